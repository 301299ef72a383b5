-- Write a client's next due time back after the brake decided (guard/lua/brake.lua).
-- No clock prelude: the times come from the caller, who had them from brake.lua.
--
-- KEYS[1]  the window's hash
-- ARGV[1]  the client's key   ARGV[2] due   ARGV[3] spacing

if redis.call("EXISTS", KEYS[1]) == 1 then
  redis.call("HSET", KEYS[1], "d:" .. ARGV[1], ARGV[2], "g:" .. ARGV[1], ARGV[3])
end
return 1
