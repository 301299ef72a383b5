"""Hedged resends: a page out far longer than its site's answers take is sent once more.

A site that lets one request in a hundred hang (for seconds, or until the
timeout) holds the crawl's end on that one page: every other page of the site is
done, and the crawl waits for the hung one. Measured on the random farm's
``errors`` sites (bench/results/hedge1.md): a 9.9-s hang on the last page of a
site that answers in 6 ms kept the crawl going 9.9 s after its last page.

The rule, per page (``kind == "page"``) in flight:

- its site's answer times make the *span*: :data:`HEDGE_FACTOR` times the 90th
  percentile of the host's last :data:`RECORD` answer latencies, at least
  :data:`HEDGE_FLOOR` (the crawler's own noise: a loaded machine's event loop reads
  millisecond answers 0.1-0.2 s late), and only once :data:`MIN_ANSWERS` answers
  are in (no record, no hedge);
- once a page has been out longer than its host's span, *and its host has nothing
  else to send* (nothing queued, nothing held back by the source), and its retries
  are not spent (the hedge is one of the ``--retries``: a URL still goes out at
  most ``retries + 1`` times), the page is queued once more at the head of its
  host's queue: the throttler admits it like any send, so it keeps the scope's
  pace, backoff and holds;
- of the two sends, the first *final* answer (one the crawl would not send again:
  a 200, a 404, a redirect to follow) settles the page, and the other send is
  cancelled: it gives its permit back without feedback, so the throttler reads
  nothing of it (no timeout read as pushback after the page was done), and it
  writes no line and counts no outcome; a send whose answer would be retried while
  the other is still out is dropped (its own feedback, one send's, stands), and
  the other one's answer decides;
- a page has one hedge out or queued at a time; one that came back to be sent again (a 503,
  say) while the first send still hangs may be followed by another, each spending a retry.

The book is the job's; nothing here sends or sleeps but :meth:`HedgeBook.run`,
the job's timer, which wakes when the next page may be due.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..frontier._scheduler import Task
from ._fetch import CATCH_UP_TURNS

__all__ = ["HEDGE_FACTOR", "HEDGE_FLOOR", "MIN_ANSWERS", "RECORD", "HedgeBook"]

_log = logging.getLogger(__name__)

#: A page out this many times its site's slow answers (the 90th percentile of the record) is
#: hung, not slow: a site's own spread of answer times rarely reaches four times its 90th
#: percentile, while the farm's hangs (3-15 s on 2-200 ms pages) are tens to thousands of times it.
HEDGE_FACTOR = 4.0
#: Seconds a page is out at least before it is hedged, whatever its site's answers: the crawler's
#: own lateness (a loaded machine's loop read 2-ms answers 0.17 s late, crawl/_stalls.py) must not
#: read as a hang.
HEDGE_FLOOR = 0.5
#: Answers of a host before its pages can be hedged: fewer make no percentile.
MIN_ANSWERS = 5
#: Answer latencies kept per host (the most recent).
RECORD = 32
#: Seconds the timer sleeps at most between two looks when a page's host still had work queued.
_RELOOK = 0.5


@dataclass(slots=True)
class _Flight:
    """One page out: its sends in flight (by token: the asyncio task fetching it and when it began)."""

    task: Task
    sends: dict[object, tuple[asyncio.Task[object] | None, float]] = field(default_factory=dict)
    hedged: bool = False
    #: The hedge waits in its host's queue, not yet sent.
    queued: bool = False


class HedgeBook:
    """The pages out, their hosts' answer times, and the hedges due.

    Args:
        now: the throttler's clock.
        sleep: how to wait on that clock.
        retries: the crawl's ``--retries``: a hedge spends one.
        idle: whether a host has nothing else to send (nothing queued, nothing held back).
        hedge: queue a page's second send (the job pushes it at the head of its host's queue).
    """

    def __init__(self, *, now: Callable[[], float], sleep: Callable[[float], Awaitable[None]], retries: int,
                 idle: Callable[[str], bool], hedge: Callable[[Task], None]) -> None:
        self._now = now
        self._sleep = sleep
        self._retries = retries
        self._idle = idle
        self._hedge = hedge
        self._flights: dict[int, _Flight] = {}
        #: Pages settled while their hedge still waited in the queue: that entry is skipped when taken.
        self._stale: set[int] = set()
        self._answers: dict[str, deque[float]] = {}
        self._wake = asyncio.Event()
        #: Sends hedged so far (the crawl's figures).
        self.hedges = 0
        #: Sends cancelled because the other send of their page had settled it.
        self.cancelled = 0

    # -- the job's calls around each send ------------------------------------------------

    def going(self, task: Task) -> object | None:
        """``task``'s send begins in the current asyncio task (cancelled if the other send settles the
        page first); the token to pass to :meth:`back`."""
        if task.kind != "page" or self._retries <= 0:
            return None
        flight = self._flights.get(id(task))
        if flight is None:
            flight = self._flights[id(task)] = _Flight(task)
        token = object()
        flight.sends[token] = (asyncio.current_task(), self._now())
        flight.queued = False
        self._wake.set()
        return token

    def back(self, task: Task, send: object | None, latency: float | None) -> None:
        """``send`` of ``task`` came back (``latency``: None when no answer came)."""
        if send is None:
            return
        flight = self._flights.get(id(task))
        if flight is not None:
            flight.sends.pop(send, None)
        if latency is not None and task.host:
            record = self._answers.get(task.host)
            if record is None:
                record = self._answers[task.host] = deque(maxlen=RECORD)
            record.append(latency)

    def racing(self, task: Task) -> bool:
        """Whether another send of ``task`` is still out (this one's answer may then be dropped)."""
        flight = self._flights.get(id(task))
        return flight is not None and (bool(flight.sends) or flight.queued)

    def lost(self, task: Task) -> None:
        """A send of ``task`` came back with an answer that would be sent again while its other send is
        still out: the answer is dropped, and the page may be hedged again (within its retries)."""
        flight = self._flights.get(id(task))
        if flight is not None and not flight.queued:
            flight.hedged = False
            self._wake.set()  # the timer may be waiting for a new page out: this one may be due now

    def stale(self, task: Task) -> bool:
        """Whether ``task``, just taken from its queue, is a hedge its page no longer needs (its other
        send settled it meanwhile): the job hands the permit back unused."""
        if not self._stale or id(task) not in self._stale:
            return False
        self._stale.discard(id(task))
        return True

    def requeued(self, task: Task) -> None:
        """``task``'s hedge went back to the queue unsent (the fetcher's last look held it)."""
        flight = self._flights.get(id(task))
        if flight is not None and flight.hedged and flight.sends:
            flight.queued = True

    def dropped(self, task: Task) -> bool:
        """``task`` left the queue unsent (its site given up): True when its other send is still
        out, which then decides (the job writes no line for this one)."""
        flight = self._flights.get(id(task))
        if flight is None or not flight.queued:
            return False
        flight.queued = False
        if flight.sends:
            return True
        self._flights.pop(id(task), None)
        return False

    def settled(self, task: Task) -> None:
        """``task`` has its answer (or is queued again): cancel its other send, forget the page."""
        flight = self._flights.pop(id(task), None)
        if flight is None:
            return
        if flight.queued:
            self._stale.add(id(task))
        for send, _ in flight.sends.values():
            if send is not None:
                _log.debug("%s: answered by its other send; the one still out is cancelled", task.target)
                self.cancelled += 1
                send.cancel()

    # -- the hedges ------------------------------------------------------------------------

    def span(self, host: str) -> float | None:
        """Seconds a page of ``host`` may be out before it counts as hung; None: too few answers."""
        record = self._answers.get(host)
        if record is None or len(record) < MIN_ANSWERS:
            return None
        ranked = sorted(record)
        slow = ranked[min(len(ranked) - 1, math.ceil(0.9 * len(ranked)) - 1)]
        return max(HEDGE_FLOOR, HEDGE_FACTOR * slow)

    def due(self, now: float) -> float:
        """Queue every hedge due at ``now``; the time of the next look (``inf``: no page out)."""
        wake = math.inf
        for flight in list(self._flights.values()):
            task = flight.task
            if flight.hedged or len(flight.sends) != 1 or task.retries >= self._retries:
                continue
            span = self.span(task.host)
            if span is None:
                # No record yet: look again once a few answers may be in.
                wake = min(wake, now + _RELOOK)
                continue
            at = next(iter(flight.sends.values()))[1] + span
            if at > now:
                wake = min(wake, at)
                continue
            if not self._idle(task.host):
                wake = min(wake, now + _RELOOK)
                continue
            flight.hedged = flight.queued = True
            task.retries += 1
            self.hedges += 1
            _log.debug("%s: out %.3f s, past its site's %.3f s; sent once more", task.target,
                       now - at + span, span)
            self._hedge(task)
        return wake

    async def run(self) -> None:
        """The job's timer: wake when the next page may be due, queue the hedges (until cancelled)."""
        while True:
            self._wake.clear()
            # A few turns first: answers already received (the hung send's own, a sibling's 429) are
            # read before a page is taken for hung (as the fetcher's last look does after a stall).
            for _ in range(CATCH_UP_TURNS):
                await asyncio.sleep(0)
            wake = self.due(self._now())
            if math.isinf(wake):
                await self._wake.wait()
                continue
            await self._sleep(max(0.0, wake - self._now()))
