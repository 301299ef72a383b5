-- Prepended to the frontier's scripts (see frontier/_shared.py), after a line
-- `local IDLE = <seconds>`: `keep` gives the frontier's job-wide keys IDLE more
-- seconds to live. Every script a working job runs calls it, and each queue
-- list gets the same expiry when it is written, so the keys of a job nobody
-- has enqueued to, claimed from or acknowledged for IDLE seconds expire.
local function keep(p, ready)
  redis.call("EXPIRE", ready, IDLE)
  for _, name in ipairs({"seen", "seq", "url", "scope", "tries", "owner", "claimed", "stats", "workers",
                          "lastclaim"}) do
    redis.call("EXPIRE", p .. name, IDLE)
  end
end
