"""``bench/shifting_recall.py``'s seconds lost per phase of a shifting limit, on sends written by hand."""

from __future__ import annotations

from .bench_scripts import load_bench

bench = load_bench("_bench_shifting_recall", "shifting_recall.py")

# A bucket of 10/s that falls to 4/s at 10 s and rises to 12/s at 20 s.
SPEC = {"name": "shifting01", "profile": "shifting", "base": "ratelimit", "rate": 10.0, "burst": 1,
        "changes": [[10.0, 0.4], [20.0, 1.2]], "pages": 1000}


def _site(accepted: list[float]) -> object:
    site = bench.Site(SPEC)
    site.shifting.accepted[:] = accepted
    return site


def test_a_crawl_at_the_capacity_in_force_loses_nothing_in_any_phase() -> None:
    sends = ([k / 10.0 for k in range(100)] + [10.0 + k / 4.0 for k in range(40)]
             + [20.0 + k / 12.0 for k in range(120)])
    assert bench.lost_by_phase(_site(sends), 30.0) == {"before": 0.0, "low": 0.0, "after": 0.0}


def test_each_phase_loses_the_time_its_missing_pages_take_at_its_own_capacity() -> None:
    # Half the pages before the fall (5 s at 10/s), all at the lower limit, 60 of the 120 after the rise
    # (5 s at 12/s); the crawl ends at 30 s.
    sends = ([k / 5.0 for k in range(50)] + [10.0 + k / 4.0 for k in range(40)]
             + [20.0 + k / 6.0 for k in range(60)])
    assert bench.lost_by_phase(_site(sends), 30.0) == {"before": 5.0, "low": 0.0, "after": 5.0}


def test_a_crawl_done_before_the_rise_has_no_loss_after_it() -> None:
    sends = [k / 10.0 for k in range(100)] + [10.0 + k / 2.0 for k in range(10)]
    assert bench.lost_by_phase(_site(sends), 15.0) == {"before": 0.0, "low": 2.5, "after": 0.0}
