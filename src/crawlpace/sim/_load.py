"""Profiles limited by how many requests a site can work on at once.

``overload`` slows down with every request in flight, ``slow`` takes one to
two seconds whatever the load; both shed what they cannot hold with an
immediate 503. Their latencies are real: they wait on the event loop's clock,
whatever clock the site measures with, unless a test swaps ``sleep``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Unpack

from ._asgi import Receive, Scope, Send
from ._params import Param
from ._site import Site, SiteOptions

__all__ = ["OverloadSite", "SlowSite"]

_LIMIT = Param("limit", "integer", "requests in flight before 503", 4, low=1, high=100_000)

Sleep = Callable[[float], Awaitable[None]]


class _BusySite(Site):
    """A site that holds at most ``limit`` requests at once and answers 503 past that."""

    def __init__(self, *, limit: int, sleep: Sleep = asyncio.sleep, **options: Unpack[SiteOptions]) -> None:
        self.limit_configured = _LIMIT.integer(limit)
        self.limit = self.limit_configured
        self.sleep = sleep
        self.busy = 0
        super().__init__(**options)

    def rescale(self, factor: float, now: float) -> None:
        """Hold ``factor`` times the configured limit (at least 1) from now on."""
        self.limit = max(round(self.limit_configured * factor), 1)

    def latency(self, busy: int) -> float:
        """Seconds to serve a request that finds ``busy`` others in flight."""
        raise NotImplementedError

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Shed the request past the limit, else serve it after its latency."""
        busy = self.busy
        if busy >= self.limit:
            await self.refuse(send, 503)
            return
        self.busy += 1
        try:
            await self.sleep(self.latency(busy))
            await self.content(scope, receive, send)
        finally:
            self.busy -= 1


class OverloadSite(_BusySite):
    """A site that slows down under load and sheds what it cannot hold.

    A request that finds ``busy`` others in flight (robots.txt aside) waits
    ``latency + per_inflight * busy`` seconds before it is served. When
    ``busy`` has already reached ``limit``, the request gets 503 at once.

    By Little's law the site serves ``n / (latency + per_inflight * (n - 1))``
    requests per second with ``n`` in flight, which grows with ``n`` as long
    as ``per_inflight < latency``; the capacity is then its value at
    ``n = limit``, reached by keeping exactly ``limit`` requests in flight.
    Otherwise one request at a time is best.

    With a ``knee`` above 0 the site has a congestion knee as well: once
    ``n`` requests are in flight (this one included) and ``n > knee``, the
    latency above is multiplied by ``(n / knee) ** exponent``. With exponent
    2 the throughput peaks at ``n = knee`` and falls past it; with exponent 1
    it stays level past the knee while each request waits longer. The
    capacity is the best throughput over ``n`` from 1 to ``limit``.

    Args:
        latency: seconds to serve a request alone.
        per_inflight: seconds added for each other request in flight.
        limit: the most requests in flight at once.
        knee: requests in flight past which latency grows as a power (0: none).
        exponent: the power of that growth.
        sleep: how to wait; ``asyncio.sleep`` unless a test swaps it.
        **options: see :class:`Site`.
    """

    profile = "overload"
    _LATENCY = Param("latency", "number", "seconds to serve a request alone", 0.05, low=0.0, above=True,
                     high=60.0)
    _PER_INFLIGHT = Param("per_inflight", "number", "seconds added per other request in flight", 0.02,
                          low=0.0, high=60.0)
    _KNEE = Param("knee", "integer", "requests in flight past which latency grows as a power (0: none)", 0,
                  low=0, high=100_000)
    _EXPONENT = Param("exponent", "number", "the power of the latency growth past the knee", 2.0, low=0.0,
                      above=True, high=10.0)
    PARAMS = (_LATENCY, _PER_INFLIGHT, _LIMIT, _KNEE, _EXPONENT)

    def __init__(self, *, latency: float = 0.05, per_inflight: float = 0.02, limit: int = 4, knee: int = 0,
                 exponent: float = 2.0, sleep: Sleep = asyncio.sleep, **options: Unpack[SiteOptions]) -> None:
        self.base_latency = self._LATENCY.number(latency)
        self.per_inflight = self._PER_INFLIGHT.number(per_inflight)
        self.knee = self._KNEE.integer(knee)
        self.exponent = self._EXPONENT.number(exponent)
        super().__init__(limit=limit, sleep=sleep, **options)

    def best_load(self) -> int:
        """The requests in flight that serve the most per second (the fewest such, on a tie)."""
        return max(range(1, self.limit + 1), key=lambda n: (round(n / self.latency(n - 1), 9), -n))

    @property
    def capacity(self) -> float:
        """Requests per second served at the best load (see :meth:`best_load`): ``limit`` in
        flight without a knee, or one when each extra request costs more than a request alone
        (``per_inflight > latency``)."""
        best = self.best_load()
        return best / self.latency(best - 1)

    def latency(self, busy: int) -> float:
        """The base latency plus ``per_inflight`` for each request already in flight, times the
        knee's factor once the load (``busy + 1``) is past it."""
        seconds = self.base_latency + self.per_inflight * busy
        load = busy + 1
        if self.knee and load > self.knee:
            seconds *= (load / self.knee) ** self.exponent
        return seconds


class SlowSite(_BusySite):
    """A site that takes its time: each request waits a random ``low`` to ``high`` seconds.

    The latency is drawn uniformly for each request and does not depend on
    the load, but no more than ``limit`` requests are held at once: one more
    gets 503 at once. A crawler gets the most out of it by keeping ``limit``
    requests in flight; with a short client timeout it sees none succeed.

    Args:
        low: the shortest latency in seconds.
        high: the longest latency in seconds, at least ``low``.
        limit: the most requests in flight at once.
        sleep: how to wait; ``asyncio.sleep`` unless a test swaps it.
        **options: see :class:`Site`.

    Raises:
        ValueError: also when ``high`` is below ``low``.
    """

    profile = "slow"
    _LOW = Param("low", "number", "shortest latency in seconds", 1.0, low=0.0, high=600.0)
    _HIGH = Param("high", "number", "longest latency in seconds", 2.0, low=0.0, above=True, high=600.0)
    PARAMS = (_LOW, _HIGH, _LIMIT)

    def __init__(self, *, low: float = 1.0, high: float = 2.0, limit: int = 4, sleep: Sleep = asyncio.sleep,
                 **options: Unpack[SiteOptions]) -> None:
        self.low = self._LOW.number(low)
        self.high = self._HIGH.number(high)
        problem = self.conflict({"low": self.low, "high": self.high})
        if problem:
            raise ValueError(problem)
        super().__init__(limit=limit, sleep=sleep, **options)

    @classmethod
    def conflict(cls, params: Mapping[str, object]) -> str | None:
        """``high`` may not be below ``low``."""
        low, high = params.get("low", 1.0), params.get("high", 2.0)
        if isinstance(low, float | int) and isinstance(high, float | int) and high < low:
            return f"high = {high!r} is below low = {low!r}; set high to at least low"
        return None

    @property
    def capacity(self) -> float:
        """``limit`` requests per mean latency."""
        return self.limit / ((self.low + self.high) / 2)

    def latency(self, busy: int) -> float:
        """A uniform draw between ``low`` and ``high``."""
        return self.rng.uniform(self.low, self.high)
