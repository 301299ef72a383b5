-- Admit one request to every scope it names, or to none (crawlpace Redis store).
--
-- KEYS: per scope, its admission hash, its lease set, its resting-slot set and its policy blob.
-- ARGV: 1 now ("" = the server's TIME), 2 lease id, 3 lease seconds, 4 idle
--   seconds (key expiry), 5 scope count, then per scope 9 values: concurrency,
--   delay, delay per slot and floor for a scope not seen before, the jitter
--   factor of this send, the policy version the worker's copy has ("" for no
--   copy), the quota units this request expects to use, and the
--   scope's quota bucket: its capacity and refill rate per second ("" for a
--   scope without a quota); then, optionally, a mode (Redis Cluster, for a
--   request whose scopes span slots): "probe" only answers whether the scopes
--   could admit now, "undo" admits and also returns what a rollback restores.
-- A scope whose breaker opened has "brk" (the end of the pause) in its hash:
--   once "now" passes it, one admission records its lease id as "probe", and
--   the scope answers "full" while that lease lives (the release script, or
--   the write-back that closes or reopens the breaker, clears it), or, when the
--   pause's length is stored ("pwait"), until it has been out that long ("pat":
--   its send time): then the next admission is a probe too (policy/breaker.py).
-- Returns {1, now, slot_ready..., generation..., version..., gap..., now...}
--   when admitted (gap: the mean gap between the scope's sends, "" after one),
--   {0, now, ready...} when not (ready "-1": every slot busy),
--   {2, now, index} when a scope was given up, and {3, now, ready...} when a
--   probe finds every scope ready. In "undo" mode an admission's reply ends
--   with, per scope, 6 more values: "next", "last" and "gap" before this send
--   ("" for none), "next" as this send wrote it, the send count after it, and
--   "1" when the scope had no state before. Last, per scope, the scope's leases in
--   flight with this one (expired ones left out), which tells rampup how many
--   were out when a request was refused on arrival (a server that limits requests in
--   flight), then per scope the seconds since the scope's previous send ("" for none),
--   which rampup's quick start weighs more than the mean gap does, then per scope the time of the
--   latest write of a request of it ("act", stamp.lua: kept for a scope paced by a Crawl-delay,
--   "" for none), which the admitted request's write keeps the delay after, then per scope the
--   stored policy blob when the stored version is not the worker's (false when none is stored,
--   "" when the worker's copy is current or no policy is stored), read in this same step with
--   the version beside it, so that the worker needs no read of its own (redis_admit.learn_versions).
-- `now` and `num` come from clock.lua, prepended when the script is loaded, and the shared
-- rules (LATENCY_WEIGHT, GAP_WEIGHT, refill, due_at, spacing) from policy/_shared_rules.py after it.
-- ARGV layout (stores/redis/_script_args.py):
--   head: now lease_id lease_seconds idle_seconds scope_count
--   each scope: concurrency delay delay_per_slot floor jitter_factor known_version quota_use quota_capacity quota_rate
--   tail: mode
local id, lease, idle, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local mode = ARGV[6 + 9 * n] or ""
local ready, state = {}, {}
local blocked = false
for i = 1, n do
  local a, l, r = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1]
  local base = 5 + 9 * (i - 1)
  -- Every field read costs the server: the probe and the quota's two are read only when in use.
  local f = redis.call("HMGET", a, "conc", "delay", "pslot", "floor", "next", "hold", "dead", "gen", "ver",
                      "brk", "last", "gap", "sends", "rmax", "exp", "turn", "act")
  local conc = tonumber(f[1]) or tonumber(ARGV[base + 1])
  local delay = tonumber(f[2]) or tonumber(ARGV[base + 2])
  local pslot = tonumber(f[3]) or tonumber(ARGV[base + 3])
  local floor = tonumber(f[4]) or tonumber(ARGV[base + 4])
  if f[7] == "1" then
    return {2, num(now), i}
  end
  -- Count, then purge what expired only when there is something to purge (most
  -- scopes of a broad crawl have no lease out and no slot resting).
  local inflight = redis.call("ZCARD", l)
  if inflight > 0 then inflight = inflight - redis.call("ZREMRANGEBYSCORE", l, "-inf", now) end
  -- "rmax": the latest time a slot of the resting set wakes (release.lua keeps it).
  -- Once it is past, or when no slot ever rested (no "rmax"), the set need not be read.
  local resting = 0
  if f[14] and tonumber(f[14]) > now then
    resting = redis.call("ZCARD", r)
    if resting > 0 then resting = resting - redis.call("ZREMRANGEBYSCORE", r, "-inf", now) end
  end
  local at = tonumber(f[5]) or -1
  local hold = tonumber(f[6]) or -1
  if hold > at then at = hold end
  -- "turn": after the writes a hold caught, each in its turn (look.lua).
  local turn = tonumber(f[16])
  if turn and turn > at then at = turn end
  local full = inflight >= conc
  -- The quota, a token bucket as in policy/quota.py: "qc" is the credit as of
  -- time "qa" (neither: full since forever). A request waits until the credit
  -- covers its use (at most the capacity); the answer depends on the stored
  -- state only, so asking again at the time it gives admits.
  local use, qcap, qrate = tonumber(ARGV[base + 7]) or 0, tonumber(ARGV[base + 8]), tonumber(ARGV[base + 9])
  local credit, qa = nil, nil
  if qcap and use > 0 then
    local q = redis.call("HMGET", a, "qc", "qa")
    credit, qa = tonumber(q[1]), tonumber(q[2])
    local need = use
    if need > qcap then need = qcap end
    if credit and qa and credit < need then
      local q = math.huge
      if qrate > 0 then q = qa + (need - credit) / qrate end
      if q > at then at = q end
    end
  end
  -- The breaker: "brk" is the end of its pause. Past it the scope is half-open
  -- and admits one request, the probe, while no live probe is recorded.
  local probing = false
  local brk = tonumber(f[10])
  if brk then
    if brk > at then at = brk end
    if now >= brk and not full then
      local p = redis.call("HMGET", a, "probe", "pat", "pwait")
      local probe = p[1]
      if probe and redis.call("ZSCORE", l, probe) then
        -- A probe is out: its answer lets more through, or, once it has been out as long as
        -- the pause it followed ("pwait"), another probe may go (policy/breaker.py's
        -- blocked_until and probe_wait: a probe that hangs held a flaky site for the hang).
        local sent, wait = tonumber(p[2]), tonumber(p[3])
        if not sent or not wait or wait <= 0 then
          full = true
        elseif now >= sent + wait then
          probing = true
        elseif sent + wait > at then
          at = sent + wait
        end
      else
        probing = true
      end
    end
  end
  if not full then
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
              tonumber(ARGV[base + 5]), f[1] == false, probing, use, qcap, qrate,
              credit, qa, f[5], f[11], f[12], (tonumber(f[13]) or 0) + 1, resting,
              inflight, not f[15] or now - tonumber(f[15]) > idle / 2, hold, f[17],
              tonumber(ARGV[base + 6])}
