-- Count one request of a client against the staged brake's shared quota.
-- The clock prelude (stores/lua/clock.lua) comes first: `now`, `num`.
--
-- The brake's rule stays in Python (guard/_brake.py): the caller draws the
-- request's chance and sends, for each stage, its threshold and whether that
-- stage refuses this request. The script only counts atomically: it finds the
-- stage the client's count is in, refuses when that stage refuses or the
-- request would pass the quota, and otherwise adds one.
--
-- KEYS[1]  the brake's key prefix; the window's hash is KEYS[1] .. ":" .. start
-- ARGV[1]  now, or "" for the server's TIME
-- ARGV[2]  window (seconds)       ARGV[3] quota
-- ARGV[4]  the client's key        ARGV[5] max keys per window
-- ARGV[6]  the overflow key        ARGV[7..] threshold, refuses ("1"/"0") per stage
--
-- The window's hash holds, per client, "u:" .. key (count), "r:" .. key
-- (refused) and "s:" .. key (the highest stage seen), and "#keys", the number
-- of clients; it expires a minute after its window ends.
-- Returns {allowed, used, stage, entered, now, window start, key}.

local window = tonumber(ARGV[2])
local quota = tonumber(ARGV[3])
local key = ARGV[4]
local max_keys = tonumber(ARGV[5])
local start = math.floor(now / window) * window
if start + window <= now then start = start + window end
local hash = KEYS[1] .. ":" .. num(start)

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
local used = tonumber(redis.call("HGET", hash, "u:" .. key))

local stage = 0
local refuses = false
local index = 1
for i = 7, #ARGV, 2 do
  if used >= tonumber(ARGV[i]) then
    stage = index
    refuses = ARGV[i + 1] == "1"
  end
  index = index + 1
end
if used + 1 > quota then refuses = true end

local seen = tonumber(redis.call("HGET", hash, "s:" .. key) or "0")
local entered = 0
if stage > seen then
  redis.call("HSET", hash, "s:" .. key, stage)
  entered = 1
end

local allowed = 0
if refuses then
  redis.call("HINCRBY", hash, "r:" .. key, 1)
else
  used = used + 1
  redis.call("HSET", hash, "u:" .. key, used)
  allowed = 1
end
redis.call("EXPIRE", hash, math.ceil(start + window - now) + 60)
return {allowed, num(used), stage, entered, num(now), num(start), key}
