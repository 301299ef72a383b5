"""``bench/start_bound.py``: the oracle's time on an errors site, the free start, and the farm-mean bound."""

from __future__ import annotations

import pytest

from .bench_scripts import load_bench

# start_bound imports errors_farm by its plain name, as it does when run from bench/.
errors_farm = load_bench("errors_farm", "errors_farm.py")
bound = load_bench("_bench_start_bound", "start_bound.py")

SITE = {"pages": 80, "errors": 0.2, "latency": 0.01}


def test_the_oracle_sends_every_failed_page_again_eight_at_once() -> None:
    # 80 pages at 20 % errors: 100 sends, 80 answered in 10 ms and 20 in 1 ms, 8 in flight.
    assert bound.oracle_time(SITE, "nohang") == pytest.approx((80 * 0.01 + 20 * 0.001) / 8)
    assert bound.oracle_time(SITE, "clean") == pytest.approx(80 * 0.01 / 8)


def test_the_free_start_only_changes_the_starting_delay_of_errors_farms_crawl() -> None:
    values = {"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "CONCURRENT_REQUESTS": 16}
    plain = errors_farm.Settings.from_scrapy(values)
    with bound.start_rate(100.0):
        free = errors_farm.Settings.from_scrapy(values)
    assert errors_farm.Settings.from_scrapy(values) == plain  # the patch is gone after the block
    assert free != plain
    assert free == bound.Settings.from_scrapy({**values, "DOWNLOAD_DELAY": 0.01})


def test_the_farm_mean_bound_is_the_ratio_gained_times_the_errors_sites_share() -> None:
    rows = [{"site": f"1:errors0{n}", "variant": "nohang", "latency": latency, "polite": 4.0, "free": 2.0,
             "oracle": 0.4, "polite_ratio": 0.1, "free_ratio": 0.2} for n, latency in ((1, 0.005), (2, 0.04))]
    result = bound.summary(rows, farms=1)
    figures = result["variants"]["nohang"]
    assert figures["quick"]["crawls"] == figures["window"]["crawls"] == 1
    assert figures["all"]["free_ratio"] - figures["all"]["polite_ratio"] == pytest.approx(0.1)
    assert figures["farm_mean_gain"] == pytest.approx(0.1 * 2 / 30, abs=1e-4)  # two errors sites of 30
