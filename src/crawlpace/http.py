"""An httpx transport that sends every request through a :class:`~crawlpace.Throttler`.

This is the "rate-limited client session" of seed 003, for asyncio code that
uses httpx: wrap the transport of an :class:`httpx.AsyncClient` (or let
:func:`throttled_client` build the client) and every request, redirects
included, waits for its scopes, has its response or exception fed back, and
is sent again after the wait when the server pushed back. The calling code
stays a plain ``await client.get(url)``::

    async with throttled_client({"DOWNLOAD_DELAY": 0.5}) as client:
        response = await client.get("https://books.toscrape.com/")

For each attempt the transport:

1. acquires a permit for the request's URL (or for the explicit scopes in
   ``request.extensions["crawlpace_scopes"]``);
2. times the inner transport's ``handle_async_request``, which returns once
   the response headers are in: that time is the latency (seed 000 measures
   from the connection to the headers);
3. feeds the response (status and headers) or the exception back to the
   permit and releases it;
4. sends the request again if the outcome was a backoff trigger for any of
   its scopes and retries remain. The next acquire waits for the backoff
   delay or the server's ``Retry-After`` by itself, so no sleep is needed
   here.

Between 1 and 2 the request may wait for a connection. Just before its
headers are written (httpx's ``trace`` extension tells when), the transport
takes a last look (:mod:`crawlpace._clients._last_look`): if one of its scopes was
told to wait (``Retry-After``) after the permit was granted, the request is
not written but admitted again once the wait is over; and a robots.txt
``Crawl-delay`` is kept between the writes themselves.

With ``robots_txt=True`` it first reads the origin's robots.txt (once per
origin, see :mod:`crawlpace._robotstxt._robots_guard`): disallowed URLs raise
:class:`~crawlpace.RobotsDisallowed` and a ``Crawl-delay`` paces the host.

httpx is an optional dependency (``pip install crawlpace[http]``); the rest of
crawlpace does not need it, and this module is not imported by ``crawlpace``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import httpx

from ._clients._http_sync import ThrottledSyncClient, ThrottledSyncTransport, throttled_sync_client
from ._clients._httpx_common import (
    ATTEMPTS_EXTENSION,
    SCOPES_EXTENSION,
    ThrottlerHolder,
    discard_async,
    pool_limits,
    replayable,
    split_client_kwargs,
)
from ._clients._retry import check_owner, check_retries
from ._clients.core import AsyncCore, attempts, own_settings
from ._robotstxt._http_robots import async_fetch
from ._robotstxt._robots_guard import RobotsGuard
from ._settings._config import Settings
from ._throttle._throttler import Throttler
from .stores.base import Store

__all__ = [
    "ATTEMPTS_EXTENSION",
    "SCOPES_EXTENSION",
    "ThrottledClient",
    "ThrottledSyncClient",
    "ThrottledSyncTransport",
    "ThrottledTransport",
    "attempts",
    "throttled_client",
    "throttled_sync_client",
]

logger = logging.getLogger(__name__)

def _answer(response: httpx.Response) -> tuple[int, httpx.Headers, Callable[[], Awaitable[bytes]]]:
    return response.status_code, response.headers, response.aread


class ThrottledTransport(ThrottlerHolder[Throttler], httpx.AsyncBaseTransport):
    """An httpx transport that waits for a throttler's permit before each send.

    Args:
        settings: settings for a throttler of the transport's own (a
            :class:`~crawlpace.Settings` or a mapping of Scrapy-style names);
            ``None`` for the defaults. Not allowed together with
            ``throttler``.
        throttler: an existing throttler to share with other code. The
            transport does not close it.
        store: where the transport's own throttler keeps its state: a
            :class:`~crawlpace.stores.Store` or a URL (``"memory://"`` by
            default, ``"redis://..."`` to share limits between processes).
            Not allowed together with ``throttler``.
        transport: the transport that really sends the requests; a new
            :class:`httpx.AsyncHTTPTransport` by default. It is closed with
            this transport.
        retries: how many times a request whose outcome was a backoff trigger
            (a status in the scope's ``BACKOFF_HTTP_CODES`` such as 429 or
            503, or an exception in its ``BACKOFF_EXCEPTIONS`` such as a
            timeout) is sent again; 0 disables retries.
        robots_txt: obey each origin's robots.txt (off by default: an API
            client usually should not; a crawler should). Disallowed URLs
            raise :class:`~crawlpace.RobotsDisallowed`; a ``Crawl-delay``
            is given to the throttler.
        robots_user_agent: the user agent whose robots.txt rules apply;
            by default the ``User-Agent`` header of the first request.
        learned: where the transport's own throttler keeps learned limits for a warm
            start (a SQLite file path or a ``redis://`` URL; see
            :class:`~crawlpace.Throttler`). Not allowed together with ``throttler``.
        block_rules: soft-block body rules (``"REGEX[:STATUS]"`` each, see
            :class:`~crawlpace.BlockRules`) added to the settings'
            ``block_rules``; an answer that matches one (or carries
            ``cf-mitigated: challenge``, or a limiting problem+json type) backs
            its scopes off and is sent again like a 429. Not allowed together
            with ``throttler`` (whose settings' rules apply).

    Raises:
        TypeError: when ``throttler`` is given with ``settings``, ``store``,
            ``learned`` or ``block_rules``.
        ValueError: when ``retries`` is not an integer >= 0.
        ConfigError: when the settings are invalid.

    A request's scopes are those the throttler's manager gives for its URL
    (its host, by default), unless ``request.extensions["crawlpace_scopes"]``
    names them (any form the throttler's ``scopes=`` argument takes: a name,
    a list or set of names, or a dict of name to expected quota use).

    Errors raised while waiting for a permit reach the caller unchanged:
    :class:`~crawlpace.ScopeGivenUp` when the circuit breaker gave a scope up
    (possibly while waiting to retry), :class:`~crawlpace.QuotaError` when the
    request expects more quota than its scope has, and
    :class:`~crawlpace.ThrottlerClosed` once the throttler is closed, and,
    with ``robots_txt``, :class:`~crawlpace.RobotsDisallowed`.
    """

    def __init__(self, settings: Settings | Mapping[str, Any] | None = None, *,
                 throttler: Throttler | None = None, store: Store | str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 retries: int = 3, robots_txt: bool = False,
                 robots_user_agent: str | None = None, learned: str | None = None,
                 block_rules: Iterable[str] | None = None) -> None:
        check_owner(settings, throttler, store, learned=learned, block_rules=block_rules)
        self._retries = check_retries(retries)
        self._owns_throttler = throttler is None
        self._throttler = throttler if throttler is not None else \
            Throttler(own_settings(settings, robots_txt, block_rules=block_rules),
                      store=store if store is not None else "memory://", learned=learned)
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport(
            limits=pool_limits(self._throttler.settings))
        self._core = AsyncCore(self._throttler, retries=retries, robots_txt=robots_txt,
                               robots_user_agent=robots_user_agent, log=logger)

    @property
    def robots(self) -> RobotsGuard | None:
        """The robots.txt keeper, when the transport obeys robots.txt."""
        return self._core.robots

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` when its scopes allow it, retrying backoff outcomes.

        Args:
            request: the request httpx wants sent.

        Returns:
            The first response that is not a backoff trigger, or the last one
            when the retries ran out or the body cannot be replayed. Its
            ``extensions["crawlpace_attempts"]`` (or :func:`attempts`) says
            how many sends it took.

        Raises:
            StoreUnreachable: at first use, when a shared store does not answer.
            ScopeGivenUp: when the circuit breaker gave a scope up.
            QuotaError: when the request expects more quota than its scope has.
            ThrottlerClosed: when the throttler is closed.
            RobotsDisallowed: with ``robots_txt``, when robots.txt forbids the URL.
            httpx.TransportError: (or whatever the inner transport raised) for
                the last attempt, when it failed with an exception.
        """
        inner = self._transport
        request.extensions = {**request.extensions,
                              "trace": self._last_look(request.extensions.get("trace"))}

        async def send() -> httpx.Response:
            # The inner transport returns as soon as the headers are in: that is the latency.
            return await inner.handle_async_request(request)

        response, attempt = await self._core.send(
            request.method, str(request.url), request.extensions.get(SCOPES_EXTENSION), replayable(request),
            send, discard_async, answer=_answer,
            fetch_robots=lambda: async_fetch(inner.handle_async_request, request.extensions),
            user_agent=request.headers.get("user-agent"))
        response.extensions[ATTEMPTS_EXTENSION] = attempt
        return response

    def _last_look(self, chained: Any) -> Callable[[str, Any], Awaitable[None]]:
        """httpcore's ``trace`` callback: the last look before the headers go (the user's own trace kept)."""
        before_write = self._core.before_write

        async def trace(event: str, info: Any) -> None:
            if event.endswith("send_request_headers.started"):
                await before_write()
            if chained is not None:
                await chained(event, info)

        return trace

    async def aclose(self) -> None:
        """Close the inner transport, and the throttler if the transport created it."""
        try:
            try:
                await self._core.aclose()
            finally:
                # Even when the close is cancelled while robots.txt fetches stop: the pool's
                # connections would stay open, their sockets unclosed.
                await self._transport.aclose()
        finally:
            if self._owns_throttler:
                await self._throttler.aclose()

    def __repr__(self) -> str:
        owned = "owned" if self._owns_throttler else "shared"
        robots = " robots_txt" if self._core.robots is not None else ""
        return f"<ThrottledTransport retries={self._retries}{robots} throttler={owned} {self._throttler!r}>"


class ThrottledClient(httpx.AsyncClient):
    """An :class:`httpx.AsyncClient` whose transport is a :class:`ThrottledTransport`.

    Built by :func:`throttled_client`; it adds only :attr:`throttler`.
    """

    def __init__(self, *, transport: ThrottledTransport, **client_kwargs: Any) -> None:
        super().__init__(transport=transport, **client_kwargs)
        self._throttled = transport

    @property
    def throttler(self) -> Throttler:
        """The throttler every request of this client waits for (for ``scope_stats()`` or sharing)."""
        return self._throttled.throttler

    @property
    def throttled_transport(self) -> ThrottledTransport:
        """The transport that throttles and retries."""
        return self._throttled


def throttled_client(settings: Settings | Mapping[str, Any] | None = None, *,
                     throttler: Throttler | None = None, store: Store | str | None = None,
                     retries: int = 3, robots_txt: bool = False, robots_user_agent: str | None = None,
                     learned: str | None = None, block_rules: Iterable[str] | None = None,
                     **client_kwargs: Any) -> ThrottledClient:
    """Build an :class:`httpx.AsyncClient` whose requests all go through a throttler.

    Args:
        settings: settings for a throttler the client creates; closing the
            client closes it. Not allowed together with ``throttler``.
        throttler: an existing throttler to share; closing the client leaves
            it open.
        store: the store of the client's own throttler (a store or a URL such
            as ``"redis://localhost:6379/0"``); ``"memory://"`` by default.
        retries: see :class:`ThrottledTransport`.
        robots_txt: obey each origin's robots.txt (off by default); see
            :class:`ThrottledTransport`.
        robots_user_agent: the user agent whose robots.txt rules apply; by
            default the client's ``User-Agent`` header.
        learned: see :class:`ThrottledTransport`.
        block_rules: see :class:`ThrottledTransport`.
        **client_kwargs: passed to :class:`httpx.AsyncClient` (``timeout``,
            ``headers``, ``follow_redirects``, ``base_url``...). The transport
            options ``verify``, ``cert``, ``http1``, ``http2``, ``limits`` and
            ``proxy`` configure the inner :class:`httpx.AsyncHTTPTransport`;
            ``transport=`` replaces that inner transport instead. Without
            ``limits``, that transport's pool keeps as many idle connections
            as ``CONCURRENT_REQUESTS`` (at least httpx's 20), so that
            connections are not closed and opened again between requests.

    Returns:
        The client (an :class:`httpx.AsyncClient` with a ``throttler``
        attribute); use it in ``async with`` or close it with ``aclose()``.

    Raises:
        TypeError: for ``mounts=`` (a mounted transport would bypass the
            throttler), for transport options given together with
            ``transport=``, or for ``throttler`` with ``settings`` or ``store``.
        ValueError: when ``retries`` is not an integer >= 0.
        ConfigError: when the settings are invalid.
    """
    inner: httpx.AsyncBaseTransport | None
    inner, options = split_client_kwargs("throttled_client", "ThrottledTransport", "Throttler", client_kwargs)
    check_retries(retries)
    check_owner(settings, throttler, store, learned=learned, block_rules=block_rules)
    if inner is None:
        if "limits" not in options:
            parsed: Settings
            if throttler is not None:
                parsed = throttler.settings
            else:  # parsed once here, and the transport's throttler takes the result
                parsed = settings = own_settings(settings, robots_txt, block_rules=block_rules)
                block_rules = None  # in the settings now
            options["limits"] = pool_limits(parsed)
        inner = httpx.AsyncHTTPTransport(trust_env=client_kwargs.get("trust_env", True), **options)
    transport = ThrottledTransport(settings, throttler=throttler, store=store, transport=inner,
                                   retries=retries, robots_txt=robots_txt,
                                   robots_user_agent=robots_user_agent, learned=learned,
                                   block_rules=block_rules)
    return ThrottledClient(transport=transport, **client_kwargs)
