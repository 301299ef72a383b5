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
-- A guarded scope (one that has held: "fhold", a refusal's Retry-After came once, clock.lua; or
-- one the worker says is still in its start, where a first hold comes) keeps a note of each write
-- (its lease, scored by the write's time, in the writes set), made here when the look lets the
-- write go. A hold lands only once the refused worker has read its answer, tens of milliseconds
-- after the site sent it on a loaded machine, and a write meanwhile reached the site inside the
-- hold. So a write waits while a sibling is overdue: still out (its lease held and unexpired) though
-- written more than `together` plus the scope's answer time (`floor`, the quickest answer the
-- worker measured) before it. Its answer has left the site more than `together` ago and may be a
-- refusal nobody has read; the release that ends the sibling's lease comes after its hold
-- (RedisStore._hold_first). A sibling not yet overdue cannot have been answered before this write
-- reaches the site, or was answered so lately that the site takes the two together: nothing to wait
-- for, so a site that answers slowly keeps its requests in flight side by side.
-- KEYS: per scope, its hash, lease set and writes set. ARGV: now (see clock.lua), this write's
-- lease ("": none, not noted), `together`, idle seconds (the writes set's expiry), the seconds to
-- look again after while a sibling is overdue, then per scope "1" to guard it though it has not
-- held (or "") and its answer time in seconds ("": none measured, 0).
-- Returns {now, seconds until this write's turn (0: go; it was noted), seconds until the first
-- sibling still out becomes overdue ("": none), per scope "1" if it has held (its writes are noted)}.
local id, together, idle, again = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local wait = 0
local margin = -1
local noting = {}
local held = {}
local k = 6  -- this scope's two values in ARGV
for i = 1, #KEYS, 3 do
  local a, l, w = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  local f = redis.call("HMGET", a, "hold", "next", "turn", "delay", "fhold")
  local hold = tonumber(f[1])
  held[#held + 1] = f[5] and "1" or "0"
  if hold and hold > now then
    local at = hold
    local nxt, turn = tonumber(f[2]), tonumber(f[3])
    if nxt and nxt > at then at = nxt end
    if turn and turn > at then at = turn end
    local delay = tonumber(f[4]) or 0
    if delay > 0 then redis.call("HSET", a, "turn", num(at + delay)) end
    if at - now > wait then wait = at - now end
  elseif f[5] or ARGV[k] == "1" then
    local due = together + (tonumber(ARGV[k + 1]) or 0)
    local notes = redis.call("ZRANGEBYSCORE", w, "-inf", "+inf", "WITHSCORES")
    for j = 1, #notes, 2 do
      local sibling, at = notes[j], tonumber(notes[j + 1])
      local expiry = tonumber(redis.call("ZSCORE", l, sibling))
      if sibling == id then
        -- (This write's own note, from a look before: it looks again.)
      elseif not expiry or expiry <= now then
        redis.call("ZREM", w, sibling)  -- answered (or its worker gone): no longer out
      elseif at < now - due then
        if again > wait then wait = again end
      elseif margin < 0 or at + due - now < margin then
        margin = at + due - now
      end
    end
    noting[#noting + 1] = w
  end
  k = k + 2
end
if wait == 0 and id ~= "" then
  for _, w in ipairs(noting) do
    redis.call("ZADD", w, num(now), id)
    redis.call("EXPIRE", w, idle)
  end
end
-- The first sibling still out to become overdue: this write may reach the site later than that
-- (the reply is read late), and then looks again.
return {num(now), num(wait), margin >= 0 and num(margin) or "", table.concat(held)}
