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

-- A refusal's hold (a Retry-After, say) must hold every worker at once, not after the worker
-- that got it has read the newer policy and written again: "hold" takes it now, and "fhold"
-- keeps it under the write-backs of workers that do not know it yet. `h` is its end, `fhold`
-- the hash's "fhold" as read. (release.lua with the refusal's release, hold.lua before it.)
local function take_hold(a, h, fhold)
  local held = tonumber(redis.call("HGET", a, "hold")) or -1
  if h > held then redis.call("HSET", a, "hold", num(h)) end
  if not fhold or h > fhold then redis.call("HSET", a, "fhold", num(h)) end
end
