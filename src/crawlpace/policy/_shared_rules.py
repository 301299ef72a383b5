"""The rules both the Python side and the Redis store's Lua scripts apply, defined once here.

The memory store, the allotments and the policies use these names; the Lua
scripts get them from :func:`lua_prelude`, which ``stores/redis/_lua.py`` prepends
to every script that reads the time when the scripts are loaded, so a value
changed here changes on both sides. ``tests/test_script_args.py`` runs the
Lua arithmetic on a real server and compares it with the Python functions.
"""

from __future__ import annotations

__all__ = ["GAP_WEIGHT", "LATENCY_WEIGHT", "due_at", "lua_prelude", "refill", "rested", "spacing"]

#: Weight of the newest latency in a scope's mean latency (an exponential moving
#: average): the memory store, a Redis release (``release.lua``) and an allotment's
#: refresh (``allot.lua``, which folds n latencies at once as ``(1 - w)^n``).
LATENCY_WEIGHT = 0.2
#: Weight of the newest spacing between a scope's sends in their mean gap: rampup's
#: measured send rate, the Redis admission (``acquire.lua``) and a worker's view of
#: its own sends (``stores/redis/_shared_policy.py``).
GAP_WEIGHT = 0.25


def refill(credit: float, at: float, capacity: float, rate: float, now: float) -> float:
    """The credit at ``now`` of a token bucket that held ``credit`` at time ``at``.

    It grows by ``rate`` per second, up to ``capacity``; asked at or before
    ``at``, the credit is as stored (a debt included).
    """
    if now <= at:
        return credit
    return min(capacity, credit + rate * (now - at))


def rested(slot_ready: float, now: float, rest: float) -> float:
    """When a slot released at ``now`` may send again: at ``slot_ready`` (its per-slot delay from its
    send), and no sooner than ``rest`` after its answer (``Limits.rest``: a server that frees its
    slot a moment after the answer leaves refuses a send made on it at once).

    The memory store's release (``policy/admission.py``) and a Redis release (``release.lua``,
    the rest stored with the scope's limits) both rest a slot by this rule.
    """
    return now + rest if rest > 0.0 and now + rest > slot_ready else slot_ready


def spacing(now: float, last: float, due: float | None) -> float:
    """The gap a send at ``now`` counts in its scope's mean gap between sends, after the send at ``last``.

    ``due`` is when the scope's pace let this send go (its delay from ``last``; None or before ``last``:
    not known). A send that left after it was due counts the gap it was due at, or how late it went if
    that is longer: the rest of its wait was the crawler's own (a busy event loop, a fleet worker waking
    to its turn and asking the store), not the scope holding back. The stores pass None for a send that
    takes the scope's last free slot, which it may have waited for (a fleet on a cap of 6 slots held by
    1.5 s pages read the 4/s it sent as 8/s, and sent 3.55/s where one process sent 3.95).

    Counted whole, that lag capped what rampup lets a scope send (twice its measured send rate): each
    send ``x`` late after a gap ``d``, the cap held the delay at ``x`` and the pace at half of ``1 / x``,
    whatever the site took. A fleet of 4 workers at a load of 10 sent a 15-slot cap's site 20 pages a
    second where one process sent 70, its copies' delays all exactly half the gap measured. A scope
    with nothing to send for a while still reads idle: its lateness is the gap.

    Rampup's own record (``policy/_rampup_sends.py``, the memory store's sends) and the Redis admission
    (``acquire.lua``, a fleet's sends) count the scope's gaps by this rule.
    """
    if due is not None and last <= due <= now:
        return max(due - last, now - due)
    return now - last


def due_at(next_send: float, taken: int, concurrency: int) -> float | None:
    """When a send admitted now was due, for :func:`spacing`: the scope's next send time, unless the
    send takes the scope's last free slot (``taken`` slots out or resting before it), which it may have
    waited for rather than for the pace: then None (not known)."""
    return next_send if taken + 1 < concurrency else None


# The Lua of rested(): a rest not stored (nil) is none.
_RESTED_LUA = """\
local function rested(slot_ready, now, rest)
  if rest and rest > 0 and now + rest > slot_ready then return now + rest end
  return slot_ready
end
"""


# The Lua of refill(): nil state (no credit or time stored) is a full bucket as of now.
# Returns the credit and its time, as policy/quota.py's _settle leaves them.
_REFILL_LUA = """\
local function refill(credit, at, capacity, rate, now)
  if not (credit and at) then return capacity, now end
  if now > at then return math.min(capacity, credit + rate * (now - at)), now end
  return credit, at
end
"""


# The Lua of due_at() and spacing(): ``due`` nil when not known.
_SPACING_LUA = """\
local function due_at(next_send, taken, concurrency)
  if taken + 1 < concurrency then return next_send end
  return nil
end
local function spacing(now, last, due)
  if due and last <= due and due <= now then return math.max(due - last, now - due) end
  return now - last
end
"""


def lua_prelude() -> str:
    """The Lua lines that define these rules for a script (prepended at load time)."""
    return (f"-- Generated from crawlpace/policy/_shared_rules.py when the script is loaded.\n"
            f"local LATENCY_WEIGHT = {LATENCY_WEIGHT!r}\n"
            f"local GAP_WEIGHT = {GAP_WEIGHT!r}\n"
            + _REFILL_LUA + _RESTED_LUA + _SPACING_LUA)
