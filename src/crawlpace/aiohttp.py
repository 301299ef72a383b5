"""An :class:`aiohttp.ClientSession` whose every request goes through a :class:`~crawlpace.Throttler`.

The rate-limited session wrapper of seed 003, for aiohttp code::

    async with throttled_session({"DOWNLOAD_DELAY": 0.5}) as session:
        async with session.get("https://books.toscrape.com/") as response:
            text = await response.text()

It is built on aiohttp's client middlewares (aiohttp 3.12 and later), which
run around each single send, redirect hops included. :class:`ThrottleMiddleware`
waits for the URL's scopes, times the send up to the response headers (the
latency), feeds the response or exception back, and sends again when the
outcome was a backoff trigger (429, 503, a timeout...) and retries remain. The
next permit waits for the backoff delay or ``Retry-After`` by itself. These are
the semantics of :func:`crawlpace.http.throttled_client`, ``robots_txt=True``
included (the same :class:`~crawlpace._robotstxt._robots_guard.RobotsGuard`; the
robots.txt GET is sent through the session with no middleware, under a
permit of its own).

aiohttp is an optional dependency (``pip install crawlpace[aiohttp]``).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import aiohttp
from aiohttp import payload

from ._clients._retry import check_owner, check_retries
from ._clients.core import ATTEMPTS, AsyncCore, attempts, own_settings
from ._robotstxt._robots import MAX_ROBOTS_BYTES
from ._robotstxt._robots_guard import FetchRobots, RobotsAnswer, RobotsGuard
from ._settings._config import Settings
from ._throttle._throttler import Throttler
from .stores.base import Store

__all__ = ["ATTEMPTS_ATTRIBUTE", "ThrottleMiddleware", "ThrottledSession", "attempts", "throttled_session"]

logger = logging.getLogger(__name__)

#: The attribute set on each response: how many sends it took (read it with :func:`attempts`).
ATTEMPTS_ATTRIBUTE = ATTEMPTS


def _replayable(request: aiohttp.ClientRequest) -> bool:
    """Whether the body can be sent again: none, or one held in memory (bytes, text, JSON, a form)."""
    body = request.body
    return body == b"" or isinstance(body, payload.BytesPayload)


async def _discard(response: aiohttp.ClientResponse) -> None:
    with contextlib.suppress(aiohttp.ClientError, OSError):
        response.close()


def _answer(response: aiohttp.ClientResponse) -> tuple[int, Mapping[str, str],
                                                      Callable[[], Awaitable[bytes]]]:
    return response.status, response.headers, response.read


def _robots_fetch(session: aiohttp.ClientSession, timeout: aiohttp.ClientTimeout) -> FetchRobots:
    """A robots.txt GET through ``session``, past every middleware (the throttle included)."""

    async def fetch(url: str, user_agent: str) -> RobotsAnswer:
        async with session.get(url, headers={"User-Agent": user_agent}, allow_redirects=False,
                               middlewares=(), timeout=timeout) as response:
            body = b""
            if 200 <= response.status < 300:
                try:
                    body = await response.content.read(MAX_ROBOTS_BYTES + 1)
                except (aiohttp.ClientError, OSError) as exc:  # cut short: what arrived is what there is
                    logger.warning("%s: the body was cut short (%s)", url, exc)
            return RobotsAnswer(response.status, response.headers, response.headers.get("Location"), body)

    return fetch


class ThrottleMiddleware:
    """An aiohttp client middleware that waits for a permit before each send.

    Pass it to :class:`aiohttp.ClientSession` (``middlewares=(mw,)``) to
    throttle a session you build yourself; :func:`throttled_session` does it
    for you.

    Args:
        throttler: the throttler to wait for. The middleware never closes it.
        retries: how many times a backoff outcome is sent again; 0 disables
            retries.
        robots_txt: obey each origin's robots.txt (off by default): disallowed
            URLs raise :class:`~crawlpace.RobotsDisallowed`, a ``Crawl-delay``
            is given to the throttler.
        robots_user_agent: the user agent whose robots.txt rules apply; by
            default the ``User-Agent`` header of the first request.

    Raises:
        ValueError: when ``retries`` is not an integer >= 0.
    """

    __slots__ = ("_core", "_scopes")

    def __init__(self, throttler: Throttler, *, retries: int = 3, scopes: object = None,
                 robots_txt: bool | RobotsGuard = False, robots_user_agent: str | None = None) -> None:
        self._core = AsyncCore(throttler, retries=retries, robots_txt=robots_txt,
                               robots_user_agent=robots_user_agent, log=logger)
        self._scopes = scopes

    @property
    def throttler(self) -> Throttler:
        """The throttler every request waits for."""
        return self._core.throttler

    @property
    def robots(self) -> RobotsGuard | None:
        """The robots.txt keeper, when the middleware obeys robots.txt."""
        return self._core.robots

    def with_scopes(self, scopes: object) -> ThrottleMiddleware:
        """The same throttle for requests with explicit scopes, for one request's ``middlewares=``.

        aiohttp runs a request's own middlewares *instead of* the session's,
        so ``session.get(url, middlewares=(mw.with_scopes(["api"]),))`` is
        throttled once, under the scopes given (any form the throttler's
        ``scopes=`` takes). The copy shares this middleware's robots.txt
        rules, store check and last look.
        """
        copy = ThrottleMiddleware.__new__(ThrottleMiddleware)
        copy._core, copy._scopes = self._core, scopes
        return copy

    @property
    def retries(self) -> int:
        """How many times a backoff outcome is retried."""
        return self._core.retries

    async def __call__(self, request: aiohttp.ClientRequest,
                       handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
        """Send ``request`` through ``handler`` when its scopes allow it, retrying backoff outcomes.

        Returns:
            The first response that is not a backoff trigger, or the last one;
            :func:`attempts` tells how many sends it took.

        Raises:
            StoreUnreachable: at first use, when a shared store does not answer.
            ScopeGivenUp: when the circuit breaker gave a scope up.
            QuotaError: when the request expects more quota than its scope has.
            ThrottlerClosed: when the throttler is closed.
            RobotsDisallowed: with ``robots_txt``, when robots.txt forbids the URL.
            aiohttp.ClientError: (or whatever the send raised) for the last
                attempt, when it failed with an exception.
        """
        core = self._core
        write = request.send

        async def send_looking(conn: Any) -> aiohttp.ClientResponse:
            # Called with the connection open, just before the request's head is written.
            await core.before_write()
            return await write(conn)

        # The instance attribute shadows the method for this request only (aiohttp calls req.send).
        setattr(request, "send", send_looking)  # noqa: B010 - mypy forbids assigning to a method

        async def send() -> aiohttp.ClientResponse:
            # The handler connects, writes and reads the head: it returns with the headers in.
            return await handler(request)

        session = request.session
        response, attempt = await core.send(
            request.method, str(request.url), self._scopes, _replayable(request), send, _discard,
            answer=_answer, fetch_robots=lambda: _robots_fetch(session, session.timeout),
            user_agent=request.headers.get("User-Agent"))
        setattr(response, ATTEMPTS_ATTRIBUTE, attempt)
        return response

    def __repr__(self) -> str:
        robots = " robots_txt" if self.robots is not None else ""
        return f"<ThrottleMiddleware retries={self.retries}{robots} {self.throttler!r}>"


# aiohttp warns against subclassing ClientSession, to keep its internals free to change.
# This subclass overrides nothing but close() (a public coroutine), and adds one attribute,
# declared in ATTRS for aiohttp's debug-mode attribute check.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)

    class ThrottledSession(aiohttp.ClientSession):
        """An :class:`aiohttp.ClientSession` with a :class:`ThrottleMiddleware`.

        Built by :func:`throttled_session`; it adds :attr:`throttler` and
        closes a throttler it owns with the session.
        """

        ATTRS = aiohttp.ClientSession.ATTRS | frozenset({"_crawlpace"})

        def __init__(self, middleware: ThrottleMiddleware, *, owns_throttler: bool,
                     **session_kwargs: Any) -> None:
            middlewares = (middleware, *session_kwargs.pop("middlewares", ()))
            super().__init__(middlewares=middlewares, **session_kwargs)
            self._crawlpace = (middleware, owns_throttler)

        @property
        def throttler(self) -> Throttler:
            """The throttler every request of this session waits for."""
            return self._crawlpace[0].throttler

        @property
        def throttle(self) -> ThrottleMiddleware:
            """The session's middleware; ``session.throttle.with_scopes(...)`` names scopes per request."""
            return self._crawlpace[0]

        async def __aenter__(self) -> ThrottledSession:
            await super().__aenter__()
            return self

        async def close(self) -> None:
            """Close the session, and the throttler if the session created it."""
            try:
                try:
                    await self._crawlpace[0]._core.aclose()
                finally:
                    # Even when the close is cancelled while robots.txt fetches stop: the
                    # connector's connections would stay open, their sockets unclosed.
                    await super().close()
            finally:
                middleware, owns = self._crawlpace
                if owns:
                    await middleware.throttler.aclose()


