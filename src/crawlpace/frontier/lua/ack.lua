-- Record URLs as finished (crawlpace shared frontier). A URL this worker no
-- longer held because its claim expired is finished all the same while nobody
-- else holds it (waiting in its queue again, it is taken out): its answer is
-- written. But once another worker has claimed it, that claim stands: this
-- late ack (a worker paused or cut off past the visibility) neither removes
-- nor finishes it; the new owner's ack will (counted as `late`).
--
-- KEYS: 1 the ready set (every other key shares its hash tag and prefix).
-- ARGV: 1 unused, 2 key prefix, 3 worker name, 4 outcome, then ids.
-- Returns {finished, duplicates, late}.
local p, worker, outcome = ARGV[2], ARGV[3], ARGV[4]
local claimed, done, dups, late = p .. "claimed", 0, 0, 0
for i = 5, #ARGV do
  local id = ARGV[i]
  local url = redis.call("HGET", p .. "url", id)
  local owner = redis.call("HGET", p .. "owner", id)
  if url and owner and owner ~= worker then
    late = late + 1
  elseif url then
    local scope = redis.call("HGET", p .. "scope", id)
    if redis.call("ZREM", claimed, id) == 0 then
      -- Not (or no longer) claimed: it may be waiting in its queue again.
      local queue = p .. "q:" .. scope
      if redis.call("LREM", queue, 0, id) > 0 then
        redis.call("HINCRBY", p .. "stats", "queued", -1)
        if redis.call("LLEN", queue) == 0 then redis.call("ZREM", KEYS[1], scope) end
      end
    end
    redis.call("HDEL", p .. "owner", id)
    redis.call("HDEL", p .. "url", id)
    redis.call("HDEL", p .. "scope", id)
    redis.call("HDEL", p .. "tries", id)
    redis.call("HDEL", p .. "seen", url)
    done = done + 1
  else
    dups = dups + 1
  end
end
if done > 0 then
  redis.call("HINCRBY", p .. "stats", "done", done)
  redis.call("HINCRBY", p .. "stats", "outcome:" .. outcome, done)
end
if dups > 0 then redis.call("HINCRBY", p .. "stats", "duplicates", dups) end
if late > 0 then redis.call("HINCRBY", p .. "stats", "late", late) end
keep(p, KEYS[1])
return {done, dups, late}
