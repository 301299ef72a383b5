-- A refusal's hold, taken to the store the moment the refusal is read (RedisStore.release):
-- its release reads the scope's counts first, and meanwhile every other worker must be held.
-- The release carries the hold too; both take the later end (clock.lua: take_hold).
-- KEYS: each scope's hash. ARGV: now (see clock.lua), then each scope's hold in seconds.
-- Returns now.
for i, a in ipairs(KEYS) do
  local seconds = tonumber(ARGV[i + 1])
  if seconds and seconds > 0 then
    take_hold(a, now + seconds, tonumber(redis.call("HGET", a, "fhold")))
  end
end
return num(now)
