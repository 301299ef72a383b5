"""The pure quota bucket, driven by hand-picked float times."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlpace.policy.quota import QuotaBucket, quota_share

INF = float("inf")
DAY = 86_400.0


def greedy(bucket: QuotaBucket, until: float, use: float = 1.0) -> list[float]:
    """Admit ``use``-unit requests back to back, each at its ready time, before ``until``."""
    now = 0.0
    times: list[float] = []
    while True:
        now = max(now, bucket.ready_at(now, use))
        if now >= until:
            return times
        assert bucket.ready_at(now, use) <= now  # asking again at the ready time agrees
        bucket.consume(now, use)
        times.append(now)


def test_shape_of_the_bucket_follows_the_window() -> None:
    minute = QuotaBucket(500, 60)
    assert (minute.quota, minute.window) == (500, 60)
    assert minute.capacity == 50
    assert minute.rate == pytest.approx(450 / 60)
    daily = QuotaBucket(10_000, DAY)
    assert daily.capacity == pytest.approx(10_000 * 60 / DAY)  # about a minute's worth
    for bucket in (minute, daily, QuotaBucket(3, 1), QuotaBucket(7, 120), QuotaBucket(7, 121)):
        assert bucket.capacity + bucket.rate * bucket.window == pytest.approx(bucket.quota)
        assert bucket.capacity <= bucket.quota / 10 + 1e-12


# -- (a) a minute quota ------------------------------------------------------------


def test_a_tenth_of_a_minute_quota_goes_at_once_then_one_unit_per_pace() -> None:
    bucket = QuotaBucket(500, 60)
    times = greedy(bucket, until=120.5)
    pace = 60 / 450
    assert times[:50] == [0.0] * 50
    assert times[50:55] == pytest.approx([pace * i for i in range(1, 6)])
    gaps = [b - a for a, b in itertools.pairwise(times[50:])]
    assert gaps == pytest.approx([pace] * len(gaps))
    # 50 at once and 450 more in the first minute; 450 in every minute after it.
    first = [t for t in times if t <= 60.0 + 1e-9]  # the 500th goes at t = 60 exactly
    second = [t for t in times if 60.0 + 1e-9 < t <= 120.0 + 1e-9]
    assert (len(first), len(second)) == (500, 450)


# -- (b) a daily quota -------------------------------------------------------------


def test_daily_quota_is_spread_over_the_day() -> None:
    bucket = QuotaBucket(10_000, DAY)
    times = greedy(bucket, until=DAY)
    assert 9_990 <= len(times) <= 10_000
    assert times[:6] == [0.0] * 6  # the burst: 6.94 units of credit
    last_hour = [t for t in times if t >= DAY - 3600]
    assert len(last_hour) == pytest.approx(3600 * bucket.rate, abs=1)  # about 416
    pace = 1 / bucket.rate
    gaps = [b - a for a, b in itertools.pairwise(times[6:])]
    assert min(gaps) == pytest.approx(pace, rel=1e-6)
    assert max(gaps) == pytest.approx(pace, rel=1e-6)
    # The next day's requests keep the pace: nothing was banked beyond the burst.
    assert bucket.remaining(times[-1]) < 1


# -- (d) reconciling declared and actual use ------------------------------------------


def test_a_larger_actual_use_charges_the_difference() -> None:
    bucket = QuotaBucket(500, 60)
    bucket.consume(0.0, 2.0)
    assert bucket.remaining(0.0) == 48.0
    bucket.adjust(0.0, 2.5 - 2.0)
    assert bucket.remaining(0.0) == 47.5


def test_a_smaller_actual_use_is_refunded() -> None:
    bucket = QuotaBucket(500, 60)
    bucket.consume(0.0, 2.0)
    bucket.adjust(0.0, 1.0 - 2.0)
    assert bucket.remaining(0.0) == 49.0


def test_refunds_never_raise_the_credit_above_capacity() -> None:
    bucket = QuotaBucket(500, 60)
    bucket.consume(0.0, 2.0)
    bucket.adjust(1.0, -2.0)  # the refill already covered part of it
    assert bucket.remaining(1.0) == 50.0
    assert bucket.is_idle(1.0)


def test_charges_can_put_the_bucket_in_debt() -> None:
    bucket = QuotaBucket(500, 60)
    bucket.consume(0.0, 50.0)
    bucket.adjust(0.0, 10.0)
    assert bucket.remaining(0.0) == -10.0
    assert bucket.ready_at(0.0, 1.0) == pytest.approx(11 * 60 / 450)
    assert bucket.snapshot(0.0).next_unit_in == pytest.approx(11 * 60 / 450)


# -- (e) requests that can never fit, and empty ones ------------------------------------


def test_requests_above_the_quota_never_fit() -> None:
    bucket = QuotaBucket(500, 60)
    assert bucket.fits(500.0)
    assert not bucket.fits(500.5)
    assert bucket.ready_at(0.0, 500.5) == INF


def test_zero_use_is_always_ready() -> None:
    bucket = QuotaBucket(500, 60)
    bucket.consume(0.0, 50.0)
    bucket.adjust(0.0, 100.0)
    assert bucket.ready_at(0.0, 0.0) == -INF


# -- (f) idle banking, (g) oversized requests ----------------------------------------


def test_a_day_idle_banks_no_more_than_capacity() -> None:
    bucket = QuotaBucket(500, 60)
    bucket.consume(0.0, 100.0)
    assert not bucket.is_idle(10.0)
    assert bucket.remaining(DAY) == 50.0
    assert bucket.is_idle(DAY)
    # A day's refill bought one burst, no more: after it the pace applies at once.
    bucket.consume(DAY, 50.0)
    assert bucket.ready_at(DAY, 1.0) == pytest.approx(DAY + 60 / 450)


def test_an_oversized_request_waits_for_a_full_bucket_then_goes_into_debt() -> None:
    bucket = QuotaBucket(500, 60)
    bucket.consume(0.0, 20.0)  # credit 30 of 50
    full = 20 / 7.5  # 20 units at 450/60 per second
    assert bucket.ready_at(0.0, 400.0) == pytest.approx(full)
    bucket.consume(full, 400.0)
    assert bucket.remaining(full) == pytest.approx(-350.0)
    assert bucket.ready_at(full, 1.0) == pytest.approx(full + 351 * 60 / 450)


def test_snapshot_reports_the_state() -> None:
    bucket = QuotaBucket(500, 60)
    bucket.consume(0.0, 50.0)
    snap = bucket.snapshot(0.0)
    assert (snap.quota, snap.window, snap.capacity) == (500, 60, 50)
    assert snap.remaining == 0.0
    assert snap.outstanding == 50.0
    assert snap.full_in == pytest.approx(50 / 7.5)
    assert snap.next_unit_in == pytest.approx(60 / 450)
    fresh = QuotaBucket(500, 60).snapshot(5.0)
    assert (fresh.remaining, fresh.outstanding, fresh.full_in, fresh.next_unit_in) == (50, 0, 0, 0)


@pytest.mark.parametrize(
    ("quota", "window", "name"),
    [(0.0, 60.0, "quota"), (math.nan, 60.0, "quota"), (INF, 60.0, "quota"),
     (10.0, 0.0, "window"), (10.0, -1.0, "window"), (10.0, INF, "window")],
)
def test_bad_arguments_are_rejected_by_name(quota: float, window: float, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        QuotaBucket(quota, window)


def test_negative_use_is_rejected() -> None:
    bucket = QuotaBucket(10, 60)
    with pytest.raises(ValueError, match="use"):
        bucket.ready_at(0.0, -1.0)
    with pytest.raises(ValueError, match="use"):
        bucket.consume(0.0, math.nan)


@pytest.mark.parametrize(
    ("use", "remaining", "share"),
    [(2.0, 4.0, 0.5), (4.0, 2.0, 2.0), (0.0, 0.0, 0.0), (0.0, -1.0, 0.0), (1.0, 0.0, INF), (1.0, -3.0, INF)],
)
def test_quota_share(use: float, remaining: float, share: float) -> None:
    assert quota_share(use, remaining) == share


# -- (c) the any-window bound --------------------------------------------------------


def admit_all(bucket: QuotaBucket, requests: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Admit ``(gap, use)`` requests in order, each at its ready time; return ``(time, use)``."""
    arrival = now = 0.0
    admitted = []
    for gap, use in requests:
        arrival += gap
        now = max(now, arrival, bucket.ready_at(arrival, use))
        assert bucket.ready_at(now, use) <= now
        bucket.consume(now, use)
        admitted.append((now, use))
    return admitted


