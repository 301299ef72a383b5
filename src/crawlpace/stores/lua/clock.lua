-- Prepended to every crawlpace script that reads the time (see stores/redis/_lua.py).
-- `now`: ARGV[1] when the caller gives a time, else the server's TIME.
-- `num`: times as text with every digit; tostring keeps only 14, which rounds
-- a time to a tenth of a millisecond and can put a stored time past the next
-- "now".
local function num(x) return string.format("%.17g", x) end
local now = tonumber(ARGV[1])
if ARGV[1] == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) + tonumber(t[2]) / 1e6
end
