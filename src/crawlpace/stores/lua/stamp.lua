-- A write of a scope paced by a Crawl-delay went (RedisStore.wrote, crawl/_fetch.py): the scope's
-- next admission comes no sooner than the delay after it.
--
-- The store admits such a scope's requests a delay apart, one at a time, but on a loaded machine
-- a worker writes its request 0.1-0.3 s after the admission, more or less from one worker to
-- the next: a write that lagged and a punctual next one reached the site closer than the delay.
-- The note leaves as the request goes (after its bytes, so the server's time it takes is never
-- earlier than the write), and before its answer frees the scope's one slot: the next admission,
-- by any worker, finds the scope's "turn" (look.lua; acquire.lua admits no sooner) moved. Not
-- "next": a write-back of a new delay counts "next" again from the last admission.
-- KEYS: each scope's hash. ARGV: now (see clock.lua), then each scope's Crawl-delay in seconds.
-- Returns now.
for i, a in ipairs(KEYS) do
  local cd = tonumber(ARGV[i + 1])
  local f = redis.call("HMGET", a, "turn", "delay")
  -- (No "delay" field: the hash expired or was never made; a lone "turn" would never expire.)
  if cd and cd > 0 and f[2] then
    local at = now + cd
    local turn = tonumber(f[1])
    if not turn or at > turn then redis.call("HSET", a, "turn", num(at)) end
  end
end
return num(now)
