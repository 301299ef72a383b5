"""Which robots.txt files a crawl knows, is fetching, or has yet to fetch.

One entry per origin (``scheme://host:port``, the unit robots.txt governs).
The cache only keeps state and time: the scheduler asks it before each page,
and the crawl job, which does the fetching, tells it what came back
(:meth:`RobotsCache.settle`). Rules expire after ``ttl`` seconds, so a long
crawl picks up a changed file.

A file that cannot be reached (5xx, 429, network error) forbids everything,
per RFC 9309, unless an earlier copy of it was fetched: then that copy stays
in force. Either way the stand-in expires after ``retry_ttl`` seconds, doubled
for each further failure in a row up to ``ttl``, so a site that stays down is
asked less and less often.

The cache holds at most ``limit`` origins: past that, expired rules go first,
then the least recently used ones (an origin asked about again later has its
file fetched again); files being fetched stay.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from ._robots import RobotsRules, robots_verdict

__all__ = ["DEFAULT_LIMIT", "DEFAULT_RETRY_TTL", "DEFAULT_TTL", "RobotsCache", "Settled"]

_log = logging.getLogger(__name__)

#: Seconds a fetched robots.txt is trusted, as the large crawlers do.
DEFAULT_TTL = 24 * 3600.0
#: Seconds before an origin whose robots.txt could not be fetched is first tried again.
DEFAULT_RETRY_TTL = 600.0
#: Origins whose rules are kept at most.
DEFAULT_LIMIT = 10_000

State = Literal["known", "pending", "unknown"]


@dataclass(slots=True)
class _Entry:
    rules: RobotsRules | None  # None while a fetch is under way
    expires: float
    last_good: RobotsRules | None = None  # the last file actually fetched, kept through outages
    failures: int = 0  # unreachable fetches in a row


@dataclass(frozen=True, slots=True)
class Settled:
    """What one robots.txt answer changed.

    Attributes:
        rules: the rules now in force for the origin.
        crawl_delay_changed: whether the Crawl-Delay in force differs from the
            one before (so the throttler must be told, ``None`` included).
    """

    rules: RobotsRules
    crawl_delay_changed: bool


class RobotsCache:
    """robots.txt rules per origin, with their expiry.

    Args:
        user_agent: the crawler's user agent, whose rules apply.
        ttl: seconds fetched rules are kept.
        retry_ttl: seconds the stand-in for an unreachable file is first kept.
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
        self._delays: dict[str, float] = {}  # origin -> the Crawl-Delay last announced

    def state(self, origin: str, now: float) -> State:
        """``"known"`` (rules in force), ``"pending"`` (being fetched) or ``"unknown"``."""
        entry = self._entries.get(origin)
        if entry is None:
            return "unknown"
        if entry.rules is None:
            return "pending"
        if now >= entry.expires:
            return "unknown"  # kept: the last good copy and the failure count still matter
        self._entries.move_to_end(origin)
        return "known"

    def start(self, origin: str, now: float) -> None:
        """Record that ``origin``'s robots.txt is being fetched (what was known is kept aside)."""
        entry = self._entries.get(origin)
        if entry is None:
            self._entries[origin] = _Entry(None, now)
        else:
            entry.rules, entry.expires = None, now
        self._entries.move_to_end(origin)
        self._bound(now)

    def learn(self, origin: str, rules: RobotsRules, now: float) -> None:
        """Record rules fetched for ``origin``; they are trusted for ``ttl`` seconds."""
        self._entries[origin] = _Entry(rules, now + self.ttl, rules if not rules.unreachable else None)
        self._entries.move_to_end(origin)
        self._bound(now)

    def _bound(self, now: float) -> None:
        """Keep at most ``limit`` origins: expired rules first, then the least recently used."""
        entries = self._entries
        if len(entries) <= self.limit:
            return
        for origin in [o for o, e in entries.items() if e.rules is not None and now >= e.expires]:
            self._forget(origin)
        for origin in list(entries):
            if len(entries) <= self.limit * 0.9:  # room for a tenth more before the next sweep
                break
            if entries[origin].rules is not None:  # a file being fetched stays
                self._forget(origin)

    def _forget(self, origin: str) -> None:
        del self._entries[origin]
        self._delays.pop(origin, None)
        self.evicted += 1

    def failed(self, origin: str, now: float, why: str = "unreachable") -> RobotsRules:
        """Record that ``origin``'s robots.txt could not be reached; returns the rules now in force.

        The last fetched copy stays in force if there is one; otherwise every
        URL of the origin is forbidden. Either way the origin is asked again
        after ``retry_ttl`` seconds, doubled for each failure in a row.
        """
        entry = self._entries.get(origin)
        if entry is None:
            entry = self._entries[origin] = _Entry(None, now)
        entry.failures += 1
        wait = min(self.retry_ttl * 2.0 ** (entry.failures - 1), self.ttl)
        if entry.last_good is not None:
            entry.rules = entry.last_good
            _log.warning("robots.txt of %s could not be fetched (%s): keeping the copy fetched before, "
                         "asking again in %g s", origin, why, wait)
        else:
            entry.rules = RobotsRules.disallow_all(self.user_agent, why)
            _log.warning("robots.txt of %s could not be fetched (%s): nothing of it is fetched for now, "
                         "asking again in %g s", origin, why, wait)
        entry.expires = now + wait
        return entry.rules

    def settle(self, origin: str, status: int | None, body: bytes, now: float, *,
               why: str = "") -> Settled:
        """Apply the final answer to ``origin``'s robots.txt fetch (RFC 9309's table).

        Args:
            origin: whose robots.txt it was.
            status: the HTTP status, None when no answer came.
            body: the body (its first bytes suffice, see :data:`MAX_ROBOTS_BYTES`).
            now: the time, for expiry.
            why: what went wrong when there was no answer, for the log line.

        Returns:
            The rules now in force, and whether the Crawl-Delay changed.
        """
        verdict = robots_verdict(status)
        if verdict == "rules":
            rules = RobotsRules.parse(body, self.user_agent, origin=f"{origin}/robots.txt")
            self.learn(origin, rules, now)
        elif verdict == "allow_all":
            rules = RobotsRules.allow_all(self.user_agent, f"status {status}")
            self.learn(origin, rules, now)
        else:
            why = why or (f"status {status}" if status is not None else "no answer")
            rules = self.failed(origin, now, why)
        before = self._delays.get(origin)
        if rules.crawl_delay is None:
            self._delays.pop(origin, None)
        else:
            self._delays[origin] = rules.crawl_delay
        return Settled(rules, rules.crawl_delay != before)

    def rules(self, origin: str) -> RobotsRules | None:
        """The rules in force for ``origin``, if known."""
        entry = self._entries.get(origin)
        return None if entry is None else entry.rules

    def allowed(self, origin: str, url: str) -> bool:
        """Whether ``url`` of ``origin`` may be fetched; True while the rules are not known."""
        rules = self.rules(origin)
        return True if rules is None else rules.allowed(url)

    def refusal(self, origin: str) -> tuple[bool, str]:
        """Why ``origin``'s URLs are refused: (for good?, the reason in words).

        A refusal by the file itself is final; one because the file could not
        be reached is not (a resumed crawl asks again).
        """
        rules = self.rules(origin)
        if rules is not None and rules.unreachable:
            return False, (f"robots.txt of {origin} could not be fetched ({rules.note}); "
                           "RFC 9309 forbids crawling the site until it can")
        return True, f"robots.txt of {origin} forbids it"

    def __len__(self) -> int:
        return len(self._entries)
