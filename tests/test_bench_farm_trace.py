"""``bench/farm_trace.py``'s pace per window and a counter's even pace, on sends written by hand."""

from __future__ import annotations

import pytest

from .bench_scripts import load_bench

trace = load_bench("_bench_farm_trace", "farm_trace.py")


def test_each_window_counts_its_own_sends_and_refusals() -> None:
    accepted = [0.0, 0.5, 1.0, 1.5, 2.0, 3.9, 4.0]
    refused = [1.9, 2.1, 4.5]
    rows = trace.windows(accepted, refused, 5.0, 2.0)
    assert rows == [{"at": 0.0, "rate": 2.0, "refused": 1}, {"at": 2.0, "rate": 1.0, "refused": 1},
                    {"at": 4.0, "rate": 0.5, "refused": 1}]


def test_a_counter_lets_one_fewer_than_its_limit_through_a_period_at_an_even_pace() -> None:
    assert trace.even_pace({"profile": "reqrate", "limit": 10, "period": 1.6}) == pytest.approx(9 / 1.6)
    assert trace.even_pace({"profile": "shifting", "base": "reqrate", "limit": 30, "period": 3.0}) == 29 / 3.0
    assert trace.even_pace({"profile": "ratelimit", "rate": 5.0, "burst": 1}) is None
