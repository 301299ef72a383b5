"""A :class:`requests.Session` whose every request goes through a :class:`~crawlpace.SyncThrottler`.

For synchronous code built on requests, in one thread or many, in one
process or many (with a Redis store)::

    with throttled_session({"DOWNLOAD_DELAY": 0.5}) as session:
        response = session.get("https://books.toscrape.com/")

The session mounts a :class:`ThrottledAdapter` for ``http://`` and
``https://``. For each send (each redirect hop is one) the adapter waits for
the URL's scopes, times the send up to the response headers (requests reads
the body afterwards), feeds the response or exception back, and sends again
when the outcome was a backoff trigger (429, 503, a timeout...) and retries
remain; the next permit waits for the backoff delay or ``Retry-After`` by
itself. Waiting blocks the thread on a lock: nothing polls. With
``robots_txt=True`` each origin's robots.txt is obeyed, by the same
:class:`~crawlpace._robotstxt._robots_guard.RobotsGuard` as the other clients.

requests is an optional dependency (``pip install crawlpace[requests]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager

from ._clients._retry import check_owner, check_retries
from ._clients.core import ATTEMPTS, SyncCore, attempts, last_look_sync, own_settings
from ._robotstxt._robots import MAX_ROBOTS_BYTES
from ._robotstxt._robots_guard import FetchRobots, RobotsAnswer
from ._settings._config import Settings
from ._throttle._sync import SyncThrottler

__all__ = ["ATTEMPTS_ATTRIBUTE", "ThrottledAdapter", "ThrottledSession", "attempts", "throttled_session"]

logger = logging.getLogger(__name__)

#: The attribute set on each response: how many sends it took (read it typed with :func:`attempts`).
ATTEMPTS_ATTRIBUTE = ATTEMPTS


class _LookingConnection(HTTPConnection):
    """A urllib3 connection that takes the last look once it is open, just before the request is written."""

    def request(self, method: str, url: str, body: Any = None, headers: Any = None,
                **options: Any) -> None:
        if self.sock is None:  # http.client would connect inside the write: connect first, then look
            self.connect()
        last_look_sync()
        super().request(method, url, body, headers, **options)


class _LookingTLSConnection(HTTPSConnection):
    """:class:`_LookingConnection` for https."""

    def request(self, method: str, url: str, body: Any = None, headers: Any = None,
                **options: Any) -> None:
        if self.sock is None:
            self.connect()
        last_look_sync()
        super().request(method, url, body, headers, **options)


class _LookingPool(HTTPConnectionPool):
    ConnectionCls = _LookingConnection


class _LookingTLSPool(HTTPSConnectionPool):
    ConnectionCls = _LookingTLSConnection


def _looking(manager: PoolManager) -> PoolManager:
    """``manager`` with pools whose connections take the last look (see
    :mod:`crawlpace._clients._last_look`)."""
    manager.pool_classes_by_scheme = {"http": _LookingPool, "https": _LookingTLSPool}
    return manager


def _replayable(request: requests.PreparedRequest) -> bool:
    """Whether the prepared body can be sent again: none, bytes or text (not a file or generator)."""
    return request.body is None or isinstance(request.body, bytes | str)


def _discard(response: requests.Response) -> None:
    with contextlib.suppress(requests.RequestException, OSError):
        response.close()


def _answer(response: requests.Response) -> tuple[int, Mapping[str, str], Callable[[], bytes]]:
    return response.status_code, response.headers, lambda: response.content


def _robots_fetch(adapter: HTTPAdapter, options: dict[str, Any]) -> FetchRobots:
    """A robots.txt GET through ``adapter``'s own sending (not the throttled one), in a thread."""

    def blocking(url: str, user_agent: str) -> RobotsAnswer:
        prepared = requests.Request("GET", url, headers={"User-Agent": user_agent}).prepare()
        response = HTTPAdapter.send(adapter, prepared, stream=True, **options)
        try:
            body = b""
            if 200 <= response.status_code < 300:
                try:
                    body = response.raw.read(MAX_ROBOTS_BYTES + 1, decode_content=True) or b""
                except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                    logger.warning("%s: the body was cut short (%s)", url, exc)
        finally:
            _discard(response)
        return RobotsAnswer(response.status_code, response.headers, response.headers.get("location"), body)

    async def fetch(url: str, user_agent: str) -> RobotsAnswer:
        return await asyncio.to_thread(blocking, url, user_agent)

    return fetch