end
if blocked or mode == "probe" then
  local out = {0, num(now)}
  if not blocked then out[1] = 3 end
  for i = 1, n do out[#out + 1] = ready[i] end
  return out
end
-- "now" as text, formatted once: most scopes send without a delay, so their "next",
-- "last" and slot times are this same text.
local snow = num(now)
local out = {1, snow}
local gens, vers, gaps, undo, spaced = {}, {}, {}, {}, {}
for i = 1, n do
  local s = state[i]
  local a, l, r, delay, pslot, floor, factor = s[1], s[2], s[3], s[5], s[6], s[7], s[10]
  redis.call("ZADD", l, now + lease, id)
  local gap = delay * factor
  if gap < floor then gap = floor end
  -- "next", "last" and "gap" as they were before this send (read by the first HMGET).
  local last = tonumber(s[19])
  local sent_gap = s[20]
  gaps[i] = ""
  spaced[i] = ""
  if mode == "undo" then
    undo[i] = {s[18] or "", s[19] or "", sent_gap or ""}
  end
  local snext = snow
  if gap > 0 then snext = num(now + gap) end
  if mode == "undo" then undo[i][4] = snext end
  local set = {"next", snext, "last", snow, "sends", s[21]}
  if last then
    -- A server's hold is no gap in the scope's sending, as in rampup's own record: the
    -- first send after one is spaced from the hold's end, not from the send before it.
    local from = last
    if s[25] > last and s[25] <= now then from = s[25] end
    -- Counted from when the send was due ("next"), by the rule rampup's own record applies
    -- (spacing(), policy/_shared_rules.py): a worker's lag in taking its turn is no gap of the scope's.
    -- Not for a send that takes the scope's last free slot (due_at): it may have waited for that slot.
    local due = due_at(tonumber(s[18]), s[23] + s[22], s[4])
    local g = spacing(now, from, due)
    spaced[i] = string.format("%.12g", g)
    if sent_gap then g = tonumber(sent_gap) + GAP_WEIGHT * (g - tonumber(sent_gap)) end
    gaps[i] = string.format("%.12g", g)  -- a spacing: 12 digits are plenty, and cheaper than 17
    set[#set + 1] = "gap"
    set[#set + 1] = gaps[i]
  end
  -- Keys expire once idle: their expiry is pushed forward (to 1.5 x idle, so never
  -- sooner than idle after the last use) when the stamp "exp" is half an idle old,
  -- not on every call; a lease set made anew by this admission gets one at once.
  local stale = s[24]
  if stale then
    set[#set + 1] = "exp"
    set[#set + 1] = math.floor(now)  -- whole seconds: a smaller hash
  end
  redis.call("HSET", a, unpack(set))
  if s[12] then redis.call("HSET", a, "probe", id, "pat", snow) end
  if s[14] and s[13] > 0 then
    local qcap, qrate, credit, qa = s[14], s[15], s[16], s[17]
    credit, qa = refill(credit, qa, qcap, qrate, now)
    redis.call("HSET", a, "qc", num(credit - s[13]), "qa", num(qa))
  end
  if s[11] then
    redis.call("HSET", a, "conc", s[4], "delay", num(delay), "pslot", num(pslot),
               "floor", num(floor))
  end
  local sends = s[21]
  if mode == "undo" then
    undo[i][5] = sends
    undo[i][6] = s[11] and "1" or "0"
  end
  local keep = math.floor(idle * 1.5)
  if stale then
    redis.call("EXPIRE", a, keep)
    redis.call("EXPIRE", l, keep)
    if s[22] > 0 then redis.call("EXPIRE", r, keep) end  -- no resting slot: no key to keep
  elseif s[23] == 0 then
    redis.call("EXPIRE", l, keep)  -- the lease set was empty, so gone: this ZADD made it anew
  end
  if pslot > 0 then out[#out + 1] = num(now + pslot * factor) else out[#out + 1] = snow end
  gens[i] = s[8]
  vers[i] = s[9]
end
for i = 1, n do out[#out + 1] = gens[i] end
for i = 1, n do out[#out + 1] = vers[i] end
for i = 1, n do out[#out + 1] = gaps[i] end
for i = 1, n do out[#out + 1] = snow end
if mode == "undo" then
  for i = 1, n do
    for j = 1, 6 do out[#out + 1] = undo[i][j] end
  end
end
for i = 1, n do out[#out + 1] = state[i][23] + 1 end
for i = 1, n do out[#out + 1] = spaced[i] end
for i = 1, n do out[#out + 1] = state[i][26] or "" end
-- The policy the worker's copy lacks: read only when the versions differ (most admissions read nothing).
for i = 1, n do
  local blob = ""
  if vers[i] ~= 0 and vers[i] ~= state[i][27] then blob = redis.call("GET", KEYS[4 * i]) end
  out[#out + 1] = blob
end
return out
