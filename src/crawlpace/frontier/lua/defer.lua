-- Keep a scope's queued URLs from being claimed before a later time (crawlpace
-- shared frontier): a worker whose throttler says the site must wait (backoff,
-- Retry-After, Crawl-Delay) tells the others, so that nobody claims URLs that
-- could not be sent anyway. Only ever moves the time later.
--
-- KEYS: 1 the ready set.
-- ARGV: 1 now ("" = TIME), 2 scope, 3 seconds.
local now = tonumber(ARGV[1])
if ARGV[1] == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) + tonumber(t[2]) / 1e6
end
return redis.call("ZADD", KEYS[1], "XX", "GT", "CH", string.format("%.17g", now + tonumber(ARGV[3])), ARGV[2])
