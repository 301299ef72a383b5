"""After the start's ramp, a small request-rate counter's first lock-out: the search's top (fake clock).

The ramp's cycle is only a floor under the limit, and the search after its lock-out once went no higher
than the geometric middle of that floor and the cut rate: a counter of 10 per 1.4 s (its even pace
6.43/s) was searched to 4.74/s and held there for the hold rule's wait. The search now goes at least
to the pace the counter took over the lock-out's length before it refused (``_lockout_pace``).
"""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from .test_rampup_limiters import RequestRate, crawl


@pytest.mark.parametrize(("limit", "period", "phase", "least"), [
    (10, 1.4, 0.042, 0.66),  # main: 0.599
    (10, 1.6, 0.664, 0.77),  # main: 0.744
])
def test_a_small_counters_first_lock_out_after_the_ramp_is_searched_past_the_middle(
        limit: int, period: float, phase: float, least: float, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="crawlpace.policy.rampup")
    out = asyncio.run(crawl(RequestRate(limit, period, _start=-phase * period), 40.0, latency=0.02))
    assert out.share >= least
    assert out.refused <= 6
    messages = [record.getMessage() for record in caplog.records]
    fit = next(i for i, text in enumerate(messages) if "rampup fit:" in text and "(a lock-out)" in text)
    tops = [float(found.group(1)) for text in messages[fit:]
            if (found := re.search(r"search: .* \(top ([0-9.]+)/s\)", text))]
    # The first search after the ramp's lock-out climbs to over 0.8 of the counter's even pace.
    assert tops
    assert tops[0] >= 0.8 * (limit - 1) / period
