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


def test_a_sliding_windows_rule_sends_its_limit_at_once_and_the_rest_as_the_first_sends_leave() -> None:
    # 3 per 10 s, 5 pages, 4 in flight of 0.1 s: three at 0, two once the first two left (10.005 s).
    assert trace.mirror([], 0.0, 5, 3, 10.0, 0.1) == pytest.approx(10.105)
    # A record of two sends at 1 s and 2 s: one goes at once, the next two once those left.
    assert trace.mirror([1.0, 2.0], 5.0, 3, 3, 10.0, 0.1) == pytest.approx(12.105)
    # The slots bound a window that is not the bound: 8 pages, 4 in flight, 0.5 s each.
    assert trace.mirror([], 0.0, 8, 100, 10.0, 0.5) == pytest.approx(1.0)


def test_window_bounds_read_the_first_lock_out_fit_and_count_refusals_only_where_the_site_does() -> None:
    spec = {"profile": "window", "kind": "sliding", "limit": 2, "window": 10.0, "pages": 4,
            "count_refused": True}
    decisions = [(0.5, "rampup cut: pushback"),
                 (11.0, "rampup fit: the last cycle let 2 through in 11s (a lock-out)"),
                 (30.0, "rampup fit: the last cycle let 2 through in 9s (a lock-out)")]
    accepted, refused = [0.0, 0.1, 11.0], [0.2, 5.0]
    bounds = trace.window_bounds(spec, accepted, refused, decisions, 0.1)
    assert bounds["oracle"] == pytest.approx(10.105)
    assert bounds["first_fit"] == 11.0
    # Three pages done by 11 s, one left. Refusals counted, the window at 11 s holds the refusal at 5 s
    # and the send at 11 s: the last page goes once the refusal left (15.005 s).
    assert bounds["window_rule_after_fit"] == pytest.approx(15.105)
    # Not counted, it holds the send at 11 s alone: the last page goes at once.
    uncounted = trace.window_bounds({**spec, "count_refused": False}, accepted, refused, decisions, 0.1)
    assert uncounted["window_rule_after_fit"] == pytest.approx(11.1)
    assert trace.window_bounds({**spec, "kind": "fixed"}, accepted, refused, decisions, 0.1) is None
