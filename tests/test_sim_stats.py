"""Server-side statistics of a simulated site, fed scripted times."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlpace.sim import SiteStats


def brute_force_peak(arrivals: list[float]) -> int:
    """The most arrivals in any half-open window [s, s + 1), trying every useful start."""
    return max((sum(1 for t in arrivals if start <= t < start + 1.0) for start in arrivals), default=0)


def feed(stats: SiteStats, arrivals: list[float], status: int = 200) -> None:
    for now in arrivals:
        stats.arrive(now)
        stats.depart(now, status)


def test_sliding_window_peak_on_a_scripted_sequence() -> None:
    stats = SiteStats()
    # Calendar seconds hold 4 (second 0) and 3 (second 1), but (0.3, 1.3] holds all 7.
    arrivals = [0.6, 0.7, 0.8, 0.9, 1.1, 1.2, 1.3, 2.5, 3.0]
    feed(stats, arrivals[:4])
    assert stats.peak_per_second == 4
    feed(stats, arrivals[4:])
    assert stats.peak_per_second == 7
    assert brute_force_peak(arrivals) == 7


def test_a_window_excludes_an_arrival_exactly_one_second_earlier() -> None:
    stats = SiteStats()
    feed(stats, [0.0, 1.0, 2.0, 3.0])
    assert stats.peak_per_second == 1
    feed(stats, [3.0, 3.0])
    assert stats.peak_per_second == 3


@given(st.lists(st.integers(min_value=0, max_value=5000), max_size=60))
def test_peak_per_second_is_exact(millis: list[int]) -> None:
    # Whole milliseconds keep float rounding out of the comparison.
    arrivals = sorted(m / 1000 for m in millis)
    stats = SiteStats()
    feed(stats, arrivals)
    assert stats.peak_per_second == brute_force_peak(arrivals)


def test_goodput_counts_successes_over_the_active_period() -> None:
    stats = SiteStats(capacity=2.0)
    assert stats.goodput is None
    feed(stats, [10.0])
    assert stats.goodput is None  # a single instant has no length
    feed(stats, [11.0, 12.0, 13.0], 200)
    feed(stats, [14.0], 429)
    feed(stats, [15.0], 503)
    assert stats.first == 10.0
    assert stats.last == 15.0
    assert stats.active == 5.0
    assert stats.ok == 4
    assert stats.throttled == 2
    assert stats.goodput == pytest.approx(0.8)
    assert stats.goodput_ratio == pytest.approx(0.4)


def test_goodput_ratio_needs_a_positive_capacity() -> None:
    for capacity in (None, 0.0):
        stats = SiteStats(capacity)
        feed(stats, [0.0, 1.0])
        assert stats.goodput == 2.0
        assert stats.goodput_ratio is None


def test_peak_concurrency_follows_overlaps() -> None:
    stats = SiteStats()
    stats.arrive(0.0)
    stats.arrive(0.1)
    stats.depart(0.2, 200)
    stats.arrive(0.3)
    stats.arrive(0.4)
    assert stats.inflight == 3
    for _ in range(3):
        stats.depart(0.5, 200)
    stats.arrive(0.6)
    stats.depart(0.7, None)
    assert stats.inflight == 0
    assert stats.peak_inflight == 3
    assert stats.aborted == 1
    assert stats.requests == 5


def test_time_going_back_is_clamped() -> None:
    stats = SiteStats()
    feed(stats, [5.0, 4.0])
    assert stats.first == 5.0
    assert stats.last == 5.0
    assert stats.peak_per_second == 2


def test_as_dict_is_json_ready() -> None:
    stats = SiteStats(capacity=4.0)
    feed(stats, [0.0, 0.25, 0.5], 200)
    feed(stats, [0.75], 429)
    stats.violation("crawl_delay")
    stats.violation("retry_after", 2)
    report = stats.as_dict()
    assert json.loads(json.dumps(report, allow_nan=False)) == report
    assert report["requests"] == 4
    assert report["statuses"] == {"200": 3, "429": 1}
    assert report["violations"] == 3
    assert report["violation_kinds"] == {"crawl_delay": 1, "retry_after": 2}
    assert report["goodput"] == 4.0
    assert report["goodput_ratio"] == 1.0
    assert report["peak_per_second"] == 4
    assert "violations=3" in repr(stats)


@pytest.mark.parametrize("capacity", [-1.0, math.inf, math.nan])
def test_capacity_must_be_finite_and_not_negative(capacity: float) -> None:
    with pytest.raises(ValueError, match="capacity"):
        SiteStats(capacity)


def test_timeline_bins_arrivals_successes_and_refusals_by_second() -> None:
    stats = SiteStats(2.0)
    for when, status in ((10.0, 200), (10.5, 429), (11.2, 200), (13.9, 503), (13.95, 500)):
        stats.arrive(when)
        stats.depart(when + 0.05, status)
    timeline = stats.timeline()
    assert timeline == {"bin": 1.0, "requests": [2, 1, 0, 2], "ok": [1, 1, 0, 0],
                        "refused": [1, 0, 0, 1], "capacity": [[0.0, 2.0]]}
    assert stats.as_dict(timeline=True)["timeline"] == timeline
    assert "timeline" not in stats.as_dict()


def test_capacity_is_averaged_over_the_active_period_by_time() -> None:
    stats = SiteStats(4.0)
    stats.arrive(0.0)
    stats.set_capacity(10.0, 2.0)
    stats.set_capacity(10.0, 2.0)  # no change, not recorded twice
    stats.set_capacity(15.0, 4.0)
    stats.arrive(20.0)
    assert stats.capacity == pytest.approx((10 * 4 + 5 * 2 + 5 * 4) / 20)
    assert stats.timeline()["capacity"] == [[0.0, 4.0], [10.0, 2.0], [15.0, 4.0]]
    stats.set_capacity(20.0, None)
    assert stats.capacity is None
    with pytest.raises(ValueError, match="capacity"):
        stats.set_capacity(21.0, -1.0)


def test_resets_are_aborted_requests_counted_apart() -> None:
    stats = SiteStats()
    for reset in (True, False):
        stats.arrive(1.0)
        stats.depart(1.0, None, reset=reset)
    assert (stats.aborted, stats.resets) == (2, 1)


def test_a_path_last_answered_with_a_challenge_is_listed_until_its_content_goes_out() -> None:
    stats = SiteStats(capacity=1.0)
    for at, path, challenge in [(0.0, "/a", True), (0.1, "/b", True), (0.2, "/a", False), (0.3, "/c", False)]:
        stats.arrive(at)
        stats.depart(at, 200, challenge=challenge, path=path)
    figures = stats.as_dict()
    assert (figures["challenged"], figures["ok"], figures["throttled"]) == (2, 2, 2)
    assert figures["challenged_paths"] == ["/b"]  # /a got its content in the end; /b never did


def test_a_sites_last_page_is_each_pages_first_200_not_a_hung_send_that_ends_later() -> None:
    # /a hangs from 0.0 and is sent again at 1.0 (answered at once); the hung send ends with its 200 at 9.9,
    # when the client had /a already. /b's 503 at 2.0 and its 200 at 2.5: the site was done at 2.5.
    stats = SiteStats()
    assert stats.as_dict()["last_page"] is None
    for arrived in (0.0, 1.0, 2.0, 2.4):
        stats.arrive(arrived)
    stats.depart(1.0, 200, path="/a")
    stats.depart(2.0, 503, path="/b")
    stats.depart(2.5, 200, path="/b")
    stats.depart(9.9, 200, path="/a")
    assert stats.as_dict()["last_page"] == 2.5
    assert (stats.last, stats.ok) == (2.4, 3)
    stats.arrive(12.0)
    stats.depart(12.0, 200, challenge=True, path="/c")  # a challenge page is not the page
    assert stats.last_page == 2.5


def test_the_judged_peak_per_second_leaves_robots_txt_out() -> None:
    # A bucket of 2/s, burst 1: robots.txt (which no limiter of the farm counts) and two pages within a
    # second are within its rules, but every arrival together reads 3, over its limit of 2. The figure
    # the bench judges a per-second limit by counts what the limit meets, as the window's figure does.
    stats = SiteStats()
    stats.arrive(0.0)  # robots.txt: arrives, not limited
    for now in (0.2, 0.7):
        stats.arrive(now)
        stats.limited(now)
    assert stats.peak_per_second == 3
    assert stats.peak_limited_per_second == 2
    assert stats.as_dict()["peak_limited_per_second"] == 2
