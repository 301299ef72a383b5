"""Profiles of the limiters found in front of real sites, besides token buckets.

``window`` counts requests in fixed windows aligned to the clock or in a
moving window, the way Flask-Limiter and the ``limits`` package do, with or
without RateLimit headers and ``Retry-After`` (on refusals only, or on every
answer as Flask-Limiter sends it with its headers on). ``reqrate`` is
HAProxy's stick-table rule ``deny if { sc_http_req_rate(0) gt N }``, whose
counter counts the refused requests too. ``conncap`` holds a few requests at
once and frees each slot a moment after its answer left, as HAProxy's
``conn_cur``, nginx's ``limit_conn`` and worker pools do. ``queue`` is nginx's
``limit_req`` with a ``burst`` and without ``nodelay``: requests over the rate
wait in line and are served at the rate; only a full line is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Unpack

from ._asgi import Receive, Scope, Send
from ._limits import ClockWindow, FixedWindow, RequestQueue, RequestRate, SlidingWindow, SlotCap
from ._params import Param
from ._rates import HEADER_STYLES, CountingSite, budget_headers
from ._site import Site, SiteOptions, retry_after_value

__all__ = ["RETRY_AFTER_MODES", "WINDOW_KINDS", "QueueSite", "RequestRateSite", "SlotCapSite", "WindowSite"]

#: ``fixed``: windows aligned to the clock; ``sliding``: any span of the window's length; ``started``:
#: each window opened by the first request after the last one ended (``limits``' fixed window).
WINDOW_KINDS = ("fixed", "sliding", "started")
#: When a ``window`` site sends ``Retry-After``.
RETRY_AFTER_MODES = ("none", "refusals", "every")
_STATUS = Param("status", "integer", "the status of a refusal", 429, low=400, high=599)


class WindowSite(CountingSite):
    """A site that allows ``limit`` requests per ``window`` seconds, fixed or sliding.

    ``kind = "fixed"`` counts in windows aligned to the clock
    (:class:`~crawlpace.sim._limits.ClockWindow`): a crawler meets its first
    window part-spent in time. ``kind = "sliding"`` allows ``limit`` in any
    ``window`` seconds (:class:`~crawlpace.sim._limits.SlidingWindow`), and
    ``kind = "started"`` counts in windows each opened by the first request
    after the previous one ended (:class:`~crawlpace.sim._limits.FixedWindow`
    unchained), as ``limits``' fixed window does. With
    ``count_refused`` refusals are counted too, so knocking on keeps a sliding
    window shut. Refusals get ``status`` (429). With ``style`` other than
    ``"none"`` every answer announces the budget in that header family;
    ``retry_after`` says which answers carry ``Retry-After`` (the seconds
    until a request would be allowed again): none, refusals only, or every
    answer, with Flask-Limiter's arithmetic (its headers on): the reset is the
    Unix second after the window's end (``int(end + 1)``; a moving window's
    end is its oldest request's, requests left or not) and ``Retry-After`` is
    that second less now, truncated, so ``0`` on a refusal less than a
    second before it. Only a refusal's counts as a demand for quiet.

    Args:
        limit: requests per window.
        window: the window length in seconds.
        kind: one of :data:`WINDOW_KINDS`.
        count_refused: count refused requests as well.
        retry_after: one of :data:`RETRY_AFTER_MODES`.
        style: ``"none"`` or one of :data:`~crawlpace.sim.HEADER_STYLES`.
        status: the status of a refusal.
        wall: the Unix-time clock for resets given as a Unix time.
        **options: see :class:`~crawlpace.sim.Site`.
    """

    profile = "window"
    _LIMIT = Param("limit", "integer", "requests per window", low=1, high=1_000_000_000)
    _WINDOW = Param("window", "number", "window length in seconds", 10.0, low=0.0, above=True, high=1e7)
    _KIND = Param("kind", "choice",
                  "fixed windows aligned to the clock, a sliding window, or windows opened by a request",
                  "fixed", choices=WINDOW_KINDS)
    _COUNT_REFUSED = Param("count_refused", "boolean", "count refused requests too", False)
    _RETRY = Param("retry_after", "choice", "which answers carry Retry-After", "refusals",
                   choices=RETRY_AFTER_MODES)
    _STYLE = Param("style", "choice", "the rate-limit header family of every answer", "none",
                   choices=("none", *HEADER_STYLES))
    PARAMS = (_LIMIT, _WINDOW, _KIND, _COUNT_REFUSED, _RETRY, _STYLE, _STATUS)

    def __init__(self, *, limit: int, window: float = 10.0, kind: str = "fixed", count_refused: bool = False,
                 retry_after: str = "refusals", style: str = "none", status: int = 429,
                 wall: Callable[[], float] = time.time, **options: Unpack[SiteOptions]) -> None:
        self.limit = self._LIMIT.integer(limit)
        self.window = self.span = self._WINDOW.number(window)
        self.kind = self._KIND.word(kind)
        self.count_refused = self._COUNT_REFUSED.flag(count_refused)
        self.retry_after = self._RETRY.word(retry_after)
        self.style = self._STYLE.word(style)
        self.status = _STATUS.integer(status)
        self.wall = wall
        self.counter: ClockWindow | SlidingWindow | FixedWindow = (
            ClockWindow(self.limit, self.window, count_refused=self.count_refused) if self.kind == "fixed"
            else SlidingWindow(self.limit, self.window, count_refused=self.count_refused)
            if self.kind == "sliding" else FixedWindow(self.limit, self.window, chained=False))
        super().__init__(**options)

    @property
    def limit_window(self) -> tuple[float, str]:
        """Windows aligned to the clock, any span of the window's length, or windows opened by requests."""
        return self.window, {"fixed": "clock", "sliding": "sliding"}.get(self.kind, "started")

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Count the request, then serve or refuse it, with the headers the site sends."""
        allowed = self.counter.take(now)
        reset = self.counter.reset(now)
        wall = self.wall()
        # Flask-Limiter's reset: the Unix second after the window's end, ``int(end + 1)``.
        reset_at = int(wall + reset + 1) if self.retry_after == "every" else None
        extra = [] if self.style == "none" else budget_headers(
            self.style, self.counter.limit, self.counter.remaining(now), reset, self.window, wall,
            reset_at=reset_at)
        if reset_at is not None:
            # Flask-Limiter, on every answer: that second less now, truncated (0 included, refusals too).
            extra.append((b"retry-after", str(max(int(reset_at - wall), 0)).encode("ascii")))
        elif not allowed and self.retry_after == "refusals":
            extra.append((b"retry-after", retry_after_value(reset)))
        if not allowed:
            await self.refuse(send, self.status, headers=extra)
            return
        await self.serve(scope, receive, send, extra)


class RequestRateSite(CountingSite):
    """HAProxy's ``http_req_rate`` rule: refuse while the client's request rate is above ``limit``.

    Every request, refused or not, increments a
    :class:`~crawlpace.sim._limits.RequestRate` counter over ``period``
    seconds; a request that brings its reading above ``limit`` gets
    ``status`` (429), with no header saying how long to wait, as ``http-request
    deny deny_status 429`` answers. A client that keeps sending while refused
    stays refused. HAProxy's periods follow its own clock: ``phase`` is the
    share of a period already gone when the first request comes (0: the
    periods start with it).

    Args:
        limit: the highest rate reading allowed, requests per period.
        period: the counter's period in seconds.
        phase: the share of the counter's first period gone at the first request, 0 to 1.
        status: the status of a refusal.
        **options: see :class:`~crawlpace.sim.Site`.
    """

    profile = "reqrate"
    _LIMIT = Param("limit", "integer", "requests per period allowed", low=1, high=1_000_000_000)
    _PERIOD = Param("period", "number", "the counter's period in seconds", 10.0, low=0.0, above=True,
                    high=1e6)
    _PHASE = Param("phase", "number", "the share of the counter's first period gone at the first request",
                   0.0, low=0.0, high=1.0)
    PARAMS = (_LIMIT, _PERIOD, _PHASE, _STATUS)

    def __init__(self, *, limit: int, period: float = 10.0, phase: float = 0.0, status: int = 429,
                 **options: Unpack[SiteOptions]) -> None:
        self.limit = self._LIMIT.integer(limit)
        self.period = self.span = self._PERIOD.number(period)
        self.phase = self._PHASE.number(phase)
        self.status = _STATUS.integer(status)
        self.counter: RequestRate = RequestRate(self.limit, self.period, self.phase)
        super().__init__(**options)

    @property
    def limit_window(self) -> tuple[float, str]:
        """The counter itself: its highest reading."""
        return self.period, "counter"

    @property
    def window_phase(self) -> float:
        """Where the counter's first period stands at the first request (see :class:`RequestRate`)."""
        return self.phase

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Count the request; serve it when the reading allows, else refuse it."""
        if self.counter.take(now):
            await self.content(scope, receive, send)
        else:
            await self.refuse(send, self.status)


class SlotCapSite(Site):
    """A site that works on at most ``cap`` requests at once and frees each slot ``lag`` after its answer.

    Each request takes ``latency`` seconds; one that finds every slot taken
    (requests in flight, and slots whose answer left less than ``lag`` ago)
    gets ``status`` (503) at once. A crawler that sends again the moment an
    answer comes back meets its own slot still taken.

    Args:
        cap: the most requests held at once.
        latency: seconds each request takes.
        lag: seconds a slot stays taken after its answer left.
        status: the status of a refusal.
        sleep: how to wait; ``asyncio.sleep`` unless a test swaps it.
        **options: see :class:`~crawlpace.sim.Site`.
    """

    profile = "conncap"
    _CAP = Param("cap", "integer", "requests held at once", 4, low=1, high=100_000)
    _LATENCY = Param("latency", "number", "seconds each request takes", 0.05, low=0.0, high=60.0)
    _LAG = Param("lag", "number", "seconds a slot stays taken after its answer", 0.05, low=0.0, high=60.0)
    _BUSY = Param("status", "integer", "the status of a refusal", 503, low=400, high=599)
    PARAMS = (_CAP, _LATENCY, _LAG, _BUSY)

    def __init__(self, *, cap: int = 4, latency: float = 0.05, lag: float = 0.05, status: int = 503,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 **options: Unpack[SiteOptions]) -> None:
        self.cap = self._CAP.integer(cap)
        self.latency = self._LATENCY.number(latency)
        self.lag = self._LAG.number(lag)
        self.status = self._BUSY.integer(status)
        self.sleep = sleep
        self.slots = SlotCap(self.cap, self.lag)
        super().__init__(**options)

    @property
    def capacity(self) -> float:
        """Each slot serves one request per latency plus lag."""
        return self.slots.cap / max(self.latency + self.lag, 1e-3)

    def rescale(self, factor: float, now: float) -> None:
        """Hold ``factor`` times the configured cap (at least 1) from now on."""
        self.slots.cap = max(round(self.cap * factor), 1)

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Take a slot or refuse; serve after the latency; free the slot ``lag`` after the answer."""
        if not self.slots.acquire(now):
            await self.refuse(send, self.status)
            return
        try:
            await self.sleep(self.latency)
            await self.content(scope, receive, send)
        finally:
            self.slots.release(self.clock())


