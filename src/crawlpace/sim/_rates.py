"""Profiles that limit how many requests a site takes per unit of time.

``ratelimit`` and ``retryafter`` refuse what a token bucket cannot hold,
``headers`` counts a fixed window and announces what is left of it,
``crawldelay`` asks for a spacing in robots.txt, and ``quota`` rations a
windowed quota with :class:`crawlpace.guard.Guard`. Each capacity is the
rate of 200s a perfectly paced crawler would get.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol, Unpack

from ..guard import Guard
from ._asgi import Headers, Receive, Scope, Send
from ._limits import FixedWindow, Spacing, TokenBucket
from ._params import Param
from ._site import Site, SiteOptions, retry_after_value

__all__ = ["CrawlDelaySite", "HeadersSite", "QuotaSite", "RateLimitSite", "RetryAfterSite"]

_RATE = Param("rate", "number", "requests per second", low=0.0, above=True, high=1e6)
_BURST = Param("burst", "integer", "requests allowed at once after a pause", 1, low=1, high=1_000_000)


class _Counter(Protocol):
    limit: int


class CountingSite(Site):
    """A site that allows ``counter.limit`` requests per ``span`` seconds (its configured ``limit`` rescaled).

    The base of the windows and request-rate counters: a subclass sets
    ``limit``, ``span`` and ``counter`` before ``Site.__init__``.
    """

    limit: int
    span: float
    counter: _Counter

    @property
    def capacity(self) -> float:
        """The limit spread over its span."""
        return self.counter.limit / self.span

    def rescale(self, factor: float, now: float) -> None:
        """Allow ``factor`` times the configured limit (at least 1) from now on."""
        self.counter.limit = max(round(self.limit * factor), 1)


class _BucketSite(Site):
    """A site whose rate is a token bucket of ``rate`` per second holding ``burst``."""

    def __init__(self, *, rate: float, burst: int = 1, **options: Unpack[SiteOptions]) -> None:
        self.rate = _RATE.number(rate)
        self.burst = _BURST.integer(burst)
        self.bucket = TokenBucket(self.rate, self.burst)
        super().__init__(**options)

    @property
    def capacity(self) -> float:
        """The refill rate of the bucket."""
        return self.bucket.rate

    def rescale(self, factor: float, now: float) -> None:
        """Refill at ``factor`` times the configured rate from ``now`` on."""
        self.bucket.set_rate(now, self.rate * factor)


class RateLimitSite(_BucketSite):
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
        self.retry_after = self._RETRY.flag(retry_after)
        super().__init__(rate=rate, burst=burst, **options)

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Serve the page if a token is left, else answer 429."""
        wait = self.bucket.take(now)
        if wait > 0:
            await self.refuse(send, 429, wait if self.retry_after else None)
        else:
            await self.content(scope, receive, send)


