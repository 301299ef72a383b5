-- The last look of a write that lags its admission (RedisStore.held_for, crawl/_fetch.py): when
-- another worker's refusal holds a scope, the write waits for its turn after the hold.
--
-- A lease granted before the hold reached the store is written whenever its worker's loop gets to
-- it; the store's own admissions resume at the hold's end, and so would every write the hold
-- caught: two or more requests would reach the site at once right after it asked for quiet, a
-- burst a bucket with no burst refuses (and holds again, for the whole Retry-After). So each write
-- the hold caught takes a turn, as an admission would: the first at the hold's end (or the
-- scope's next send, if later), each next one the scope's delay after the previous; "turn" keeps
-- the time the next one may go, and acquire.lua admits no sooner.
--
-- A scope whose site showed a bucket with no burst (RedisStore.write_turn) also keeps a gap
-- between its writes: the store spaces its admissions, but each worker writes a varying while
-- after its grant (0.1-2.5 s on a loaded machine), and two grants a gap apart reached the site
-- closer than it, which such a bucket refuses. Every write of the scope asks here: "wrt" keeps
-- the time the latest one was given, and the next waits until the gap has passed since it.
-- KEYS: each scope's hash. ARGV: now (see clock.lua), then each scope's gap between writes in
-- seconds (0, or none: the scope keeps none, and its "wrt" is neither read nor moved).
-- Returns {now, seconds until this write's turn (0: no scope held or spaced)}.
local wait = 0
local spaced = {}
for i, a in ipairs(KEYS) do
  local f = redis.call("HMGET", a, "hold", "next", "turn", "delay", "wrt")
  local at = now
  local hold = tonumber(f[1])
  if hold and hold > now then
    at = hold
    local nxt, turn = tonumber(f[2]), tonumber(f[3])
    if nxt and nxt > at then at = nxt end
    if turn and turn > at then at = turn end
    local delay = tonumber(f[4]) or 0
    if delay > 0 then redis.call("HSET", a, "turn", num(at + delay)) end
  end
  local gap = tonumber(ARGV[i + 1]) or 0
  -- (No "delay" field: the hash expired or was never made; a lone "wrt" would never expire.)
  if gap > 0 and f[4] then
    local wrt = tonumber(f[5])
    if wrt and wrt + gap > at then at = wrt + gap end
    spaced[#spaced + 1] = a
  end
  if at - now > wait then wait = at - now end
end
-- The write goes when every scope lets it: that is the time each spaced scope's next one counts from.
for _, a in ipairs(spaced) do redis.call("HSET", a, "wrt", num(now + wait)) end
return {num(now), num(wait)}
