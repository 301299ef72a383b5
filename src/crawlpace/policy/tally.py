"""A circuit breaker's count of successes, kept compactly while a scope has seen nothing else.

A scope of a broad crawl is usually answered a few times, always well. Its
breaker then holds nothing but the successes of its window, yet a
:class:`~crawlpace.policy.breaker.Breaker` object with its bucket list costs
several hundred bytes. Until the first failure (or anything else that needs
the scope's own policy), a store may keep the same facts as one flat tuple,
``(outcomes, bucket, count, bucket, count, ...)``: the outcomes seen (capped at
what the give-up rule remembers), then the window's buckets, oldest first.
:meth:`Breaker.absorb <crawlpace.policy.breaker.Breaker.absorb>` turns it into
the breaker those successes would have left, so the rules are the breaker's
own (its bucket width, its window, its memory of recent outcomes).

Pure: ``now`` is passed in.
"""

from __future__ import annotations

from .breaker import BUCKETS, RECENT

__all__ = ["SuccessTally", "count_success", "tally_is_idle"]

#: ``(outcomes, bucket, count, ...)``; the empty tuple: nothing counted.
SuccessTally = tuple[float, ...]


def count_success(tally: SuccessTally, now: float, window: float) -> SuccessTally:
    """``tally`` with one more success at ``now`` for a breaker of ``window`` seconds."""
    bucket = now // (window / BUCKETS)
    if len(tally) == 3 and tally[1] >= bucket:  # the common case: one bucket, still the newest
        return (min(RECENT, int(tally[0]) + 1), tally[1], int(tally[2]) + 1)
    seen = min(RECENT, int(tally[0]) + 1) if tally else 1
    oldest = bucket - BUCKETS
    kept: list[float] = []
    for i in range(1, len(tally) - 1, 2):
        if tally[i] > oldest:
            kept += (tally[i], tally[i + 1])
    if kept and kept[-2] >= bucket:  # out of order: joins the newest, as in the breaker
        kept[-1] = int(kept[-1]) + 1
    else:
        kept += (bucket, 1)
    return (seen, *kept)


def tally_is_idle(tally: SuccessTally, now: float, window: float) -> bool:
    """True when every success of ``tally`` has left the window: a fresh breaker would behave the same."""
    if not tally:
        return True
    return tally[-2] <= now // (window / BUCKETS) - BUCKETS
