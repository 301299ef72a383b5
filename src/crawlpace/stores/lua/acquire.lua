-- Admit one request to every scope it names, or to none (crawlpace Redis store).
--
-- KEYS: per scope, its admission hash, its lease set and its resting-slot set.
-- ARGV: 1 now ("" = the server's TIME), 2 lease id, 3 lease seconds, 4 idle
--   seconds (key expiry), 5 scope count, then per scope 5 values: concurrency,
--   delay, delay per slot and floor for a scope not seen before, and the
--   jitter factor of this send; then, optionally, a mode (Redis Cluster, for a
--   request whose scopes span slots): "probe" only answers whether the scopes
--   could admit now, "undo" admits and also returns what a rollback restores.
-- Returns {1, now, slot_ready..., generation..., version..., gap..., now...}
--   when admitted (gap: the mean gap between the scope's sends, "" after one),
--   {0, now, ready...} when not (ready "-1": every slot busy),
--   {2, now, index} when a scope was given up, and {3, now, ready...} when a
--   probe finds every scope ready. In "undo" mode an admission's reply ends
--   with, per scope, 6 more values: "next", "last" and "gap" before this send
--   ("" for none), "next" as this send wrote it, the send count after it, and
--   "1" when the scope had no state before.
-- Times as text with every digit: tostring keeps only 14, which rounds a time
-- to a tenth of a millisecond and can put a stored time past the next "now".
local function num(x) return string.format("%.17g", x) end
local now = tonumber(ARGV[1])
if ARGV[1] == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) + tonumber(t[2]) / 1e6
end
local id, lease, idle, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local mode = ARGV[6 + 5 * n] or ""
local ready, state = {}, {}
local blocked = false
for i = 1, n do
  local a, l, r = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local base = 5 + 5 * (i - 1)
  local f = redis.call("HMGET", a, "conc", "delay", "pslot", "floor", "next", "hold", "dead", "gen", "ver")
  local conc = tonumber(f[1]) or tonumber(ARGV[base + 1])
  local delay = tonumber(f[2]) or tonumber(ARGV[base + 2])
  local pslot = tonumber(f[3]) or tonumber(ARGV[base + 3])
  local floor = tonumber(f[4]) or tonumber(ARGV[base + 4])
  if f[7] == "1" then
    return {2, num(now), i}
  end
  redis.call("ZREMRANGEBYSCORE", l, "-inf", now)
  redis.call("ZREMRANGEBYSCORE", r, "-inf", now)
  local inflight = redis.call("ZCARD", l)
  local at = tonumber(f[5]) or -1
  local hold = tonumber(f[6]) or -1
  if hold > at then at = hold end
  local full = inflight >= conc
  if not full then
    local resting = redis.call("ZCARD", r)
    if inflight + resting >= conc then
      local wake = redis.call("ZRANGE", r, inflight + resting - conc, inflight + resting - conc, "WITHSCORES")
      local w = tonumber(wake[2])
      if w > at then at = w end
    end
  end
  if full then
    ready[i] = "-1"
    blocked = true
  elseif at > now then
    ready[i] = num(at)
    blocked = true
  else
    ready[i] = "0"
  end
  state[i] = {a, l, r, conc, delay, pslot, floor, tonumber(f[8]) or 0, tonumber(f[9]) or 0,
              tonumber(ARGV[base + 5]), f[1] == false}
end
if blocked or mode == "probe" then
  local out = {0, num(now)}
  if not blocked then out[1] = 3 end
  for i = 1, n do out[#out + 1] = ready[i] end
  return out
end
local out = {1, num(now)}
local gens, vers, gaps, undo = {}, {}, {}, {}
for i = 1, n do
  local s = state[i]
  local a, l, r, delay, pslot, floor, factor = s[1], s[2], s[3], s[5], s[6], s[7], s[10]
  redis.call("ZADD", l, now + lease, id)
  local gap = delay * factor
  if gap < floor then gap = floor end
  local last = tonumber(redis.call("HGET", a, "last"))
  local sent_gap = redis.call("HGET", a, "gap")
  gaps[i] = ""
  if last then
    local g = now - last
    if sent_gap then g = tonumber(sent_gap) + 0.25 * (g - tonumber(sent_gap)) end
    gaps[i] = num(g)
    redis.call("HSET", a, "gap", gaps[i])
  end
  if mode == "undo" then
    undo[i] = {redis.call("HGET", a, "next") or "", redis.call("HGET", a, "last") or "", sent_gap or "",
               num(now + gap)}
  end
  redis.call("HSET", a, "next", num(now + gap), "last", num(now))
  if s[11] then
    redis.call("HSET", a, "conc", s[4], "delay", num(delay), "pslot", num(pslot),
               "floor", num(floor))
  end
  local sends = redis.call("HINCRBY", a, "sends", 1)
  if mode == "undo" then
    undo[i][5] = sends
    undo[i][6] = s[11] and "1" or "0"
  end
  redis.call("EXPIRE", a, idle)
  redis.call("EXPIRE", l, idle)
  redis.call("EXPIRE", r, idle)
  out[#out + 1] = num(now + pslot * factor)
  gens[i] = s[8]
  vers[i] = s[9]
end
for i = 1, n do out[#out + 1] = gens[i] end
for i = 1, n do out[#out + 1] = vers[i] end
for i = 1, n do out[#out + 1] = gaps[i] end
for i = 1, n do out[#out + 1] = num(now) end
if mode == "undo" then
  for i = 1, n do
    for j = 1, 6 do out[#out + 1] = undo[i][j] end
  end
end
return out
