"""When this process's event loop ran late: so that its own lateness is not taken for the server's.

A latency measured by the crawler is the server's time plus the crawler's own: an
answer that arrives while the event loop is busy, or while the operating system
gives the process no CPU (several workers of a fleet on a loaded machine), waits
until the loop gets to it. Rampup reads a latency far above its baseline as a
server past its knee and cuts the rate; a crawler starved of CPU would then cut a
site that answers in a millisecond, and hold the rate there (measured: a fleet of
8 workers on a loaded 2-core machine logged latencies of 0.17 s against a site
answering in 2 ms, and cut a 30/s site to 17/s with no refusal).

:class:`LoopStalls` is a heartbeat: a task that sleeps ``period`` seconds again and
again and notes how much later than asked it woke. The seconds past each wake-up's
due time are the loop's stalls. :meth:`LoopStalls.within` says how many of them fall
inside a request's flight; :func:`local_share_dominates` decides that a latency
sample says more about this process than about the server when its stalls are at
least ``STALL_FLOOR`` and ``STALL_SHARE`` of the latency. Such a sample is left out of
what the throttler learns (the page's own record keeps the latency as measured).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable

__all__ = ["BEAT", "STALL_FLOOR", "STALL_SHARE", "LoopStalls", "local_share_dominates"]

#: Seconds between two heartbeats: the resolution of the stalls seen.
BEAT = 0.02
#: Stalls shorter than this are noise (a knee needs more than rampup's 10 ms of slack to show).
STALL_FLOOR = 0.01
#: The share of a latency the loop's stalls must cover for the sample to be left out.
STALL_SHARE = 0.5
#: Stalls remembered: the longest flight they can account for is about BEAT times this.
_KEPT = 4096


def local_share_dominates(latency: float | None, stalled: float) -> bool:
    """Whether ``stalled`` seconds of this process's stalls make a ``latency`` sample unreliable."""
    return latency is not None and stalled >= STALL_FLOOR and stalled >= STALL_SHARE * latency


class LoopStalls:
    """The event loop's stalls, from a heartbeat task (start it inside the running loop).

    Args:
        clock: the loop's clock (``loop.time``); the flights given to :meth:`within` use it too.
        period: seconds between heartbeats.
    """

    def __init__(self, clock: Callable[[], float], period: float = BEAT) -> None:
        self._clock = clock
        self.period = period
        #: (start, end) of each stall: from when a heartbeat was due to when it ran.
        self._stalls: collections.deque[tuple[float, float]] = collections.deque(maxlen=_KEPT)
        self._task: asyncio.Task[None] | None = None
        self._due = float("inf")  # when the next heartbeat should run

    def start(self) -> None:
        """Start the heartbeat (once; call inside the running loop)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._beat())

    async def stop(self) -> None:
        """Stop the heartbeat."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _beat(self) -> None:
        clock, period = self._clock, self.period
        while True:
            self._due = due = clock() + period
            await asyncio.sleep(period)
            self.note(due, clock())

    def note(self, due: float, woke: float) -> None:
        """Record a heartbeat due at ``due`` that ran at ``woke`` (a stall if later)."""
        if woke > due:
            self._stalls.append((due, woke))

    def late(self, now: float) -> float:
        """Seconds the loop is, or just was, behind at ``now``: its heartbeat is overdue by that
        much, or the stall it last noted ended less than a period ago (0.0: on time). Right after
        a stall, answers that came in during it may wait unread while other work goes first."""
        behind = max(0.0, now - self._due) if self._task is not None else 0.0
        if self._stalls:
            start, end = self._stalls[-1]
            if end >= now - self.period:
                behind = max(behind, end - start)
        return behind

    def within(self, start: float, end: float) -> float:
        """Seconds of stalls between ``start`` and ``end`` (loop clock)."""
        total = 0.0
        for low, high in reversed(self._stalls):
            if high <= start:
                break  # the stalls are in order of their end
            total += max(0.0, min(high, end) - max(low, start))
        return total
