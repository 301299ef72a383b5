"""robots.txt's Crawl-Delay in the add-on: which scopes it applies to, and applying it.

Which URLs robots.txt allows stays the business of Scrapy's own robots.txt
middleware; this room only reads the Crawl-Delay (from the raw response as
it passes, or from Scrapy 2.18's ``robots_parsed`` signal), gives it to the
scopes the robots.txt request ran under, and marks requests admitted before
it was known so that they are admitted again under it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from .._bounded import remember
from .._exceptions import ScopeError
from .._robotstxt._robots import crawl_delay, crawl_delay_scopes, robots_verdict
from .._scoping._scopes import host_scope
from .._throttle._throttler import Throttler
from ._reporting import StatsLike
from ._settings import AddonConfig
from ._tickets import Ticket

__all__ = ["CrawlDelays"]

logger = logging.getLogger("crawlpace.scrapy")


class CrawlDelays:
    """The Crawl-Delays in force for one crawl.

    Args:
        config: the add-on's checked settings.
        throttler: returns the crawl's throttler (created on first use).
        stats: returns the stats collector.
        parked: the tickets of requests admitted but not yet sent.
    """

    def __init__(self, config: AddonConfig, throttler: Callable[[], Throttler],
                 stats: Callable[[], StatsLike], parked: Iterable[Ticket]) -> None:
        self._config = config
        self._throttler = throttler
        self._stats = stats
        self._parked = parked
        self._robots_scopes: dict[str, tuple[str, ...]] = {}
        self._delayed: set[str] = set()  # scopes under a Crawl-Delay, to clear when it goes
        # The Crawl-Delay last applied to each scope: Scrapy 2.18+ hands the same robots.txt over twice
        # (the raw response, then its parser's signal), and applying it again would only repeat its warnings.
        self._applied: dict[str, float | None] = {}

    def remember(self, url: str, scopes: tuple[str, ...]) -> None:
        """Note which scopes a robots.txt fetch ran under, for its Crawl-Delay."""
        netloc = urlsplit(url).netloc
        remember(self._robots_scopes, netloc, scopes)  # bounded, like every per-host memo

    def targets(self, url: str, scopes: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """The scopes a robots.txt of ``url``'s host applies its Crawl-Delay to.

        The host's own scope when the robots.txt request had it (the usual
        case); otherwise every scope the robots.txt request was throttled
        under (a manager that groups hosts, say by registrable domain).
        """
        if scopes is None:
            scopes = self._robots_scopes.get(urlsplit(url).netloc)
        try:
            host: str | None = host_scope(url)
        except ScopeError:
            host = None
        return crawl_delay_scopes(host, scopes or ())

    async def apply(self, scopes: tuple[str, ...], delay: float | None) -> None:
        """Give ``scopes`` the Crawl-Delay of their robots.txt (``None``: it has none, clear any)."""
        if not self._config.robots:
            return
        if delay is None:
            scopes = tuple(scope for scope in scopes if scope in self._delayed)
        applied = self._applied
        scopes = tuple(scope for scope in scopes if scope not in applied or applied[scope] != delay)
        if not scopes:
            return
        throttler = self._throttler()
        stats = self._stats()
        for scope in scopes:
            await throttler.set_crawl_delay(scope, delay)
            remember(self._applied, scope, delay)  # bounded, like every per-host memo
            key = f"throttling/crawl_delay/{scope}"
            if delay is None:
                self._delayed.discard(scope)
                everything = getattr(stats, "get_stats", None)
                if callable(everything):
                    everything().pop(key, None)
            else:
                self._delayed.add(scope)
                stats.set_value(key, delay)
        # Requests admitted before the Crawl-Delay was known (most are waiting
        # for this very robots.txt) must be admitted again under it.
        for ticket in self._parked:
            if any(scope in scopes for scope in ticket.scopes):
                ticket.outdated = True
        logger.debug("Crawl-Delay %s applied to %s", "cleared" if delay is None else f"{delay:g}s",
                     ", ".join(scopes))

    async def robots_response(self, request: Any, response: Any, scopes: tuple[str, ...]) -> None:
        """Read the Crawl-Delay of a robots.txt response as it passes (any Scrapy version).

        Per RFC 9309: a 2xx body sets the Crawl-Delay (or clears one it no
        longer has), a 4xx means no file (any Crawl-Delay is cleared), and a
        5xx, a 429 or a 1xx leaves the one in force as it is.
        """
        self.remember(request.url, scopes)
        status = getattr(response, "status", None)
        verdict = robots_verdict(status if isinstance(status, int) else None)
        if verdict == "unreachable":
            logger.warning("robots.txt of %s answered %s: the Crawl-Delay in force (if any) is kept",
                           request.url, status)
            return
        delay = None
        if verdict == "rules":
            body = getattr(response, "body", b"")
            delay = crawl_delay(body if isinstance(body, bytes) else b"", self._config.robots_user_agent)
        await self.apply(self.targets(request.url, scopes), delay)

    def __repr__(self) -> str:
        return f"<CrawlDelays scopes={len(self._delayed)}>"
