"""The base of every simulated site: its content, its measurements, its embargo rule.

A :class:`Site` is an ASGI application. For each request it records the
arrival and the outcome in its :class:`~crawlpace.sim.SiteStats`, serves
``/robots.txt`` itself (robots.txt is exempt from every limit, as if it came
from a cache, except where a profile says otherwise) and hands every other
request to :meth:`Site.handle`, which a profile overrides to apply its hidden
limits before, or instead of, serving the page. The statistics count every
request alike, robots.txt included.

One rule is common to all sites: whenever a refusal (a 4xx or 5xx) carries ``Retry-After``,
the site expects no request until that time has passed, and every request
arriving earlier (by more than the site's ``tolerance``) is counted as a
``retry_after`` violation, unless it came within ``tolerance`` of the answer
that began the quiet time (it may have been admitted before the crawler read
that answer). Sites do not tell crawlers apart: the simulator
measures one crawler at a time, so every count is per site.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import ClassVar, TypedDict

from ._asgi import LATE_KEY, RECEIVED_KEY, Message, Receive, ResetConnection, Scope, Send, header, respond
from ._limits import Embargo
from ._pages import PRIVATE_PREFIX, PageApp
from ._params import Param
from ._stats import SiteStats

__all__ = ["CHALLENGE_KEY", "COMMON_PARAMS", "Site", "SiteOptions", "retry_after_value"]

#: Set to True in a request's ASGI scope by a profile that answered it with a challenge page.
CHALLENGE_KEY = "crawlpace.challenge"

_PAGES = Param("pages", "integer", "pages the site serves", 50, low=1, high=1_000_000)
_LINKS = Param("links", "integer", "links on each page", 3, low=0, high=100)
#: The default tolerance: more than the lag between a crawler's decision to send and the site's read
#: varies on a loaded machine (up to about 20 ms measured with eight busy processes on two cores).
DEFAULT_TOLERANCE = 0.05
_TOLERANCE = Param("tolerance", "number", "seconds a request may lag its send (lags never add up)",
                   DEFAULT_TOLERANCE, low=0.0, high=60.0)
_PRIVATE = Param("private", "integer", f"pages under {PRIVATE_PREFIX} that robots.txt disallows", 0,
                 low=0, high=1_000_000)

#: The parameters every profile accepts.
COMMON_PARAMS: tuple[Param, ...] = (_PAGES, _LINKS, _TOLERANCE, _PRIVATE)

_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)
# Float noise must not turn an exact number of seconds into one more.
_EPSILON = 1e-9


class SiteOptions(TypedDict, total=False):
    """The keyword arguments every :class:`Site` constructor accepts."""

    pages: int
    links: int
    tolerance: float
    private: int
    clock: Callable[[], float]
    rng: random.Random | None


def retry_after_value(seconds: float) -> bytes:
    """A ``Retry-After`` value: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(seconds - _EPSILON))).encode("ascii")


def _announced_wait(message: Message) -> float | None:
    value = header(message.get("headers"), b"retry-after")
    if value is None or _SECONDS.fullmatch(value.strip()) is None:
        return None
    return float(value)


