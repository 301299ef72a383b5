"""A scope must never stop sending to a live site: the stalls found so far, on the fake clock.

The farm's fixed window (``crawlpace.sim``'s own model and its ``Retry-After``), at a phase of
the clock, crawled as ``crawlpace crawl --rampup`` paces it (tests/test_rampup_limiters.py).
"""

from __future__ import annotations

import itertools
import logging
import random

import pytest

from crawlpace import Settings
from crawlpace.policy.admission import Limits
from crawlpace.sim._limits import ClockWindow
from crawlpace.sim._site import retry_after_value
from crawlpace.stores import Blocked, Lease, MemoryStore, Outcome
from crawlpace.stores.memory import STUCK_LOOK
from crawlpace.testing import MockClock

from .test_rampup_limiters import Response, crawl


class PhasedWindow:
    """The farm's fixed window with Retry-After on refusals; the crawl starts ``phase`` seconds
    into the clock's windows. Keeps every arrival's time."""

    def __init__(self, limit: int, window: float, phase: float) -> None:
        self.window = ClockWindow(limit, window, count_refused=True)
        self.phase = phase
        self.arrivals: list[float] = []

    @property
    def capacity(self) -> float:
        return self.window.limit / self.window.window

    def arrive(self, now: float) -> Response:
        self.arrivals.append(now)
        at = now + self.phase
        if self.window.take(at):
            return Response(200)
        return Response(429, {"Retry-After": retry_after_value(self.window.reset(at)).decode()})

    def leave(self, now: float) -> None:
        pass

    def longest_silence(self, end: float) -> float:
        times = [0.0, *self.arrivals, end]
        return max(later - earlier for earlier, later in itertools.pairwise(times))


# Before the fix, each of these sent nothing after the first seconds: the bucket fit found no bucket
# under the refused pace and paced at the floor rate, one send per BACKOFF_MAX_DELAY (300 s).
@pytest.mark.parametrize(("limit", "window", "phase", "latency", "seed"),
                         [(18, 2.8, 0.42, 0.05, 55),  # fixed04 of random seed 1782651072: silent from 6.5 s
                          (18, 3.9, 2.69, 0.05, 21),     # silent after 10.5 s
                          (30, 5.0, 4.28, 0.005, 11)])   # silent after 11.7 s
async def test_a_fixed_window_with_retry_after_is_never_left_silent(
        limit: int, window: float, phase: float, latency: float, seed: int) -> None:
    site = PhasedWindow(limit, window, phase)
    seconds = 25.0
    out = await crawl(site, seconds, latency=latency, seed=seed, robots=0.005)
    # The longest silence a Retry-After of this window can ask for, and a probe's gap or two on top.
    assert site.longest_silence(seconds) < window + 3.0
    assert out.share >= 0.6


def test_a_scope_waiting_for_an_answer_with_nothing_in_flight_is_told_and_looked_at_again(
        caplog: pytest.LogCaptureFixture) -> None:
    """The guard for the stalls not found yet: a scope that only a release could open, with nothing
    in flight to release, was parked for good; now it says so once and is looked at every second."""
    clock = MockClock()
    store = MemoryStore(Settings.from_scrapy({"DOWNLOAD_DELAY": 0.0}), clock, random.Random(1))
    demand = (("a.example", 0.0),)
    lease = store.acquire_nowait(demand)
    assert isinstance(lease, Lease)
    store.release_nowait(lease, Outcome(status=200, latency=0.01))
    state = store._scopes["a.example"]
    state.set_limits(Limits(0, 0.0, 0.0))  # a bug's state: no slot at all, nothing in flight
    with caplog.at_level(logging.WARNING, logger="crawlpace.stores.memory"):
        for _ in range(3):
            blocked = store.acquire_nowait(demand)
            assert isinstance(blocked, Blocked)
            assert blocked.ready_at == pytest.approx(clock.now() + STUCK_LOOK)  # was None: never
            clock.advance(STUCK_LOOK)
    told = [r.getMessage() for r in caplog.records if "nothing in flight" in r.getMessage()]
    assert len(told) == 1
    assert "a.example" in told[0]
    assert "inflight=0/0" in told[0]
    state.set_limits(Limits(1, 0.0, 0.0))  # whatever mends it: the scope sends, and may be told again
    assert isinstance(store.acquire_nowait(demand), Lease)
    assert not state.stuck
