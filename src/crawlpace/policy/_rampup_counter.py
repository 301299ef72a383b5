"""Rampup's counter fit: a request-rate counter that counts refused requests, read from every send.

Part of :class:`~crawlpace.policy.rampup.Rampup`. A request-rate counter (HAProxy's
``http_req_rate``) counts every request, the refused ones too, over periods of ``T`` seconds that
follow the server's clock, and refuses a request whose reading ``current + previous * (time left
in the period / T)`` passes ``N``. Every send the scope made is evidence about ``(N, T, phase)``:
an accepted send says the reading there was at most ``N``, a refused one that it was over.

**What one lock-out cannot tell.** At every refused probe of a first lock-out some counter that
fits every send so far ends its lock-out at once (a period boundary due now), so no probe is
provably wasted; and after the lock-out the counters that fit let 0.85 to 21 requests a second
through on a 10/s counter (its periods 2.8 s off the crawl's): a level that never went near the
limit rules out none of them. Only a refusal at a steady pace pins the counter: then every
``(N, T, phase)`` that fits gives the same ``N / T`` (to a ``tolerance``), and the scope paces at
it with nothing to search for above it, after waiting for the reading to fall under ``N`` (each
send before that would be refused and counted, keeping it over).

The fit tries periods from half to twelve times the last lock-out's cycle (a cycle is at least the
refused share of a period long, and at most a period and that share) at :data:`PHASES` phases each,
over the last :data:`SENDS_KEPT` sends, only at a refusal after a lock-out, in a process that sees
every send of the scope (a fleet's worker sees only its own). It runs on the event loop, so its cost
is bounded: most grid points are ruled out by the two sends that ruled out the last one (read from
prefix counts over the sorted send times, a few microseconds), and at most :data:`SCANS` points are
read send by send. A record that more points fit than that is too loose to act on (a first
lock-out, a level far under the limit: 0.85 to 21/s above) and gives no fit. One fit costs 3-7 ms
of CPU where counters4's exhaustive search took 10-400 (``bench/results/counters4.md``, section
counters5), with the same counters found wherever it gives a fit.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["CHECKS", "PHASES", "SCANS", "SENDS_KEPT", "Counter", "CounterFit", "counter_open", "fit_counter"]

#: Sends kept, accepted and refused, for the fit (an implementation bound: enough for a few
#: periods of a counter the scope paces at tens a second).
SENDS_KEPT = 256
#: Phases tried per period, and periods tried per doubling of the period (grid bounds, not tuning:
#: a finer grid changes which grid points fit, not the rate the fitting ones agree on).
PHASES = 12
_STEPS_PER_DOUBLING = 14
#: How far a send's reading may be off the fitted counter's and still fit it: half a count, and a
#: share of the reading for the grid's own error (a period 1 % off, a boundary a 60th of a period off,
#: move a reading of 100 by about a count). The coarse grid's points are further off, so they are
#: only candidates, kept with a tenth of the reading, each refined on a grid three times finer.
MARGIN = 0.5
_FINE = 0.01
_COARSE = 0.1
_REFINE = 3
#: The periods tried, as multiples of the last lock-out's cycle (a cycle is at least the refused
#: share of a period long, at most a period and that share), and how many that makes on the grid.
_SHORTEST, _LONGEST = 0.5, 12.0
_PERIODS = 1 + math.floor(_STEPS_PER_DOUBLING * math.log2(_LONGEST / _SHORTEST))
#: Bounds of one fit (it runs on the event loop). A record that more grid points fit than the grid
#: has periods (:data:`SCANS`, 65) is too loose to act on: with a fitting point for every period tried
#: the sends do not tell the period, and they say little of ``N / T`` (the fits that narrow the rate
#: took 15-64 scans in the harness's counters, the loose ones 150 to 6,000), so it gives no fit, as
#: one that none fits. A point is read send by send (scanned, about 50 us) only once the evidence
#: sends (those that last ruled a point out or bounded one that fits, :data:`EVIDENCE` kept) have not
#: ruled it out (checked, a few microseconds), so a fit's CPU is bounded by the grid itself: every
#: coarse point and the fine neighbours of each candidate checked once (:data:`CHECKS`), at most
#: :data:`SCANS` scanned. (Before tuning5, 64 scans and a bound of 3,000 checks; the closest fits take
#: 2,000-2,700 checks.)
SCANS = _PERIODS
CHECKS = _PERIODS * PHASES * (1 + _REFINE * _REFINE)
EVIDENCE = 6


@dataclass(frozen=True, slots=True)
class Counter:
    """A request-rate counter that fits every send: ``limit`` per ``period``, periods starting at
    ``start + k * period``."""

    limit: int
    period: float
    start: float

    @property
    def rate(self) -> float:
        """The even pace whose reading stays at the limit: ``limit / period``."""
        return self.limit / self.period


class _Record:
    """The sends under fit, with what the grid search learned: the sends that last ruled a grid point
    out or bounded one that fits (tried first at the next point: neighbouring points are ruled out by
    the same pair), and how many points it scanned in full."""

    def __init__(self, sends: list[tuple[float, bool]], complete: bool) -> None:
        self.times = [at for at, _ in sends]
        self.oks = [ok for _, ok in sends]
        self.skip = 0 if complete else 2
        self.evidence: list[int] = []
        self.checks = self.scans = 0

    def _note(self, *found: int) -> None:
        evidence = self.evidence
        for i in found:
            if i >= 0:
                if i in evidence:
                    evidence.remove(i)
                evidence.insert(0, i)
        del evidence[EVIDENCE:]

    def check(self, period: float, start: float, share: float) -> bool:
        """Whether the counter of ``period`` from ``start`` may fit: False when the evidence sends alone
        rule it out (each read from prefix counts over the sorted send times, no tally). Raises
        :class:`_Loose` when no send would be judged (a record missing older sends, shorter than three
        such periods): such a counter fits, and the record bounds its rate not at all."""
        self.checks += 1
        times, oks, floor = self.times, self.oks, math.floor
        judged = floor((times[0] - start) / period) + self.skip
        if floor((times[-1] - start) / period) < judged:
            # Older sends dropped, the record judges no send of a counter this long: nothing rules it
            # out, and nothing bounds it. Taken as ruled out, the shorter periods the record can judge
            # made the fit (245 per 6.5 s, 256 sends kept over 3.9 s: "54 to 58/s" on a 37.7/s counter).
            raise _Loose
        need, refused = 0, math.inf
        for i in self.evidence:
            at = times[i]
            k = floor((at - start) / period)
            if k < judged:
                continue
            begun = start + k * period
            first = bisect_left(times, begun, 0, i + 1)
            reading = (i + 1 - first) + (first - bisect_left(times, begun - period, 0, first)) * (
                1.0 - (at - begun) / period)
            if oks[i]:
                need = max(need, math.ceil(reading * (1.0 - share) - MARGIN))
            else:
                refused = min(refused, reading * (1.0 + share) + MARGIN)
            if need >= refused:
                return False
        return True

    def scan(self, period: float, start: float, share: float) -> int | None:
        """The limit of the counter of ``period`` with periods from ``start`` that every send fits, or None.

        An accepted send's reading (itself counted) is at most the limit, a refused one's above it, each
        within :data:`MARGIN` plus ``share`` of the reading. Where older sends were dropped (not
        ``complete``), the first two periods on record are not judged: their counts, or their previous
        period's, miss sends."""
        self.scans += 1
        if self.scans > SCANS:
            raise _Loose
        times, oks, floor, ceil = self.times, self.oks, math.floor, math.ceil
        index = judged = floor((times[0] - start) / period) + self.skip
        # (The sends before the first period judged only count: its previous period's count is all
        # they tell.)
        begun = bisect_left(times, start + judged * period)
        current, previous = 0, begun - bisect_left(times, start + (judged - 1) * period, 0, begun)
        accepted, refused = 0.0, math.inf
        top = low = -1  # the sends that set the two bounds
        down, up = 1.0 - share, 1.0 + share
        for i in range(begun, len(times)):
            at = times[i]
            k = floor((at - start) / period)
            if k != index:
                previous = current if k == index + 1 else 0
                current, index = 0, k
            current += 1
            reading = current + previous * (1.0 - (at - start - k * period) / period)
            if oks[i]:
                bound = reading * down - MARGIN
                if bound > accepted:
                    accepted, top = bound, i
                    if ceil(accepted) >= refused:
                        self._note(low, top)
                        return None
            else:
                bound = reading * up + MARGIN
                if bound < refused:
                    refused, low = bound, i
                    if ceil(accepted) >= refused:
                        self._note(top, low)
                        return None
        limit = math.ceil(accepted)
        if 1 <= limit < refused:
            self._note(top, low)
            return limit
        return None

    def opens(self, counter: Counter, now: float) -> float:
        """:func:`counter_open` over these sends, from prefix counts."""
        times, period, start = self.times, counter.period, counter.start
        index = math.floor((times[-1] - start) / period)
        first = bisect_left(times, start + index * period)
        before = first - bisect_left(times, start + (index - 1) * period, 0, first)
        return _open(counter, index, len(times) - first, before, now)


