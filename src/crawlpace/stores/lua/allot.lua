-- Refresh, or give back, a worker's allotment of one scope (crawlpace Redis store).
--
-- An allotment is a few of the scope's slots that one worker holds as leases
-- (members of the lease set, so they count as held for every worker) and
-- admits from locally; see stores/redis/_allot.py and docs/redis.md.
-- KEYS: the scope's admission hash and its lease set.
-- ARGV: 1 now ("" = TIME), 2 lease seconds, 3 idle seconds, 4 the policy
--   version the allotment was formed under, 5 sends made from it since the
--   last refresh and 6 the latest one's time, 7 responses and 8 errors among
--   their outcomes, 9 the latest latency ("" for none), 10 latencies counted,
--   11 and 12 their moving mean's two terms (the mean becomes (1 - LATENCY_WEIGHT)^n x mean +
--   ARGV[11], or ARGV[12] when no mean is stored yet), 13 the count g of
--   members given back, then g member ids to free, then the ids of the
--   members the worker keeps (renewed).
-- Returns {status, lost...}: status "1" when the allotment may stay, "0" when
--   the worker must give back the members it keeps (the policy was written
--   since, the scope holds a delay, a hold, a breaker pause, or is more than
--   half full); lost: kept members whose lease had expired.
-- `now` and `num` come from clock.lua, prepended when the script is loaded, and the shared
-- rules (LATENCY_WEIGHT, GAP_WEIGHT, refill) from policy/_shared_rules.py after it.
-- ARGV layout (stores/redis/_script_args.py):
--   head: now lease_seconds idle_seconds version sends last_send responses errors latency latencies mean_step mean_first given_back_count
--   tail: given_back_ids... kept_ids...
local a, l = KEYS[1], KEYS[2]
local lease, idle, ngive = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[13])
if ngive > 0 then redis.call("ZREM", l, unpack(ARGV, 14, 13 + ngive)) end
local f = redis.call("HMGET", a, "ver", "conc", "delay", "pslot", "floor", "hold", "brk", "dead", "o",
                     "sends", "exp")
local set = {}
local sends = tonumber(ARGV[5])
if sends > 0 then
  set[#set + 1] = "sends"
  set[#set + 1] = (tonumber(f[10]) or 0) + sends
  set[#set + 1] = "last"
  set[#set + 1] = ARGV[6]
end
local resp, errs, lat, nlat = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10])
if resp > 0 or errs > 0 or nlat > 0 then
  -- "o" as release.lua keeps it: responses, errors, the latest latency and their moving mean.
  local r, e, last, mean = string.match(f[9] or "0 0  ", "^(%S+) (%S+) (%S*) (%S*)$")
  r, e = tonumber(r) + resp, tonumber(e) + errs
  if nlat > 0 then
    local m = tonumber(mean)
    if m then m = (1 - LATENCY_WEIGHT) ^ nlat * m + tonumber(ARGV[11]) else m = tonumber(ARGV[12]) end
    last, mean = lat, string.format("%.6g", m)
  end
  set[#set + 1] = "o"
  set[#set + 1] = r .. " " .. e .. " " .. last .. " " .. mean
end
if not f[11] or now - tonumber(f[11]) > idle / 2 then
  set[#set + 1] = "exp"
  set[#set + 1] = math.floor(now)
  redis.call("EXPIRE", a, math.floor(idle * 1.5))
  redis.call("EXPIRE", l, math.floor(idle * 1.5))
end
if #set > 0 then redis.call("HSET", a, unpack(set)) end
local keep = #ARGV - 13 - ngive
if keep == 0 then return {"0"} end
local ok = (f[1] or "0") == ARGV[4] and tonumber(f[3] or 0) == 0 and tonumber(f[4] or 0) == 0
  and tonumber(f[5] or 0) == 0 and (tonumber(f[6]) or -1) <= now and not f[7] and f[8] ~= "1"
if ok then
  -- Idle members are kept only while at least half the slots are free: others may be waiting.
  redis.call("ZREMRANGEBYSCORE", l, "-inf", now)
  local conc = tonumber(f[2]) or 1
  if 2 * (conc - redis.call("ZCARD", l)) < conc then ok = false end
end
local out = {ok and "1" or "0"}
local expiry = now + lease
for j = 14 + ngive, #ARGV do
  if redis.call("ZSCORE", l, ARGV[j]) then
    redis.call("ZADD", l, expiry, ARGV[j])
  else
    out[#out + 1] = ARGV[j]
  end
end
return out
