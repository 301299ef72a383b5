-- Count one request against the staged brake's shared quota.
-- The clock prelude (stores/lua/clock.lua) comes first: `now`, `num`.
--
-- The brake's rule stays in Python (guard/_brake.py): the caller draws the
-- request's chance and sends, for each stage, its threshold and whether that
-- stage refuses this request ("F": every request, "1": an unpaced one, "0":
-- none). The script only counts atomically: the whole quota's count ("#u"),
-- and the client's count inside it. A request is refused when the quota or
-- the client's share is spent, when its stage refuses everything, or when its
-- stage refuses it by chance and the client did not wait as long as it was
-- told (the "d:" due time, less the tolerance times the "g:" spacing).
-- The caller writes the client's next due time back (pace.lua).
--
-- KEYS[1]  the brake's key prefix; the window's hash is KEYS[1] .. ":" .. start
-- ARGV[1]  now, or "" for the server's TIME
-- ARGV[2]  window (seconds)       ARGV[3] quota
-- ARGV[4]  the client's key        ARGV[5] max keys per window
-- ARGV[6]  the overflow key        ARGV[7] the most one key may use (share x quota)
-- ARGV[8]  requests to add to the quota's count first (let through while Redis was away)
-- ARGV[9]  the start of the window they were let through in ("" for none)
-- ARGV[10] the pacing tolerance    ARGV[11] seconds the window's hash outlives it
-- ARGV[12..] threshold, mode ("F"/"1"/"0") per stage
--
-- The window's hash holds "#u", "#r" (refused), "#s" (the highest stage
-- reached) and "#keys", and per client "u:" .. key (count), "r:" .. key
-- (refused), "d:" .. key and "g:" .. key (its pace).
-- Returns {allowed, used, key used, stage, entered, now, window start, key, due, spacing, paced}.

local window = tonumber(ARGV[2])
local quota = tonumber(ARGV[3])
local key = ARGV[4]
local max_keys = tonumber(ARGV[5])
local cap = tonumber(ARGV[7])
local carry = tonumber(ARGV[8])
local tolerance = tonumber(ARGV[10])
local keep = tonumber(ARGV[11])
local slack = 1e-9
local start = math.floor(now / window) * window
if start + window <= now then start = start + window end
local hash = KEYS[1] .. ":" .. num(start)

if carry > 0 and ARGV[9] ~= "" and math.abs(tonumber(ARGV[9]) - start) < 1e-6 then
  redis.call("HINCRBYFLOAT", hash, "#u", carry)
end

-- A key seen for the first time in the window is registered, unless the
-- window already holds max_keys keys: then it shares the overflow counter.
if redis.call("HEXISTS", hash, "u:" .. key) == 0 then
  if tonumber(redis.call("HGET", hash, "#keys") or "0") >= max_keys then
    key = ARGV[6]
  end
  if redis.call("HSETNX", hash, "u:" .. key, 0) == 1 then
    redis.call("HINCRBY", hash, "#keys", 1)
  end
end
local used = tonumber(redis.call("HGET", hash, "#u") or "0")
local key_used = tonumber(redis.call("HGET", hash, "u:" .. key))

local stage = 0
local mode = "0"
local index = 1
for i = 12, #ARGV, 2 do
  if used >= tonumber(ARGV[i]) then
    stage = index
    mode = ARGV[i + 1]
  end
  index = index + 1
end

local seen = tonumber(redis.call("HGET", hash, "#s") or "0")
local entered = 0
if stage > seen then
  redis.call("HSET", hash, "#s", stage)
  entered = 1
end

local due = redis.call("HGET", hash, "d:" .. key)
local spacing = redis.call("HGET", hash, "g:" .. key)
local paced = 0
if due and now >= tonumber(due) - tolerance * tonumber(spacing or "0") then paced = 1 end

local refused = mode == "F" or used + 1 > quota + slack or key_used + 1 > cap + slack
  or (mode == "1" and paced == 0)
local allowed = 0
if refused then
  redis.call("HINCRBY", hash, "#r", 1)
  redis.call("HINCRBY", hash, "r:" .. key, 1)
else
  used = tonumber(redis.call("HINCRBYFLOAT", hash, "#u", 1))
  key_used = key_used + 1
  redis.call("HSET", hash, "u:" .. key, key_used)
  allowed = 1
end
redis.call("EXPIRE", hash, math.ceil(start + window - now + keep))
return {allowed, num(used), num(key_used), stage, entered, num(now), num(start), key, due or "", spacing or "",
        paced}
