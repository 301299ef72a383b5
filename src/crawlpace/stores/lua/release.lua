-- Give a request's slots back, count its outcome, and write back what the
-- policy learned from it, unless another worker wrote first (crawlpace Redis store).
--
-- KEYS: per scope, its admission hash, lease set, resting-slot set and policy blob.
-- ARGV: 1 now ("" = TIME), 2 lease id, 3 idle seconds, 4 scope count, then per
--   scope 19 values: when its slot may send again, "1" to free the lease (""
--   for a write-back alone; "2" for a release sent again after an outage,
--   whose outcome counts only if the lease was still held; "3" as "1" for a
--   refusal, whose hold stands even when its write-back loses to another
--   worker's: see "fhold" below), the response and error counts to add (0 or 1;
--   the response's "2": an answer the scope accepted, also counted in "acc"),
--   the latency ("" if none), the policy version the write-back was computed
--   from ("" for no write-back), the new policy blob, concurrency, delay,
--   delay per slot, floor, hold-until and generation, "1" when given up, and
--   the breaker's pause: its end while open (then ",", and how long its probe
--   may be out before another may go: "pwait"), "h" while half-open, "" when
--   closed or off (a new end, or "", clears the recorded probe), and the rest
--   a slot takes after its answer (policy/admission.py's Limits.rest, stored
--   with the limits: every later release of the scope rests its slot so, by
--   the shared rule rested()); then the quota bucket's capacity and refill rate, and the units to charge (the
--   actual use minus the expected one; negative: a refund), "" for none.
--   Trailing "" values may be left out (the usual release has no write-back
--   and no quota: 5 values instead of 19); they read as "". After the scopes,
--   optionally, the mean gap between sends to store with a write-back (one
--   scope: the send through the start phase's door, see stores/redis/_writeback.py).
-- Returns {"", result...} (the first value is a place holder: formatting "now"
--   cost more than anything read it for): per scope "ok", or, when the version no longer
--   matched (the write-back was not done: compute it again), {current version, stored blob}
--   (the blob nil when none is stored): the worker redoes it on that pair with no read of its
--   own (stores/redis/_writeback.py, lost()).
-- `now` and `num` come from clock.lua, prepended when the script is loaded, and the shared
-- rules (LATENCY_WEIGHT, GAP_WEIGHT, refill) from policy/_shared_rules.py after it.
-- ARGV layout (stores/redis/_script_args.py):
--   head: now lease_id idle_seconds scope_count
--   each scope: slot_ready free add_response add_error latency version policy_blob concurrency delay delay_per_slot floor hold_until generation given_up breaker_pause rest quota_capacity quota_rate quota_charge
--   tail: mean_gap
local id, idle, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local set_gap = ARGV[5 + 19 * n]
-- Each argument costs the server more than a short loop here: callers leave the empty tail out.
for j = #ARGV + 1, 4 + 19 * n do ARGV[j] = "" end
local out = {""}
for i = 1, n do
  local a, l, r, p = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local base = 4 + 19 * (i - 1)
  local slot_ready = tonumber(ARGV[base + 1])
  local freed = ARGV[base + 2] ~= "" and redis.call("ZREM", l, id) == 1
  -- One read and one write for the outcome counts, the probe, the expiry stamp and the rest
  -- after an answer (each field read or written costs: the counts share one field, "o", and the
  -- resting slot's two are read only when a slot rests).
  local h = redis.call("HMGET", a, "probe", "o", "exp", "acc", "rest")
  local set = {}
  if freed then
    -- A slot rests its per-slot delay from its send, and the scope's rest from its answer.
    slot_ready = rested(slot_ready, now, tonumber(h[5]))
    if slot_ready > now then
      local rest = redis.call("HMGET", a, "conc", "rmax")
      local conc = tonumber(rest[1]) or 1
      redis.call("ZREMRANGEBYSCORE", r, "-inf", now)
      if redis.call("ZCARD", l) + redis.call("ZCARD", r) < conc then
        redis.call("ZADD", r, slot_ready, id)
        redis.call("EXPIRE", r, math.floor(idle * 1.5))
        -- The acquire script reads the resting set only until its last slot wakes.
        if not rest[2] or tonumber(rest[2]) < slot_ready then
          set[#set + 1] = "rmax"
          set[#set + 1] = num(slot_ready)
        end
      end
    end
  end
  if freed and h[1] == id then redis.call("HDEL", a, "probe") end
  local counts = freed or ARGV[base + 2] ~= "2"
  -- The keys' expiry is pushed forward only when its stamp is half an idle old (see acquire.lua).
  local stale = not h[3] or now - tonumber(h[3]) > idle / 2
  if stale then
    set[#set + 1] = "exp"
    set[#set + 1] = math.floor(now)
  end
  local resp_arg = ARGV[base + 3]
  local add_resp, add_errs, lat = resp_arg == "1" or resp_arg == "2", ARGV[base + 4] == "1", ARGV[base + 5]
  if counts and (add_resp or add_errs or lat ~= "") then
    -- "o": responses, errors, the latest latency and their moving mean, space-separated
    -- (the latencies "" until one is known).
    local resp, errs, last, mean = string.match(h[2] or "0 0  ", "^(%S+) (%S+) (%S*) (%S*)$")
    if add_resp then resp = tonumber(resp) + 1 end
    if add_errs then errs = tonumber(errs) + 1 end
    if lat ~= "" then
      local m = tonumber(mean)
      local x = tonumber(lat)
      if m then m = m + LATENCY_WEIGHT * (x - m) else m = x end
      -- Six digits: a smaller hash, and a cheaper format than every digit (it is only shown).
      last, mean = lat, string.format("%.6g", m)
    end
    set[#set + 1] = "o"
    set[#set + 1] = resp .. " " .. errs .. " " .. last .. " " .. mean
    if resp_arg == "2" then
      -- "acc": the answers the scope accepted, over every worker (rampup's overshoot fit
      -- counts a cycle's from it: policy/_rampup_sends.py, sync_accepted).
      set[#set + 1] = "acc"
      set[#set + 1] = (tonumber(h[4]) or 0) + 1
    end
  end
  if #set > 0 then redis.call("HSET", a, unpack(set)) end
  local qcap, qdelta = tonumber(ARGV[base + 17]), tonumber(ARGV[base + 19])
  if counts and qcap and qdelta and qdelta ~= 0 then
    -- Reconcile as policy/quota.py does: settle the refill, then charge or
    -- refund (a refund never fills the bucket beyond its capacity).
    local qrate = tonumber(ARGV[base + 18])
    local q = redis.call("HMGET", a, "qc", "qa")
    local credit, qa = tonumber(q[1]), tonumber(q[2])
    credit, qa = refill(credit, qa, qcap, qrate, now)
    redis.call("HSET", a, "qc", num(math.min(qcap, credit - qdelta)), "qa", num(qa))
  end
  local result = "ok"
  if ARGV[base + 6] ~= "" then
    -- One read for the version check, the fields a new delay is counted from and a refusal's hold.
    local w = redis.call("HMGET", a, "ver", "delay", "last", "next", "fhold", "pslot")
    local version = w[1] or "0"
    local fhold = tonumber(w[5])
    if version ~= ARGV[base + 6] then
      -- The policy that won, read in this same step: the version and blob always match.
      result = {version, redis.call("GET", p)}
      -- A refusal's hold stands although its write-back lost (clock.lua: take_hold).
      local h = tonumber(ARGV[base + 12])
      if ARGV[base + 2] == "3" and h and h > now then take_hold(a, h, fhold) end
    else
      local hold = ARGV[base + 12]
      if fhold and fhold > now and fhold > (tonumber(hold) or -1) then hold = num(fhold) end
      local old = tonumber(w[2])
      local delay, floor = tonumber(ARGV[base + 9]), tonumber(ARGV[base + 11])
      local last = tonumber(w[3])
      local nxt = tonumber(w[4])
      -- A new delay counts from the last send, both ways (as in the memory store).
      if last and nxt and old and delay ~= old then
        if delay > old then
          if last + delay > nxt then nxt = last + delay end
        else
          local gap = delay
          if floor > gap then gap = floor end
          if last + gap < nxt then nxt = last + gap end
        end
        redis.call("HSET", a, "next", num(nxt))
      end
      -- Resting slots wake as if sent under a shorter per-slot delay (as in the memory
      -- store, policy/admission.py's _woken: the old rest scaled from the last send, or
      -- shifted, whichever is sooner). (A fleet's first page after robots.txt, whose slot
      -- rests for the starting per-slot delay, goes at once as in one process.)
      local opslot, npslot = tonumber(w[6]), tonumber(ARGV[base + 10])
      if opslot and npslot and npslot < opslot then
        local rest = redis.call("ZRANGE", r, 0, -1, "WITHSCORES")
        local shift, scale = opslot - npslot, npslot / opslot
        for j = 1, #rest, 2 do
          local ready = tonumber(rest[j + 1])
          local wake = ready - shift
          if last and last + (ready - last) * scale < wake then wake = last + (ready - last) * scale end
          redis.call("ZADD", r, num(wake), rest[j])
        end
      end
      if set_gap and set_gap ~= "" then redis.call("HSET", a, "gap", set_gap) end
      redis.call("SET", p, ARGV[base + 7], "EX", idle)
      redis.call("HSET", a, "ver", tonumber(version) + 1, "conc", ARGV[base + 8], "delay", ARGV[base + 9],
                 "pslot", ARGV[base + 10], "floor", ARGV[base + 11], "hold", hold,
                 "gen", ARGV[base + 13], "dead", ARGV[base + 14], "rest", ARGV[base + 16])
      local brk = ARGV[base + 15]
      if brk == "" then
        redis.call("HDEL", a, "brk", "probe", "pat", "pwait")
      elseif brk == "h" then
        if redis.call("HEXISTS", a, "brk") == 0 then redis.call("HSET", a, "brk", num(now)) end
      else
        -- "end,wait": the pause's end, and how long its probe may be out before another may go.
        local till, wait = string.match(brk, "^([^,]*),?(.*)$")
        if redis.call("HGET", a, "brk") ~= till then
          redis.call("HSET", a, "brk", till)
          redis.call("HDEL", a, "probe", "pat")
          if wait ~= "" then redis.call("HSET", a, "pwait", wait) else redis.call("HDEL", a, "pwait") end
        end
      end
    end
  end
  if stale then redis.call("EXPIRE", a, math.floor(idle * 1.5)) end
  out[#out + 1] = result
end
return out
