"""A rate limiter's quick 503s to a client alone in flight are load, not the site's own errors (fake clock).

nginx's ``limit_req`` refuses with 503 by default (``limit_req_status``), at once and with no
``Retry-After``, and it refuses a client that has one request out as readily as one with many: it
counts the rate, not what is in flight. Such a refusal looks like a backend failing at once; what
tells them apart is whether the refusals stop when the pace falls (``policy/_load_errors.py``).
"""

from __future__ import annotations

import asyncio
import random

import pytest

from crawlpace import ScopeGivenUp, Settings, Throttler
from crawlpace.policy._load_errors import JUDGE, LoadErrors
from crawlpace.sim._limits import RequestQueue
from crawlpace.testing import MockClock

URL = "https://line.example/page"


def test_a_lone_refusal_on_arrival_that_stops_after_the_cut_is_load() -> None:
    errors = LoadErrors()
    for t in range(3):
        errors.record("s", sent_at=float(t), error=False)
    errors.record("s", sent_at=3.0, error=True)
    # One quick 503 in four outcomes: no share after the cut could be clearly lower than 1 in 4.
    # Judged at once, that was "not about load"; now the outcomes after the cut decide.
    errors.slowed(3.0, 0.0, 3, at_once=True, quick=True)  # the breaker: 0 of 3 before
    assert not errors.plain
    assert errors.judging
    assert not errors.slows()
    for t in range(JUDGE):
        errors.record("s", sent_at=4.0 + t, error=False)
    assert not errors.plain  # none recurred at the slower pace: about load
    assert errors.slows()


def test_a_backend_failing_at_once_is_still_judged_its_own() -> None:
    errors = LoadErrors()
    for t in range(3):
        errors.record("s", sent_at=float(t), error=False)
    errors.record("s", sent_at=3.0, error=True)
    errors.slowed(3.0, 0.0, 3, at_once=True, quick=True)  # the breaker: 0 of 3 before
    for t, error in enumerate((False, True, False)):  # it fails at once at the slower pace too
        errors.record("s", sent_at=4.0 + t, error=error)
    assert errors.plain
    assert not errors.slows()


async def crawl(seed: int, *, rate: float, seconds: float = 30.0, page: float = 0.01) -> tuple[int, int]:
    """Crawl a site behind nginx's ``limit_req rate=<rate> burst=1`` (no ``nodelay``, status 503,
    answered at once) with 16 workers under rampup; the line refuses the crawl's fourth send, as real
    nginx refused the start's overshoot (``bench/real_limiters.py --cases nginx-req-503``: page 4
    answered 503 in 1 ms while page 3 waited in the line, one other request out). Returns the
    requests answered 200 and those refused."""
    clock = MockClock(autojump=True)
    rng = random.Random(seed)
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True, "rampup_min_delay": 0.01},
                                     "CONCURRENT_REQUESTS": 64})
    line = RequestQueue(rate, 1)
    sends = served = refused = 0
    async with Throttler(settings, clock=clock, rng=random.Random(seed)) as throttler:

        async def worker() -> None:
            nonlocal sends, served, refused
            while clock.now() < seconds:
                try:
                    async with throttler.slot(URL) as permit:
                        if clock.now() >= seconds:
                            permit.feedback(status=200, latency=0.0)
                            break
                        sends += 1
                        wait = line.take(clock.now())
                        if wait is None or sends == 4:
                            await clock.sleep(0.001)
                            refused += 1
                            permit.feedback(status=503, latency=0.001)
                            continue
                        took = wait + page * rng.uniform(2 / 3, 4 / 3)
                        await clock.sleep(took)
                        served += 1
                        permit.feedback(status=200, latency=took)
                except ScopeGivenUp:
                    return

        await asyncio.gather(*(worker() for _ in range(16)))
    return served, refused


@pytest.mark.parametrize("seed", [2, 3])
async def test_a_line_of_one_refusing_with_503_is_not_sent_past_its_rate(seed: int) -> None:
    # Judged the site's own errors at that first refusal (1 in 4 outcomes), the 503s no longer
    # slowed the scope, rampup climbed again with no ceiling, and 26-28 of 93-101 requests were
    # refused (real nginx: 64-68 %). The refusals stop once the cut is under the rate: load.
    served, refused = await crawl(seed, rate=2.5)
    assert refused <= 3, (served, refused)
    assert served >= 0.75 * 2.5 * 30.0, (served, refused)


def test_a_rare_quick_error_that_stops_after_the_cut_is_still_the_sites_own() -> None:
    # One quick 503 in 40 outcomes: a site failing 2.5 % of its requests has none in the next ten
    # three times in four, so their absence says nothing of load (each such cut standing, a backend
    # failing 3 % at once would be cut for good).
    errors = LoadErrors()
    for t in range(39):
        errors.record("s", sent_at=float(t), error=False)
    errors.record("s", sent_at=39.0, error=True)
    errors.slowed(39.0, None, at_once=True, quick=True)
    for t in range(JUDGE):
        errors.record("s", sent_at=40.0 + t, error=False)
    assert errors.plain


def test_a_lone_refusal_in_five_that_stops_is_load_after_enough_outcomes() -> None:
    # Real nginx (burst=1, 503), page 5 refused in 3 ms after four accepted: 1 in 5 before the cut,
    # 0 of 4 after it read as "not about load" (a fifth of a site's requests failing has none in ten
    # one time in nine: eleven are asked for), and 66 % of the crawl's requests were refused.
    errors = LoadErrors()
    for t in range(4):
        errors.record("s", sent_at=float(t), error=False)
    errors.record("s", sent_at=4.0, error=True)
    errors.slowed(4.0, 0.0, 4, at_once=True, quick=True)
    for t in range(JUDGE):
        errors.record("s", sent_at=5.0 + t, error=False)
    assert not errors.slows()  # still judged: ten without one is no rarity at a fifth
    errors.record("s", sent_at=20.0, error=False)
    assert errors.slows()  # about load
    assert not errors.plain
