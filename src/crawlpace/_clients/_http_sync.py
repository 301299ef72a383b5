"""An httpx transport for the blocking :class:`httpx.Client`, on a :class:`~crawlpace.SyncThrottler`.

The same promises as :class:`crawlpace.http.ThrottledTransport`, for threads
and plain scripts: every request (each redirect hop too) waits for its
scopes, its response or exception is fed back, and a backoff outcome is sent
again after the wait it asked for. Waiting blocks the calling thread on a
lock, never in a polling loop, and one client may be used from many threads.
Public through :mod:`crawlpace.http`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from .._robotstxt._http_robots import sync_fetch
from .._robotstxt._robots_guard import RobotsGuard
from .._settings._config import Settings
from .._throttle._sync import SyncThrottler
from ._httpx_common import (
    ATTEMPTS_EXTENSION,
    SCOPES_EXTENSION,
    ThrottlerHolder,
    discard_sync,
    replayable,
    split_client_kwargs,
)
from ._retry import check_owner, check_retries
from .core import SyncCore, last_look_sync, own_settings

__all__ = ["ThrottledSyncClient", "ThrottledSyncTransport", "throttled_sync_client"]

logger = logging.getLogger("crawlpace.http")


def _answer(response: httpx.Response) -> tuple[int, httpx.Headers, Callable[[], bytes]]:
    return response.status_code, response.headers, response.read


def _last_look(chained: Any) -> Callable[[str, Any], None]:
    """httpcore's ``trace`` callback: the last look before the headers go (the user's own trace kept)."""

    def trace(event: str, info: Any) -> None:
        if event.endswith("send_request_headers.started"):
            last_look_sync()
        if chained is not None:
            chained(event, info)

    return trace


class ThrottledSyncTransport(ThrottlerHolder[SyncThrottler], httpx.BaseTransport):
    """An :class:`httpx.BaseTransport` that waits for a permit before each send.

    Args:
        settings: settings for a throttler of the transport's own; ``None``
            for the defaults. Not allowed together with ``throttler``.
        throttler: an existing :class:`~crawlpace.SyncThrottler` to share
            (between clients, threads, or with a requests session). The
            transport does not close it.
        store: the store URL of the transport's own throttler
            (``"memory://"`` by default; ``"redis://..."`` shares the budget
            with other processes and machines).
        transport: the transport that really sends; a new
            :class:`httpx.HTTPTransport` by default. Closed with this one.
        retries: how many times a backoff outcome (429, 503, a timeout...)
            is sent again; 0 disables retries.
        robots_txt: obey each origin's robots.txt (off by default), as
            :class:`~crawlpace.http.ThrottledTransport` does: disallowed URLs
            raise :class:`~crawlpace.RobotsDisallowed`, a ``Crawl-delay`` is
            given to the throttler.
        robots_user_agent: the user agent whose robots.txt rules apply; by
            default the ``User-Agent`` header of the first request.
        learned: where the transport's own throttler keeps learned limits for a
            warm start, as for :class:`~crawlpace.http.ThrottledTransport`.
        block_rules: soft-block body rules added to the settings', as for
            :class:`~crawlpace.http.ThrottledTransport`.

    Raises:
        TypeError: when ``throttler`` is given with ``settings``, ``store``,
            ``learned`` or ``block_rules``.
        ValueError: when ``retries`` is not an integer >= 0.
        ConfigError: when the settings are invalid.

    Scopes come from the throttler's manager, or from
    ``request.extensions["crawlpace_scopes"]``.
    """

    def __init__(self, settings: Settings | Mapping[str, Any] | None = None, *,
                 throttler: SyncThrottler | None = None, store: str | None = None,
                 transport: httpx.BaseTransport | None = None, retries: int = 3, robots_txt: bool = False,
                 robots_user_agent: str | None = None, learned: str | None = None,
                 block_rules: Iterable[str] | None = None) -> None:
        check_owner(settings, throttler, store, learned=learned, block_rules=block_rules)
        self._retries = check_retries(retries)
        self._owns_throttler = throttler is None
        self._throttler = throttler if throttler is not None else \
            SyncThrottler(own_settings(settings, robots_txt, block_rules=block_rules),
                          store=store if store is not None else "memory://", learned=learned)
        self._transport = transport if transport is not None else httpx.HTTPTransport()
        self._core = SyncCore(self._throttler, retries=retries, robots_txt=robots_txt,
                              robots_user_agent=robots_user_agent, log=logger)

    @property
    def robots(self) -> RobotsGuard | None:
        """The robots.txt keeper, when the transport obeys robots.txt."""
        return self._core.robots

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` when its scopes allow it, retrying backoff outcomes.

        Returns:
            The first response that is not a backoff trigger, or the last one;
            ``extensions["crawlpace_attempts"]`` (or
            :func:`crawlpace.http.attempts`) counts the sends.

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
        request.extensions = {**request.extensions, "trace": _last_look(request.extensions.get("trace"))}

        def send() -> httpx.Response:
            return inner.handle_request(request)

        response, attempt = self._core.send(
            request.method, str(request.url), request.extensions.get(SCOPES_EXTENSION), replayable(request),
            send, discard_sync, answer=_answer,
            fetch_robots=lambda: sync_fetch(inner.handle_request, request.extensions),
            user_agent=request.headers.get("user-agent"))
        response.extensions[ATTEMPTS_EXTENSION] = attempt
        return response

    def close(self) -> None:
        """Close the inner transport, and the throttler if the transport created it."""
        try:
            try:
                self._core.close()
            finally:  # even when stopping robots.txt fetches fails or is interrupted: the sockets
                self._transport.close()
        finally:
            if self._owns_throttler:
                self._throttler.close()

    def __repr__(self) -> str:
        owned = "owned" if self._owns_throttler else "shared"
        robots = " robots_txt" if self._core.robots is not None else ""
        return (f"<ThrottledSyncTransport retries={self._retries}{robots} throttler={owned} "
                f"{self._throttler!r}>")


class ThrottledSyncClient(httpx.Client):
    """An :class:`httpx.Client` whose transport is a :class:`ThrottledSyncTransport`.

    Built by :func:`throttled_sync_client`; it adds only :attr:`throttler`.
    """

    def __init__(self, *, transport: ThrottledSyncTransport, **client_kwargs: Any) -> None:
        super().__init__(transport=transport, **client_kwargs)
        self._throttled = transport

    @property
    def throttler(self) -> SyncThrottler:
        """The throttler every request of this client waits for."""
        return self._throttled.throttler


def throttled_sync_client(settings: Settings | Mapping[str, Any] | None = None, *,
                          throttler: SyncThrottler | None = None, store: str | None = None,
                          retries: int = 3, robots_txt: bool = False, robots_user_agent: str | None = None,
                          learned: str | None = None, block_rules: Iterable[str] | None = None,
                          **client_kwargs: Any) -> ThrottledSyncClient:
    """Build an :class:`httpx.Client` whose requests all go through a throttler.

    Args:
        settings: settings for a throttler the client creates; closing the
            client closes it. Not allowed together with ``throttler``.
        throttler: an existing :class:`~crawlpace.SyncThrottler` to share.
        store: the store URL of the client's own throttler.
        retries: see :class:`ThrottledSyncTransport`.
        robots_txt: obey each origin's robots.txt (off by default); see
            :class:`ThrottledSyncTransport`.
        robots_user_agent: the user agent whose robots.txt rules apply; by
            default the client's ``User-Agent`` header.
        learned: see :class:`ThrottledSyncTransport`.
        block_rules: see :class:`ThrottledSyncTransport`.
        **client_kwargs: passed to :class:`httpx.Client`; ``verify``,
            ``cert``, ``http1``, ``http2``, ``limits`` and ``proxy`` configure
            the inner :class:`httpx.HTTPTransport`, and ``transport=``
            replaces it.

    Returns:
        The client; use it in ``with`` or close it with ``close()``.

    Raises:
        TypeError: for ``mounts=``, for transport options with
            ``transport=``, or for ``throttler`` with ``settings`` or ``store``.
        ValueError: when ``retries`` is not an integer >= 0.
        ConfigError: when the settings are invalid.
    """
    inner: httpx.BaseTransport | None
    inner, options = split_client_kwargs("throttled_sync_client", "ThrottledSyncTransport", "SyncThrottler",
                                         client_kwargs)
    check_retries(retries)
    check_owner(settings, throttler, store, learned=learned, block_rules=block_rules)
    if inner is None:
        inner = httpx.HTTPTransport(trust_env=client_kwargs.get("trust_env", True), **options)
    transport = ThrottledSyncTransport(settings, throttler=throttler, store=store, transport=inner,
                                       retries=retries, robots_txt=robots_txt,
                                       robots_user_agent=robots_user_agent, learned=learned,
                                       block_rules=block_rules)
    return ThrottledSyncClient(transport=transport, **client_kwargs)
