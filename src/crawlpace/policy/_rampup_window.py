"""Rampup's clock-window fit: a window of ``N`` per ``W`` seconds aligned to the clock, read from every send.

Part of :class:`~crawlpace.policy.rampup.Rampup`. A window aligned to the clock (``N`` per ``W``
seconds, its periods starting at ``phase + k * W``) accepts the first ``N`` requests of each period
and refuses the rest, whatever it counts: so within a period every accepted send comes before every
refused one, a period with a refusal in it accepted exactly ``N``, one with none at most ``N``, and
every lock-out ends at a boundary. Refused probes change nothing there, where a request-rate counter
that counts refusals (HAProxy's) is kept locked by each one: its periods with a refusal accept
varying counts, and its refusals and acceptances interleave. So the sends tell the two apart.

:func:`fit_window` takes the answered sends (the send time, accepted or not) and finds the
``(N, W, phase)`` that fit them. ``N`` is the fewest accepted between a lock-out's end and the next
refusal. The boundaries lie in known spans: each lock-out's end (between the last refused send and
the accepted one after it), and the start of each period with a refusal (between the send before
the ``N`` accepted that preceded that refusal and the first of them). Two distinct spans or more
bound ``W`` by their whole-number spacings (pairwise, which is enough for intervals on a line);
``W`` is then sampled across each bound, longest first, at three phases each, and each point is
checked send by send for the counts. The fit answers with the earliest and the latest next boundary
after a time over the points that fit, or None when none does (a counter, a bucket, a crawl slower
than the window, too few lock-outs) or the fits disagree by more than a share of the period. A
probe refused at a predicted boundary rules out of the next call every fit that placed a boundary
before it (its period would hold a refusal and no ``N`` accepted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

__all__ = ["COUNTS", "SAMPLES", "fit_window"]

#: The most ``W`` values checked send by send across each bound the lock-outs' ends leave (an
#: implementation bound on the cost, on the event loop; the bound is narrow once three ends are seen).
SAMPLES = 256
#: Boundaries the sends must show for a window to be fitted: two fix a period only up to its whole
#: divisors, and a HAProxy counter of 42 per 12 s falling to 18 fitted a window of 6.4 s on two (its
#: lock-out's probes at the fits' boundaries were refused and counted: 21 refusals for 17); a third
#: is the first check on the other two.
_BOUNDARIES = 3
#: The most windows whose counts are read send by send in one fit (an implementation bound: it runs
#: on the event loop, about 0.1 ms a read over 256 sends). A record that needs more is too loose to
#: act on: no fit (as the counter fit's ``SCANS``).
COUNTS = 200
#: The most periods between the first and the last lock-out end tried (an implementation bound: 256
#: sends kept rarely span more).
_MOST_PERIODS = 64


def _evidence(sends: Sequence[tuple[float, bool]], slack: float, complete: bool,
              ) -> tuple[list[tuple[float, float]], list[int], int]:
    """The lock-outs' ends (each between a refused send and the accepted one after it: a boundary,
    widened by ``slack``, the arrivals' spread), the index of each first refusal after an accepted
    send, and the fewest accepted sends between a lock-out's end (or the crawl's first send, with
    ``complete``) and the next refusal: ``N`` at most, as that stretch began at a boundary."""
    ends: list[tuple[float, float]] = []
    refusals: list[int] = []
    most = -1
    accepted, counted = 0, complete
    for index, ((at, ok), (nxt, ok_next)) in enumerate(pairwise(sends)):
        accepted += ok
        if not ok and ok_next:
            ends.append((at - slack, nxt + slack))
            accepted, counted = 0, True
        if ok and not ok_next:
            refusals.append(index + 1)
            if counted:
                most = accepted if most < 0 else min(most, accepted)
    return ends, refusals, most


def _spans(sends: Sequence[tuple[float, bool]], ends: list[tuple[float, float]], refusals: list[int],
           accepted: list[int], before: list[int], limit: int, slack: float) -> list[tuple[float, float]]:
    """The spans boundaries lie in for a window of ``limit``: the lock-outs' ends, and the start of
    each period with a refusal after the record's first, just before the ``limit`` accepted sends
    that came before its first refusal."""
    spans = list(ends)
    for refused in refusals:
        first = before[refused] - limit
        # (Not at the record's first send: it may be robots.txt, which no limiter may count.)
        if first >= 0 and accepted[first] > 1:
            index = accepted[first]
            spans.append((sends[index - 1][0] - slack, sends[index][0] + slack))
    spans.sort()
    return spans


def _distinct(spans: list[tuple[float, float]]) -> int:
    """How many boundaries the sorted ``spans`` show at least (overlapping spans may show one)."""
    count, reach = 0, -math.inf
    for lo, hi in spans:
        if lo > reach:
            count, reach = count + 1, hi
        else:
            reach = min(reach, hi)
    return count


def _spacings(ends: list[tuple[float, float]], periods: int, w_lo: float, w_hi: float,
              ) -> tuple[float, float] | None:
    """The bound on ``W`` when the last end is ``periods`` periods after the first, each end in
    between at the whole number of periods that fits (None: none does)."""
    first_lo, first_hi = ends[0]
    lo, hi = w_lo, w_hi
    for end_lo, end_hi in ends[1:]:
        far_lo, far_hi = end_lo - first_hi, end_hi - first_lo
        # the whole numbers k with far_lo / k <= W <= far_hi / k for some W in [lo, hi]
        ks = range(max(0, math.ceil(far_lo / hi - 1e-9)), math.floor(far_hi / lo + 1e-9) + 1)
        if not ks:
            return None
        if len(ks) != 1 or ks[0] == 0:
            continue  # (two or more fit, or the first boundary again: the phases and counts decide)
        k = ks[0]
        lo, hi = max(lo, far_lo / k), min(hi, far_hi / k)
        if lo > hi:
            return None
    return lo, hi


def _counts_fit(sends: Sequence[tuple[float, bool]], width: float, phase: float, complete: bool) -> int:
    """The ``N`` of a window of ``width`` from ``phase`` that fits every send (0: none does): in each
    period no acceptance after a refusal, the periods with a refusal ``N`` accepted, the others no
    more (the record's first period, when it is not ``complete``, is not judged: it may have lost
    sends to the record's bound, or hold robots.txt, which no limiter may count)."""
    periods: dict[int, list[int]] = {}
    for at, ok in sends:
        index = math.floor((at - phase) / width)
        seen = periods.setdefault(index, [0, 0])
        if ok:
            if seen[1]:
                return 0  # accepted after a refusal in the same period
            seen[0] += 1
        else:
            seen[1] += 1
    if not complete:
        del periods[min(periods)]
    full = {seen[0] for seen in periods.values() if seen[1]}
    if len(full) != 1:
        return 0
    limit = full.pop()
    return limit if all(seen[0] <= limit for seen in periods.values()) else 0


def fit_window(sends: Sequence[tuple[float, bool]], after: float, slack: float, late_share: float, *,
               complete: bool = True) -> tuple[float, float, float] | None:
    """The clock windows that fit ``sends`` (sorted by time; ``complete``: from the crawl's first):
    the earliest and the latest next boundary after ``after`` over them, and the shortest ``W``.
    None when no window fits, the sends show fewer than two boundaries, the windows that fit differ in
    ``N``, or their next boundaries are further apart than ``late_share`` of the wait for the latest."""
    ends, refusals, most = _evidence(sends, slack, complete)
    if most <= 0 or len(ends) + len(refusals) < 2:
        return None
    # A period holds the refused run it starts none of: W is longer than any run of refusals.
    longest_run, run_start = 0.0, None
    for at, ok in sends:
        if ok:
            run_start = None
        else:
            run_start = at if run_start is None else run_start
            longest_run = max(longest_run, at - run_start)
    w_floor = max(longest_run, 4.0 * slack, 1e-3)
    # W is sampled finely enough that the boundaries move by under half the usual gap between
    # accepted sends over the record (the counts change only where a boundary passes a send).
    accepted = [index for index, (_, ok) in enumerate(sends) if ok]
    before = [0] * (len(sends) + 1)
    for index, (_, ok) in enumerate(sends):
        before[index + 1] = before[index] + ok
    gaps = sorted(sends[b][0] - sends[a][0] for a, b in pairwise(accepted) if sends[b][0] > sends[a][0])
    fine = 0.5 * gaps[len(gaps) // 2] if gaps else slack
    boundaries: list[float] = []
    widths: list[float] = []
    limits: set[int] = set()
    budget = [COUNTS]
    # N is the fewest accepted between a lock-out's end and the next refusal: that stretch began at a
    # boundary, and a crawl that refills a window at once after its lock-out meets the next refusal in
    # that window. (A crawl slower than that sees more: then no window of that N fits, and the
    # probes double as before. Trying every smaller N cost up to a second a fit.)
    for limit in (most,):
        spans = _spans(sends, ends, refusals, accepted, before, limit, slack)
        if _distinct(spans) < _BOUNDARIES:
            continue
        for width, phase in _fits(sends, spans, w_floor, fine, limit, complete, budget):
            boundaries.append(phase + math.floor((after - phase) / width + 1.0) * width)
            widths.append(width)
            limits.add(limit)
    if budget[0] < 0 or not boundaries or len(limits) != 1:
        return None  # (no window fits, or windows of different N: the sends do not tell which)
    earliest, latest, shortest = min(boundaries), max(boundaries), min(widths)
    if latest - earliest > late_share * shortest:
        return None  # (the fits place the boundary too far apart to say where the period turns)
    return earliest, latest, shortest


def _fits(sends: Sequence[tuple[float, bool]], spans: list[tuple[float, float]], w_floor: float,
          fine: float, limit: int, complete: bool, budget: list[int]) -> list[tuple[float, float]]:
    """The ``(W, phase)`` of windows of ``limit`` whose boundaries fall in every span and that fit
    every send's count, with at most ``budget[0]`` counts read (it is spent)."""
    found: list[tuple[float, float]] = []
    first_lo, first_hi = spans[0]
    span_lo, span_hi = spans[-1][0] - first_hi, spans[-1][1] - first_lo
    # Two spans that show different boundaries are a whole number of periods apart: W is at most
    # the shortest such spacing.
    distinct, w_top = spans[:1], math.inf
    for lo, hi in spans[1:]:
        if lo > distinct[-1][1]:
            w_top = min(w_top, hi - distinct[-1][0])
            distinct.append((lo, hi))
    for periods in range(max(1, math.floor(span_lo / w_top)), _MOST_PERIODS + 1):
        w_lo, w_hi = max(w_floor, span_lo / periods), min(w_top, span_hi / periods)
        if w_hi < w_floor:
            break
        if w_lo > w_hi:
            continue
        bound = _spacings(spans, periods, w_lo, w_hi)
        if bound is None:
            continue
        samples = min(SAMPLES, max(1, math.ceil((bound[1] - bound[0]) * periods / fine)))
        for step in range(samples):
            width = bound[0] + (bound[1] - bound[0]) * (step + 0.5) / samples
            # the phases every span allows at this W: each span less its whole periods
            lo, hi = -math.inf, math.inf
            for end_lo, end_hi in spans:
                k = round((0.5 * (end_lo + end_hi) - 0.5 * (first_lo + first_hi)) / width)
                lo, hi = max(lo, end_lo - k * width), min(hi, end_hi - k * width)
            if lo > hi:
                continue
            # (the counts pin the phase within what the spans allow: three points across it)
            for phase in {lo + 0.25 * (hi - lo), 0.5 * (lo + hi), hi - 0.25 * (hi - lo)}:
                budget[0] -= 1
                if budget[0] < 0:
                    return found
                if _counts_fit(sends, width, phase, complete) == limit:
                    found.append((width, phase))
        if found:
            # (The longest period that fits: a whole divisor of it paced at the same N fits the counts
            # only where each period holds N, and is then read later, past what more can tell.)
            return found
    return found
