"""After the start's ramp, a small request-rate counter's first lock-out: the search's top (fake clock).

The ramp's cycle is only a floor under the limit, and the search after its lock-out once went no higher
than the geometric middle of that floor and the cut rate: a counter of 10 per 1.4 s (its even pace
6.43/s) was searched to 4.74/s and held there for the hold rule's wait. The search now goes
on to the pace the counter took over the lock-out's length before it refused (``_lockout_pace``), once
its first step is held (``SearchClimb._lifted``).
"""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from .test_rampup_limiters import ClockWindow, RequestRate, crawl


@pytest.mark.parametrize(("limit", "period", "phase", "least"), [
    (10, 1.4, 0.042, 0.65),  # main: 0.599
    (10, 1.6, 0.664, 0.76),  # main: 0.744
])
def test_a_small_counters_first_lock_out_after_the_ramp_is_searched_past_the_middle(
        limit: int, period: float, phase: float, least: float, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="crawlpace.policy.rampup")
    out = asyncio.run(crawl(RequestRate(limit, period, _start=-phase * period), 40.0, latency=0.02))
    assert out.share >= least
    assert out.refused <= 6
    messages = [record.getMessage() for record in caplog.records]
    fit = next(i for i, text in enumerate(messages) if "rampup fit:" in text and "(a lock-out)" in text)
    cut = next((i for i, text in enumerate(messages) if i > fit and "rampup cut:" in text), len(messages))
    tops = [float(found.group(1)) for text in messages[fit:cut]
            if (found := re.search(r"search: .* \(top ([0-9.]+)/s\)", text))]
    # The first search after the ramp's lock-out, its first step held, climbs on to over 0.8 of the
    # counter's even pace (main parked at the geometric middle, 4.74 and 4.82/s).
    assert tops
    assert max(tops) >= 0.8 * (limit - 1) / period


@pytest.mark.parametrize(("limit", "window", "seed"), [(50, 5.0, 1), (8, 4.0, 5)])
def test_a_clock_windows_lock_out_after_the_ramp_is_no_pace_to_search_to_at_once(
        limit: int, window: float, seed: int) -> None:
    # A clock window's lock-out is only its rest, and the ramp's count over that rest is the ramp's own
    # pace (50 per 5 s: 30.9/s). Searched to it at once (counters21's rule), these went 0.987 -> 0.917
    # and 0.983 -> 0.917 of their capacity: the next window filled early, and the longer lock-out's
    # late probe lowered the next fit (bench/results/counters23.md). The first step, held, lifts it.
    out = asyncio.run(crawl(ClockWindow(limit, window, 0.0), 30.0, latency=0.003, instant=True, seed=seed,
                            robots=0.005, robots_counted=True, robots_unmeasured=True))
    assert out.share >= 0.98
    assert out.refused <= (10 if limit == 50 else 4)
