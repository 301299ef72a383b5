-- A write of a scope paced by a Crawl-delay went (RedisStore.wrote, crawl/_fetch.py): "act" keeps
-- the latest such write, which the next write's last look (look.lua) spaces from. Sent as the
-- request goes, it reaches the server after the bytes left: the time is never too early.
-- KEYS: each scope's hash. ARGV: now (see clock.lua). Returns now.
for _, a in ipairs(KEYS) do
  local f = redis.call("HMGET", a, "act", "delay")
  local act = tonumber(f[1])
  -- (No "delay" field: the hash expired or was never made; a stamp alone would never expire.)
  if f[2] and (not act or now > act) then redis.call("HSET", a, "act", num(now)) end
end
return num(now)
