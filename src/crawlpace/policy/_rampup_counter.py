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
over the last :data:`SENDS_KEPT` sends: a few hundred thousand steps, run only at a refusal after a
lock-out, in a process that sees every send of the scope (a fleet's worker sees only its own).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PHASES", "SENDS_KEPT", "Counter", "CounterFit", "counter_open", "fit_counter"]

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


def _tally(sends: Iterable[float], period: float, start: float) -> tuple[int, int, int]:
    """The period index of the last send, and the current and previous periods' counts then."""
    index = current = previous = 0
    first = True
    for at in sends:
        k = math.floor((at - start) / period)
        if first:
            index, first = k, False
        elif k != index:
            previous = current if k == index + 1 else 0
            current, index = 0, k
        current += 1
    return index, current, previous


def _bounds(sends: list[tuple[float, bool]], period: float, start: float, complete: bool,
            share: float) -> int | None:
    """The limit of the counter of ``period`` with periods from ``start`` that every send fits, or None.

    An accepted send's reading (itself counted) is at most the limit, a refused one's above it, each
    within :data:`MARGIN` plus ``share`` of the reading. Where older sends were dropped (not
    ``complete``), the first two periods on record are not judged: their counts, or their previous
    period's, miss sends."""
    index = current = previous = 0
    first = True
    judged = math.floor((sends[0][0] - start) / period) + (0 if complete else 2)
    accepted, refused = 0.0, math.inf
    for at, ok in sends:
        k = math.floor((at - start) / period)
        if first:
            index, first = k, False
        elif k != index:
            previous = current if k == index + 1 else 0
            current, index = 0, k
        current += 1
        if k < judged:
            continue
        reading = current + previous * (1.0 - (at - start - k * period) / period)
        if ok:
            low = reading * (1.0 - share) - MARGIN
            if low > accepted:
                accepted = low
                if math.ceil(accepted) >= refused:
                    return None
        else:
            high = reading * (1.0 + share) + MARGIN
            if high < refused:
                refused = high
                if math.ceil(accepted) >= refused:
                    return None
    limit = math.ceil(accepted)
    return limit if 1 <= limit < refused else None


@dataclass(frozen=True, slots=True)
class CounterFit:
    """The request-rate counters that fit every send: the one with the lowest ``N / T`` and the
    highest ``N / T`` of any (the limiter's, if it is such a counter, lies between)."""

    low: Counter
    high: float
    #: When half the fitting counters let a send through again (nothing more sent): the time a probe
    #: passes with even odds, if the limiter is such a counter.
    opens: float = 0.0

    @property
    def pinned(self) -> bool:
        """Whether every fitting counter lets the same rate through, to a fine margin's spread."""
        return self.high <= self.low.rate * (1.0 + 2.0 * _FINE)


def fit_counter(sends: list[tuple[float, bool]], cycle: float, *, complete: bool = True,
                now: float | None = None) -> CounterFit | None:
    """The request-rate counters ``(N, T, phase)`` that fit every send, or None when none does.

    Args:
        sends: ``(send time, accepted)``, oldest first, refused sends included.
        cycle: the last lock-out's cycle: the periods tried run from half of it to twelve times it
            (a cycle lasts at least the refused share of a period, at most a period and that share).
        complete: ``sends`` hold every send since the scope's first (none dropped).
        now: the time :attr:`CounterFit.opens` is reckoned from (None: the last send's).
    """
    if cycle <= 0.0 or len(sends) < 2 or all(ok for _, ok in sends) or not any(ok for _, ok in sends):
        return None
    origin = sends[0][0]
    ratio = 2.0 ** (1.0 / _STEPS_PER_DOUBLING)
    period, top = cycle / 2.0, 12.0 * cycle
    low: Counter | None = None
    high = 0.0
    half = _REFINE // 2
    fitting: list[Counter] = []
    while period <= top:
        for step in range(PHASES):
            start = origin - (step + 0.5) * period / PHASES
            if _bounds(sends, period, start, complete, _COARSE) is None:
                continue
            for u in range(-half, half + 1):
                fine = period * ratio ** (u / _REFINE)
                for v in range(-half, half + 1):
                    at = start + v * fine / (PHASES * _REFINE)
                    limit = _bounds(sends, fine, at, complete, _FINE)
                    if limit is None:
                        continue
                    counter = Counter(limit, fine, at)
                    fitting.append(counter)
                    if low is None or counter.rate < low.rate:
                        low = counter
                    high = max(high, counter.rate)
        period *= ratio
    if low is None:
        return None
    times = [at for at, _ in sends]
    when = times[-1] if now is None else now
    opens = sorted(counter_open(counter, times, when) for counter in fitting)
    return CounterFit(low, high, opens[len(opens) // 2])


def counter_open(counter: Counter, sends: Iterable[float], now: float) -> float:
    """When a send would first be accepted by ``counter``, with nothing more sent after ``sends``."""
    index, current, previous = _tally(sends, counter.period, counter.start)
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
