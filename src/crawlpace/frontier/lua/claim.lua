-- Hand a worker up to n URLs, at most one per scope, from the scopes whose
-- ready time has come, earliest first (crawlpace shared frontier).
--
-- First, claims whose visibility deadline passed (their worker died or lost
-- the server for too long) go back to the front of their scope's queue.
-- A scope that gave a URL becomes ready again `spacing` seconds later, so the
-- next claims serve the other scopes first: fair, and no worker hoards one
-- site's URLs while its limits let them out one by one.
--
-- Scopes named after the spacing are skipped (the worker holds enough of
-- their URLs): they stay ready for the other workers, and a worker whose
-- room fills with slow sites' URLs still gets URLs of the others.
--
-- A claim whose reply the worker never read (the server went away between
-- running it and answering) would leave its URLs claimed by nobody who knows
-- it until their visibility runs out. So each claim carries a token, and the
-- server keeps the worker's latest token with the ids it handed out
-- ("lastclaim"); a worker that lost replies names their tokens in its next
-- claim, and when the kept token is one of them, those ids still owned by the
-- worker are handed out again first (their visibility renewed).
--
-- KEYS: 1 the ready set (every other key shares its hash tag and prefix).
-- ARGV: 1 now ("" = TIME), 2 key prefix, 3 worker name, 4 n, 5 visibility
--   seconds, 6 spacing seconds, 7 this claim's token, 8 the tokens of claims
--   whose replies were lost, space-separated ("" for none), then scopes to skip.
-- Returns {queued, claimed, next ready in seconds ("" when nothing is queued),
--   requeued, the id of the last URL ever enqueued ("0": none, or the frontier
--   vanished), then id, url, scope, tries and left for each URL handed out}: left is
--   how many URLs of its scope the frontier still queues (the work the fleet has not
--   yet claimed, which a worker tells its throttler as one process tells its own).
-- `now` and `num` come from clock.lua, prepended when the script is loaded.
local p, worker = ARGV[2], ARGV[3]
local n, vis, spacing = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local ready, claimed, stats = KEYS[1], p .. "claimed", p .. "stats"
local token, lost = ARGV[7], ARGV[8]
local skip = {}
for i = 9, #ARGV do skip[ARGV[i]] = true end

local requeued = 0
local expired = redis.call("ZRANGEBYSCORE", claimed, "-inf", num(now), "LIMIT", 0, 1000)
for i = #expired, 1, -1 do
  local id = expired[i]
  redis.call("ZREM", claimed, id)
  redis.call("HDEL", p .. "owner", id)
  local scope = redis.call("HGET", p .. "scope", id)
  if scope then
    redis.call("LPUSH", p .. "q:" .. scope, id)
    redis.call("EXPIRE", p .. "q:" .. scope, IDLE)
    redis.call("ZADD", ready, "NX", num(now), scope)
    requeued = requeued + 1
  end
end
if requeued > 0 then
  redis.call("HINCRBY", stats, "requeued", requeued)
  redis.call("HINCRBY", stats, "queued", requeued)
end
redis.call("ZADD", p .. "workers", num(now), worker)

local out = {}
local ids = {}
local given = 0
if lost ~= "" then
  local kept = redis.call("HGET", p .. "lastclaim", worker)
  if kept then
    local was = string.match(kept, "^(%S+)")
    if string.find(" " .. lost .. " ", " " .. was .. " ", 1, true) then
      for id in string.gmatch(string.sub(kept, #was + 2), "%S+") do
        if redis.call("HGET", p .. "owner", id) == worker and redis.call("ZSCORE", claimed, id) then
          redis.call("ZADD", claimed, num(now + vis), id)
          out[#out + 1] = id
          out[#out + 1] = redis.call("HGET", p .. "url", id) or ""
          out[#out + 1] = redis.call("HGET", p .. "scope", id) or ""
          out[#out + 1] = redis.call("HGET", p .. "tries", id) or "1"
          out[#out + 1] = tostring(redis.call("LLEN", p .. "q:" .. (out[#out - 1])))
          ids[#ids + 1] = id
        end
      end
    end
  end
end
local recovered = #ids
if n > 0 then
  local scopes = redis.call("ZRANGEBYSCORE", ready, "-inf", num(now), "LIMIT", 0, n + #ARGV - 8)
  for _, scope in ipairs(scopes) do
    if given + recovered >= n then break end
    if not skip[scope] then
      local queue = p .. "q:" .. scope
      local id = redis.call("LPOP", queue)
      local left = redis.call("LLEN", queue)
      if id then
        redis.call("ZADD", claimed, num(now + vis), id)
        redis.call("HSET", p .. "owner", id, worker)
        local tries = redis.call("HINCRBY", p .. "tries", id, 1)
        out[#out + 1] = id
        out[#out + 1] = redis.call("HGET", p .. "url", id) or ""
        out[#out + 1] = scope
        out[#out + 1] = tostring(tries)
        out[#out + 1] = tostring(left)
        ids[#ids + 1] = id
        given = given + 1
      end
      if left == 0 then
        redis.call("ZREM", ready, scope)
      else
        redis.call("ZADD", ready, num(now + spacing), scope)
        redis.call("EXPIRE", queue, IDLE)
      end
    end
  end
end
if #ids > 0 then
  redis.call("HSET", p .. "lastclaim", worker, token .. " " .. table.concat(ids, " "))
end
local queued = 0
if given > 0 then
  queued = redis.call("HINCRBY", stats, "queued", -given)
else
  queued = tonumber(redis.call("HGET", stats, "queued") or "0")
end
local next_in = ""
local first = redis.call("ZRANGE", ready, 0, 0, "WITHSCORES")
if #first > 0 then next_in = num(math.max(tonumber(first[2]) - now, 0)) end
keep(p, ready)
local head = {tostring(queued), tostring(redis.call("ZCARD", claimed)), next_in, tostring(requeued),
              redis.call("GET", p .. "seq") or "0"}
for _, item in ipairs(out) do head[#head + 1] = item end
return head
