"""Counts what the throttler did, per scope, in bounded memory.

A :class:`Recorder` is a :class:`~crawlpace.ThrottleObserver`: the throttler
tells it of each admission (with the time spent waiting) and release (with
the outcome). It keeps, per scope, the requests by outcome, histograms of
admission waits and of response latencies, and this process's requests in
flight. Memory stays bounded on a crawl of a million hosts: once
more than ``max_tracked`` scopes are tracked, the least busy half is folded
into one ``other`` bucket, whose counts are never lost.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..stores.base import Outcome

__all__ = ["LATENCY_BUCKETS", "OTHER", "OUTCOMES", "PUSHBACK_OUTCOMES", "WAIT_BUCKETS", "Recorder",
           "ScopeCounts"]

logger = logging.getLogger(__name__)

#: The label of every scope outside the busiest ones.
OTHER = "other"
#: The outcomes requests are counted under. ``blocked`` is a soft block: an
#: answer below 400 that the crawler read as pushback (a challenge page).
OUTCOMES = ("ok", "blocked", "http_4xx", "http_429", "http_5xx", "http_503", "exception", "no_feedback")
#: The outcomes that are the server pushing back: counted in ``crawlpace_pushbacks_total``.
PUSHBACK_OUTCOMES = ("http_429", "http_503", "blocked")
#: Upper bounds (seconds) of the admission-wait histogram's buckets (+Inf is implied).
WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Upper bounds (seconds) of the response-latency histogram's buckets (+Inf is implied).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def outcome_label(outcome: Outcome) -> str:
    """The :data:`OUTCOMES` entry an outcome is counted under."""
    if outcome.error is not None:
        return "exception"
    status = outcome.status
    if status is None:
        return "no_feedback"
    if status == 429:
        return "http_429"
    if status == 503:
        return "http_503"
    if status >= 500:
        return "http_5xx"
    if status >= 400:
        return "http_4xx"
    # A good status that still backed a scope off was a soft block (a challenge page).
    if any(signal.backoff for signal in outcome.feedback):
        return "blocked"
    return "ok"


@dataclass(slots=True)
class ScopeCounts:
    """One scope's (or the ``other`` bucket's) counters.

    Attributes:
        outcomes: releases by :data:`OUTCOMES` label.
        wait_buckets: admissions per :data:`WAIT_BUCKETS` bucket (not
            cumulative; the last entry counts waits above every bound).
        wait_sum: seconds waited over all admissions.
        latency_buckets: releases per :data:`LATENCY_BUCKETS` bucket (not cumulative).
        latency_sum: seconds of latency over the releases that reported one.
        latency_count: releases that reported a latency.
        given_up: times the breaker gave the scope up.
        inflight: this process's requests admitted and not yet released.
    """

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    wait_buckets: list[int] = field(default_factory=lambda: [0] * (len(WAIT_BUCKETS) + 1))
    wait_sum: float = 0.0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    latency_count: int = 0
    given_up: int = 0
    inflight: int = 0

    @property
    def admitted(self) -> int:
        """Admissions counted."""
        return sum(self.wait_buckets)

    @property
    def requests(self) -> int:
        """Releases counted, whatever their outcome."""
        return sum(self.outcomes.values())

    @property
    def pushbacks(self) -> int:
        """Answers 429 and 503, and soft blocks."""
        return sum(self.outcomes[label] for label in PUSHBACK_OUTCOMES)

    def add(self, other: ScopeCounts) -> None:
        """Add ``other``'s counts to these."""
        for key, value in other.outcomes.items():
            self.outcomes[key] += value
        for index, value in enumerate(other.wait_buckets):
            self.wait_buckets[index] += value
        for index, value in enumerate(other.latency_buckets):
            self.latency_buckets[index] += value
        self.wait_sum += other.wait_sum
        self.latency_sum += other.latency_sum
        self.latency_count += other.latency_count
        self.given_up += other.given_up
        self.inflight += other.inflight


GiveUpListener = Callable[[str, str], None]
# The outcomes a circuit breaker counts as failures.
_FAILURES = frozenset({"http_5xx", "http_503", "exception"})


