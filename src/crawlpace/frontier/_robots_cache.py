"""Which robots.txt files a crawl knows, is fetching, or has yet to fetch.

One entry per origin (``scheme://host:port``, the unit robots.txt governs).
The cache only keeps state and time: the scheduler asks it before each page,
and the crawl job, which does the fetching, tells it what came back. Rules
expire after ``ttl`` seconds, so a long crawl picks up a changed file, and
rules that stood in for an unreachable file expire sooner (``retry_ttl``) so
the real file is tried again. The cache holds at most ``limit`` origins: past
that, expired rules go first, then the least recently used ones (an origin
asked about again later has its file fetched again); files being fetched stay.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from .._robots import RobotsRules

__all__ = ["DEFAULT_LIMIT", "DEFAULT_RETRY_TTL", "DEFAULT_TTL", "RobotsCache"]

_log = logging.getLogger(__name__)

#: Seconds a fetched robots.txt is trusted, as the large crawlers do.
DEFAULT_TTL = 24 * 3600.0
#: Seconds before an origin whose robots.txt could not be fetched is tried again.
DEFAULT_RETRY_TTL = 600.0
#: Origins whose rules are kept at most.
DEFAULT_LIMIT = 10_000

State = Literal["known", "pending", "unknown"]


@dataclass(slots=True)
class _Entry:
    rules: RobotsRules | None
    expires: float


class RobotsCache:
    """robots.txt rules per origin, with their expiry.

    Args:
        user_agent: the crawler's user agent, whose rules apply.
        ttl: seconds fetched rules are kept.
        retry_ttl: seconds the allow-all stand-in for an unreachable file is kept.
        limit: origins kept at most (a broad crawl meets millions).
    """

    def __init__(self, user_agent: str, *, ttl: float = DEFAULT_TTL,
                 retry_ttl: float = DEFAULT_RETRY_TTL, limit: int = DEFAULT_LIMIT) -> None:
        self.user_agent = user_agent
        self.ttl = ttl
        self.retry_ttl = retry_ttl
        self.limit = max(1, limit)
        self.evicted = 0
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def state(self, origin: str, now: float) -> State:
        """``"known"`` (rules in force), ``"pending"`` (being fetched) or ``"unknown"``."""
        entry = self._entries.get(origin)
        if entry is None:
            return "unknown"
        if entry.rules is None:
            return "pending"
        if now >= entry.expires:
            del self._entries[origin]
            return "unknown"
        self._entries.move_to_end(origin)
        return "known"

    def start(self, origin: str, now: float) -> None:
        """Record that ``origin``'s robots.txt is being fetched."""
        self._entries[origin] = _Entry(None, now)
        self._entries.move_to_end(origin)
        self._bound(now)

    def learn(self, origin: str, rules: RobotsRules, now: float, *, temporary: bool = False) -> None:
        """Record ``origin``'s rules; ``temporary`` ones (a stand-in) expire after ``retry_ttl``."""
        self._entries[origin] = _Entry(rules, now + (self.retry_ttl if temporary else self.ttl))
        self._entries.move_to_end(origin)
        self._bound(now)

    def _bound(self, now: float) -> None:
        """Keep at most ``limit`` origins: expired rules first, then the least recently used."""
        entries = self._entries
        if len(entries) <= self.limit:
            return
        for origin in [o for o, e in entries.items() if e.rules is not None and now >= e.expires]:
            del entries[origin]
            self.evicted += 1
        for origin in list(entries):
            if len(entries) <= self.limit * 0.9:  # room for a tenth more before the next sweep
                break
            if entries[origin].rules is not None:  # a file being fetched stays
                del entries[origin]
                self.evicted += 1

    def failed(self, origin: str, now: float) -> None:
        """Give up fetching ``origin``'s robots.txt for now: allow everything until ``retry_ttl`` passes."""
        _log.warning("robots.txt of %s could not be fetched: allowing everything for %g s", origin,
                     self.retry_ttl)
        self.learn(origin, RobotsRules.allow_all(self.user_agent, "unreachable"), now, temporary=True)

    def rules(self, origin: str) -> RobotsRules | None:
        """The rules in force for ``origin``, if known."""
        entry = self._entries.get(origin)
        return None if entry is None else entry.rules

    def allowed(self, origin: str, url: str) -> bool:
        """Whether ``url`` of ``origin`` may be fetched; True while the rules are not known."""
        rules = self.rules(origin)
        return True if rules is None else rules.allowed(url)

    def __len__(self) -> int:
        return len(self._entries)
