-- Extend the visibility of the URLs a worker still holds (crawlpace shared
-- frontier), so that URLs waiting for their site's delay are not handed to
-- another worker; only the worker that owns a claim may extend it.
--
-- KEYS: 1 the ready set (every other key shares its hash tag and prefix).
-- ARGV: 1 now ("" = TIME), 2 key prefix, 3 worker name, 4 visibility seconds,
--   then ids.
-- Returns the ids this worker no longer owns.
-- `now` and `num` come from clock.lua, prepended when the script is loaded.
local p, worker, vis = ARGV[2], ARGV[3], tonumber(ARGV[4])
local deadline = num(now + vis)
local lost = {}
for i = 5, #ARGV do
  local id = ARGV[i]
  if redis.call("HGET", p .. "owner", id) == worker then
    redis.call("ZADD", p .. "claimed", "XX", deadline, id)
  else
    lost[#lost + 1] = id
  end
end
redis.call("ZADD", p .. "workers", num(now), worker)
keep(p, KEYS[1])
return lost
