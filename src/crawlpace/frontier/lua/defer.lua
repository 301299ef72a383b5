-- Keep a scope's queued URLs from being claimed before a later time (crawlpace
-- shared frontier): a worker whose throttler says the site must wait (backoff,
-- Retry-After, Crawl-Delay) tells the others, so that nobody claims URLs that
-- could not be sent anyway. Only ever moves the time later.
--
-- KEYS: 1 the ready set.
-- ARGV: 1 now ("" = TIME), 2 scope, 3 seconds.
-- `now` and `num` come from clock.lua, prepended when the script is loaded.
return redis.call("ZADD", KEYS[1], "XX", "GT", "CH", num(now + tonumber(ARGV[3])), ARGV[2])
