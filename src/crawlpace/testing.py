"""Helpers for testing code that uses crawlpace, crawlpace's own tests included.

:class:`MockClock` is a :class:`~crawlpace.Clock` whose time only moves when
told to. With ``autojump=True`` it moves by itself: whenever every task of
the event loop is blocked, it jumps straight to the next timer. A test that
waits out a minute of delays then finishes in milliseconds, and the times it
observes are exact.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from collections.abc import Callable

__all__ = ["MockClock"]

# How many consecutive idle checks the autojumper wants before it moves time.
_IDLE_ROUNDS = 3


class _Timer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class MockClock:
    """A clock for tests: virtual seconds, timers, and optional autojump.

    Args:
        start: the initial reading.
        autojump: jump to the next timer whenever the event loop is idle.
            This needs the standard asyncio event loop and assumes that every
            task waits on this clock (not on real sockets or real timers).

    Example::

        clock = MockClock(autojump=True)
        settings = {"DOWNLOAD_DELAY": 60, "RANDOMIZE_DOWNLOAD_DELAY": False}
        async with Throttler(settings, clock=clock) as t:
            for _ in range(3):
                async with t.slot("https://example.com/"):
                    pass
        assert clock.now() == 120.0

    Several autojumping clocks may share one event loop: one jumper per loop
    serves them all, each time moving the clock whose next timer is nearest.
    """

    def __init__(self, start: float = 0.0, *, autojump: bool = False) -> None:
        self._now = float(start)
        self._heap: list[tuple[float, int, _Timer]] = []
        self._order = itertools.count()
        self.autojump = autojump

    def now(self) -> float:
        """Return the virtual time."""
        return self._now

    def call_at(self, when: float, callback: Callable[[], object]) -> _Timer:
        """Run ``callback`` when virtual time reaches ``when``."""
        timer = _Timer(when, callback)
        heapq.heappush(self._heap, (when, next(self._order), timer))
        if self.autojump:
            self._start_jumper()
        return timer

    async def sleep(self, seconds: float) -> None:
        """Wait for ``seconds`` of virtual time."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        timer = self.call_at(self._now + max(0.0, seconds), wake)
        try:
            await future
        finally:
            timer.cancel()

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing due timers in order.

        Timers fire synchronously, so tasks they wake run only after this
        returns; under ``autojump`` that is rarely what a test wants.
        """
        if seconds < 0:
            raise ValueError("time cannot go backwards; seconds must be >= 0")
        self._advance_to(self._now + seconds)

    def next_deadline(self) -> float | None:
        """Return the time of the earliest pending timer, if any."""
        self._drop_cancelled()
        return self._heap[0][0] if self._heap else None

    def _advance_to(self, target: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= target:
            when, _, timer = heapq.heappop(heap)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback()
        self._now = max(self._now, target)

    def _drop_cancelled(self) -> None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)

    def _start_jumper(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        jumper = _JUMPERS.get(loop)
        if jumper is None:
            jumper = _JUMPERS[loop] = _Jumper(loop)
        jumper.add(self)

    def __repr__(self) -> str:
        return f"<MockClock now={self._now:g} timers={len(self._heap)} autojump={self.autojump}>"


class _Jumper:
    """Moves the autojumping clocks of one event loop whenever the loop is idle.

    One per loop, because two independent jumpers would each see the other's
    yielding as activity and never find the loop idle.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.clocks: weakref.WeakSet[MockClock] = weakref.WeakSet()
        self.task: asyncio.Task[None] | None = None

    def add(self, clock: MockClock) -> None:
        self.clocks.add(clock)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self.run())

    async def run(self) -> None:
        while True:
            await _until_idle(self.loop)
            nearest: tuple[float, MockClock] | None = None
            for clock in list(self.clocks):
                deadline = clock.next_deadline()
                if deadline is not None:
                    gap = deadline - clock.now()
                    if nearest is None or gap < nearest[0]:
                        nearest = (gap, clock)
            if nearest is None:
                return
            gap, clock = nearest
            clock._advance_to(clock.now() + max(0.0, gap))


_JUMPERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Jumper] = weakref.WeakKeyDictionary()


async def _until_idle(loop: asyncio.AbstractEventLoop) -> None:
    """Return once no other callback of ``loop`` is ready to run."""
    ready = getattr(loop, "_ready", None)
    idle_rounds = 0
    while idle_rounds < _IDLE_ROUNDS:
        await asyncio.sleep(0)
        # The standard loop keeps its runnable callbacks in ``_ready``; other
        # loops fall back to yielding a fixed number of times.
        if ready is None or not ready:
            idle_rounds += 1
        else:
            idle_rounds = 0
