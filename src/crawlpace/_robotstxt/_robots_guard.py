"""robots.txt for the library's HTTP clients: each origin's file fetched once, its rules applied.

Every client adapter (:mod:`crawlpace.http`'s async and sync httpx
transports, :mod:`crawlpace.aiohttp`, :mod:`crawlpace.requests`) takes
``robots_txt=True`` and hands this one :class:`RobotsGuard` a small function
that sends a single GET in that client's own way (:data:`FetchRobots`). The
rest is here, once. Before the first request to an origin (``scheme://host:port``)
the guard fetches that origin's ``/robots.txt`` and holds every request to
the origin until the answer is in. Then, for each request:

- a URL the file disallows for the client's user agent is not sent:
  :class:`~crawlpace.RobotsDisallowed` is raised;
- the file's ``Crawl-delay`` was given to the throttler
  (:meth:`~crawlpace.Throttler.set_crawl_delay`), so the host's scope sends
  one request at a time, that many seconds apart.

What an answer means is the crawl's own table (:func:`crawlpace._robotstxt._robots.robots_verdict`,
RFC 9309): a 4xx allows everything, a 5xx, 429 or network error forbids the
origin for a while (the file is asked for again after ten minutes, then
less and less often), redirects are followed for five hops. The rules are
kept per origin in the crawl's :class:`~crawlpace._robotstxt._robots_cache.RobotsCache`
and fetched again after a day.

The robots.txt request goes through the throttler like any other (it counts
against the host's scope, and the throttler retries it after a 429 or 503),
but its latency does not steer AutoThrottle or rampup: a file served from a
cache says little about the pages.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from .._clients._last_look import LastLook
from .._clients._retry import send_async
from .._exceptions import RobotsDisallowed, ThrottlerClosed
from .._throttle._release import DONT_ADJUST_KEY
from .._throttle._throttler import Throttler
from ._robots import ROBOTS_MAX_REDIRECTS, ROBOTS_RETRIES, crawl_delay_scopes
from ._robots_cache import RobotsCache

__all__ = ["FetchRobots", "RobotsAnswer", "RobotsGuard", "origin_of"]

logger = logging.getLogger("crawlpace.http")

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class RobotsAnswer:
    """One answer to a robots.txt GET, as a client adapter read it.

    Attributes:
        status_code: the HTTP status.
        headers: the client's own header object (the throttler reads
            ``Retry-After`` and the RateLimit fields from it).
        location: the ``Location`` header, if any.
        body: the first :data:`~crawlpace._robotstxt._robots.MAX_ROBOTS_BYTES` plus one
            bytes of a 2xx answer's body (enough to tell a file is too large);
            empty for any other status.
    """

    status_code: int
    headers: object = None
    location: str | None = None
    body: bytes = b""


#: Sends one GET of a robots.txt URL (first argument) with the given ``User-Agent``
#: (second), without following redirects; returns once the answer is read, or raises the
#: client's own error.
FetchRobots = Callable[[str, str], Awaitable[RobotsAnswer]]


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (the port only when not the scheme's default)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    port = parts.port
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != _DEFAULT_PORTS.get(scheme)
                                   else "")


class _RobotsRequest:
    """The throttler's view of a robots.txt fetch: its URL, and "do not learn from its latency"."""

    __slots__ = ("meta", "url")

    def __init__(self, url: str) -> None:
        self.url = url
        self.meta = {DONT_ADJUST_KEY: True}


async def _keep(answer: RobotsAnswer) -> None:
    """Nothing to close: an adapter's fetch closed its response after reading it."""


