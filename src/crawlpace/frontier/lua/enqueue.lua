-- Add URLs to the shared frontier (crawlpace). A URL already queued or
-- claimed is skipped; one that was finished may be queued again.
--
-- KEYS: 1 the ready set (every other key shares its hash tag and prefix).
-- ARGV: 1 now ("" = the server's TIME), 2 key prefix, then url, scope pairs.
-- Returns the number of URLs added.
-- `now` and `num` come from clock.lua, prepended when the script is loaded.
local p = ARGV[2]
local added = 0
for i = 3, #ARGV - 1, 2 do
  local url, scope = ARGV[i], ARGV[i + 1]
  if redis.call("HSETNX", p .. "seen", url, "") == 1 then
    local id = tostring(redis.call("INCR", p .. "seq"))
    redis.call("HSET", p .. "seen", url, id)
    redis.call("HSET", p .. "url", id, url)
    redis.call("HSET", p .. "scope", id, scope)
    redis.call("RPUSH", p .. "q:" .. scope, id)
    redis.call("EXPIRE", p .. "q:" .. scope, IDLE)
    -- NX: a scope put back by a worker (its site asked for a pause) stays put back.
    redis.call("ZADD", KEYS[1], "NX", num(now), scope)
    added = added + 1
  end
end
if added > 0 then
  redis.call("HINCRBY", p .. "stats", "enqueued", added)
  redis.call("HINCRBY", p .. "stats", "queued", added)
end
keep(p, KEYS[1])
return added