def throttled_session(settings: Settings | Mapping[str, Any] | None = None, *,
                      throttler: Throttler | None = None, store: Store | str | None = None,
                      retries: int = 3, robots_txt: bool = False, robots_user_agent: str | None = None,
                      learned: str | None = None, block_rules: Iterable[str] | None = None,
                      **session_kwargs: Any) -> ThrottledSession:
    """Build an :class:`aiohttp.ClientSession` whose requests all go through a throttler.

    Call it inside a running event loop (aiohttp requires one).

    Args:
        settings: settings for a throttler the session creates; closing the
            session closes it. Not allowed together with ``throttler``.
        throttler: an existing throttler to share (with other sessions, an
            httpx client, a crawl); closing the session leaves it open.
        store: the store of the session's own throttler (a store or a URL
            such as ``"redis://localhost:6379/0"``); ``"memory://"`` by default.
        retries: how many times a backoff outcome is sent again.
        robots_txt: obey each origin's robots.txt (off by default); see
            :class:`ThrottleMiddleware`.
        robots_user_agent: the user agent whose robots.txt rules apply; by
            default the session's ``User-Agent`` header.
        learned: where the session's own throttler keeps learned limits for a
            warm start, as for :class:`~crawlpace.http.ThrottledTransport`.
        block_rules: soft-block body rules added to the settings', as for
            :class:`~crawlpace.http.ThrottledTransport`.
        **session_kwargs: passed to :class:`aiohttp.ClientSession`
            (``timeout``, ``headers``, ``connector``, ``base_url``...). Other
            ``middlewares`` run inside the throttle, once per attempt.

    Returns:
        The session; use it in ``async with`` or ``await session.close()``.

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
        throttler = Throttler(own_settings(settings, robots_txt, block_rules=block_rules),
                              store=store if store is not None else "memory://", learned=learned)
    middleware = ThrottleMiddleware(throttler, retries=retries, robots_txt=robots_txt,
                                    robots_user_agent=robots_user_agent)
    return ThrottledSession(middleware, owns_throttler=owns, **session_kwargs)
