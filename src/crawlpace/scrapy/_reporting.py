"""What the add-on tells the crawl's stats collector and log about its scopes.

Three things, all read-only towards the throttler: counters per released
permit (backoffs by cause, holds), one log line per limit change of a scope
under ``THROTTLING_DEBUG``, and the busiest scopes' final limits under
``throttling/scope/<name>/...``. The starting point of the debug lines is
what a fresh scope starts at, asked from the same policy the store builds
(:class:`~crawlpace.stores.PolicyFactory`), never worked out again here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from .._bounded import remember
from .._settings._config import Settings
from .._throttle._throttler import Throttler
from ..stores import PolicyFactory

__all__ = ["NoStats", "ScopeReport", "StatsLike"]

logger = logging.getLogger("crawlpace.scrapy")


class StatsLike(Protocol):
    """The part of Scrapy's stats collector the add-on uses."""

    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None: ...

    def set_value(self, key: str, value: Any) -> None: ...

    def max_value(self, key: str, value: Any) -> None: ...


class NoStats:
    """A stats collector that keeps nothing (before the crawler has one)."""

    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None:
        pass

    def set_value(self, key: str, value: Any) -> None:
        pass

    def max_value(self, key: str, value: Any) -> None:
        pass


def _limits_of(snapshot: Any) -> tuple[object, ...]:
    return (snapshot.concurrency, round(snapshot.delay, 3), snapshot.backoff, snapshot.crawl_delay,
            snapshot.breaker)


class ScopeReport:
    """Counters, debug lines and final figures of the crawl's scopes.

    Args:
        settings: the crawl's throttling settings.
        stats: returns the stats collector to write to (it may change once
            the crawler has its own).
        stats_scopes: how many of the busiest scopes :meth:`publish` writes.
    """

    def __init__(self, settings: Settings, stats: Callable[[], StatsLike], *, stats_scopes: int) -> None:
        self._settings = settings
        self._stats = stats
        self._stats_scopes = stats_scopes
        self._last_limits: dict[str, tuple[object, ...]] = {}
        self._factory: PolicyFactory | None = None

    def count_release(self, outcome: Any, *, soft_block: bool = False) -> None:
        """Count what a released permit's outcome did to its scopes.

        A backoff is counted by its cause: ``status/429``, ``exception/TimeoutError``,
        or ``soft_block`` for a page a block rule recognised (a challenge page
        answered with 200 is pushback, not a status worth naming).
        """
        if outcome is None:
            return
        stats = self._stats()
        if any(signal.backoff for signal in outcome.feedback):
            stats.inc_value("throttling/backoffs")
            if soft_block:
                cause = "soft_block"
            else:
                cause = f"status/{outcome.status}" if outcome.error is None else f"exception/{outcome.error}"
            stats.inc_value(f"throttling/backoffs/{cause}")
        if any(signal.hold for signal in outcome.feedback):
            stats.inc_value("throttling/holds")

    def note_refused(self, reason: str) -> None:
        """Count a request that was refused for good."""
        stats = self._stats()
        stats.inc_value("throttling/refused")
        stats.inc_value(f"throttling/refused/{reason}")

    async def log_adjustments(self, throttler: Throttler, scopes: tuple[str, ...], outcome: Any) -> None:
        """One log line for each scope whose limits changed (``THROTTLING_DEBUG``)."""
        for scope in scopes:
            snapshot = await throttler.scope_stats(scope)
            if snapshot is None:
                continue
            now = _limits_of(snapshot)
            before = self._last_limits.get(scope)
            if before is None:
                before = self.starting_limits(scope)
            remember(self._last_limits, scope, now)  # bounded: a broad crawl meets millions of scopes
            if before == now:
                continue
            if outcome is None:
                cause = "a request released unsent"
            elif outcome.error is not None:
                cause = f"exception {outcome.error}"
            else:
                latency = "" if outcome.latency is None else f", latency {outcome.latency:.3f}s"
                cause = f"status {outcome.status}{latency}"
            logger.info("scope %s: delay %.3fs -> %.3fs, concurrency %s -> %s, backoff level %s -> %s, "
                        "crawl-delay %s -> %s, breaker %s -> %s (after %s)", scope, before[1], now[1],
                        before[0], now[0], before[2], now[2], before[3], now[3], before[4], now[4], cause)

    def starting_limits(self, scope: str) -> tuple[object, ...]:
        """What a fresh ``scope`` starts at, as the store builds it (AutoThrottle's start included).

        In the order of the debug lines: concurrency, delay, backoff level,
        Crawl-Delay, breaker state.
        """
        factory = self._factory
        if factory is None:
            factory = self._factory = PolicyFactory(self._settings)
        limits = factory.new(scope).limits
        return (limits.concurrency, round(limits.delay, 3), 0, None, "closed")

    async def publish(self, throttler: Throttler) -> None:
        """Write each busy scope's limits into the stats (``throttling/scope/<name>/...``)."""
        limit = self._stats_scopes
        if limit == 0:
            return
        scopes = await throttler.stats()
        busiest = sorted(scopes.values(), key=lambda snap: snap.sends, reverse=True)[:limit]
        stats = self._stats()
        for snap in busiest:
            base = f"throttling/scope/{snap.scope}"
            stats.set_value(f"{base}/delay", round(snap.delay, 3))
            stats.set_value(f"{base}/delay_per_slot", round(snap.delay_per_slot, 3))
            stats.set_value(f"{base}/concurrency", snap.concurrency)
            stats.set_value(f"{base}/backoff", snap.backoff)
            stats.set_value(f"{base}/sends", snap.sends)
            if snap.breaker != "closed":
                stats.set_value(f"{base}/breaker", snap.breaker)