class _Loose(Exception):
    """More grid points fit than :data:`SCANS` allows: no counter is bound closely."""


@dataclass(frozen=True, slots=True)
class CounterFit:
    """The request-rate counters that fit every send: the one with the lowest ``N / T`` and the
    highest ``N / T`` of any (the limiter's, if it is such a counter, lies between)."""

    low: Counter
    high: float
    #: When half the fitting counters let a send through again (nothing more sent): the time a probe
    #: passes with even odds, if the limiter is such a counter.
    opens: float = 0.0
    #: The grid points checked against the evidence sends, and those scanned in full (the fit's cost).
    checks: int = 0
    scans: int = 0

    @property
    def pinned(self) -> bool:
        """Whether every fitting counter lets the same rate through, to a fine margin's spread."""
        return self.high <= self.low.rate * (1.0 + 2.0 * _FINE)


def fit_counter(sends: list[tuple[float, bool]], cycle: float, *, complete: bool = True,
                now: float | None = None) -> CounterFit | None:
    """The request-rate counters ``(N, T, phase)`` that fit every send, or None when none does (or more
    grid points fit than :data:`SCANS`, or a record missing older sends judges no send of some period
    tried: the sends bound no counter closely enough to act on). The
    counters it finds, and when they open, are those of the whole grid search (every grid point that
    fits is read send by send); only the grid points ruled out are skipped early.

    Args:
        sends: ``(send time, accepted)``, oldest first, refused sends included.
        cycle: the last lock-out's cycle: the periods tried run from half of it to twelve times it
            (a cycle lasts at least the refused share of a period, at most a period and that share).
        complete: ``sends`` hold every send since the scope's first (none dropped).
        now: the time :attr:`CounterFit.opens` is reckoned from (None: the last send's).
    """
    if cycle <= 0.0 or len(sends) < 2 or all(ok for _, ok in sends) or not any(ok for _, ok in sends):
        return None
    record = _Record(sends, complete)
    try:
        return _search(record, cycle, sends[-1][0] if now is None else now)
    except _Loose:
        return None


