"""Time sources.

The throttling policy never reads the system time itself: it is handed ``now``
by whoever calls it, and the async layer gets ``now`` and its timers from one
injected :class:`Clock`. Production code uses :class:`AsyncioClock` (the event
loop's monotonic clock); tests use :class:`crawlpace.testing.MockClock`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["AsyncioClock", "Clock", "TimerHandle"]


@runtime_checkable
class TimerHandle(Protocol):
    """Something that can cancel a scheduled callback."""

    def cancel(self) -> None:
        """Prevent the callback from running; a no-op if it already ran."""


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock with timers, in seconds.

    ``now()`` has an arbitrary origin: only differences between readings mean
    anything. ``call_at`` schedules a plain callback at an absolute reading of
    the same clock; the callback runs in the event loop's thread.
    """

    def now(self) -> float:
        """Return the current reading in seconds."""

    async def sleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds`` of this clock's time."""

    def call_at(self, when: float, callback: Callable[[], object]) -> TimerHandle:
        """Run ``callback`` once the clock reads ``when`` or later."""


class AsyncioClock:
    """The running event loop's monotonic clock.

    The loop is looked up on each call, so one instance can be created before
    the loop starts and shared by every component of a process.
    """

    __slots__ = ()

    def now(self) -> float:
        """Return ``loop.time()`` of the running loop."""
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        """Sleep with :func:`asyncio.sleep`."""
        await asyncio.sleep(max(0.0, seconds))

    def call_at(self, when: float, callback: Callable[[], object]) -> TimerHandle:
        """Schedule with ``loop.call_at``."""
        return asyncio.get_running_loop().call_at(when, callback)

    def __repr__(self) -> str:
        return "AsyncioClock()"
