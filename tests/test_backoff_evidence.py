"""Backoff paced by evidence (issue 30 item 6, issue 37 item 2), on the fake clock.

A server with a steady limit must see one pace, not a swing between a cut and
a full recovery; one 429 costs what the measured rates say, not a minute at
one request a second. The servers here are token buckets in fake time.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import pytest

from crawlpace import BackoffConfig, ScopeConfig, Throttler
from crawlpace.policy.backoff import SETTLE, Backoff
from crawlpace.policy.scope_manager import ThrottlingScopeManager
from crawlpace.testing import MockClock

URL = "https://api.example/items"
#: A library user's defaults (issue 37): 8 slots, nothing else spacing the sends.
LIBRARY: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0,
                           "DOWNLOAD_DELAY_PER_SLOT": 0.0}


class Bucket:
    """A token bucket: ``rate`` a second, ``burst`` at most; :meth:`take` is 0.0 or the wait for a token."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, 0.0

    def take(self, now: float) -> float:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


@dataclass
class Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def steady_pace(configured: float, limit: float, *, seconds: float = 1200.0) -> tuple[list[int], int]:
    """Sends a minute and refusals of one slot sending every ``configured`` s against a ``limit``/s bucket.

    The pure rule alone: the scope's delay is ``max(configured, backoff delay)``, each answer takes 0.05 s.
    """
    backoff = Backoff(factor=2.0, min_delay=1.0, max_delay=300.0, concurrency_factor=0.5, window=60.0)
    bucket = Bucket(limit, 2.0)
    now, refusals, minutes = 0.0, 0, [0] * int(seconds // 60)
    while now < seconds:
        generation = backoff.generation
        refused = bucket.take(now) > 0.0
        minutes[int(now // 60)] += 1
        answered = now + 0.05
        if refused:
            refusals += 1
            backoff.on_backoff(answered, generation, configured, 1, round_trip=0.05, inflight=1)
        else:
            backoff.on_success(answered, current=generation == backoff.generation)
        now = max(answered, now + max(configured, backoff.delay()))
    return minutes, refusals


@pytest.mark.parametrize(("configured", "limit"), [(0.1, 4.0), (0.25, 3.0), (0.05, 12.0)])
def test_a_steady_limit_gets_one_steady_pace(configured: float, limit: float) -> None:
    minutes, refusals = steady_pace(configured, limit)
    settled = minutes[2:]  # the first two minutes find the limit
    # One pace: every minute within 5 % of the mean (the old rule swung by a factor of 2 each window).
    mean = statistics.fmean(settled)
    assert max(settled) <= 1.05 * mean, settled
    assert min(settled) >= 0.95 * mean, settled
    assert mean >= 0.85 * limit * 60, (mean, limit * 60)
    assert mean <= limit * 60 + 2  # under the limit: the bucket's refusals tell when it was passed
    assert refusals <= 12, refusals  # a few to find it, then a refused probe now and then, ever rarer


def test_the_first_cut_comes_from_the_rate_sent_not_from_one_second() -> None:
    backoff = Backoff(factor=2.0, min_delay=1.0, max_delay=300.0, concurrency_factor=0.5, window=60.0)
    # 8 requests in flight answered in 0.04 s: 200 a second were going out; half of that is 0.01 s apart.
    assert backoff.on_backoff(0.04, 0, 0.0, 8, round_trip=0.04, inflight=8)
    assert backoff.delay() == pytest.approx(0.01)
    assert backoff.delay() < 1.0  # BACKOFF_MIN_DELAY is only for a refusal nothing was measured for
    fresh = Backoff(factor=2.0, min_delay=1.0, max_delay=300.0, concurrency_factor=0.5, window=60.0)
    assert fresh.on_backoff(0.0, 0, 0.0, 8)
    assert fresh.delay() == 1.0


def test_with_enough_answers_the_cut_settles_under_the_rate_accepted() -> None:
    backoff = Backoff(factor=2.0, min_delay=1.0, max_delay=300.0, concurrency_factor=0.5, window=60.0)
    backoff.on_backoff(0.04, 0, 0.0, 8, round_trip=0.04, inflight=8)  # 200/s sent: 0.01 s apart
    for n in range(1, 16):  # then 50 answers a second, every third one refused
        if n % 3 == 0:
            backoff.on_backoff(0.04 + n / 50, 0, 0.0, 8)  # sent before the cut: evidence, not a cut
        else:
            backoff.on_success(0.04 + n / 50, current=False)
    assert backoff.on_backoff(0.04 + 16 / 50, backoff.generation, 0.0, 8)
    # The last 16 answers span 0.3 s, and 9 after the first were good: 30/s accepted.
    assert 1 / backoff.ceiling == pytest.approx(9 / 0.3)
    assert backoff.delay() == pytest.approx(backoff.ceiling / SETTLE)


async def test_a_retry_after_site_allowing_5_a_second_gets_most_of_it_and_nothing_inside_a_hold(
        clock: MockClock) -> None:
    # Issue 37: 8 tasks on the library defaults against a bucket of 5/s (burst 5) that sends only
    # Retry-After (whole seconds) with its 429s. It used to get 0.19-0.20 of its limit.
    throttler = Throttler(LIBRARY, clock=clock)
    bucket = Bucket(5.0, 5.0)
    holds: list[tuple[float, float]] = []
    sends: list[float] = []
    good = 0

    async def task() -> None:
        nonlocal good
        while clock.now() < 60.0:
            async with throttler.slot(URL) as permit:
                sent = clock.now()
                sends.append(sent)
                wait = bucket.take(sent)
                await clock.sleep(0.01)
                if wait > 0.0:
                    seconds = math.ceil(wait)
                    holds.append((clock.now(), clock.now() + seconds))
                    permit.feedback(Response(429, {"Retry-After": str(seconds)}))
                else:
                    good += 1
                    permit.feedback(Response(200))

    await asyncio.gather(*(task() for _ in range(8)))
    await throttler.aclose()
    assert good >= 0.8 * 5.0 * 60.0, (good, len(holds))
    inside = [sent for sent in sends for start, end in holds if start < sent < end]
    assert not inside, inside[:5]


def test_a_min_delay_the_user_set_is_a_floor_while_backing_off() -> None:
    """An explicit BACKOFF_MIN_DELAY is the seed's "minimum delay during backoff"; evidence cuts above it."""
    floored = Backoff(factor=2.0, min_delay=5.0, max_delay=300.0, concurrency_factor=0.5, window=60.0,
                      floor=5.0)
    # The same refusal as above: 200 a second were going out, evidence alone would wait 0.01 s.
    assert floored.on_backoff(0.04, 0, 0.0, 8, round_trip=0.04, inflight=8)
    assert floored.delay() == 5.0
    now = 0.04
    while floored.level:  # the climb: good answers at the pace in force, never below the floor
        now += floored.delay()
        floored.on_success(now)
        assert floored.delay() >= 5.0 or floored.level == 0
    assert now >= 0.04 + 3 * 5.0  # it ended as evidence says (a few good answers), at 5 s apart
    # The next refusal backs off again, to the floor or above it.
    assert floored.on_backoff(now + 0.01, floored.generation, 0.0, 8, round_trip=0.01, inflight=8)
    assert floored.delay() >= 5.0


def test_the_scope_manager_floors_only_an_explicit_min_delay() -> None:
    unset = ThrottlingScopeManager(scope="a", config=ScopeConfig()).backoff
    assert (unset.min_delay, unset.floor) == (1.0, 0.0)  # 1 s with nothing measured, no floor
    config = ScopeConfig(backoff=BackoffConfig(min_delay=1.0))
    explicit = ThrottlingScopeManager(scope="a", config=config).backoff
    assert (explicit.min_delay, explicit.floor) == (1.0, 1.0)  # even the default's value, when set
    assert explicit.on_backoff(0.04, 0, 0.0, 8, round_trip=0.04, inflight=8)
    assert unset.on_backoff(0.04, 0, 0.0, 8, round_trip=0.04, inflight=8)
    assert explicit.delay() == 1.0
    assert unset.delay() == pytest.approx(0.01)