def _search(record: _Record, cycle: float, now: float) -> CounterFit | None:
    """The grid search of :func:`fit_counter`. A coarse point is a candidate when the evidence sends
    (those that last ruled a point out or bounded one that fits) do not rule it out at a tenth of the
    reading; each of its finer neighbours is checked the same way at the fine margin, and scanned in
    full (every send) only then. Most points are ruled out by two sends in a few microseconds."""
    origin = record.times[0]
    ratio = 2.0 ** (1.0 / _STEPS_PER_DOUBLING)
    period, top = cycle * _SHORTEST, _LONGEST * cycle
    low: Counter | None = None
    high = 0.0
    half = _REFINE // 2
    opens: list[float] = []
    while period <= top:
        for step in range(PHASES):
            start = origin - (step + 0.5) * period / PHASES
            if not record.check(period, start, _COARSE):
                continue
            for u in range(-half, half + 1):
                fine = period * ratio ** (u / _REFINE)
                for v in range(-half, half + 1):
                    at = start + v * fine / (PHASES * _REFINE)
                    if not record.check(fine, at, _FINE):
                        continue
                    limit = record.scan(fine, at, _FINE)
                    if limit is None:
                        continue
                    counter = Counter(limit, fine, at)
                    opens.append(record.opens(counter, now))
                    if low is None or counter.rate < low.rate:
                        low = counter
                    high = max(high, counter.rate)
        period *= ratio
    if low is None:
        return None
    opens.sort()
    return CounterFit(low, high, opens[len(opens) // 2], record.checks, record.scans)


def counter_open(counter: Counter, sends: Iterable[float], now: float) -> float:
    """When a send would first be accepted by ``counter``, with nothing more sent after ``sends``."""
    index = current = previous = 0
    first = True
    for at in sends:
        k = math.floor((at - counter.start) / counter.period)
        if first:
            index, first = k, False
        elif k != index:
            previous = current if k == index + 1 else 0
            current, index = 0, k
        current += 1
    return _open(counter, index, current, previous, now)


def _open(counter: Counter, index: int, current: int, previous: int, now: float) -> float:
    """:func:`counter_open` from the tally at the last send: its period's index, that period's count and
    the one before."""
    period, limit = counter.period, counter.limit
    k = math.floor((now - counter.start) / period)
    if k > index + 1:
        return now
    if k == index + 1:
        index, current, previous = k, 0, current
    room = limit - current - 1  # what the previous period's weight may still count
    if room >= 0:
        gone = 1.0 - room / previous if previous > 0 else 0.0
        return max(now, counter.start + (index + max(gone, 0.0)) * period)
    # Not this period: the next one starts with this one's count as its previous.
    gone = 1.0 - (limit - 1) / current
    return max(now, counter.start + (index + 1 + max(gone, 0.0)) * period)
