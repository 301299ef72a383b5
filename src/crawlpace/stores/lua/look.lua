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
-- KEYS: each scope's hash. ARGV: now (see clock.lua).
-- Returns {now, seconds until this write's turn (0: no scope held)}.
local wait = 0
for _, a in ipairs(KEYS) do
  local f = redis.call("HMGET", a, "hold", "next", "turn", "delay")
  local hold = tonumber(f[1])
  if hold and hold > now then
    local at = hold
    local nxt, turn = tonumber(f[2]), tonumber(f[3])
    if nxt and nxt > at then at = nxt end
    if turn and turn > at then at = turn end
    local delay = tonumber(f[4]) or 0
    if delay > 0 then redis.call("HSET", a, "turn", num(at + delay)) end
    if at - now > wait then wait = at - now end
  end
end
return {num(now), num(wait)}
