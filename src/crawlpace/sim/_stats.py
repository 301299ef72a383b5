"""What one simulated site saw of its visitors, measured on the server side.

Nothing here reads a clock: every event comes with the time it happened, in
whatever clock the site runs on, so a test can script a sequence of arrivals
and know the exact figures that must come out.

The measures are chosen to judge a crawler's politeness from the site's point
of view: how many requests it sent, how many got through, how hard it pushed
at its peak (requests in flight at once, and requests within any one second),
how often it was turned away (429 and 503) and how often it broke a rule the
site had announced (``violations``, counted by the site's profile). When the
profile knows how much the site can serve (``capacity``, in successful
requests per second), goodput over capacity says how much of that the crawler
used: near 1 is fast and polite, far below 1 is needlessly slow.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from typing import Any

__all__ = ["WINDOW", "SiteStats"]

#: The length, in seconds, of the sliding window behind ``peak_per_second``.
WINDOW = 1.0


class SiteStats:
    """Counters and peaks for one site.

    Call :meth:`arrive` when a request comes in and :meth:`depart` when its
    response is settled, with the times they happened. Times are expected not
    to go backwards; one that does is treated as the latest time seen.

    Args:
        capacity: the successful requests per second the site can serve at
            best, when the profile defines it; None otherwise.

    Attributes:
        capacity: as given.
        requests: requests that arrived.
        inflight: requests arrived and not yet departed.
        peak_inflight: the most requests ever in flight at once.
        peak_per_second: the most arrivals within any window of one second,
            computed exactly over every window, not per calendar second.
        first: arrival time of the first request, None before any.
        last: arrival time of the latest request, None before any.
        statuses: responses per status code.
        aborted: requests that ended without any response (cancelled).
        violations: broken rules per kind (``"crawl_delay"``, ``"retry_after"``...).
    """

    def __init__(self, capacity: float | None = None) -> None:
        if capacity is not None and not (math.isfinite(capacity) and capacity >= 0):
            raise ValueError(f"capacity must be a finite number >= 0 or None, got {capacity!r}")
        self.capacity = capacity
        self.requests = 0
        self.inflight = 0
        self.peak_inflight = 0
        self.peak_per_second = 0
        self.first: float | None = None
        self.last: float | None = None
        self.statuses: Counter[int] = Counter()
        self.aborted = 0
        self.violations: Counter[str] = Counter()
        self._recent: deque[float] = deque()

    def arrive(self, now: float) -> None:
        """Record a request arriving at ``now``."""
        if self.last is not None and now < self.last:
            now = self.last
        if self.first is None:
            self.first = now
        self.last = now
        self.requests += 1
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)
        # The busiest one-second window always ends on an arrival, so checking
        # the window (now - 1 s, now] at each arrival finds the exact maximum.
        recent = self._recent
        recent.append(now)
        while recent[0] <= now - WINDOW:
            recent.popleft()
        self.peak_per_second = max(self.peak_per_second, len(recent))

    def depart(self, now: float, status: int | None) -> None:
        """Record that a request was answered with ``status`` (None: it never was).

        ``now`` is accepted for symmetry and future measures; nothing uses it yet.
        """
        self.inflight = max(self.inflight - 1, 0)
        if status is None:
            self.aborted += 1
        else:
            self.statuses[status] += 1

    def violation(self, kind: str, count: int = 1) -> None:
        """Count ``count`` breaches of the rule called ``kind``."""
        self.violations[kind] += count

    @property
    def ok(self) -> int:
        """Responses with status 200."""
        return self.statuses[200]

    @property
    def throttled(self) -> int:
        """Responses with status 429 or 503: the site turned the request away."""
        return self.statuses[429] + self.statuses[503]

    @property
    def active(self) -> float:
        """Seconds from the first arrival to the latest; 0 before two requests."""
        if self.first is None or self.last is None:
            return 0.0
        return self.last - self.first

    @property
    def goodput(self) -> float | None:
        """200 responses per second of the active period; None while it is empty.

        Over n evenly spaced successful requests this is ``n / (n - 1)`` times
        their rate, since the period runs from the first arrival to the last.
        """
        active = self.active
        return self.ok / active if active > 0 else None

    @property
    def goodput_ratio(self) -> float | None:
        """Goodput over capacity; None without a positive capacity or a goodput."""
        goodput = self.goodput
        if goodput is None or not self.capacity:
            return None
        return goodput / self.capacity

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict (string keys, numbers, None)."""
        return {
            "requests": self.requests,
            "ok": self.ok,
            "throttled": self.throttled,
            "aborted": self.aborted,
            "statuses": {str(status): count for status, count in sorted(self.statuses.items())},
            "violations": sum(self.violations.values()),
            "violation_kinds": dict(sorted(self.violations.items())),
            "inflight": self.inflight,
            "peak_inflight": self.peak_inflight,
            "peak_per_second": self.peak_per_second,
            "first": self.first,
            "last": self.last,
            "active": self.active,
            "goodput": self.goodput,
            "capacity": self.capacity,
            "goodput_ratio": self.goodput_ratio,
        }

    def __repr__(self) -> str:
        return (f"<SiteStats requests={self.requests} ok={self.ok} throttled={self.throttled} "
                f"violations={sum(self.violations.values())}>")
