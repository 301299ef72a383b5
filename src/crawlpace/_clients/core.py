"""What every throttled client does around a send, once: store check, robots.txt, retries, last look.

:class:`AsyncCore` serves the clients on the caller's event loop (httpx's
``AsyncClient``, aiohttp); :class:`SyncCore` the blocking ones (httpx's
``Client``, requests), on a :class:`~crawlpace.SyncThrottler` whose loop runs
in a thread of its own. Both run the same retry loop (:mod:`crawlpace._clients._retry`)
and the same last look (:mod:`crawlpace._clients._last_look`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from .._clock import Clock
from .._responses._blocks import BlockRules, parse_block_rules
from .._robotstxt._robots_guard import FetchRobots, RobotsGuard
from .._settings._config import Settings
from ..stores._check import DEFAULT_SOCKET_TIMEOUT, reach
from ..stores.base import Store
from ._last_look import LastLook, look_before_writing, written
from ._retry import check_retries, send_async, send_sync

if TYPE_CHECKING:
    from .._throttle._sync import SyncThrottler
    from .._throttle._throttler import Throttler

__all__ = ["ATTEMPTS", "AsyncCore", "SyncCore", "attempts", "connect_timeout", "last_look", "last_look_sync",
           "own_settings", "store_checked"]

R = TypeVar("R")

logger = logging.getLogger(__name__)

#: The name under which a response carries its attempt count (an httpx extension, an attribute elsewhere).
ATTEMPTS = "crawlpace_attempts"


def attempts(response: object) -> int:
    """How many times a client sent the request whose answer ``response`` is (1: no resend).

    Reads what every throttled client leaves on its responses: httpx's
    ``response.extensions["crawlpace_attempts"]``, or the
    ``crawlpace_attempts`` attribute of a requests or aiohttp response.

    Raises:
        ValueError: when ``response`` did not come through a throttled client.
    """
    extensions = getattr(response, "extensions", None)
    count = extensions.get(ATTEMPTS) if isinstance(extensions, Mapping) else None
    if count is None:
        count = getattr(response, ATTEMPTS, None)
    if not isinstance(count, int) or isinstance(count, bool):
        raise ValueError(f"{type(response).__name__} did not come through a crawlpace client: it carries "
                         "no attempt count")
    return count


def own_settings(settings: Settings | Mapping[str, Any] | None, robots_txt: bool, *,
                 block_rules: Iterable[str] | None = None) -> Settings:
    """The settings of a throttler a client creates for itself.

    robots.txt is ignored unless the client obeys it, so the throttler's
    start-up line says what the client does (``robots.txt ignored``) and it
    takes no Crawl-delay the client would never fetch. ``block_rules``, when
    given, are added to the settings' own.

    Raises:
        ConfigError: when the settings or the rules are invalid.
    """
    parsed = settings if isinstance(settings, Settings) else (
        Settings() if settings is None else Settings.from_scrapy(settings))
    if block_rules is not None:
        rules = parse_block_rules("block_rules", list(block_rules) if not isinstance(block_rules, str)
                                  else block_rules)
        parsed = dataclasses.replace(parsed, block_rules=(*parsed.block_rules, *rules))
    if robots_txt or not parsed.robotstxt_obey:
        return parsed
    return dataclasses.replace(parsed, robotstxt_obey=False)


def connect_timeout(store: Store) -> float:
    """Seconds a store's connection may take to open: its URL's ``socket_connect_timeout`` or the default."""
    url = getattr(store, "url", None)
    if isinstance(url, str):
        for key, value in parse_qsl(urlsplit(url).query):
            if key == "socket_connect_timeout":
                try:
                    seconds = float(value)
                except ValueError:
                    break
                if seconds > 0.0:
                    return seconds
    return DEFAULT_SOCKET_TIMEOUT


def store_checked(store: Store) -> Awaitable[None]:
    """Ask ``store`` once whether it answers (a no-op for a store local to the process).

    Raises:
        StoreUnreachable: naming the store (password hidden) and the reason.
    """
    # A refused connection is tried three times, half a second apart; a refused password at once.
    return reach(store, within=connect_timeout(store) + 1.5)


async def last_look(clock: Clock) -> None:
    """The last look of an async client, just before the headers of its request are written.

    Raises:
        NotSent: a hold heard after the permit was granted is still running.
    """
    wait = look_before_writing()
    if wait > 0.0:
        logger.debug("%.3fs more before writing, for the Crawl-delay", wait)
        await clock.sleep(wait)
    written()


def last_look_sync() -> None:
    """The last look of a blocking client (in the calling thread), just before its request is written.

    Raises:
        NotSent: a hold heard after the permit was granted is still running.
    """
    wait = look_before_writing()
    if wait > 0.0:
        logger.debug("%.3fs more before writing, for the Crawl-delay", wait)
        time.sleep(wait)
    written()


class _Common:
    """What both cores hold: retries, the last look, the robots.txt guard, the soft-block rules."""

    def __init__(self, throttler: Throttler, *, retries: int, robots_txt: bool | RobotsGuard,
                 robots_user_agent: str | None, log: logging.Logger) -> None:
        self.retries = check_retries(retries)
        self.log = log
        #: The throttler's ``block_rules``, the default rules, those always on: which answers are soft blocks.
        self.blocks = BlockRules.of(throttler.settings)
        if isinstance(robots_txt, RobotsGuard):
            self.robots: RobotsGuard | None = robots_txt
            self.look = robots_txt.look or LastLook()
        else:
            self.look = LastLook()
            self.robots = RobotsGuard(throttler, retries=retries, user_agent=robots_user_agent,
                                      look=self.look) if robots_txt else None

    def wants_body(self, status: int, headers: Mapping[str, str]) -> bool:
        """Whether telling a soft block needs the body (see :meth:`BlockRules.needs_body`)."""
        return self.blocks.needs_body(status, headers)

    def verdict(self, method: str, url: str, status: int, headers: Mapping[str, str],
                body: bytes | None) -> bool:
        """Whether the answer is a soft block (said in an INFO line naming the rule).

        ``body`` is ``None`` when no rule needs it: then only the header rule can match.
        """
        if body is None:
            if headers.get("cf-mitigated") is None:  # the common answer: nothing more to look at
                return False
            body = b""
        rule = self.blocks.match(status, headers, body)
        if rule is None:
            return False
        self.log.info("%s %s: %d is a soft block (%s): backing off as for a 429", method, url, status, rule)
        return True

    def attempts(self, replayable: bool, method: str, url: str) -> int:
        """The most sends of a request: 1 + retries, or 1 when its body cannot be sent twice."""
        if replayable or not self.retries:
            return 1 + self.retries
        self.log.debug("%s %s has a streamed body that cannot be sent twice: no retries", method, url)
        return 1


class AsyncCore(_Common):
    """The core of a client on the caller's event loop.

    Args:
        throttler: gives the permits; the core never closes it.
        retries: resends of a backoff outcome.
        robots_txt: obey robots.txt (or the guard to share, for a copy of a client).
        robots_user_agent: whose robots.txt rules apply.
        log: the client's logger, for its retry lines.
    """

    def __init__(self, throttler: Throttler, *, retries: int = 3, robots_txt: bool | RobotsGuard = False,
                 robots_user_agent: str | None = None, log: logging.Logger = logger) -> None:
        super().__init__(throttler, retries=retries, robots_txt=robots_txt,
                         robots_user_agent=robots_user_agent, log=log)
        self.throttler = throttler
        self._checked: asyncio.Future[None] | None = None
        self._answered = False

    async def ready(self) -> None:
        """Return once the store answered (asked at first use; again after a failure).

        Raises:
            StoreUnreachable: the store refused the connection or the
                password, or was silent past the connect timeout.
        """
        if self._answered:
            return
        checked = self._checked
        if checked is None or checked.done():  # the first request, or the last check failed
            checked = self._checked = asyncio.ensure_future(store_checked(self.throttler.store))
        await asyncio.shield(checked)
        self._answered = True

    async def send(self, method: str, url: str, scopes: object, replayable: bool,
                   send: Callable[[], Awaitable[R]], discard: Callable[[R], Awaitable[None]], *,
                   answer: Callable[[R], tuple[int, Mapping[str, str], Callable[[], Awaitable[bytes]]]],
                   fetch_robots: Callable[[], FetchRobots] | None = None,
                   user_agent: str | None = None) -> tuple[R, int]:
        """Send a request through the throttler: store check, robots.txt, retries, last look, soft blocks.

        Args:
            answer: a response's status, headers, and a way to read its body
                (only called for when a soft-block rule needs it).

        Returns:
            The response and the number of sends it took.
        """
        await self.ready()
        robots = self.robots
        if robots is not None and fetch_robots is not None:
            await robots.check(url, fetch_robots(), user_agent)

        async def judge(response: R) -> bool:
            status, headers, read = answer(response)
            body = None
            if self.wants_body(status, headers):
                body = b""
                try:
                    body = await read()
                except Exception as exc:  # the caller meets it when it reads; the head alone is judged
                    self.log.debug("%s %s: the body could not be read for the soft-block rules (%r)",
                                   method, url, exc)
            return self.verdict(method, url, status, headers, body)

        return await send_async(self.throttler, method, url, scopes, self.attempts(replayable, method, url),
                                send, discard, self.log, look=self.look, judge=judge)

    async def before_write(self) -> None:
        """The last look (see :func:`last_look`), on this core's throttler's clock."""
        await last_look(self.throttler.clock)

    async def aclose(self) -> None:
        """Stop the robots.txt fetches still under way."""
        if self.robots is not None:
            await self.robots.aclose()


class SyncCore(_Common):
    """The core of a blocking client, on a :class:`~crawlpace.SyncThrottler`; safe from many threads."""

    def __init__(self, throttler: SyncThrottler, *, retries: int = 3, robots_txt: bool = False,
                 robots_user_agent: str | None = None, log: logging.Logger = logger) -> None:
        # The guard lives on the throttler's loop, like the throttler it waits for.
        super().__init__(throttler.throttler, retries=retries, robots_txt=robots_txt,
                         robots_user_agent=robots_user_agent, log=log)
        self.throttler = throttler
        self._checked = False
        self._lock = threading.Lock()

    def ready(self) -> None:
        """Return once the store answered (asked at first use, by one thread; again after a failure).

        Raises:
            StoreUnreachable: the store refused the connection or the
                password, or was silent past the connect timeout.
        """
        if self._checked:
            return
        with self._lock:
            if not self._checked:
                self.throttler.call(lambda throttler: store_checked(throttler.store))
                self._checked = True

    def send(self, method: str, url: str, scopes: object, replayable: bool, send: Callable[[], R],
             discard: Callable[[R], None], *,
             answer: Callable[[R], tuple[int, Mapping[str, str], Callable[[], bytes]]],
             fetch_robots: Callable[[], FetchRobots] | None = None,
             user_agent: str | None = None) -> tuple[R, int]:
        """Send a request through the throttler, blocking: the same steps as :meth:`AsyncCore.send`.

        Returns:
            The response and the number of sends it took.
        """
        self.ready()
        robots = self.robots
        if robots is not None and fetch_robots is not None:
            fetch = fetch_robots()
            self.throttler.call(lambda _throttler: robots.check(url, fetch, user_agent))

        def judge(response: R) -> bool:
            status, headers, read = answer(response)
            body = None
            if self.wants_body(status, headers):
                body = b""
                try:
                    body = read()
                except Exception as exc:  # the caller meets it when it reads; the head alone is judged
                    self.log.debug("%s %s: the body could not be read for the soft-block rules (%r)",
                                   method, url, exc)
            return self.verdict(method, url, status, headers, body)

        return send_sync(self.throttler, method, url, scopes, self.attempts(replayable, method, url), send,
                         discard, self.log, look=self.look, judge=judge)

    def close(self) -> None:
        """Stop the robots.txt fetches still under way."""
        robots = self.robots
        if robots is not None and not self.throttler.closed:
            self.throttler.call(lambda _throttler: robots.aclose())
