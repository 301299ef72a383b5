-- Record URLs as finished (crawlpace shared frontier). A URL this worker no
-- longer held (its claim expired and it went back to the queue, or to another
-- worker) is finished all the same: its answer is written, and the other
-- worker's later ack counts as a duplicate.
--
-- KEYS: 1 the ready set (every other key shares its hash tag and prefix).
-- ARGV: 1 unused, 2 key prefix, 3 worker name, 4 outcome, then ids.
-- Returns {finished, duplicates}.
local p, worker, outcome = ARGV[2], ARGV[3], ARGV[4]
local claimed, done, dups = p .. "claimed", 0, 0
for i = 5, #ARGV do
  local id = ARGV[i]
  local url = redis.call("HGET", p .. "url", id)
  if url then
    local scope = redis.call("HGET", p .. "scope", id)
    local owner = redis.call("HGET", p .. "owner", id)
    if redis.call("ZREM", claimed, id) == 0 or owner ~= worker then
      -- Not (or no longer) our claim: it may be waiting in its queue again.
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
keep(p, KEYS[1])
return {done, dups}
