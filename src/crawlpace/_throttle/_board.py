"""The readiness board: the one place that decides which queue goes next.

Every scheduler in crawlpace (the crawl's, the Scrapy add-on's, the
throttler's own waiters) keeps requests in queues keyed by their throttling
scopes, and asks this board which queue to try next. A key on the board is in
one of two states:

* **due** at a time: the throttler said when the queue's head could go (a
  delay running out, a backoff ending), or the queue just got work;
* **parked** on scopes: the head waits for a slot of one of those scopes to
  free up, which only a release can tell; a key parked on no scope waits for
  the global cap (any release). A parked key may also carry a time at which
  it is looked at anyway (a shared store, whose slots other processes free).

:meth:`Board.pop` hands out the due key that has waited longest: among keys
whose time has come, the one with the smallest *rank* goes first (a
scheduler ranks a queue by how long its head has waited, or by its priority),
then the earliest due, then the one put on the board first. So a release
never serves its own queue first merely because it released, and a queue
that became due long ago is not overtaken by one that just did.

The board has no clock, no I/O and no imports from crawlpace: every time is
a number the caller passes in, so it is tested with plain numbers.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable, Iterator
from typing import Any, Generic, TypeAlias, TypeVar

__all__ = ["GLOBAL_CAP", "SHARED_POLL", "Board", "Rank", "request_order"]

K = TypeVar("K", bound=Hashable)
#: How a scheduler ranks its queues: compared item by item, smaller goes first.
Rank: TypeAlias = tuple[float, ...]

#: Seconds between two looks at a queue whose scope has every slot taken in a
#: *shared* store: other processes free those slots, and no release of ours says so.
SHARED_POLL = 0.05
#: The scope name a key is parked on when only the global cap (``CONCURRENT_REQUESTS``) held it.
GLOBAL_CAP = ""

_NEVER = float("inf")


def request_order(priority: float = 0.0, shares: Iterable[float] = (),
                  seq: int = 0) -> tuple[float, float, int]:
    """The order of requests within one queue: smaller goes first.

    Higher ``priority`` first; then the request that needs the larger share of
    a quota (``use / quota`` per scope, the largest counts), so that big
    requests are not starved by a stream of small ones (seed 001); then
    arrival (``seq``).
    """
    return (-priority, -max(shares, default=0.0), seq)


class _Entry(Generic[K]):
    __slots__ = ("key", "parked_on", "poll_at", "rank", "state", "token", "when")

    def __init__(self, key: K) -> None:
        self.key = key
        self.state = "off"  # "due", "parked" or "off"
        self.when = _NEVER
        self.rank: Rank = ()
        self.parked_on: tuple[str, ...] = ()
        self.poll_at = _NEVER
        self.token = -1  # the board-wide number of the key's live heap entry


class Board(Generic[K]):
    """Keys that are due at a time or parked until a scope frees a slot.

    Every method takes the current time from the caller where it needs one;
    none blocks, sleeps or reads a clock.
    """

    def __init__(self) -> None:
        self._entries: dict[K, _Entry[K]] = {}
        # (when, rank, seq, token, key): keys due in the future, and parked keys' poll times.
        self._timed: list[tuple[Any, Any, int, int, K]] = []  # (float, Rank, ...)
        # (rank, when, seq, token, key): keys whose time has come.
        self._ready: list[tuple[Any, Any, int, int, K]] = []  # (Rank, float, ...)
        self._parked: dict[str, dict[K, None]] = {}
        self._seq = itertools.count()

    # -- putting keys on the board ---------------------------------------------------

    def due(self, key: K, when: float, rank: Rank = (), *, keep_earlier: bool = False) -> None:
        """Make ``key`` due at ``when`` (replacing where it was on the board).

        Args:
            key: the queue.
            when: the time its head could go.
            rank: smaller goes first among keys whose time has come.
            keep_earlier: if ``key`` is already due no later than ``when``,
                leave it as it is.
        """
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(key)
        elif keep_earlier and entry.state == "due" and entry.when <= when:
            return
        self._unpark(entry)
        entry.state, entry.when, entry.rank = "due", when, rank
        entry.token = next(self._seq)
        heapq.heappush(self._timed, (when, rank, entry.token, entry.token, key))

    def park(self, key: K, scopes: Iterable[str], rank: Rank = (), *,
             poll_at: float | None = None) -> None:
        """Park ``key`` until a release of one of ``scopes`` (none: of any scope).

        Args:
            key: the queue.
            scopes: the scopes whose slots are all taken; empty when only the
                global cap said no.
            rank: the key's rank once a release makes it due.
            poll_at: look at the key at this time even without a release.
        """
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(key)
        self._unpark(entry)
        names = tuple(dict.fromkeys(scopes)) or (GLOBAL_CAP,)
        entry.state, entry.when, entry.rank, entry.parked_on = "parked", _NEVER, rank, names
        entry.token = next(self._seq)
        for name in names:
            self._parked.setdefault(name, {})[key] = None
        entry.poll_at = _NEVER if poll_at is None else poll_at
        if poll_at is not None:
            heapq.heappush(self._timed, (poll_at, rank, entry.token, entry.token, key))

    def released(self, scopes: Iterable[str], now: float) -> list[K]:
        """A request of ``scopes`` ended: its keys, and those held by the global cap, are due now.

        Returns:
            The keys that were woken, in the order they will be popped.
        """
        woken: list[_Entry[K]] = []
        for name in (*scopes, GLOBAL_CAP):
            keys = self._parked.pop(name, None)
            if not keys:
                continue
            for key in keys:
                entry = self._entries[key]
                if entry.state == "parked":
                    woken.append(entry)
                    self._unpark(entry)
        woken.sort(key=lambda entry: entry.rank)
        for entry in woken:
            self.due(entry.key, now, entry.rank)
        return [entry.key for entry in woken]

    def discard(self, key: K) -> None:
        """Take ``key`` off the board (its queue emptied or went away)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._unpark(entry)
            entry.state = "off"

    # -- taking keys off the board ------------------------------------------------------

    def pop(self, now: float) -> K | None:
        """Take the key to try next at ``now``: the lowest rank among those whose time has come.

        The key leaves the board; put it back with :meth:`due` or :meth:`park`.
        """
        self._promote(now)
        ready = self._ready
        while ready:
            _rank, _when, _seq, token, key = heapq.heappop(ready)
            entry = self._entries.get(key)
            if entry is None or entry.token != token:
                continue
            del self._entries[key]
            self._unpark(entry)
            entry.state = "off"
            return key
        return None

    def next_at(self) -> float | None:
        """The earliest time a key becomes due (or is polled); ``None`` when none will be."""
        if self._ready:
            self._drop_stale(self._ready)
            if self._ready:
                return float(self._ready[0][1])
        self._drop_stale(self._timed)
        return float(self._timed[0][0]) if self._timed else None

    # -- looking -----------------------------------------------------------------------

    def state(self, key: K) -> str:
        """``"due"``, ``"parked"`` or ``"off"``."""
        entry = self._entries.get(key)
        return "off" if entry is None else entry.state

    def when(self, key: K) -> float | None:
        """The time ``key`` is due, or ``None`` when it is not due."""
        entry = self._entries.get(key)
        return entry.when if entry is not None and entry.state == "due" else None

    def parked_on(self, key: K) -> tuple[str, ...]:
        """The scopes ``key`` is parked on (``(GLOBAL_CAP,)`` for the global cap)."""
        entry = self._entries.get(key)
        return entry.parked_on if entry is not None and entry.state == "parked" else ()

    def holds(self, scope: str) -> bool:
        """True while some key is parked on ``scope`` (:data:`GLOBAL_CAP`: on the global cap)."""
        return scope in self._parked

    def parked(self) -> Iterator[K]:
        """Every parked key."""
        return (key for key, entry in self._entries.items() if entry.state == "parked")

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        due = sum(1 for entry in self._entries.values() if entry.state == "due")
        return f"<Board due={due} parked={len(self._entries) - due} next_at={self.next_at()}>"

    # -- inside ---------------------------------------------------------------------------

    def _promote(self, now: float) -> None:
        timed, ready = self._timed, self._ready
        while timed and timed[0][0] <= now:
            when, rank, seq, token, key = heapq.heappop(timed)
            entry = self._entries.get(key)
            if entry is None or entry.token != token:
                continue
            if entry.state == "parked":  # its poll time came: it is due like any other
                self._unpark(entry)
                entry.state, entry.when = "due", when
            heapq.heappush(ready, (rank, when, seq, token, key))

    def _drop_stale(self, heap: list[tuple[Any, Any, int, int, K]]) -> None:
        while heap:
            key, token = heap[0][4], heap[0][3]
            entry = self._entries.get(key)
            if entry is not None and entry.token == token:
                return
            heapq.heappop(heap)

    def _unpark(self, entry: _Entry[K]) -> None:
        if entry.state != "parked":
            return
        for name in entry.parked_on:
            keys = self._parked.get(name)
            if keys is not None:
                keys.pop(entry.key, None)
                if not keys:
                    del self._parked[name]
        entry.parked_on = ()
        entry.poll_at = _NEVER
