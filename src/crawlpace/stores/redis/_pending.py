"""Releases that could not reach the server, kept to be sent again when it answers.

A release that fails because Redis is unreachable would otherwise leave its
slots held until their leases expire (30 s by default), long after a short
outage is over. The shared store keeps such releases here, in a bounded queue,
and sends them again: before its next acquire, and on a short timer that backs
off while the server stays away. A release is only worth sending while its
lease could still be held: once the lease would have expired anyway, the
server frees the slot by itself, and the release is dropped (and logged).

Sending one again is safe: the release script removes the lease id from the
lease set only if it is still there, and a write-back carries the version it
was computed from, so a stale one is refused and computed again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .connection import Retry

__all__ = ["PendingRelease", "ReleaseQueue"]

logger = logging.getLogger(__name__)

#: Releases kept at most; the oldest is dropped (its lease expires on its own) beyond.
QUEUE_MAX = 1024
# Waits between two attempts of the timer: short first (the slot matters), then backing off.
# (A slot matters sooner than a new admission does: at most 1 s between two tries, not RETRY_MAX.)
_RESEND_MAX = 1.0


@dataclass(slots=True)
class PendingRelease:
    """One release that failed: what to send again, and until when it matters.

    Attributes:
        lease_id: the lease it gives back (for the log).
        expires: this worker's clock time after which the lease has expired anyway.
        payload: whatever the store needs to send it again.
    """

    lease_id: str
    expires: float
    payload: Any


class ReleaseQueue:
    """Failed releases, retried in order until sent or expired.

    Args:
        send: sends one release again; raises one of ``down`` while the
            server is unreachable.
        down: the exceptions that mean "unreachable".
        now: this worker's clock.
        sleep: this worker's sleep.
        limit: the most releases kept.
    """

    def __init__(self, send: Callable[[PendingRelease], Awaitable[None]],
                 down: tuple[type[Exception], ...], now: Callable[[], float],
                 sleep: Callable[[float], Awaitable[None]], limit: int = QUEUE_MAX) -> None:
        self._send = send
        self._down = down
        self._now = now
        self._sleep = sleep
        self._limit = limit
        self._queue: collections.deque[PendingRelease] = collections.deque()
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        self.sent = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, item: PendingRelease) -> None:
        """Keep ``item`` to be sent again, and make sure the timer runs."""
        if len(self._queue) >= self._limit:
            oldest = self._queue.popleft()
            self.dropped += 1
            logger.warning("too many releases waiting for the Redis server (%d): lease %s dropped; its "
                           "slots come back when it expires", self._limit, oldest.lease_id)
        self._queue.append(item)
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._retry_forever())

    async def flush(self) -> None:
        """Send every waiting release, oldest first.

        Raises:
            One of ``down`` when the server is still unreachable; the release
            that failed and those after it stay queued.
        """
        if not self._queue:
            return
        async with self._lock:
            while self._queue:
                item = self._queue[0]
                if self._now() >= item.expires:
                    self._queue.popleft()
                    self.dropped += 1
                    logger.info("release of lease %s dropped: the lease has expired by now, and its slots "
                                "with it", item.lease_id)
                    continue
                await self._send(item)  # raises while down: the item stays first in line
                self._queue.popleft()
                self.sent += 1
                logger.debug("release of lease %s sent again", item.lease_id)

    async def _retry_forever(self) -> None:
        retry = Retry(most=_RESEND_MAX)
        while self._queue:
            await self._sleep(retry.next())
            try:
                await self.flush()
            except self._down as exc:
                logger.debug("releases still waiting for the Redis server: %s", exc)
            except Exception:
                logger.exception("sending a release again failed; it is dropped")
                if self._queue:
                    self._queue.popleft()
                    self.dropped += 1

    async def aclose(self) -> None:
        """Stop the timer; releases still waiting are left to expire (logged)."""
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None
        if self._queue:
            logger.warning("closing with %d releases the Redis server never received: their slots "
                           "come back when their leases expire", len(self._queue))
            self._queue.clear()
