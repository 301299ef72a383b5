-- The last look of a write (RedisStore.held_for, crawl/_fetch.py): when another worker's refusal
-- holds a scope, the write waits for its turn after the hold; a scope paced by a Crawl-delay
-- spaces the writes of every worker, not only their admissions.
--
-- A lease granted before the hold reached the store is written whenever its worker's loop gets to
-- it; the store's own admissions resume at the hold's end, and so would every write the hold
-- caught: two or more requests would reach the site at once right after it asked for quiet, a
-- burst a bucket with no burst refuses (and holds again, for the whole Retry-After). So each write
-- the hold caught takes a turn, as an admission would: the first at the hold's end (or the
-- scope's next send, if later), each next one the scope's delay after the previous; "turn" keeps
-- the time the next one may go, and acquire.lua admits no sooner.
--
-- A Crawl-delay is asked between the requests a site sees, and on a loaded machine a request
-- reaches the wire 0.1-0.3 s after its admission, more or less from one worker to the next: two
-- admissions a delay apart can be written closer than it. So each write takes a slot: "wrote" is
-- the latest slot given, and a write goes no sooner than the delay after it, nor after "act", the
-- latest write a worker reported as it went (stamp.lua: a write later than its slot). A look
-- "again" (after waiting out the first one's answer) takes no new slot: it checks "act" once more,
-- which a write that woke late has moved since, and moves its own slot if it must wait.
-- KEYS: each scope's hash. ARGV: now (see clock.lua), "again" or "", then each scope's
-- Crawl-delay in seconds ("" or missing: none).
-- Returns {now, seconds until this write may go (0: at once)}.
local again = ARGV[2] == "again"
local wait = 0
for i, a in ipairs(KEYS) do
  local cd = tonumber(ARGV[i + 2])
  local f = redis.call("HMGET", a, "hold", "next", "turn", "delay", "wrote", "act")
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
  -- (No "delay" field: no admission made the hash, or it expired; nothing to space from.)
  if cd and cd > 0 and f[4] then
    local act, wrote = tonumber(f[6]), tonumber(f[5])
    if act and act + cd > at then at = act + cd end
    if not again then
      if wrote and wrote + cd > at then at = wrote + cd end
      redis.call("HSET", a, "wrote", num(at))
    elseif not wrote or at > wrote then
      redis.call("HSET", a, "wrote", num(at))
    end
  end
  if at - now > wait then wait = at - now end
end
return {num(now), num(wait)}
