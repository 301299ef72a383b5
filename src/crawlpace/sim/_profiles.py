"""The behaviour profiles: sites that each hide one kind of limit.

Each profile, what it does, and its capacity in successful requests per second:

- ``ratelimit``: a token bucket of ``rate`` per second holding ``burst``; 429
  when it is empty, with ``Retry-After`` unless ``retry_after = false``.
  Capacity ``rate``.
- ``crawldelay``: robots.txt asks ``Crawl-delay: delay``; requests closer than
  that are answered anyway but counted. Capacity ``1 / delay``.
- ``retryafter``: past ``rate`` (a bucket of ``burst``), 429 with
  ``Retry-After: embargo``, and silence expected until then. Capacity ``rate``.
- ``overload``: each request takes ``latency + per_inflight * busy`` seconds,
  ``busy`` being the requests already in flight; 503 once ``limit`` are.
  Capacity ``limit / (latency + per_inflight * (limit - 1))``.
- ``quota``: :class:`crawlpace.guard.Guard` rations ``quota`` requests per
  ``window`` seconds for the whole site, braking in stages. Capacity
  ``quota / window``.
- ``dead``: every request, robots.txt included, gets ``status`` (503).
  Capacity 0.

Every profile also counts the common ``retry_after`` violation (see
:class:`~crawlpace.sim.Site`); ``crawldelay`` adds ``crawl_delay`` violations.
A new profile is a :class:`Site` subclass with a ``profile`` name and its
``PARAMS``, listed in :data:`PROFILES`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Unpack

from ..guard import Guard
from ._asgi import Receive, Scope, Send
from ._limits import Spacing, TokenBucket
from ._params import Param
from ._site import Site, SiteOptions

__all__ = [
    "PROFILES",
    "CrawlDelaySite",
    "DeadSite",
    "OverloadSite",
    "QuotaSite",
    "RateLimitSite",
    "RetryAfterSite",
]

_RATE = Param("rate", "number", "requests per second", low=0.0, above=True, high=1e6)
_BURST = Param("burst", "integer", "requests allowed at once after a pause", 1, low=1, high=1_000_000)


class RateLimitSite(Site):
    """A token bucket: ``rate`` requests per second, ``burst`` at once; 429 past it.

    Args:
        rate: tokens per second; also the capacity.
        burst: the bucket size.
        retry_after: send ``Retry-After`` (seconds until the next token,
            rounded up to a whole second) with each 429.
        **options: see :class:`Site`.
    """

    profile = "ratelimit"
    _RETRY = Param("retry_after", "boolean", "send Retry-After with each 429", True)
    PARAMS = (_RATE, _BURST, _RETRY)

    def __init__(self, *, rate: float, burst: int = 1, retry_after: bool = True,
                 **options: Unpack[SiteOptions]) -> None:
        self.rate = float(_RATE.validate(rate))
        self.burst = int(_BURST.validate(burst))
        self.retry_after = bool(self._RETRY.validate(retry_after))
        self.bucket = TokenBucket(self.rate, self.burst)
        super().__init__(**options)

    @property
    def capacity(self) -> float:
        """The refill rate."""
        return self.rate

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Serve the page if a token is left, else answer 429."""
        wait = self.bucket.take(now)
        if wait > 0:
            await self.refuse(send, 429, wait if self.retry_after else None)
        else:
            await self.content(scope, receive, send)


class CrawlDelaySite(Site):
    """A site that asks for ``Crawl-delay`` in robots.txt and counts who ignores it.

    Every request (robots.txt aside) is answered 200; one arriving less than
    ``delay`` seconds (minus the tolerance) after the previous one counts as a
    ``crawl_delay`` violation.

    Args:
        delay: the crawl delay in seconds; the capacity is its inverse.
        **options: see :class:`Site`.
    """

    profile = "crawldelay"
    _DELAY = Param("delay", "number", "seconds between requests asked in robots.txt", low=0.0, above=True,
                   high=86400.0)
    PARAMS = (_DELAY,)

    def __init__(self, *, delay: float, **options: Unpack[SiteOptions]) -> None:
        self.delay = float(self._DELAY.validate(delay))
        super().__init__(**options)
        self.spacing = Spacing(self.delay, self.tolerance)

    @property
    def capacity(self) -> float:
        """One request per crawl delay."""
        return 1.0 / self.delay

    @property
    def crawl_delay(self) -> float:
        """The delay announced in robots.txt."""
        return self.delay

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Serve the page, counting a violation when it came too soon."""
        if self.spacing.observe(now):
            self.stats.violation("crawl_delay")
        await self.content(scope, receive, send)


class RetryAfterSite(Site):
    """A site that, once a crawler goes over ``rate``, wants ``embargo`` seconds of silence.

    Requests beyond the token bucket (``rate``, ``burst``) get 429 with
    ``Retry-After: embargo``. Until that time is up every request gets 429
    with the seconds left, and counts as a ``retry_after`` violation; the
    embargo is not lengthened by them beyond what each answer announces.

    Args:
        rate: requests per second allowed; also the capacity.
        embargo: seconds of silence demanded after going over the rate.
        burst: the bucket size.
        **options: see :class:`Site`.
    """

    profile = "retryafter"
    _EMBARGO = Param("embargo", "integer", "seconds announced in Retry-After", 5, low=1, high=86400)
    PARAMS = (_RATE, _EMBARGO, _BURST)

    def __init__(self, *, rate: float, embargo: int = 5, burst: int = 1,
                 **options: Unpack[SiteOptions]) -> None:
        self.rate = float(_RATE.validate(rate))
        self.embargo_seconds = int(self._EMBARGO.validate(embargo))
        self.burst = int(_BURST.validate(burst))
        self.bucket = TokenBucket(self.rate, self.burst)
        super().__init__(**options)

    @property
    def capacity(self) -> float:
        """The allowed rate."""
        return self.rate

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Refuse during an embargo or over the rate, else serve the page."""
        if self.embargo.breached(now, self.tolerance):
            await self.refuse(send, 429, self.embargo.remaining(now))
        elif self.bucket.take(now) > 0:
            await self.refuse(send, 429, self.embargo_seconds)
        else:
            await self.content(scope, receive, send)


