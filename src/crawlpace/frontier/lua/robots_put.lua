-- Store the final answer to a site's robots.txt for the rest of the fleet
-- (crawlpace shared frontier), and let go of the right to fetch it.
--
-- KEYS: 1 the ready set (every other key shares its hash tag and prefix).
-- ARGV: 1 now (unused), 2 key prefix, 3 worker name, 4 origin, 5 seconds the
--       copy is kept, 6 status ("" for no answer), 7 body, 8 why (no answer).
local p, worker, origin = ARGV[2], ARGV[3], ARGV[4]
local key = p .. "robots:" .. origin
redis.call("HSET", key, "status", ARGV[6], "body", ARGV[7], "why", ARGV[8])
redis.call("EXPIRE", key, math.max(1, math.min(math.floor(tonumber(ARGV[5])), IDLE)))
local lock = p .. "robots-lock:" .. origin
if redis.call("GET", lock) == worker then
  redis.call("DEL", lock)
end
return 1
