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

from crawlpace.sim._limits import RequestRate

__all__ = ["BIN", "MAX_BINS", "WINDOW", "WINDOW_KINDS", "SiteStats"]

#: The length, in seconds, of the sliding window behind ``peak_per_second``.
WINDOW = 1.0
#: How a site's own counting window runs (see :meth:`SiteStats.watch_window`).
WINDOW_KINDS = ("sliding", "clock", "chained", "started", "counter")
#: The width, in seconds, of one bin of the timeline kept for plots.
BIN = 1.0
#: The most limited arrivals kept waiting for their answer (see :meth:`SiteStats.answered`).
_PENDING = 100_000
#: The most timeline bins kept (a week of seconds); later events go in the last bin.
MAX_BINS = 7 * 86400


def _bin(bins: list[int], index: int) -> None:
    index = min(index, MAX_BINS - 1)
    if index >= len(bins):
        bins.extend([0] * (index + 1 - len(bins)))
    bins[index] += 1


class SiteStats:
    """Counters and peaks for one site.

    Call :meth:`arrive` when a request comes in and :meth:`depart` when its
    response is settled, with the times they happened. Times are expected not
    to go backwards; one that does is treated as the latest time seen.

    Alongside the totals it keeps a timeline in bins of :data:`BIN` seconds
    from the first arrival: arrivals, 200s and refusals (429 and 503) per
    bin, and every change of capacity, which is what a plot of the run needs.

    Args:
        capacity: the successful requests per second the site can serve at
            best, when the profile defines it; None otherwise.

    Attributes:
        capacity: the capacity averaged over the active period, weighted by
            time (see :meth:`set_capacity`); as given while it never changed.
        requests: requests that arrived.
        inflight: requests arrived and not yet departed.
        peak_inflight: the most requests ever in flight at once.
        peak_per_second: the most arrivals within any window of one second,
            computed exactly over every window, not per calendar second.
        peak_limited_per_second: the same for the arrivals the site's limit meets
            (:meth:`limited`: robots.txt aside, which no limiter of the farm counts),
            the figure a site's per-second limit is judged by.
        window: the site's own counting window, ``(seconds, kind)``, when its
            limit is a count per window (see :meth:`watch_window`); None otherwise.
        peak_per_window: the most limited arrivals (robots.txt aside) within one
            such window, counted as the site counts: in any span of its length
            (``sliding``), per window aligned to the clock (``clock``) or per
            window following the first limited arrival's (``chained``); for a
            request-rate counter (``counter``), its highest reading, rounded up.
        peak_per_window_without_lockout: the same count with the refused requests
            of the first lock-out left out: from the first limited request refused (a
            429 or 503) to the first accepted (a 200) that arrived after it. None
            until that lock-out has ended. A crawler that does not know the window
            cannot keep that lock-out's probes within the limit (a limiter that counts
            refusals counts each one); everything else it sent, before and after, is
            counted as the site counts it.
        first: arrival time of the first request, None before any.
        last: arrival time of the latest request, None before any.
        statuses: responses per status code.
        aborted: requests that ended without any response (cancelled, or
            the connection was reset on purpose).
        resets: of those, connections the site reset on purpose.
        violations: broken rules per kind (``"crawl_delay"``, ``"retry_after"``...).
    """

    def __init__(self, capacity: float | None = None) -> None:
        if capacity is not None and not (math.isfinite(capacity) and capacity >= 0):
            raise ValueError(f"capacity must be a finite number >= 0 or None, got {capacity!r}")
        self._capacities: list[tuple[float | None, float | None]] = [(None, capacity)]
        self.requests = 0
        self.inflight = 0
        self.peak_inflight = 0
        self.peak_per_second = 0
        self.first: float | None = None
        self.last: float | None = None
        #: When the latest page (a path) got its first 200, and the paths served one: a client that sends a
        #: hung page again is done with it at the first 200, whenever the hung send ends.
        self.last_page: float | None = None
        self._served: set[str] = set()
        self.statuses: Counter[int] = Counter()
        self.aborted = 0
        #: 200s that were challenge pages, not the content (counted as refusals).
        self.challenged = 0
        #: Paths whose latest answer was a challenge page: pages the crawler has not got, whatever
        #: its own record says (a crawler that takes the page for content counts them as done).
        self.challenged_paths: set[str] = set()
        self.resets = 0
        self.violations: Counter[str] = Counter()
        self._recent: deque[float] = deque()
        self.peak_limited_per_second = 0
        self._limited_recent: deque[float] = deque()
        self.window: tuple[float, str] | None = None
        self.peak_per_window = 0
        self._window_times: deque[float] = deque()
        self._window_origin: float | None = None
        self._window_index: int | None = None
        self._counter: RequestRate | None = None  # a counter site's shadow, read the site's way
        #: The same books fed every limited arrival but the first lock-out's refusals, in arrival
        #: order as each is answered; ``_lockout``: 0 before the first refusal, 1 in that lock-out,
        #: 2 once it ended. ``_pending``: limited arrivals, ``[time, status]``, status None until told.
        self._without: SiteStats | None = None
        self._is_without = False
        self._lockout = 0
        self._pending: deque[list[float | int | None]] = deque(maxlen=_PENDING)
        self._arrivals: list[int] = []
        self._ok: list[int] = []
        self._refused: list[int] = []

    @property
    def capacity(self) -> float | None:
        """The capacity over the active period, weighted by time; None when undefined."""
        changes = self._capacities
        if len(changes) == 1 or self.first is None or self.last is None or self.last <= self.first:
            return changes[-1][1]
        total = 0.0
        for index, (start, value) in enumerate(changes):
            if value is None:
                return None
            begin = self.first if start is None else max(start, self.first)
            end = changes[index + 1][0] if index + 1 < len(changes) else self.last
            assert end is not None
            total += value * max(min(end, self.last) - begin, 0.0)
        return total / (self.last - self.first)

    def set_capacity(self, now: float, capacity: float | None) -> None:
        """Record that from ``now`` on the site can serve ``capacity`` per second."""
        if capacity is not None and not (math.isfinite(capacity) and capacity >= 0):
            raise ValueError(f"capacity must be a finite number >= 0 or None, got {capacity!r}")
        if capacity != self._capacities[-1][1]:
            self._capacities.append((now, capacity))

    def _index(self, now: float) -> int:
        return 0 if self.first is None else max(int((now - self.first) / BIN), 0)

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
        while recent[0] + WINDOW <= now:  # not "<= now - WINDOW": keep the rounding of [t, t + 1)
            recent.popleft()
        self.peak_per_second = max(self.peak_per_second, len(recent))
        _bin(self._arrivals, self._index(now))

    def watch_window(self, seconds: float, kind: str, phase: float = 0.0) -> None:
        """Count limited arrivals per the site's own window of ``seconds``, of ``kind`` ``"sliding"``
        (any span), ``"clock"`` (aligned to the clock), ``"chained"`` (from the first limited arrival),
        ``"started"`` (each opened by the first limited arrival after the last one ended) or
        ``"counter"``: HAProxy's request-rate counter over periods of ``seconds``, the first of them
        ``phase`` gone at the first limited arrival (as the site's own counter runs), read as
        ``current + previous * (time left / period)`` (see :class:`~crawlpace.sim._limits.RequestRate`).
        A client within such a counter's rule may send more than its limit in one span of a period
        (the previous period's weight drains as it goes), so its peak is the reading, not a count."""
        if kind not in WINDOW_KINDS:
            raise ValueError(f"window kind must be one of {', '.join(WINDOW_KINDS)}, got {kind!r}")
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"window seconds must be a finite number > 0, got {seconds!r}")
        self.window = (float(seconds), kind)
        self._counter = RequestRate(1, seconds, phase) if kind == "counter" else None
        if not self._is_without:
            without = SiteStats()
            without._is_without = True
            without.watch_window(seconds, kind, phase)
            self._without = without

    def limited(self, now: float) -> None:
        """Record that the request arrived at ``now`` meets the site's limit (robots.txt is exempt)."""
        recent = self._limited_recent
        at = max(now, recent[-1]) if recent else now  # (times do not go backwards, as in :meth:`arrive`)
        recent.append(at)
        while recent[0] + WINDOW <= at:
            recent.popleft()
        self.peak_limited_per_second = max(self.peak_limited_per_second, len(recent))
        if self.window is None:
            return
        if self._without is not None:
            self._pending.append([now, None])
        seconds, kind = self.window
        times = self._window_times
        if self._counter is not None:
            self._counter.take(now)
            reading = self._counter.reading(now)
            self.peak_per_window = max(self.peak_per_window, math.ceil(reading - 1e-9))
            return
        if kind == "sliding":
            times.append(now)
            while times[0] + seconds <= now:
                times.popleft()
        elif kind == "started":
            if self._window_origin is None or now >= self._window_origin + seconds:
                self._window_origin = now
                times.clear()
            times.append(now)
        else:
            if self._window_origin is None:
                self._window_origin = 0.0 if kind == "clock" else now
            index = math.floor((now - self._window_origin) / seconds)
            if index != self._window_index:
                self._window_index = index
                times.clear()
            times.append(now)
        self.peak_per_window = max(self.peak_per_window, len(times))

    @property
    def peak_per_window_without_lockout(self) -> int | None:
        """See the class's attributes: None until the first lock-out has ended."""
        return None if self._without is None or self._lockout < 2 else self._without.peak_per_window

    def answered(self, arrived: float, status: int) -> None:
        """The limited request that arrived at ``arrived`` was answered ``status`` (0: never answered).

        Arrivals are handed on to the books without the first lock-out's refusals in arrival order, each
        once it and every one before it have been answered (a page answers after its latency, a refusal
        at once): the first refusal opens the first lock-out, and its refusals are left out up to the
        first arrival accepted after it."""
        if self._without is None:
            return
        pending = self._pending
        for entry in pending:
            if entry[1] is None and entry[0] == arrived:
                entry[1] = status
                break
        while pending and pending[0][1] is not None:
            at, told = pending.popleft()
            refused = told in (429, 503)
            if self._lockout == 0 and refused:
                self._lockout = 1
                continue
            if self._lockout == 1:
                if refused:
                    continue
                if told == 200:
                    self._lockout = 2
            self._without.limited(float(at or 0.0))

    def depart(self, now: float, status: int | None, *, reset: bool = False, challenge: bool = False,
               path: str | None = None) -> None:
        """Record that a request was answered with ``status`` (None: it never was).

        Args:
            now: when the answer went out; places it on the timeline.
            status: the status sent, None when no response was sent.
            reset: the site reset the connection on purpose instead of answering.
            challenge: the answer was a challenge page instead of the content:
                a refusal whatever its status, and not in ``statuses``.
            path: the request's path: a challenge adds it to ``challenged_paths``,
                the content (a 200) takes it out.
        """
        self.inflight = max(self.inflight - 1, 0)
        if challenge and status is not None:
            self.challenged += 1
            _bin(self._refused, self._index(now))
            if path is not None:
                self.challenged_paths.add(path)
        elif status is None:
            self.aborted += 1
            self.resets += reset
        else:
            self.statuses[status] += 1
            if status == 200:
                _bin(self._ok, self._index(now))
                if path is not None:
                    self.challenged_paths.discard(path)
                    if path not in self._served:
                        self._served.add(path)
                        self.last_page = now if self.last_page is None else max(self.last_page, now)
            elif status in (429, 503):
                _bin(self._refused, self._index(now))

    def violation(self, kind: str, count: int = 1) -> None:
        """Count ``count`` breaches of the rule called ``kind``."""
        self.violations[kind] += count

    @property
    def ok(self) -> int:
        """Responses with status 200."""
        return self.statuses[200]

    @property
    def throttled(self) -> int:
        """Responses with status 429 or 503, or challenge pages: the site turned the request away."""
        return self.statuses[429] + self.statuses[503] + self.challenged

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

    def timeline(self) -> dict[str, Any]:
        """The run second by second, as a JSON-ready dict.

        ``bin`` is the bin width in seconds; ``requests``, ``ok`` and
        ``refused`` are counts per bin from the first arrival, all of one
        length; ``capacity`` lists ``[seconds from the first arrival,
        capacity]`` at the start and at each change.
        """
        length = max(len(self._arrivals), len(self._ok), len(self._refused))
        first = self.first

        def pad(bins: list[int]) -> list[int]:
            return bins + [0] * (length - len(bins))

        capacity = [[0.0 if start is None or first is None else max(start - first, 0.0), value]
                    for start, value in self._capacities]
        return {"bin": BIN, "requests": pad(self._arrivals), "ok": pad(self._ok),
                "refused": pad(self._refused), "capacity": capacity}

    def as_dict(self, *, timeline: bool = False) -> dict[str, Any]:
        """The figures as a JSON-ready dict (string keys, numbers, None).

        Args:
            timeline: add ``"timeline"`` (see :meth:`timeline`).
        """
        figures = {
            "requests": self.requests,
            "ok": self.ok,
            "throttled": self.throttled,
            "aborted": self.aborted,
            "resets": self.resets,
            "challenged": self.challenged,
            "challenged_paths": sorted(self.challenged_paths),
            "statuses": {str(status): count for status, count in sorted(self.statuses.items())},
            "violations": sum(self.violations.values()),
            "violation_kinds": dict(sorted(self.violations.items())),
            "inflight": self.inflight,
            "peak_inflight": self.peak_inflight,
            "peak_per_second": self.peak_per_second,
            "peak_limited_per_second": self.peak_limited_per_second,
            "first": self.first,
            "last": self.last,
            "last_page": self.last_page,
            "active": self.active,
            "goodput": self.goodput,
            "capacity": self.capacity,
            "goodput_ratio": self.goodput_ratio,
        }
        if self.window is not None:  # only a site that counts per window has these
            figures.update(window=self.window[0], window_kind=self.window[1],
                           peak_per_window=self.peak_per_window,
                           peak_per_window_without_lockout=self.peak_per_window_without_lockout)
        if timeline:
            figures["timeline"] = self.timeline()
        return figures

    def __repr__(self) -> str:
        return (f"<SiteStats requests={self.requests} ok={self.ok} throttled={self.throttled} "
                f"violations={sum(self.violations.values())}>")
