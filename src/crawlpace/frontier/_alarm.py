"""What an idle crawl scheduler sleeps on: news, or the time its earliest queue is due.

The scheduler has nothing to hand out until one of two things happens: a
queue on its board comes due (a known time), or something it cannot foresee
(a task pushed, a slot freed by a release). :class:`Alarm` waits for
whichever comes first, on the scheduler's clock, so that a fake clock jumps
straight to the due time in tests. News that arrives while no one sleeps is
kept, and the next sleep returns at once: a poke is never lost between a
caller finding nothing due and going to sleep.

A time can also come up while the sleeper sleeps: another coroutine of the
scheduler tried a queue and put it back on the board, due later or parked
with a time to look again. :meth:`Alarm.wake_by` moves the sleeper's timer
earlier for it, so that no time on the board is ever later than the sleeper's
own (a sleeper with no timer and a queue parked with a look-again time slept
for ever: a fleet worker kept its claimed URLs until it was killed).
"""

from __future__ import annotations

import asyncio

from .._clock import Clock, TimerHandle

__all__ = ["Alarm"]


class Alarm:
    """Wait for news or a time, whichever comes first.

    Args:
        clock: the clock the due times are read on.
    """

    __slots__ = ("_clock", "_event", "_handle", "_news", "_until")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._news = False
        self._event: asyncio.Event | None = None  # set while someone sleeps
        self._until: float | None = None  # the sleeper's time (None: none)
        self._handle: TimerHandle | None = None

    def ring(self) -> None:
        """Say that something happened: wake the sleeper, or the next one to come."""
        self._news = True
        if self._event is not None:
            self._event.set()

    def wake_by(self, when: float) -> None:
        """Make sure the sleeper, if any, is up at ``when`` at the latest.

        Nothing to do while no one sleeps: the next sleep is given the
        earliest time there is to wait for.
        """
        event = self._event
        if event is None or (self._until is not None and self._until <= when):
            return
        if self._handle is not None:
            self._handle.cancel()
        self._until = when
        self._handle = self._clock.call_at(when, event.set)

    async def sleep(self, until: float | None) -> bool:
        """Return at the time ``until`` (None: no such time), or at news; at once if news is waiting.

        Returns:
            True when it returned at ``until`` itself: no news came, and no
            earlier time (:meth:`wake_by`).
        """
        if self._news:
            self._news = False
            return False
        event = self._event = asyncio.Event()
        self._until = until
        if until is not None:
            self._handle = self._clock.call_at(until, event.set)
        try:
            await event.wait()
        finally:
            self._event = None
            news, self._news = self._news, False
            if self._handle is not None:
                self._handle.cancel()
                self._handle = None
        return not news and self._until == until

    def __repr__(self) -> str:
        return f"<Alarm news={self._news} sleeping={self._event is not None} until={self._until}>"
