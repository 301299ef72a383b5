-- Count one request of a confirmed allow-listed crawler in the current window (on top of the quota).
-- The clock prelude (stores/lua/clock.lua) comes first: `now`, `num`.
--
-- KEYS[1]  the brake's key prefix
-- ARGV[1]  now, or "" for the server's TIME   ARGV[2] window   ARGV[3] the crawler's name
-- ARGV[4]  seconds the window's hash outlives it

local window = tonumber(ARGV[2])
local start = math.floor(now / window) * window
if start + window <= now then start = start + window end
local hash = KEYS[1] .. ":" .. num(start)
local count = redis.call("HINCRBY", hash, "c:" .. ARGV[3], 1)
redis.call("EXPIRE", hash, math.ceil(start + window - now + tonumber(ARGV[4])))
return count