class ThrottledAdapter(HTTPAdapter):
    """A transport adapter that waits for a permit before each send.

    Args:
        throttler: the throttler to wait for; the adapter never closes it.
        retries: how many times a backoff outcome is sent again; 0 disables
            retries. (requests' own ``max_retries``, for connection errors,
            stays 0 unless given in ``adapter_kwargs``.)
        robots_txt: obey each origin's robots.txt (off by default): disallowed
            URLs raise :class:`~crawlpace.RobotsDisallowed`, a ``Crawl-delay``
            is given to the throttler.
        robots_user_agent: the user agent whose robots.txt rules apply; by
            default the ``User-Agent`` header of the first request.
        **adapter_kwargs: passed to :class:`requests.adapters.HTTPAdapter`
            (``pool_connections``, ``pool_maxsize``...).

    Raises:
        ValueError: when ``retries`` is not an integer >= 0.
    """

    def __init__(self, throttler: SyncThrottler, *, retries: int = 3, robots_txt: bool = False,
                 robots_user_agent: str | None = None, **adapter_kwargs: Any) -> None:
        self._core = SyncCore(throttler, retries=retries, robots_txt=robots_txt,
                              robots_user_agent=robots_user_agent, log=logger)
        self.throttler = throttler
        #: The robots.txt keeper, when the adapter obeys robots.txt (it lives on the throttler's loop).
        self.robots = self._core.robots
        super().__init__(**adapter_kwargs)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False,
                         **pool_kwargs: Any) -> None:
        """requests' pool manager, whose connections take the last look before each write."""
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        _looking(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> PoolManager:
        """requests' proxy manager, whose connections take the last look before each write."""
        return _looking(super().proxy_manager_for(proxy, **proxy_kwargs))

    @property
    def retries(self) -> int:
        """How many times a backoff outcome is retried."""
        return self._core.retries

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: float | tuple[float, float] | tuple[float, None] | None = None,
             verify: bool | str = True, cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
             proxies: Mapping[str, str] | None = None) -> requests.Response:
        """Send ``request`` when its scopes allow it, retrying backoff outcomes.

        Returns:
            The first response that is not a backoff trigger, or the last one;
            :func:`attempts` (or its ``crawlpace_attempts`` attribute) counts
            the sends.

        Raises:
            StoreUnreachable: at first use, when a shared store does not answer.
            ScopeGivenUp: when the circuit breaker gave a scope up.
            QuotaError: when the request expects more quota than its scope has.
            ThrottlerClosed: when the throttler is closed.
            RobotsDisallowed: with ``robots_txt``, when robots.txt forbids the URL.
            requests.RequestException: for the last attempt, when it failed.
        """
        target = request.url or ""

        def once() -> requests.Response:
            # HTTPAdapter.send returns once the headers are in; Session.send reads the body later.
            return super(ThrottledAdapter, self).send(request, stream=stream, timeout=timeout,
                                                      verify=verify, cert=cert, proxies=proxies)

        def fetch_robots() -> FetchRobots:
            options = {"timeout": timeout, "verify": verify, "cert": cert, "proxies": proxies}
            return _robots_fetch(self, options)

        response, attempt = self._core.send(
            request.method or "GET", target, getattr(request, "crawlpace_scopes", None), _replayable(request),
            once, _discard, answer=_answer, fetch_robots=fetch_robots,
            user_agent=request.headers.get("User-Agent"))
        setattr(response, ATTEMPTS_ATTRIBUTE, attempt)
        return response


class ThrottledSession(requests.Session):
    """A :class:`requests.Session` with a :class:`ThrottledAdapter` on http and https.

    Args:
        throttler: the throttler every request waits for.
        owns_throttler: close the throttler with the session.
        retries: see :class:`ThrottledAdapter`.
        robots_txt: obey each origin's robots.txt; see :class:`ThrottledAdapter`.
        robots_user_agent: the user agent whose robots.txt rules apply.
    """

    def __init__(self, throttler: SyncThrottler, *, owns_throttler: bool = False, retries: int = 3,
                 robots_txt: bool = False, robots_user_agent: str | None = None) -> None:
        super().__init__()
        self._throttler = throttler
        self._owns_throttler = owns_throttler
        adapter = self._adapter = ThrottledAdapter(throttler, retries=retries, robots_txt=robots_txt,
                                                   robots_user_agent=robots_user_agent)
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    @property
    def throttler(self) -> SyncThrottler:
        """The throttler every request of this session waits for."""
        return self._throttler

    def close(self) -> None:
        """Close the adapters, and the throttler if the session created it."""
        try:
            try:
                self._adapter._core.close()
            finally:  # even when stopping robots.txt fetches fails or is interrupted: the sockets
                super().close()
        finally:
            if self._owns_throttler:
                self._throttler.close()

    def __repr__(self) -> str:
        owned = "owned" if self._owns_throttler else "shared"
        return f"<ThrottledSession throttler={owned} {self._throttler!r}>"


def throttled_session(settings: Settings | Mapping[str, Any] | None = None, *,
                      throttler: SyncThrottler | None = None, store: str | None = None,
                      retries: int = 3, robots_txt: bool = False,
                      robots_user_agent: str | None = None, learned: str | None = None,
                      block_rules: Iterable[str] | None = None) -> ThrottledSession:
    """Build a :class:`requests.Session` whose requests all go through a throttler.

    Args:
        settings: settings for a throttler the session creates; closing the
            session closes it. Not allowed together with ``throttler``.
        throttler: an existing :class:`~crawlpace.SyncThrottler` to share
            (with other sessions, threads, or an httpx client); closing the
            session leaves it open.
        store: the store URL of the session's own throttler: ``"memory://"``
            by default, ``"redis://host:port/db"`` to share one budget between
            processes and machines.
        retries: how many times a backoff outcome is sent again.
        robots_txt: obey each origin's robots.txt (off by default); see
            :class:`ThrottledAdapter`.
        robots_user_agent: the user agent whose robots.txt rules apply; by
            default the ``User-Agent`` header of the first request.
        learned: where the session's own throttler keeps learned limits for a
            warm start, as for :class:`~crawlpace.http.ThrottledTransport`.
        block_rules: soft-block body rules added to the settings', as for
            :class:`~crawlpace.http.ThrottledTransport`.

    Returns:
        The session; use it in ``with`` or call ``close()``.

    Raises:
        TypeError: for ``throttler`` together with ``settings``, ``store``,
            ``learned`` or ``block_rules``.
        ValueError: when ``retries`` is not an integer >= 0.
        ConfigError: when the settings are invalid.
    """
    check_retries(retries)
    check_owner(settings, throttler, store, learned=learned, block_rules=block_rules)
    owns = throttler is None
    if throttler is None:
        throttler = SyncThrottler(own_settings(settings, robots_txt, block_rules=block_rules),
                                  store=store if store is not None else "memory://", learned=learned)
    return ThrottledSession(throttler, owns_throttler=owns, retries=retries, robots_txt=robots_txt,
                            robots_user_agent=robots_user_agent)
