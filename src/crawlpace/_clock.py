"""Time sources.

The throttling policy never reads the system time itself: it is handed ``now``
by whoever calls it, and the async layer gets ``now`` and its timers from one
injected :class:`Clock`. Production code uses :class:`AsyncioClock` (the event
loop's monotonic clock); tests use :class:`crawlpace.testing.MockClock`.
"""

from __future__ import annotations

import asyncio
import time
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
    """The system's monotonic clock, with timers on the running event loop.

    Readings come from :func:`time.monotonic` (what the standard loop's
    ``time()`` returns too); timers are converted to a delay, so they stay
    right on loops whose ``time()`` has another origin or resolution. One
    instance can be created before the loop starts and shared.
    """

    __slots__ = ()

    def now(self) -> float:
        """Return :func:`time.monotonic`."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Sleep with :func:`asyncio.sleep`."""
        await asyncio.sleep(max(0.0, seconds))

    def call_at(self, when: float, callback: Callable[[], object]) -> TimerHandle:
        """Schedule ``callback`` on the running loop ``when - now()`` from now."""
        return asyncio.get_running_loop().call_later(max(0.0, when - time.monotonic()), callback)

    def __repr__(self) -> str:
        return "AsyncioClock()"