class RetryAfterSite(_BucketSite):
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
        self.embargo_seconds = self._EMBARGO.integer(embargo)
        super().__init__(rate=rate, burst=burst, **options)

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Refuse during an embargo or over the rate, else serve the page."""
        if self.embargo.breached(now, self.tolerance):
            await self.refuse(send, 429, self.embargo.remaining(now))
        elif self.bucket.take(now) > 0:
            await self.refuse(send, 429, self.embargo_seconds)
        else:
            await self.content(scope, receive, send)


#: The header families a ``headers`` site can speak: every form crawlpace reads.
HEADER_STYLES = ("ietf", "draft07", "trio", "x-ratelimit", "x-rate-limit", "reset-after", "policy")


def budget_headers(style: str, limit: int, remaining: int, reset: float, window: float,
                   wall: float, *, reset_at: int | None = None) -> Headers:
    """The header pairs announcing a window's budget in one family.

    Args:
        style: ``"ietf"`` (``RateLimit-Policy`` and ``RateLimit``, the
            IETF draft's structured lists), ``"draft07"`` (the draft-07
            dictionary ``RateLimit: limit=.., remaining=.., reset=..``),
            ``"trio"`` (the older ``RateLimit-Limit``, ``-Remaining`` and
            ``-Reset``, reset in seconds), ``"x-ratelimit"`` (``X-RateLimit-*``,
            reset as a Unix time, the way GitHub sends it), ``"x-rate-limit"``
            (``X-Rate-Limit-*``, reset as a Unix time, as Twitter did),
            ``"reset-after"`` (``X-RateLimit-*`` with ``X-RateLimit-Reset-After``
            in seconds, as Discord does) or ``"policy"`` (``RateLimit-Policy``
            alone: the quota and window, never what is left).
        limit: requests per window.
        remaining: requests left in this window.
        reset: seconds until the window ends.
        window: the window length in seconds.
        wall: the current Unix time, for resets given as a Unix time.
        reset_at: the Unix time to announce for those instead of ``ceil(wall + reset)``
            (Flask-Limiter announces ``int(wall + reset + 1)``).
    """
    seconds = str(max(math.ceil(reset), 0)).encode("ascii")
    whole_window = max(math.ceil(window), 1)
    count, left = str(limit).encode("ascii"), str(remaining).encode("ascii")
    epoch = str(math.ceil(wall + reset) if reset_at is None else reset_at).encode("ascii")
    if style == "ietf":
        policy = f'"site";q={limit};w={whole_window}'.encode("ascii")
        state = f'"site";r={remaining};t={seconds.decode()}'.encode("ascii")
        return [(b"ratelimit-policy", policy), (b"ratelimit", state)]
    if style == "draft07":
        state = f"limit={limit}, remaining={remaining}, reset={seconds.decode()}".encode("ascii")
        return [(b"ratelimit", state), (b"ratelimit-policy", f"{limit};w={whole_window}".encode("ascii"))]
    if style == "trio":
        return [(b"ratelimit-limit", count), (b"ratelimit-remaining", left), (b"ratelimit-reset", seconds)]
    if style == "x-rate-limit":
        return [(b"x-rate-limit-limit", count), (b"x-rate-limit-remaining", left),
                (b"x-rate-limit-reset", epoch)]
    if style == "reset-after":
        after = f"{max(reset, 0.0):.3f}".encode("ascii")
        return [(b"x-ratelimit-limit", count), (b"x-ratelimit-remaining", left),
                (b"x-ratelimit-reset-after", after)]
    if style == "policy":
        return [(b"ratelimit-policy", f'"site";q={limit};w={whole_window}'.encode("ascii"))]
    return [(b"x-ratelimit-limit", count), (b"x-ratelimit-remaining", left), (b"x-ratelimit-reset", epoch)]


class HeadersSite(CountingSite):
    """A site that counts ``limit`` requests per ``window`` and says so in every answer.

    Each answer, 200 or 429, carries the window's budget in the header family
    ``style``: the limit, what is left and when the window ends. Past the
    limit the site answers 429 (with ``Retry-After`` up to the window's end
    unless ``retry_after = false``) until the next window. A crawler that
    reads the headers can spend the budget evenly and never see a 429.

    Args:
        limit: requests per window.
        window: the window length in seconds; windows follow each other
            from the first request.
        style: one of :data:`HEADER_STYLES`.
        retry_after: send ``Retry-After`` with each 429.
        wall: the Unix-time clock for ``x-ratelimit`` resets.
        **options: see :class:`Site`.
    """

    profile = "headers"
    _LIMIT = Param("limit", "integer", "requests per window", low=1, high=1_000_000_000)
    _WINDOW = Param("window", "number", "window length in seconds", 10.0, low=0.0, above=True, high=1e7)
    _STYLE = Param("style", "choice", "the rate-limit header family", "ietf", choices=HEADER_STYLES)
    _RETRY = Param("retry_after", "boolean", "send Retry-After with each 429", True)
    PARAMS = (_LIMIT, _WINDOW, _STYLE, _RETRY)

    def __init__(self, *, limit: int, window: float = 10.0, style: str = "ietf", retry_after: bool = True,
                 wall: Callable[[], float] = time.time, **options: Unpack[SiteOptions]) -> None:
        self.limit = self._LIMIT.integer(limit)
        self.window = self.span = self._WINDOW.number(window)
        self.style = self._STYLE.word(style)
        self.retry_after = self._RETRY.flag(retry_after)
        self.wall = wall
        self.counter: FixedWindow = FixedWindow(self.limit, self.window)
        super().__init__(**options)

    @property
    def limit_window(self) -> tuple[float, str]:
        """Windows back to back from the first counted request."""
        return self.window, "chained"

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Count the request if the window has room and serve it, else refuse it; announce the budget."""
        allowed = self.counter.take(now)
        reset = self.counter.reset(now)
        extra = budget_headers(self.style, self.counter.limit, self.counter.remaining(now), reset,
                               self.window, self.wall())
        if not allowed:
            retry = [] if not self.retry_after else [(b"retry-after", retry_after_value(reset))]
            await self.refuse(send, 429, headers=extra + retry)
            return
        await self.serve(scope, receive, send, extra)


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
        self.delay = self._DELAY.number(delay)
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
        if self.spacing.observe(now, self.late(scope)):
            self.stats.violation("crawl_delay")
        await self.content(scope, receive, send)


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
        self.quota = self._QUOTA.number(quota)
        self.window = self._WINDOW.number(window)
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
