"""The add-on scheduler's queues: requests grouped by scope names, ordered by the readiness board.

Each queue holds the requests of one set of scope names, in the board's
request order (Scrapy priority, then the expected share of a quota-limited
scope, then first in, first out). A queue is in one of five states:

* *eligible*: due now, worth asking the throttler about;
* *timed*: due at a known time (the throttler said "not before t");
* *blocked*: parked on its full scopes until a permit of one is released
  (or, as a safety net, until a poll time);
* *asking*: off the board while a shared store answers;
* *idle*: off the board, empty or being asked in the same call.

:class:`ScopeQueues` keeps the queues, the board and the timer that wakes
the engine when the earliest queue falls due. What to do with a queue's
head (ask the throttler, refuse it) is the scheduler's business.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._scoping._scopes import Demand
from .._throttle._board import SHARED_POLL, Board, request_order

if TYPE_CHECKING:
    from ._runtime import Runtime

__all__ = ["ASKING", "BLOCKED", "ELIGIBLE", "IDLE", "LOCAL_POLL", "TIMED", "Entry", "Queue", "ScopeQueues"]

#: Seconds between two questions about a queue whose slots are all busy with
#: the local store, only as a safety net: every release of this
#: process wakes the queues of its scopes (Scrapy's engine heartbeat is 5 s too).
LOCAL_POLL = 5.0

ELIGIBLE, TIMED, BLOCKED, ASKING, IDLE = "eligible", "timed", "blocked", "asking", "idle"


@dataclass(order=True, slots=True)
class Entry:
    """One queued request, ranked by its request order."""

    order: tuple[float, float, int]
    request: Any = field(compare=False)
    demands: tuple[Demand, ...] = field(compare=False)
    waited: bool = field(default=False, compare=False)


@dataclass(slots=True)
class Queue:
    """The requests of one set of scope names, as a heap."""

    names: tuple[str, ...]
    heap: list[Entry] = field(default_factory=list)
    state: str = IDLE

    def head(self) -> Entry:
        """The request that goes first."""
        return self.heap[0]


class ScopeQueues:
    """The queues of one scheduler, its board and its wake-up timer.

    Args:
        runtime: the crawl's runtime (its clock, settings, store and engine).
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.queued = 0
        self._queues: dict[tuple[str, ...], Queue] = {}
        self._by_scope: dict[str, set[tuple[str, ...]]] = {}
        self._board: Board[tuple[str, ...]] = Board()  # which queue is asked next
        self._order = itertools.count()
        self._timer: Any = None
        self._timer_at = float("inf")

    def __len__(self) -> int:
        return len(self._queues)

    # -- filling and emptying ------------------------------------------------------

    def push(self, request: Any, demands: tuple[Demand, ...]) -> None:
        """Queue ``request`` under its scope names; its queue becomes due if it was idle."""
        names = tuple(sorted(name for name, _ in demands))
        queue = self._queues.get(names)
        if queue is None:
            queue = self._queues[names] = Queue(names)
            for name in names:
                self._by_scope.setdefault(name, set()).add(names)
        entry = Entry(self._order_of(request, demands), request, demands)
        head_before = queue.heap[0] if queue.heap else None
        heapq.heappush(queue.heap, entry)
        self.queued += 1
        if queue.state == IDLE or (queue.state == ELIGIBLE and head_before is not None
                                   and entry.order < head_before.order):
            self.make_eligible(queue)

    def _order_of(self, request: Any, demands: tuple[Demand, ...]) -> tuple[float, float, int]:
        settings = self.runtime.config.settings
        shares = []
        for name, use in demands:
            quota = settings.scope_config(name).quota
            if quota:
                shares.append(use / quota)
        return request_order(int(getattr(request, "priority", 0)), shares, next(self._order))

    def remove(self, queue: Queue, entry: Entry) -> None:
        """Take ``entry`` out of ``queue`` (the head, unless a request overtook it meanwhile)."""
        if queue.heap[0] is entry:
            heapq.heappop(queue.heap)
        else:
            queue.heap.remove(entry)
            heapq.heapify(queue.heap)
        self.queued -= 1

    def pop_entry(self, queue: Queue) -> Entry:
        """Take the head out of ``queue``."""
        entry = heapq.heappop(queue.heap)
        self.queued -= 1
        return entry

    def drop(self, queue: Queue) -> None:
        """Forget ``queue`` (its requests are gone)."""
        del self._queues[queue.names]
        queue.state = IDLE
        self._board.discard(queue.names)
        for name in queue.names:
            keys = self._by_scope.get(name)
            if keys is not None:
                keys.discard(queue.names)
                if not keys:
                    del self._by_scope[name]

    def of_scope(self, scope: str) -> list[Queue]:
        """The queues whose requests hold ``scope``, in a stable order."""
        return [queue for names in sorted(self._by_scope.get(scope, ()))
                if (queue := self._queues.get(names)) is not None]

    # -- the board -----------------------------------------------------------------

    def pop_eligible(self) -> Queue | None:
        """The due queue to ask next, or ``None`` when none is due."""
        board = self._board
        while (names := board.pop(self.runtime.clock_now)) is not None:
            queue = self._queues.get(names)
            if queue is None:
                continue
            if not queue.heap:
                self.drop(queue)
                continue
            queue.state = IDLE  # off the board until asked and answered
            return queue
        return None

    def make_eligible(self, queue: Queue) -> None:
        """Make ``queue`` due now (or idle, when it is empty)."""
        if not queue.heap:
            queue.state = IDLE
            self._board.discard(queue.names)
            return
        queue.state = ELIGIBLE
        self._board.due(queue.names, self.runtime.clock_now, queue.head().order[:1])

    def after_admission(self, queue: Queue) -> None:
        """Its head went: the queue is due again for the next one, or dropped when empty."""
        if queue.heap:
            self.make_eligible(queue)
        else:
            self.drop(queue)

    def set_asking(self, queue: Queue) -> None:
        """Take ``queue`` off the board while a shared store answers about it."""
        queue.state = ASKING
        self._board.discard(queue.names)

    def set_timed(self, queue: Queue, when: float) -> None:
        """``queue`` is due at ``when``."""
        queue.state = TIMED
        self._board.due(queue.names, when, queue.head().order[:1])
        self._arm(when)

    def set_blocked(self, queue: Queue, waiting_on: tuple[tuple[str, float | None], ...]) -> None:
        """Park ``queue`` on its full scopes (none: on the global cap, which any release frees)."""
        queue.state = BLOCKED
        # A shared store's slots free up in other processes too: ask again soon.
        poll = SHARED_POLL if self.runtime.throttler.store.shared else LOCAL_POLL
        when = self.runtime.clock_now + poll
        self._board.park(queue.names, [name for name, _ in waiting_on], queue.head().order[:1],
                         poll_at=when)
        self._arm(when)

    def released(self, scopes: tuple[str, ...]) -> list[Queue]:
        """A permit of ``scopes`` went back: the queues that may go now, made due, first head first."""
        now = self.runtime.clock_now
        # Parked queues of these scopes, and those held by the global cap, are due
        # now; timed ones are asked again too, since the answer may have loosened
        # their scopes' limits.
        woken = set(self._board.released(scopes, now))
        for name in scopes:
            for names in self._by_scope.get(name, ()):
                queue = self._queues.get(names)
                if queue is not None and queue.state == TIMED:
                    woken.add(names)
        waking = [queue for names in woken if (queue := self._queues.get(names)) is not None and queue.heap]
        # The queue whose head came first goes first among equal priorities: fair,
        # and the same in every run.
        waking.sort(key=lambda queue: queue.head().order)
        for queue in waking:
            self.make_eligible(queue)
        return waking

    # -- the timer -------------------------------------------------------------------

    def arm_for_next(self) -> None:
        """Have the engine woken when the next queue falls due (nothing is due now)."""
        when = self._board.next_at()
        if when is not None and when > self.runtime.clock_now:
            self._arm(when)

    def _arm(self, when: float) -> None:
        if self._timer is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.runtime.config.clock.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        when = self._board.next_at()
        if when is None:
            return
        if when <= self.runtime.clock_now:
            self.runtime.wake()
        else:
            self._arm(when)

    def close(self) -> None:
        """Stop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __repr__(self) -> str:
        return f"<ScopeQueues queued={self.queued} queues={len(self._queues)} {self._board!r}>"
