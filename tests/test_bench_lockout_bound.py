"""``bench/lockout_bound.py``: the rule that probes a lock-out where the refusals seen let a window end."""

from __future__ import annotations

import copy
import math

import pytest

from .bench_scripts import load_bench

bound_tool = load_bench("_bench_lockout_bound", "lockout_bound.py")
harness = bound_tool.harness

# Five sends accepted 0.1 s apart from 0.1, the sixth refused at 0.6 s, by a clock window of 5 per 1 s.
SENDS = [(0.1 * k, True) for k in range(1, 6)] + [(0.6, False)]


def _window_after_sends() -> object:
    window = harness.ClockWindow(5, 1.0, 0.0)
    for at, ok in SENDS:
        assert (window.arrive(at).status_code == 200) is ok
    return window


def test_the_limiter_opens_at_its_boundary_with_nothing_more_sent() -> None:
    assert bound_tool.opens(_window_after_sends(), 0.6) == pytest.approx(1.0, abs=0.002)


def test_the_bound_is_the_earliest_a_fitting_sliding_window_ends() -> None:
    # The shortest window on the grid that holds all six sends at 0.6 is 0.519 s, with N = 5 (the
    # refused send saw 6, itself counted). A send sees at most 5 once 0.1 and 0.2 have aged out of it,
    # at 0.2 + 0.519; a longer window ages them out later.
    shortest = min(w for w in bound_tool.model.WINDOWS if w > 0.5)
    earliest = bound_tool.bound(SENDS, "any")
    assert earliest == pytest.approx(0.2 + shortest)
    assert bound_tool.bound(SENDS, "shortest") >= earliest


def test_probing_at_the_bound_finds_the_end_but_pays_a_refusal_per_early_probe() -> None:
    refused, accepted_at = bound_tool.probe_at_bound(copy.deepcopy(_window_after_sends()), SENDS, "any")
    assert 1.0 - 1e-9 <= accepted_at < 1.2  # the window's boundary, seen soon
    assert refused >= 2  # every bound before 1.0 was a probe the window refused
    assert math.isfinite(accepted_at)
