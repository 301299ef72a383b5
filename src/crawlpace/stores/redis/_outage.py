"""The shared store while its server cannot be reached: fail closed, or admit by the memory fallback.

Without ``fallback=memory``, nothing is admitted while the server is away: a
request is told to ask again after a wait that doubles from 0.1 s up to 5 s
(``connection.Retry``). With it, requests are admitted by a cautious local
memory store (``_fallback.py``) and the server is tried again after the same
waits. One warning when the server goes, one when it comes back.
"""

from __future__ import annotations

import logging
import math

from ..._clock import Clock
from ..._redact import redact
from ...policy.admission import Demand
from ..base import Blocked, Lease
from ..memory import MemoryStore
from .connection import Retry

__all__ = ["Outage"]

logger = logging.getLogger(__name__)


class Outage:
    """Whether the server is away, since when, and what to admit meanwhile.

    Args:
        url: the server (for log lines).
        clock: this worker's clock.
        fallback: the memory store to admit by while away (``None``: fail closed).
        workers: the fallback's assumed workers per site (for the log line).
    """

    def __init__(self, url: str, clock: Clock, fallback: MemoryStore | None, workers: int) -> None:
        self.url = redact(url)  # for log lines only: never a password
        self._clock = clock
        self.fallback = fallback
        self._workers = workers
        self.since: float | None = None
        self._retry = Retry()
        self._next_try = -math.inf

    def skip(self) -> bool:
        """True while the server is most likely still away and the fallback may answer without trying."""
        return self.fallback is not None and self.since is not None and self._clock.now() < self._next_try

    def unreachable(self, exc: Exception, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """The answer to an acquire the server could not take."""
        now = self._clock.now()
        if self.since is None:
            self.since = now
            if self.fallback is None:
                logger.warning("Redis store %s unreachable (%s): holding every request until it answers",
                               self.url, exc)
            else:
                logger.warning("Redis store %s unreachable (%s): admitting by the memory fallback (one "
                               "slot per scope, delays x%d) until it answers", self.url, exc, self._workers)
        else:
            logger.debug("Redis store still unreachable after %.1fs: %s", now - self.since, exc)
        wait = self._retry.next()
        self._next_try = now + wait
        if self.fallback is not None:
            return self.fallback.acquire_nowait(demands)
        return Blocked(now + wait, tuple((name, now + wait) for name, _ in demands))

    def reachable(self) -> None:
        """The server answered."""
        if self.since is not None:
            back = "; back to the shared state from the memory fallback" if self.fallback is not None else ""
            logger.warning("Redis store %s answers again after %.1fs%s", self.url,
                           self._clock.now() - self.since, back)
            self.since = None
        self._retry.reset()