class OverloadSite(Site):
    """A site that slows down under load and sheds what it cannot hold.

    A request that finds ``busy`` others in flight (robots.txt aside) waits
    ``latency + per_inflight * busy`` seconds before it is served, on the real
    event-loop clock whatever ``clock`` the site has. When ``busy`` has
    already reached ``limit``, the request gets 503 at once.

    By Little's law the site serves ``n / (latency + per_inflight * (n - 1))``
    requests per second with ``n`` in flight, which grows with ``n``; the
    capacity is its value at ``n = limit``. A crawler reaches it by keeping
    exactly ``limit`` requests in flight, and gains nothing by pushing more.

    Args:
        latency: seconds to serve a request alone.
        per_inflight: seconds added for each other request in flight.
        limit: the most requests in flight at once.
        sleep: how to wait; ``asyncio.sleep`` unless a test swaps it.
        **options: see :class:`Site`.
    """

    profile = "overload"
    _LATENCY = Param("latency", "number", "seconds to serve a request alone", 0.05, low=0.0, above=True,
                     high=60.0)
    _PER_INFLIGHT = Param("per_inflight", "number", "seconds added per other request in flight", 0.02,
                          low=0.0, high=60.0)
    _LIMIT = Param("limit", "integer", "requests in flight before 503", 4, low=1, high=100_000)
    PARAMS = (_LATENCY, _PER_INFLIGHT, _LIMIT)

    def __init__(self, *, latency: float = 0.05, per_inflight: float = 0.02, limit: int = 4,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 **options: Unpack[SiteOptions]) -> None:
        self.latency = float(self._LATENCY.validate(latency))
        self.per_inflight = float(self._PER_INFLIGHT.validate(per_inflight))
        self.limit = int(self._LIMIT.validate(limit))
        self.sleep = sleep
        self.busy = 0
        super().__init__(**options)

    @property
    def capacity(self) -> float:
        """Requests per second served with ``limit`` in flight."""
        return self.limit / (self.latency + self.per_inflight * (self.limit - 1))

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Shed the request past the limit, else serve it after the load-dependent latency."""
        busy = self.busy
        if busy >= self.limit:
            await self.refuse(send, 503)
            return
        self.busy += 1
        try:
            await self.sleep(self.latency + self.per_inflight * busy)
            await self.content(scope, receive, send)
        finally:
            self.busy -= 1


class QuotaSite(Site):
    """A site rationing a windowed quota with :class:`crawlpace.guard.Guard`.

    The whole site shares one quota (``key="site"``) of ``quota`` requests per
    window of ``window`` seconds, windows laid on multiples of ``window`` on
    the site's clock. Guard's default stages brake half the requests past half
    the quota, three quarters past three quarters, all of them once it is
    spent, each 429 with ``Retry-After``. No user agent is exempt.

    Args:
        quota: requests per window.
        window: the window length in seconds.
        **options: see :class:`Site`.
    """

    profile = "quota"
    _QUOTA = Param("quota", "number", "requests allowed per window", low=0.0, above=True, high=1e9)
    _WINDOW = Param("window", "number", "window length in seconds", 60.0, low=0.0, above=True, high=1e7)
    PARAMS = (_QUOTA, _WINDOW)

    def __init__(self, *, quota: float, window: float = 60.0, **options: Unpack[SiteOptions]) -> None:
        self.quota = float(self._QUOTA.validate(quota))
        self.window = float(self._WINDOW.validate(window))
        super().__init__(**options)
        self.guard = Guard(self.content, quota=self.quota, window=self.window, key="site", allow=(),
                           clock=self.clock, rng=self.rng)

    @property
    def capacity(self) -> float:
        """The quota spread over its window."""
        return self.quota / self.window

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Let the guard decide, then serve the page."""
        await self.guard(scope, receive, send)


class DeadSite(Site):
    """A site that is down: every request, robots.txt included, gets ``status``.

    Args:
        status: the status to answer with, a 5xx.
        **options: see :class:`Site`.
    """

    profile = "dead"
    gates_robots = True
    _STATUS = Param("status", "integer", "the 5xx status of every answer", 503, low=500, high=599)
    PARAMS = (_STATUS,)

    def __init__(self, *, status: int = 503, **options: Unpack[SiteOptions]) -> None:
        self.status = int(self._STATUS.validate(status))
        super().__init__(**options)

    @property
    def capacity(self) -> float:
        """Nothing can be served."""
        return 0.0

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Answer with the error status."""
        await self.refuse(send, self.status)


#: Profile name to site class, for farm files.
PROFILES: Mapping[str, type[Site]] = MappingProxyType({
    cls.profile: cls
    for cls in (RateLimitSite, CrawlDelaySite, RetryAfterSite, OverloadSite, QuotaSite, DeadSite)
})
