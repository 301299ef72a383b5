-- Find a site's robots.txt as another worker of the fleet fetched it
-- (crawlpace shared frontier), or take the right to fetch it: one worker
-- fetches a site's robots.txt for the whole fleet instead of one per worker.
--
-- KEYS: 1 the ready set (every other key shares its hash tag and prefix).
-- ARGV: 1 now (unused), 2 key prefix, 3 worker name, 4 origin,
--       5 milliseconds the right to fetch is held before another worker may take it.
-- Returns {"copy", status ("" for no answer), body, why} when a copy is stored,
-- {"fetch"} when this worker should fetch it (it now holds the right), or
-- {"wait"} while another worker is fetching it.
local p, worker, origin = ARGV[2], ARGV[3], ARGV[4]
local copy = redis.call("HMGET", p .. "robots:" .. origin, "status", "body", "why")
if copy[2] then
  return {"copy", copy[1] or "", copy[2], copy[3] or ""}
end
local lock = p .. "robots-lock:" .. origin
if redis.call("SET", lock, worker, "NX", "PX", tonumber(ARGV[5])) then
  return {"fetch"}
end
if redis.call("GET", lock) == worker then
  return {"fetch"}
end
return {"wait"}