class Recorder:
    """Per-scope counters fed by the throttler's observer hooks.

    Args:
        max_tracked: scopes kept apart at most; beyond it the least busy half
            is folded into :data:`OTHER`.
    """

    def __init__(self, max_tracked: int = 10_000) -> None:
        if max_tracked < 2:
            raise ValueError(f"max_tracked: {max_tracked!r} is below 2; use e.g. 10000")
        self.max_tracked = max_tracked
        self._scopes: dict[str, ScopeCounts] = {}
        self.folded = ScopeCounts()
        self.folded_names = 0
        self.give_ups: list[tuple[str, str]] = []
        self._listeners: list[GiveUpListener] = []
        self._failure_listeners: list[Callable[[tuple[str, ...]], None]] = []

    # -- ThrottleObserver ------------------------------------------------------

    def admitted(self, scopes: tuple[str, ...], waited: float) -> None:
        """Count an admission and its wait under each of ``scopes``."""
        index = bisect.bisect_left(WAIT_BUCKETS, waited) if waited > 0 else 0
        for name in scopes:
            counts = self._counts(name)
            counts.wait_buckets[index] += 1
            counts.wait_sum += waited
            counts.inflight += 1

    def released(self, scopes: tuple[str, ...], outcome: Outcome) -> None:
        """Count a release under its outcome for each of ``scopes``."""
        label = outcome_label(outcome)
        latency = outcome.latency
        bucket = -1
        if latency is not None and label != "no_feedback":
            bucket = bisect.bisect_left(LATENCY_BUCKETS, latency) if latency > 0 else 0
        for name in scopes:
            counts = self._counts(name)
            counts.outcomes[label] += 1
            if counts.inflight > 0:
                counts.inflight -= 1
            if bucket >= 0 and latency is not None:
                counts.latency_buckets[bucket] += 1
                counts.latency_sum += latency
                counts.latency_count += 1
        if label in _FAILURES and self._failure_listeners:
            for listener in self._failure_listeners:
                listener(scopes)

    def gave_up(self, scope: str, reason: str) -> None:
        """Count a give-up and tell the listeners."""
        self._counts(scope).given_up += 1
        self.give_ups.append((scope, reason))
        for listener in self._listeners:
            try:
                listener(scope, reason)
            except Exception:
                logger.exception("a give-up listener failed for scope %r", scope)

    # -- reading ---------------------------------------------------------------

    def on_give_up(self, listener: GiveUpListener) -> None:
        """Call ``listener(scope, reason)`` at every give-up."""
        self._listeners.append(listener)

    def on_failure(self, listener: Callable[[tuple[str, ...]], None]) -> None:
        """Call ``listener(scopes)`` after each release that counts as a failure (5xx, exception)."""
        self._failure_listeners.append(listener)

    def scope(self, name: str) -> ScopeCounts | None:
        """The counts of ``name`` if it is tracked apart."""
        return self._scopes.get(name)

    def names(self) -> list[str]:
        """Tracked scopes, busiest first."""
        return sorted(self._scopes, key=lambda name: (-self._scopes[name].admitted, name))

    def top(self, limit: int) -> tuple[list[tuple[str, ScopeCounts]], ScopeCounts]:
        """The ``limit`` busiest scopes, and the sum of every other one (folded ones included).

        Raises:
            ValueError: for a ``limit`` below 0.
        """
        if limit < 0:
            raise ValueError(f"limit: {limit!r} is negative")
        names = self.names()
        rest = ScopeCounts()
        rest.add(self.folded)
        for name in names[limit:]:
            rest.add(self._scopes[name])
        return [(name, self._scopes[name]) for name in names[:limit]], rest

    def total(self) -> ScopeCounts:
        """Every count summed (a request with two scopes counts twice)."""
        out = ScopeCounts()
        out.add(self.folded)
        for counts in self._scopes.values():
            out.add(counts)
        return out

    def tracked(self) -> Iterable[str]:
        """Every scope tracked apart, in no particular order."""
        return self._scopes.keys()

    def _counts(self, name: str) -> ScopeCounts:
        counts = self._scopes.get(name)
        if counts is None:
            if len(self._scopes) >= self.max_tracked:
                self._fold()
            counts = self._scopes[name] = ScopeCounts()
        return counts

    def _fold(self) -> None:
        """Fold the least busy half of the tracked scopes into :attr:`folded`."""
        names = self.names()
        for name in names[len(names) // 2:]:
            self.folded.add(self._scopes.pop(name))
            self.folded_names += 1
        logger.debug("recorder: folded %d quiet scopes into %r", len(names) - len(names) // 2, OTHER)