def worst_window(admitted: list[tuple[float, float]], window: float) -> float:
    """The most units admitted within any closed span of ``window`` seconds."""
    return max(sum(use for t, use in admitted if start <= t <= start + window) for start, _ in admitted)


quotas = st.sampled_from([1.0, 3.0, 10.0, 500.0, 10_000.0])
windows = st.sampled_from([1.0, 7.5, 60.0, 120.0, 600.0, 3600.0, DAY])
fractions = st.floats(0.0, 1.0)
# Back-to-back arrivals and full-size requests are common, so the bucket is often drained.
gaps = st.one_of(st.just(0.0), fractions)
uses = st.one_of(st.just(1.0), fractions)


@settings(max_examples=200, deadline=None)
@given(quotas, windows, st.lists(st.tuples(gaps, uses), min_size=1, max_size=80))
def test_no_window_admits_more_than_the_quota(quota: float, window: float,
                                              raw: list[tuple[float, float]]) -> None:
    bucket = QuotaBucket(quota, window)
    # Gaps up to a quarter window; uses up to the capacity (no oversized requests).
    requests = [(gap * window / 4, use * bucket.capacity) for gap, use in raw]
    admitted = admit_all(bucket, requests)
    assert worst_window(admitted, window) <= quota * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(quotas, windows, st.lists(st.tuples(gaps, uses), min_size=1, max_size=80))
def test_oversized_requests_overshoot_by_at_most_their_excess(quota: float, window: float,
                                                              raw: list[tuple[float, float]]) -> None:
    bucket = QuotaBucket(quota, window)
    requests = [(gap * window / 4, use * quota) for gap, use in raw]
    admitted = admit_all(bucket, requests)
    excess = max(0.0, max(use for _, use in requests) - bucket.capacity)
    assert worst_window(admitted, window) <= (quota + excess) * (1 + 1e-9)