class Site:
    """A simulated site with no limits: the base that profiles build on.

    A subclass sets the attributes its :attr:`capacity` and
    :attr:`crawl_delay` read *before* calling ``super().__init__``, which
    builds the content and the statistics from them.

    Args:
        pages: the number of pages ``/page/1`` to ``/page/{pages}``.
        links: the links on each page to following pages.
        tolerance: the most a request's arrival may lag its send, in
            seconds: a request that comes early by up to that much after
            a ``Retry-After`` is not counted, nor is a Crawl-delay gap that
            is short by up to that much, as long as those shortfalls do not
            add up over the sequence (see :class:`~crawlpace.sim._limits.Spacing`).
        private: pages ``/private/1`` to ``/private/{private}``, which the
            site's robots.txt disallows (``Disallow: /private/``); each
            request for one is served but counted as a ``disallow``
            violation.
        clock: the time source for limits and statistics, in seconds.
        rng: the source of chance for profiles that use any; ``Random(0)``
            when omitted.

    Attributes:
        stats: what the site has measured so far.
        embargo: until when the site asked to be left alone.
        content: the limit-free application that serves robots.txt and pages.

    Raises:
        ValueError: naming the parameter that is out of range.
    """

    #: The profile name used in farm files; empty for this base class.
    profile: ClassVar[str] = ""
    #: The parameters specific to the profile, besides :data:`COMMON_PARAMS`.
    PARAMS: ClassVar[tuple[Param, ...]] = ()
    #: Whether robots.txt goes through :meth:`handle` too, instead of being exempt.
    gates_robots: ClassVar[bool] = False

    def __init__(self, *, pages: int = 50, links: int = 3, tolerance: float = DEFAULT_TOLERANCE,
                 private: int = 0, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self.pages = _PAGES.integer(pages)
        self.links = _LINKS.integer(links)
        self.tolerance = _TOLERANCE.number(tolerance)
        self.private = _PRIVATE.integer(private)
        self.clock = clock
        self.rng = random.Random(0) if rng is None else rng
        self.stats = SiteStats(self.capacity)
        if self.limit_window is not None:
            self.stats.watch_window(*self.limit_window, phase=self.window_phase)
        self.embargo = Embargo()
        self.content = PageApp(self.pages, self.links, self.crawl_delay, private=self.private)

    @classmethod
    def params(cls) -> tuple[Param, ...]:
        """Every parameter the profile accepts, common ones first."""
        return COMMON_PARAMS + cls.PARAMS

    @classmethod
    def extra_params(cls, entry: Mapping[str, object]) -> tuple[Param, ...]:
        """Parameters that depend on other keys of a farm entry; none for most profiles."""
        return ()

    @classmethod
    def conflict(cls, params: Mapping[str, object]) -> str | None:
        """Say what is wrong with a combination of parameters valid one by one, or None.

        Farm files are checked with it before any site is built, so the
        problem is reported with the others instead of failing the build.
        """
        return None

    @property
    def capacity(self) -> float | None:
        """Successful requests per second the site can serve at best; None when unbounded."""
        return None

    @property
    def limit_window(self) -> tuple[float, str] | None:
        """The window the site counts its limit in, ``(seconds, kind)`` (see
        :meth:`SiteStats.watch_window`); None when its limit is not a count per window."""
        return None

    @property
    def window_phase(self) -> float:
        """The share of the site's first counting period gone at its first request (a counter
        whose periods follow the server's clock); 0 for every other site."""
        return 0.0

    @property
    def crawl_delay(self) -> float | None:
        """The ``Crawl-delay`` announced in robots.txt, if any."""
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI scope; only ``http`` scopes do anything."""
        if scope.get("type") != "http":
            return
        now = self._arrival(scope)
        self.stats.arrive(now)
        exempt = scope.get("path") == "/robots.txt" and not self.gates_robots
        if not exempt:
            self.stats.limited(now)
        if self.embargo.violated(now, self.tolerance + self.late(scope)):
            self.stats.violation("retry_after")
        if self.private and str(scope.get("path", "")).startswith(PRIVATE_PREFIX):
            self.stats.violation("disallow")  # robots.txt forbids it; served all the same
        status: int | None = None
        told = exempt  # (the stats hear each limited request's answer once: see SiteStats.answered)

        async def watch(message: Message) -> None:
            nonlocal status, told
            if message.get("type") == "http.response.start":
                status = int(message["status"])
                if not told:
                    told = True
                    self.stats.answered(now, status)
                # Only a refusal asks for quiet: Flask-Limiter, say, sends Retry-After with every answer.
                wait = _announced_wait(message) if status >= 400 else None
                if wait is not None:
                    self.embargo.extend(self.clock(), wait)
            await send(message)

        reset = False
        try:
            if exempt:
                await self.content(scope, receive, watch)
            else:
                await self.handle(scope, receive, watch, now)
        except ResetConnection:
            reset = True
            raise
        except Exception:
            if status is None:
                status = 500  # what the server will answer
            raise
        finally:
            if not told:
                self.stats.answered(now, status or 0)  # never answered (0), or failed before it was
            path = scope.get("path")
            self.stats.depart(self.clock(), status, reset=reset, challenge=bool(scope.get(CHALLENGE_KEY)),
                              path=path if isinstance(path, str) else None)

    def _arrival(self, scope: Scope) -> float:
        """When the request arrived, on the site's clock.

        :class:`~crawlpace.sim.SimServer` notes when the request's first
        bytes were read; on the monotonic clock the server uses too, that is
        the arrival, so the server's own delay before the site runs is not
        held against the crawler. Otherwise (another clock, another server)
        it is now.
        """
        now = self.clock()
        received = scope.get(RECEIVED_KEY)
        if self.clock is time.monotonic and isinstance(received, float):
            return min(received, now)
        return now

    def late(self, scope: Scope) -> float:
        """How much earlier than its arrival time the request may have come in: how late the
        server's loop ran as it read it (see :data:`~crawlpace.sim._asgi.LATE_KEY`; 0.0 on
        another clock). The rules judged from arrivals add it to their tolerance."""
        late = scope.get(LATE_KEY)
        if self.clock is time.monotonic and isinstance(late, float) and math.isfinite(late):
            return max(0.0, late)
        return 0.0

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Answer a request other than robots.txt; profiles override this.

        Args:
            scope: the ASGI ``http`` scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable.
            now: the arrival time on the site's clock.
        """
        await self.content(scope, receive, send)

    async def serve(self, scope: Scope, receive: Receive, send: Send,
                    headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        """Serve the page, with ``headers`` (lower-case names) added to its answer."""
        if not headers:
            await self.content(scope, receive, send)
            return
        extra = list(headers)

        async def announce(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.content(scope, receive, announce)

    async def refuse(self, send: Send, status: int, retry_after: float | None = None, *,
                     headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        """Turn a request away with ``status``, announcing ``Retry-After`` when given.

        Args:
            send: the ASGI send callable.
            status: the status to answer with.
            retry_after: seconds to announce in ``Retry-After``, if any.
            headers: further header pairs, lower-case names.
        """
        extra = [] if retry_after is None else [(b"retry-after", retry_after_value(retry_after))]
        headers = [*headers, *extra]
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Refused"
        await respond(send, status, f"{status} {reason}\n".encode("ascii"), headers=headers)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} profile={self.profile!r} capacity={self.capacity!r}>"
