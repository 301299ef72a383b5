-- A write of a scope paced by a Crawl-delay went (RedisStore.wrote, crawl/_fetch.py): "act" keeps
-- the latest, and the next admission's reply carries it (acquire.lua), so that the next write, by
-- any worker, keeps the delay after it (RedisStore.write_after).
--
-- The store admits such a scope's requests a delay apart, one at a time, but on a loaded machine
-- a worker writes its request 0.1-0.3 s after the admission, more or less from one worker to
-- the next: a write that lagged and a punctual next one reached the site closer than the delay.
-- Holding the next admission a delay after the write would add each write's lag to the pace;
-- the next write waits instead, and only as long as the previous one lagged more than it.
-- The note leaves as the request goes, with the write's time on the server's clock as the worker
-- estimates it (the server's own time when the note arrives would add its queueing to the next
-- write's wait), and the request's release waits for it: the next admission finds it.
-- KEYS: each scope's hash. ARGV: the write's time (see clock.lua). Returns it.
for _, a in ipairs(KEYS) do
  local f = redis.call("HMGET", a, "act", "delay")
  local act = tonumber(f[1])
  -- (No "delay" field: the hash expired or was never made; a lone "act" would never expire.)
  if f[2] and (not act or now > act) then redis.call("HSET", a, "act", num(now)) end
end
return num(now)
