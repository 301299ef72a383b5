"""A bounded per-key memo: the few lines every per-host or per-scope dict of a long-running worker needs.

A broad crawl meets millions of hosts, each once or a few times; a dict that
remembers something per host must forget the oldest entries or grow without
end. :func:`remember` inserts (or refreshes) an entry and drops the oldest
while the dict holds more than ``limit``; dicts keep insertion order, so the
oldest is the first key. Pure: no clock, no I/O.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["DEFAULT_LIMIT", "remember"]

K = TypeVar("K")
V = TypeVar("V")

#: Entries kept at most by default: well above the hosts one worker is busy with at a time.
DEFAULT_LIMIT = 10_000


def remember(memo: dict[K, V], key: K, value: V, limit: int = DEFAULT_LIMIT) -> int:
    """Set ``memo[key] = value`` as the newest entry; drop the oldest beyond ``limit``.

    Returns:
        How many entries were dropped.
    """
    memo.pop(key, None)  # re-inserted below: the newest again
    memo[key] = value
    dropped = 0
    while len(memo) > limit:
        del memo[next(iter(memo))]
        dropped += 1
    return dropped
