-- Take back a reservation that never became a send (crawlpace Redis store, Redis Cluster):
-- a request whose scopes span slots reserved some of them, then another
-- refused it, so the request is not sent and its reservations are undone.
--
-- KEYS: per scope, its admission hash and its lease set.
-- ARGV: 1 lease id, 2 scope count, then per scope 8 values, as the acquire
--   script's "undo" reply gave them: the policy version the reservation saw,
--   the send count after it, "last" and "next" as it wrote them, "next", "last"
--   and "gap" before it ("" for none), and "1" when the scope had no state
--   before it.
-- Returns, per scope, "1" when its state was put back as it was before the
--   reservation, "0" when only the lease was taken back.
--
-- The lease always goes: the slot was never used, so it does not rest either.
-- The pacing fields ("next", "last", "gap") and the send count go back only
-- when the hash still holds exactly what the reservation wrote: the send count
-- is the one it left (a send count only ever grows, except by such an exact
-- undo, so no admission came after it) and no policy was written since (a
-- write-back may have moved "next" relative to this send). Otherwise the
-- reservation stays counted as a send: a later admission may already be
-- spaced from it, and putting "next" back could let the scope send sooner
-- than its limits allow. Such a phantom send only shows in "rb", which the
-- store subtracts from "sends" when it reports them.
-- ARGV layout (stores/redis/_script_args.py):
--   head: lease_id scope_count
--   each scope: version sends last_written next_written next_before last_before gap_before was_new
local id, n = ARGV[1], tonumber(ARGV[2])
local out = {}
for i = 1, n do
  local a, l = KEYS[2 * i - 1], KEYS[2 * i]
  local base = 2 + 8 * (i - 1)
  redis.call("ZREM", l, id)
  local f = redis.call("HMGET", a, "sends", "ver", "last", "next")
  local exact = f[1] == ARGV[base + 2] and (f[2] or "0") == ARGV[base + 1]
    and f[3] == ARGV[base + 3] and f[4] == ARGV[base + 4]
  if exact and ARGV[base + 8] == "1" then
    redis.call("DEL", a)  -- the reservation created the scope's state: none again
  elseif exact then
    local names = {"next", "last", "gap"}
    for j = 1, 3 do
      local before = ARGV[base + 4 + j]
      if before == "" then
        redis.call("HDEL", a, names[j])
      else
        redis.call("HSET", a, names[j], before)
      end
    end
    redis.call("HINCRBY", a, "sends", -1)
  elseif f[1] then
    redis.call("HINCRBY", a, "rb", 1)
  end
  out[i] = exact and "1" or "0"
end
return out
