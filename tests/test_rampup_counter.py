"""The request-rate counter fit (policy/_rampup_counter.py): pure functions over a send record."""

from __future__ import annotations

import math

from crawlpace.policy._rampup_counter import (
    _COARSE,
    _FINE,
    _STEPS_PER_DOUBLING,
    CHECKS,
    PHASES,
    SCANS,
    Counter,
    _Record,
    counter_open,
    fit_counter,
)


def _counter_sends(limit: int, period: float, start: float, times: list[float]) -> list[tuple[float, bool]]:
    """What HAProxy's counter answers to sends at ``times`` (each counted, refused or not)."""
    out: list[tuple[float, bool]] = []
    index, current, previous = None, 0, 0
    for at in times:
        k = math.floor((at - start) / period)
        if index is not None and k != index:
            previous = current if k == index + 1 else 0
            current = 0
        index = k
        current += 1
        out.append((at, current + previous * (1.0 - (at - start - k * period) / period) <= limit))
    return out


def _exhaustive(sends: list[tuple[float, bool]], cycle: float) -> tuple[float, float, float] | None:
    """The grid search without pruning or budget (counters4's): every coarse point read send by send at
    the coarse margin, every finer neighbour of one that fits at the fine margin. Lowest and highest
    rate, and the median time the fitting counters open."""
    record = _Record(sends, True)
    record.scans = -(10**9)  # (no budget here)
    ratio = 2.0 ** (1.0 / _STEPS_PER_DOUBLING)
    period, rates, opens = cycle / 2.0, [], []
    while period <= 12.0 * cycle:
        for step in range(PHASES):
            start = sends[0][0] - (step + 0.5) * period / PHASES
            if record.scan(period, start, _COARSE) is None:
                continue
            for u in (-1, 0, 1):
                fine = period * ratio ** (u / 3)
                for v in (-1, 0, 1):
                    limit = record.scan(fine, start + v * fine / (PHASES * 3), _FINE)
                    if limit is not None:
                        counter = Counter(limit, fine, start + v * fine / (PHASES * 3))
                        rates.append(counter.rate)
                        opens.append(counter_open(counter, [at for at, _ in sends], sends[-1][0]))
        period *= ratio
    return (min(rates), max(rates), sorted(opens)[len(opens) // 2]) if rates else None


def test_a_steady_refusal_pins_the_counter_and_a_loose_record_gives_no_fit() -> None:
    # 100 per 10 s, periods 2.8 s before the first send: a burst at 40/s (refused past the 100th),
    # then 9/s for 20 s: counters letting 8.8 to 11.3/s through fit, at hundreds of grid points (long
    # periods at many phases): too loose to act on, and more than a fit may scan on the event loop.
    times = [i / 40 for i in range(130)]
    times += [6.0 + i / 9 for i in range(180)]
    assert fit_counter(_counter_sends(100, 10.0, -2.8, times), 12.0) is None
    # Then 11/s until the first refusal: 9.8 to 10.1/s, the true 10/s among them.
    times += [times[-1] + (i + 1) / 11 for i in range(200)]
    sends = _counter_sends(100, 10.0, -2.8, times)
    refused = next(i for i in range(310, len(sends)) if not sends[i][1])
    fit = fit_counter(sends[:refused + 1], 12.0)
    assert fit is not None
    assert fit.low.rate <= 10.0 <= fit.high <= 1.05 * fit.low.rate
    # What it costs, without a clock: every one of the 780 coarse grid points is checked, most ruled out
    # by the two sends that ruled out the last one; at most SCANS are read send by send (was: every
    # coarse point and every fitting neighbour, 1,500-7,000 of them, 0.05-0.4 s of CPU).
    assert fit.checks >= 780
    assert fit.scans <= SCANS
    assert fit.checks <= CHECKS
    # The same counters as the search without pruning.
    assert (fit.low.rate, fit.high, fit.opens) == _exhaustive(sends[:refused + 1], 12.0)


def test_the_counter_opens_when_its_reading_falls_under_the_limit() -> None:
    counter = Counter(10, 2.0, 0.0)
    # Ten sends in the first second fill it; the next period starts at 2 s with 10 behind it, read
    # as 10 * (time left): one more fits once that weight is 9 or less, at 2.2 s.
    sends = [0.1 * i for i in range(10)]
    assert math.isclose(counter_open(counter, sends, 1.0), 2.2)
    assert counter_open(counter, sends, 5.0) == 5.0  # two periods later nothing is left


def test_a_token_bucket_pins_no_counter() -> None:
    # A bucket of 5/s with a burst of 5: refusals come and go with each gap, which no counter's
    # periods fit at one rate.
    sends, tokens, last = [], 5.0, 0.0
    for i in range(120):
        at = i * 0.15 if i < 60 else 9.0 + i * 0.05
        tokens = min(5.0, tokens + (at - last) * 5.0)
        last = at
        ok = tokens >= 1.0
        tokens -= 1.0 if ok else 0.0
        sends.append((at, ok))
    # (No counter pins it; the slowest that fits, the level's floor, is no faster than the bucket.)
    fit = fit_counter(sends, 2.0)
    assert fit is None or (not fit.pinned and fit.low.rate <= 5.0)
