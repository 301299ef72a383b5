"""robots.txt for the httpx transport: each origin's file fetched once, its rules applied to every request.

With ``robots_txt=True`` (:func:`crawlpace.http.throttled_client`), before the
first request to an origin (``scheme://host:port``) the transport fetches that
origin's ``/robots.txt`` and holds every request to the origin until the
answer is in. Then, for each request:

- a URL the file disallows for the client's user agent is not sent:
  :class:`~crawlpace.RobotsDisallowed` is raised;
- the file's ``Crawl-delay`` was given to the throttler
  (:meth:`~crawlpace.Throttler.set_crawl_delay`), so the host's scope sends
  one request at a time, that many seconds apart.

What an answer means is the crawl's own table (:func:`crawlpace._robots.robots_verdict`,
RFC 9309): a 4xx allows everything, a 5xx, 429 or network error forbids the
origin for a while (the file is asked for again after ten minutes, then
less and less often), redirects are followed for five hops. The rules are
kept per origin in the crawl's :class:`~crawlpace._robots_cache.RobotsCache`
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
from urllib.parse import urljoin

import httpx

from ._exceptions import CrawlpaceError, RobotsDisallowed, ThrottlerClosed
from ._httpx_common import discard_async
from ._release import DONT_ADJUST_KEY
from ._retry import send_async
from ._robots import MAX_ROBOTS_BYTES, ROBOTS_MAX_REDIRECTS, crawl_delay_scopes
from ._robots_cache import RobotsCache
from ._throttler import Throttler

__all__ = ["RobotsGuard", "origin_of"]

logger = logging.getLogger("crawlpace.http")

Send = Callable[[httpx.Request], Awaitable[httpx.Response]]


def origin_of(url: httpx.URL) -> str:
    """``scheme://host[:port]`` of ``url``: the unit a robots.txt governs."""
    port = url.port
    host = url.raw_host.decode("ascii").lower()
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{url.scheme}://{host}" + (f":{port}" if port is not None else "")


class _RobotsRequest:
    """The throttler's view of a robots.txt fetch: its URL, and "do not learn from its latency"."""

    __slots__ = ("meta", "url")

    def __init__(self, url: str) -> None:
        self.url = url
        self.meta = {DONT_ADJUST_KEY: True}


