-- Put URLs a worker claimed but will not fetch back at the front of their
-- queues, ready now (crawlpace shared frontier): a worker that stops hands
-- its work on at once instead of making the others wait out the visibility.
--
-- KEYS: 1 the ready set (every other key shares its hash tag and prefix).
-- ARGV: 1 now ("" = TIME), 2 key prefix, 3 worker name, then ids in queue order.
-- Returns the number put back.
-- `now` and `num` come from clock.lua, prepended when the script is loaded.
local p, worker = ARGV[2], ARGV[3]
local back = 0
for i = #ARGV, 4, -1 do
  local id = ARGV[i]
  if redis.call("HGET", p .. "owner", id) == worker then
    redis.call("ZREM", p .. "claimed", id)
    redis.call("HDEL", p .. "owner", id)
    local scope = redis.call("HGET", p .. "scope", id)
    redis.call("LPUSH", p .. "q:" .. scope, id)
    redis.call("EXPIRE", p .. "q:" .. scope, IDLE)
    redis.call("ZADD", KEYS[1], "NX", num(now), scope)
    back = back + 1
  end
end
if back > 0 then
  redis.call("HINCRBY", p .. "stats", "queued", back)
  redis.call("HINCRBY", p .. "stats", "returned", back)
end
keep(p, KEYS[1])
return back
