"""The pure rules behind the profiles: token bucket, embargo, spacing."""

from __future__ import annotations

import math
import random

import pytest

from crawlpace.sim._limits import Embargo, Spacing, TokenBucket


def test_bucket_starts_full_and_refills_at_its_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=2)
    assert bucket.take(100.0) == 0.0
    assert bucket.take(100.0) == 0.0
    assert bucket.take(100.0) == pytest.approx(0.5)
    assert bucket.take(100.25) == pytest.approx(0.25)  # refusals cost nothing
    assert bucket.take(100.5) == 0.0
    assert bucket.level(100.5) == pytest.approx(0.0)
    assert bucket.level(110.0) == 2.0  # never above the burst


def test_bucket_at_exact_rate_is_never_refused() -> None:
    bucket = TokenBucket(rate=4.0)
    assert all(bucket.take(n * 0.25) == 0.0 for n in range(100))


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1.0), (-1.0, 1.0), (math.inf, 1.0), (1.0, 0.5),
                                             (True, 1.0)])
def test_bucket_refuses_bad_numbers(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match=r"rate|burst"):
        TokenBucket(rate, burst)


def test_embargo_only_grows() -> None:
    embargo = Embargo()
    assert embargo.remaining(0.0) == 0.0
    assert not embargo.breached(0.0)
    embargo.extend(10.0, 5.0)
    embargo.extend(11.0, 1.0)  # ends at 12, before 15: no change
    assert embargo.until == 15.0
    assert embargo.remaining(12.0) == 3.0
    assert embargo.breached(14.0)
    assert not embargo.breached(14.995, tolerance=0.01)
    assert not embargo.breached(15.0)
    assert embargo.remaining(20.0) == 0.0


def test_spacing_flags_gaps_shorter_than_the_delay() -> None:
    spacing = Spacing(delay=1.0, tolerance=0.01)
    assert not spacing.observe(0.0)
    assert not spacing.observe(1.0)
    assert not spacing.observe(1.995)  # within the tolerance
    assert spacing.observe(2.5)
    assert spacing.observe(2.5)
    assert not spacing.observe(3.5)


@pytest.mark.parametrize(("delay", "tolerance"), [(0.0, 0.0), (1.0, -0.1), (1.0, math.nan)])
def test_spacing_refuses_bad_numbers(delay: float, tolerance: float) -> None:
    with pytest.raises(ValueError, match=r"delay|tolerance"):
        Spacing(delay, tolerance)


def test_spacing_forgives_lags_within_the_tolerance_but_not_a_steady_earliness() -> None:
    # A punctual crawler (a send every second) whose arrivals lag by 0 to 50 ms at random: never flagged,
    # even where one gap comes out 49 ms short because the previous arrival lagged the most.
    rng = random.Random(7)
    punctual = Spacing(delay=1.0, tolerance=0.05)
    lags = [0.05, 0.0, *(rng.uniform(0.0, 0.05) for _ in range(200))]
    assert not any(punctual.observe(n + lag) for n, lag in enumerate(lags))
    # A crawler 10 ms early on every gap stays within the tolerance gap by gap, yet the lags it would
    # need add up: flagged once 50 ms are used up, then every 5th request.
    early = Spacing(delay=1.0, tolerance=0.05)
    flagged = [n for n in range(21) if early.observe(n * 0.99)]
    assert flagged == [6, 12, 18]


def test_spacing_flags_out_of_order_arrivals() -> None:
    spacing = Spacing(delay=1.0, tolerance=0.01)
    assert not spacing.observe(5.0)
    assert spacing.observe(4.5)  # sent before the previous one, so within the delay of it
    assert spacing.observe(5.5)  # judged from the first arrival, not from the early one
    assert not spacing.observe(6.5)


def test_an_embargo_forgives_requests_already_on_their_way() -> None:
    embargo = Embargo()
    embargo.extend(10.0, 5.0)  # a 429 with Retry-After: 5 went out at 10.0
    assert not embargo.violated(9.99, tolerance=0.05)  # arrived before the answer went out
    assert not embargo.violated(10.03, tolerance=0.05)  # may have been sent before the 429 was read
    assert embargo.violated(10.06, tolerance=0.05)
    embargo.extend(12.0, 1.0)  # a later answer inside the same embargo starts no new grace
    assert embargo.violated(12.01, tolerance=0.05)
    assert not embargo.violated(14.96, tolerance=0.05)  # the usual tolerance at the end
    embargo.extend(20.0, 2.0)  # a new embargo after the first ended
    assert not embargo.violated(20.01, tolerance=0.05)
    assert embargo.violated(21.0, tolerance=0.05)