class RobotsGuard:
    """Fetches, keeps and applies each origin's robots.txt for one transport.

    Args:
        throttler: the transport's throttler: the robots.txt fetches wait for
            it, and Crawl-delays go to it.
        send: sends one request through the transport's inner transport.
        retries: resends of a robots.txt fetch that drew a backoff answer.
        user_agent: whose rules apply; ``None`` takes the ``User-Agent``
            header of the first request (httpx sends ``python-httpx/...``
            unless the client sets one).
    """

    def __init__(self, throttler: Throttler, send: Send, *, retries: int,
                 user_agent: str | None = None) -> None:
        self._throttler = throttler
        self._send = send
        self._attempts = 1 + retries
        self._user_agent = user_agent
        self._cache: RobotsCache | None = None
        self._fetches: dict[str, asyncio.Task[None]] = {}

    @property
    def user_agent(self) -> str | None:
        """The user agent whose rules apply (``None`` until the first request sets it)."""
        return self._user_agent

    def rules_known(self, origin: str) -> bool:
        """Whether the rules of ``origin`` are in force now (fetched, or standing in for an outage)."""
        cache = self._cache
        return cache is not None and cache.state(origin, self._throttler.clock.now()) == "known"

    async def check(self, request: httpx.Request) -> None:
        """Return when ``request`` may be sent; fetch its origin's robots.txt first if needed.

        Raises:
            RobotsDisallowed: when the origin's robots.txt forbids the URL, or
                could not be fetched (RFC 9309 then forbids the whole origin
                for a while).
            ThrottlerClosed: when the throttler closed during the fetch.
        """
        url = request.url
        if url.scheme not in ("http", "https") or url.path == "/robots.txt":
            return  # the file itself is always allowed
        cache = self._cache_for(request)
        origin = origin_of(url)
        clock = self._throttler.clock
        while cache.state(origin, clock.now()) != "known":
            fetch = self._fetches.get(origin)
            if fetch is None:
                cache.start(origin, clock.now())
                fetch = self._fetches[origin] = asyncio.ensure_future(self._fetch(origin, request))
                fetch.add_done_callback(functools.partial(self._fetched, origin))
            # One caller giving up must not cancel the fetch the others wait for.
            await asyncio.shield(fetch)
        if not cache.allowed(origin, str(url)):
            final, reason = cache.refusal(origin)
            raise RobotsDisallowed(str(url), origin, reason, final=final)

    def _fetched(self, origin: str, fetch: asyncio.Task[None]) -> None:
        self._fetches.pop(origin, None)
        if not fetch.cancelled():
            fetch.exception()  # retrieved: the callers that waited were given it

    async def aclose(self) -> None:
        """Stop the robots.txt fetches still under way."""
        fetches = list(self._fetches.values())
        for fetch in fetches:
            fetch.cancel()
        await asyncio.gather(*fetches, return_exceptions=True)

    def _cache_for(self, request: httpx.Request) -> RobotsCache:
        cache = self._cache
        if cache is None:
            if self._user_agent is None:
                self._user_agent = request.headers.get("user-agent", "*")
            cache = self._cache = RobotsCache(self._user_agent)
        return cache

    async def _fetch(self, origin: str, request: httpx.Request) -> None:
        """Fetch ``origin``'s robots.txt and settle its rules; never raises but for cancellation."""
        cache = self._cache
        assert cache is not None
        clock = self._throttler.clock
        try:
            status, body, why = await self._download(origin, request)
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
                for scope in crawl_delay_scopes(request.url.host or None, scopes):
                    await self._throttler.set_crawl_delay(scope, settled.rules.crawl_delay)
            except (ThrottlerClosed, asyncio.CancelledError):
                raise
            except Exception:  # a shared store away: the rules still hold, the delay is lost
                logger.exception("robots.txt of %s: could not apply its Crawl-delay", origin)

    async def _download(self, origin: str, request: httpx.Request) -> tuple[int | None, bytes, str]:
        """The final status and the first bytes of the body, following redirects (RFC 9309: five)."""
        url = f"{origin}/robots.txt"
        headers = {"user-agent": self._user_agent or "*"}
        extensions = {key: value for key, value in request.extensions.items() if key == "timeout"}
        for hop in range(ROBOTS_MAX_REDIRECTS + 1):
            robots = httpx.Request("GET", url, headers=headers, extensions=extensions)

            async def send(robots: httpx.Request = robots) -> httpx.Response:
                return await self._send(robots)

            try:
                response, _ = await send_async(self._throttler, "GET", url, None, self._attempts, send,
                                               discard_async, request=_RobotsRequest(url))
            except (ThrottlerClosed, asyncio.CancelledError):
                raise
            except (CrawlpaceError, httpx.HTTPError, OSError) as exc:
                return None, b"", f"{type(exc).__name__}: {exc}"
            status = response.status_code
            location = response.headers.get("location")
            if 300 <= status < 400 and location and hop < ROBOTS_MAX_REDIRECTS:
                await discard_async(response)
                target = urljoin(url, location)
                if not target.startswith(("http://", "https://")):
                    return status, b"", ""
                url = target
                continue
            body = await _head(response, url) if 200 <= status < 300 else b""
            await discard_async(response)
            return status, body, ""
        raise AssertionError("unreachable: the last hop always returns")


async def _head(response: httpx.Response, url: str) -> bytes:
    """The body's first :data:`MAX_ROBOTS_BYTES` plus one (enough to tell a file is too large)."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ROBOTS_BYTES:
                break
    except httpx.HTTPError as exc:  # a body cut short: what arrived is what there is
        logger.warning("%s: the body was cut short (%s)", url, exc)
    return b"".join(chunks)[:MAX_ROBOTS_BYTES + 1]
