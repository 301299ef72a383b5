"""What an idle crawl scheduler sleeps on: news, or the time its earliest queue is due.

The scheduler has nothing to hand out until one of two things happens: a
queue on its board comes due (a known time), or something it cannot foresee
(a task pushed, a slot freed by a release). :class:`Alarm` waits for
whichever comes first, on the scheduler's clock, so that a fake clock jumps
straight to the due time in tests. News that arrives while no one sleeps is
kept, and the next sleep returns at once: a poke is never lost between a
caller finding nothing due and going to sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .._clock import Clock, TimerHandle

__all__ = ["Alarm"]


class Alarm:
    """Wait for news or a time, whichever comes first.

    Args:
        clock: the clock the due times are read on.
    """

    __slots__ = ("_clock", "_news", "_signal")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._news = False
        self._signal: Callable[[], None] | None = None

    def ring(self) -> None:
        """Say that something happened: wake the sleeper, or the next one to come."""
        self._news = True
        if self._signal is not None:
            self._signal()

    async def sleep(self, until: float | None) -> None:
        """Return at the time ``until`` (None: no such time), or at news; at once if news is waiting."""
        if self._news:
            self._news = False
            return
        event = asyncio.Event()
        self._signal = event.set
        handle: TimerHandle | None = None
        if until is not None:
            handle = self._clock.call_at(until, event.set)
        try:
            await event.wait()
        finally:
            self._signal = None
            self._news = False
            if handle is not None:
                handle.cancel()

    def __repr__(self) -> str:
        return f"<Alarm news={self._news} sleeping={self._signal is not None}>"