class RobotsGuard:
    """Fetches, keeps and applies each origin's robots.txt for one client.

    Args:
        throttler: the client's throttler: the robots.txt fetches wait for
            it, and Crawl-delays go to it.
        retries: the client's resends of a backoff answer; a robots.txt fetch
            takes at most :data:`~crawlpace._robotstxt._robots.ROBOTS_RETRIES` of them,
            as the crawl's does.
        user_agent: whose rules apply; ``None`` takes the ``User-Agent``
            header of the first request checked.
        look: the client's last look before each write, told every
            Crawl-delay too (see :mod:`crawlpace._clients._last_look`).
    """

    def __init__(self, throttler: Throttler, *, retries: int, user_agent: str | None = None,
                 look: LastLook | None = None) -> None:
        self._throttler = throttler
        self._look = look
        self._attempts = 1 + min(retries, ROBOTS_RETRIES)
        self._user_agent = user_agent
        self._cache: RobotsCache | None = None
        self._fetches: dict[str, asyncio.Task[None]] = {}

    @property
    def look(self) -> LastLook | None:
        """The client's last look, told every Crawl-delay."""
        return self._look

    @property
    def user_agent(self) -> str | None:
        """The user agent whose rules apply (``None`` until the first request sets it)."""
        return self._user_agent

    def rules_known(self, origin: str) -> bool:
        """Whether the rules of ``origin`` are in force now (fetched, or standing in for an outage)."""
        cache = self._cache
        return cache is not None and cache.state(origin, self._throttler.clock.now()) == "known"

    async def check(self, url: str, fetch: FetchRobots, user_agent: str | None = None) -> None:
        """Return when ``url`` may be sent; fetch its origin's robots.txt with ``fetch`` first if needed.

        Args:
            url: the request's URL.
            fetch: the client's way to send one robots.txt GET.
            user_agent: the request's ``User-Agent`` header (whose rules apply
                when the guard was given none).

        Raises:
            RobotsDisallowed: when the origin's robots.txt forbids the URL, or
                could not be fetched (RFC 9309 then forbids the whole origin
                for a while).
            ThrottlerClosed: when the throttler closed during the fetch.
        """
        parts = urlsplit(url)
        if parts.scheme.lower() not in _DEFAULT_PORTS or parts.path == "/robots.txt":
            return  # the file itself is always allowed
        cache = self._cache_for(user_agent)
        origin = origin_of(url)
        clock = self._throttler.clock
        while cache.state(origin, clock.now()) != "known":
            task = self._fetches.get(origin)
            if task is None:
                cache.start(origin, clock.now())
                task = self._fetches[origin] = asyncio.ensure_future(
                    self._fetch(origin, fetch, parts.hostname or None))
                task.add_done_callback(functools.partial(self._fetched, origin))
            # One caller giving up must not cancel the fetch the others wait for.
            await asyncio.shield(task)
        if not cache.allowed(origin, url):
            final, reason = cache.refusal(origin)
            raise RobotsDisallowed(url, origin, reason, final=final)

    def _fetched(self, origin: str, task: asyncio.Task[None]) -> None:
        self._fetches.pop(origin, None)
        if not task.cancelled():
            task.exception()  # retrieved: the callers that waited were given it

    async def aclose(self) -> None:
        """Stop the robots.txt fetches still under way."""
        tasks = list(self._fetches.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _cache_for(self, user_agent: str | None) -> RobotsCache:
        cache = self._cache
        if cache is None:
            if self._user_agent is None:
                self._user_agent = user_agent or "*"
            cache = self._cache = RobotsCache(self._user_agent)
        return cache

    async def _fetch(self, origin: str, fetch: FetchRobots, host: str | None) -> None:
        """Fetch ``origin``'s robots.txt and settle its rules; never raises but for cancellation."""
        cache = self._cache
        assert cache is not None
        clock = self._throttler.clock
        try:
            status, body, why = await self._download(origin, fetch)
        except (ThrottlerClosed, asyncio.CancelledError) as exc:
            cache.failed(origin, clock.now(), type(exc).__name__)
            raise
        except Exception as exc:  # a bug must not leave the origin pending for ever
            logger.exception("robots.txt of %s: the fetch failed unexpectedly", origin)
            status, body, why = None, b"", f"{type(exc).__name__}: {exc}"
        settled = cache.settle(origin, status, body, clock.now(), why=why)
        logger.info("robots.txt of %s: %r", origin, settled.rules)
        if settled.crawl_delay_changed:
            try:
                scopes = await self._throttler.scopes(f"{origin}/robots.txt")
                for scope in crawl_delay_scopes(host, scopes):
                    await self._throttler.set_crawl_delay(scope, settled.rules.crawl_delay)
                    if self._look is not None:  # the delay in force: clamped, or None when settings win
                        stats = await self._throttler.scope_stats(scope)
                        self._look.pace(scope, None if stats is None else stats.crawl_delay)
            except (ThrottlerClosed, asyncio.CancelledError):
                raise
            except Exception:  # a shared store away: the rules still hold, the delay is lost
                logger.exception("robots.txt of %s: could not apply its Crawl-delay", origin)

    async def _download(self, origin: str, fetch: FetchRobots) -> tuple[int | None, bytes, str]:
        """The final status and the first bytes of the body, following redirects (RFC 9309: five)."""
        url = f"{origin}/robots.txt"
        user_agent = self._user_agent or "*"
        for hop in range(ROBOTS_MAX_REDIRECTS + 1):

            def send(url: str = url) -> Awaitable[RobotsAnswer]:
                return fetch(url, user_agent)

            try:
                answer, _ = await send_async(self._throttler, "GET", url, None, self._attempts, send, _keep,
                                             request=_RobotsRequest(url))
            except (ThrottlerClosed, asyncio.CancelledError):
                raise
            except Exception as exc:  # the client's error, or the throttler's (a scope given up)
                return None, b"", f"{type(exc).__name__}: {exc}"
            status, location = answer.status_code, answer.location
            if 300 <= status < 400 and location and hop < ROBOTS_MAX_REDIRECTS:
                target = urljoin(url, location)
                if not target.startswith(("http://", "https://")):
                    return status, b"", ""
                url = target
                continue
            return status, answer.body if 200 <= status < 300 else b"", ""
        raise AssertionError("unreachable: the last hop always returns")
