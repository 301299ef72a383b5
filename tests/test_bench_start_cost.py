"""``bench/start_battery.py``'s measure of what a start costs, on arrival logs written by hand."""

from __future__ import annotations

import pytest

from .bench_scripts import load_bench

# start_battery imports its siblings by their plain names, as it does when run from bench/.
load_bench("holds_battery", "holds_battery.py")
load_bench("limiter_kinds", "limiter_kinds.py")
battery = load_bench("_bench_start_battery", "start_battery.py")


def test_a_limited_sites_start_ends_at_its_first_refusal() -> None:
    # A bucket of 2/s: pages at 1, 1.5, 2, 2.25 s accepted, the fifth refused at 2.4 s.
    log = [(1.0, 200), (1.5, 200), (2.0, 200), (2.25, 200), (2.4, 429), (3.0, 200)]
    start, cost = battery.start_cost("bucket", {"rate": 2.0}, log)
    assert start == pytest.approx(1.4)
    assert cost == pytest.approx(1.4 - 4 / 2.0)  # four pages by then, at 2/s they take 2 s: a burst's gain


def test_an_unlimited_sites_start_ends_at_its_first_quarter_second_near_the_gap_cap() -> None:
    # One page a second for 3 s, then 100/s from 3 s on: the start ends at 3 s, with 4 pages answered.
    log = [(float(t), 200) for t in range(4)] + [(3.0 + 0.01 * k, 200) for k in range(1, 60)]
    start, cost = battery.start_cost("none", {"errors": 0.0}, log)
    assert start == pytest.approx(3.0)
    assert cost == pytest.approx(3.0 - 4 / battery.NO_LIMIT_PACE)


def test_an_errors_sites_5xx_count_as_answers_in_its_start() -> None:
    log = [(0.0, 200), (1.0, 503), (1.5, 200)] + [(2.0 + 0.01 * k, 200) for k in range(30)]
    start, cost = battery.start_cost("errors", {"errors": 0.2}, log)
    assert start == pytest.approx(2.0)
    assert cost == pytest.approx(2.0 - 4 / battery.NO_LIMIT_PACE)