class QueueSite(Site):
    """nginx's ``limit_req burst=B`` without ``nodelay``: the excess waits in line, served at ``rate``.

    A request that comes while the client is ahead of the rate is not refused but held
    (:class:`~crawlpace.sim._limits.RequestQueue`): it is served ``excess / rate`` seconds after
    it arrived, so the pages leave the site one ``1 / rate`` apart whatever the pace they were
    asked at. Only a request that finds ``burst`` already waiting is refused, at once, with
    ``status`` (nginx's default is 503; ``limit_req_status 429`` is common) and no ``Retry-After``.
    A crawler sees its latency grow, not refusals, until the line is full.

    Args:
        rate: requests per second served; also the capacity.
        burst: requests that may wait (nginx's ``burst``), at least 1.
        delay: the excess served without waiting (nginx's ``delay=``; ``burst`` or more is ``nodelay``).
        status: the status of a refusal.
        sleep: how to wait; ``asyncio.sleep`` unless a test swaps it.
        **options: see :class:`~crawlpace.sim.Site`.
    """

    profile = "queue"
    #: nginx's ``limit_req`` in ``location /`` limits robots.txt too: a crawler's first request
    #: takes its place in the line (bench/real_limiters.py's crawls show it in nginx's log).
    gates_robots = True
    _RATE = Param("rate", "number", "requests per second served", low=0.0, above=True, high=1e6)
    _BURST = Param("burst", "integer", "requests that may wait in line", 5, low=1, high=1_000_000)
    _DELAY = Param("delay", "integer", "excess served without waiting (nginx's delay=)", 0, low=0,
                   high=1_000_000)
    _REFUSED = Param("status", "integer", "the status of a refusal", 503, low=400, high=599)
    PARAMS = (_RATE, _BURST, _DELAY, _REFUSED)

    def __init__(self, *, rate: float, burst: int = 5, delay: int = 0, status: int = 503,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 **options: Unpack[SiteOptions]) -> None:
        self.rate = self._RATE.number(rate)
        self.burst = self._BURST.integer(burst)
        self.delay = self._DELAY.integer(delay)
        self.status = self._REFUSED.integer(status)
        self.sleep = sleep
        self.queue = RequestQueue(self.rate, self.burst, self.delay)
        super().__init__(**options)

    @property
    def capacity(self) -> float:
        """The rate the line is served at."""
        return self.queue.rate

    def rescale(self, factor: float, now: float) -> None:
        """Serve at ``factor`` times the configured rate from ``now`` on."""
        self.queue.set_rate(now, self.rate * factor)

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Refuse when the line is full, else wait for the request's turn and serve it."""
        wait = self.queue.take(now)
        if wait is None:
            await self.refuse(send, self.status)
            return
        if wait > 0:
            await self.sleep(wait)
        await self.content(scope, receive, send)
