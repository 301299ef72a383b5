"""The crawl benchmark's measures and its oracle's pacing, on figures and limiters built by hand.

``bench/crawl_efficiency.py`` judges every contender against ``bench/_peers/oracle.py``; both are
scripts, loaded here from their files. Nothing here starts a farm or sleeps: the oracle's counter
shadow and knee are checked against the simulator's own limiter classes on a scripted clock.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from crawlpace.sim import OverloadSite, QueueSite, RateLimitSite, RequestRateSite, WindowSite
from crawlpace.sim._limits import RequestRate
from crawlpace.sim._rates import HeadersSite
from crawlpace.sim._stats import SiteStats

from .bench_scripts import load_bench

bench = load_bench("_bench_crawl_efficiency", "crawl_efficiency.py")
oracle = load_bench("_bench_oracle", "_peers/oracle.py")


# -- the site's own window ----------------------------------------------------------------


def test_sliding_window_peak_counts_any_span() -> None:
    stats = SiteStats(1.0)
    stats.watch_window(4.0, "sliding")
    for now in (0.0, 1.0, 2.0, 3.9, 4.0, 4.1):
        stats.limited(now)
    # (0.1, 4.1] holds 1.0, 2.0, 3.9, 4.0, 4.1; 0.0 has left by 4.0.
    assert stats.peak_per_window == 5
    assert stats.as_dict()["window"] == 4.0
    assert stats.as_dict()["window_kind"] == "sliding"


def test_clock_window_peak_counts_per_aligned_window() -> None:
    stats = SiteStats(1.0)
    stats.watch_window(10.0, "clock")
    for now in (7.0, 8.0, 9.9, 10.0, 10.5):  # 3 in [0, 10), 2 in [10, 20): never 5 in one window
        stats.limited(now)
    assert stats.peak_per_window == 3


def test_chained_windows_start_at_the_first_limited_arrival() -> None:
    stats = SiteStats(1.0)
    stats.watch_window(10.0, "chained")
    for now in (7.0, 8.0, 9.9, 10.0, 16.9, 17.0):  # [7, 17) holds 5, [17, 27) one
        stats.limited(now)
    assert stats.peak_per_window == 5


def test_started_windows_open_at_the_first_limited_arrival_after_the_last_one_ended() -> None:
    # ``limits``' fixed window (Flask-Limiter): [7, 17) holds 4; 17.5 opens [17.5, 27.5), not [17, 27).
    stats = SiteStats(1.0)
    stats.watch_window(10.0, "started")
    for now in (7.0, 8.0, 9.9, 16.9, 17.5, 26.0, 27.0, 27.4):
        stats.limited(now)
    assert stats.peak_per_window == 4  # chained windows would put 4 in [17, 27) and judge [27, 37) alone
    stats.limited(27.45)
    assert stats.peak_per_window == 5


def test_the_oracle_sends_a_started_windows_count_in_the_window_its_send_opened() -> None:
    from crawlpace.sim import WindowSite

    host = oracle.Host(WindowSite(limit=4, window=2.0, kind="started"))
    plan = oracle.plan_of(host.site)
    assert plan.started
    assert plan.count == 4
    sends = [host.started_slot(10.0, plan) for _ in range(9)]
    # Four in [10, 12) spread 0.475 s apart, the next window opened 50 ms after it ends.
    assert sends[:4] == pytest.approx([10.0, 10.475, 10.95, 11.425])
    assert sends[4:8] == pytest.approx([12.05, 12.525, 13.0, 13.475])
    assert sends[8] == pytest.approx(14.1)
    assert host.started_slot(20.0, plan) == 20.0  # after a quiet spell the next send opens a window
    # The opening send's answer came 0.2 s after it: the site's window (opened on its arrival) may end
    # as late as that answer plus the window.
    host.opener_answered = 20.2
    assert [host.started_slot(20.0, plan) for _ in range(3)][-1] == pytest.approx(21.425)
    assert host.started_slot(20.0, plan) == pytest.approx(22.2 + oracle.SLOT_SLACK)


def test_the_oracle_keeps_a_moving_windows_count_in_a_log_of_its_sends() -> None:
    from crawlpace.sim import WindowSite

    # (It spaced them window / limit + 30 ms apart: 0.54 of a window of 143 per 5 s.)
    plan = oracle.plan_of(WindowSite(limit=143, window=5.0, kind="sliding"))
    assert plan.sliding
    assert (plan.gap, plan.count, plan.window) == (0.0, 143, 5.0)


def test_a_counter_is_judged_by_its_reading_not_a_count() -> None:
    # HAProxy's counter lets 9 through at once in its first period (no previous one), then more as
    # that period's weight drains; a client that follows it reads at most its limit. (Sent late in the
    # first period, the 9 would share a span of a period with the next ones: a count is no judge.)
    stats, counter = SiteStats(1.0), RequestRate(10, 1.0)
    stats.watch_window(1.0, "counter")
    times = [0.0] * 9 + [1.0 + 0.02 + k / 9 for k in range(8)]
    for now in times:
        assert counter.take(now)
        stats.limited(now)
    assert stats.peak_per_window <= 10
    for _ in range(3):
        stats.limited(1.95)
    assert stats.peak_per_window == 12  # 11 in this period, 9 * 5 % of the last one's, rounded up


def test_a_site_without_a_window_reports_none() -> None:
    stats = SiteStats(1.0)
    stats.limited(1.0)
    figures = stats.as_dict()
    assert "peak_per_window" not in figures
    assert "window" not in figures
    with pytest.raises(ValueError, match="window kind"):
        stats.watch_window(1.0, "rolling")


def test_window_sites_name_their_window() -> None:
    assert WindowSite(limit=4, window=4.7, kind="sliding").stats.window == (4.7, "sliding")
    assert WindowSite(limit=4, window=5.0, kind="fixed").stats.window == (5.0, "clock")
    assert RequestRateSite(limit=10, period=2.0).stats.window == (2.0, "counter")
    assert HeadersSite(limit=10, window=3.0).stats.window == (3.0, "chained")
    assert RateLimitSite(rate=2.0, burst=3).stats.window is None


def farm_site(**figures: Any) -> dict[str, Any]:
    base = {"requests": 11, "ok": 10, "throttled": 1, "violations": 0, "capacity": 4 / 4.7,
            "goodput": 1.0, "goodput_ratio": 1.17, "last": None, "peak_per_second": 6,
            "window": 4.7, "peak_per_window": 5}
    return {**base, **figures}


def test_a_window_site_is_judged_over_its_own_window_not_per_second() -> None:
    # r1:flask21 of stop 41: 4 per 4.7 s (sliding); robots.txt, 4 pages and a refusal in one second.
    # Per second its "limit" was 4 and 6 read as over it; over its own window it sent 5 (4 + 1 refused).
    site, spec = farm_site(), {"profile": "window", "kind": "sliding", "limit": 4, "window": 4.7}
    assert bench.second_limit(site, spec) is None
    assert bench.window_limit(site) == 4.0
    figures = bench.SiteFigures(pages=10, done=10, requests=11, ok=10, throttled=1, violations=0,
                                violation_kinds={}, goodput=1.0, capacity=site["capacity"],
                                goodput_ratio=1.17, last_request=11.0, busiest_second=6, second_limit=None,
                                busiest_window=5, window=4.7, window_limit=4.0)
    assert figures.judged == (5.0, 4.0)
    assert not figures.over_limit
    figures.busiest_window = 6
    assert figures.over_limit


def test_a_bucket_is_still_judged_per_second() -> None:
    site = farm_site(capacity=10.0, window=None, peak_per_window=None, peak_per_second=14)
    spec = {"profile": "ratelimit", "rate": 10.0, "burst": 3}
    assert bench.window_limit(site) is None
    assert bench.second_limit(site, spec) == 12.0
    # nginx's delaying queue takes its whole burst beyond the request it serves: a bucket of burst + 1.
    assert bench.second_limit(site, {"profile": "queue", "rate": 10.0, "burst": 3}) == 13.0
    figures = bench.SiteFigures(pages=10, done=10, requests=14, ok=14, throttled=0, violations=0,
                                violation_kinds={}, goodput=10.0, capacity=10.0, goodput_ratio=1.0,
                                last_request=2.0, busiest_second=14, second_limit=12.0)
    assert figures.judged == (14.0, 12.0)
    assert figures.over_limit


# -- medians over the rounds and the own share of capacity -----------------------------------


def run(contender: str, round_no: int, ratios: dict[str, float], throttled: int = 0,
        last: float = 10.0, page: float | None = None) -> Any:
    sites = {name: bench.SiteFigures(pages=10, done=10, requests=10 + throttled, ok=10, throttled=throttled,
                                     violations=0, violation_kinds={}, goodput=ratio, capacity=1.0,
                                     goodput_ratio=ratio, last_request=last, last_page=page)
             for name, ratio in ratios.items()}
    return bench.Run(contender=contender, round=round_no, wall=last, exit_code=0, cut=False, sites=sites)


def test_repeats_give_medians_over_rounds_beside_the_pooled_figures() -> None:
    mine = [{"bucket01": 0.9, "conncap02": 0.6}, {"bucket01": 0.8, "conncap02": 0.8},
            {"bucket01": 0.5, "conncap02": 0.5}]
    theirs = {"bucket01": 1.0, "conncap02": 0.8}
    runs = []
    for round_no, ratios in enumerate(mine, 1):
        runs.append(run("crawlpace-rampup", round_no, ratios, throttled=round_no, last=10.0 + round_no))
        runs.append(run("oracle", round_no, theirs))
    summary = bench.random_summary("crawlpace-rampup", runs)
    means = [statistics.fmean([r["bucket01"] / 1.0, min(r["conncap02"] / 0.8, 1.0)]) for r in mine]
    assert summary["round_medians"]["mean_over_oracle"] == pytest.approx(statistics.median(means), abs=1e-3)
    assert [item["round"] for item in summary["per_round"]] == [1, 2, 3]
    assert summary["round_medians"]["pushback_share"] == pytest.approx(2 / 12, abs=1e-4)
    assert summary["round_medians"]["makespan_over_oracle"] == pytest.approx(1.2)
    # Own share: goodput/capacity capped at 1, whatever the oracle got; pooled over 6 site-rounds.
    assert summary["own_share_mean"] == pytest.approx(statistics.fmean([0.9, 0.6, 0.8, 0.8, 0.5, 0.5]),
                                                      abs=1e-3)
    assert summary["own_share_by_kind"]["conncap"] == pytest.approx(statistics.fmean([0.6, 0.8, 0.5]),
                                                                    abs=1e-3)
    assert summary["oracle_share_by_kind"] == {"bucket": 1.0, "conncap": 0.8}


def test_the_makespan_to_the_last_page_is_read_apart_from_the_last_send() -> None:
    # Both sent their last request at 10 s; the oracle waited for a hung page until 19.9 s, the crawl sent
    # it again and had it at 10.5 s. The makespan (last send) cannot tell them apart; the pages' one can.
    runs = [run("crawlpace-rampup", 1, {"errors01": 1.0}, page=10.5),
            run("oracle", 1, {"errors01": 1.0}, page=19.9)]
    dead = bench.SiteFigures(pages=5, done=0, requests=9, ok=0, throttled=0, violations=0,
                             violation_kinds={}, goodput=None, capacity=0.0, goodput_ratio=None,
                             last_request=40.0, last_page=40.0)
    for each in runs:
        each.sites["dead01"] = dead  # a dead site's end counts in neither makespan
    summary = bench.random_summary("crawlpace-rampup", runs)
    assert summary["makespan_over_oracle"] == pytest.approx(1.0)
    assert summary["pages_makespan_over_oracle"] == pytest.approx(10.5 / 19.9, abs=1e-3)
    assert summary["per_round"][0]["pages_makespan_over_oracle"] == summary["pages_makespan_over_oracle"]


def test_the_makespan_names_the_site_that_set_it_and_is_also_read_from_the_first_request() -> None:
    # The crawl took 5 s to start and ended bucket02 last, at 80 s; the oracle started in 1 s and ended
    # bucket01 last, at 60 s, bucket02 at 40 s. From the start: 80 / 60; from each one's first request
    # (the start-up of both left out): 75 / 59.
    def site(first: float, last: float) -> Any:
        return bench.SiteFigures(pages=10, done=10, requests=10, ok=10, throttled=0, violations=0,
                                 violation_kinds={}, goodput=1.0, capacity=1.0, goodput_ratio=1.0,
                                 last_request=last, last_page=last, first_request=first)

    mine = bench.Run(contender="crawlpace-rampup", round=1, wall=81.0, exit_code=0, cut=False,
                     sites={"bucket01": site(5.0, 50.0), "bucket02": site(5.2, 80.0)})
    oracle = bench.Run(contender="oracle", round=1, wall=61.0, exit_code=0, cut=False,
                       sites={"bucket01": site(1.0, 60.0), "bucket02": site(1.1, 40.0)})
    summary = bench.random_summary("crawlpace-rampup", [mine, oracle])
    assert summary["makespan_over_oracle"] == pytest.approx(80 / 60, abs=1e-3)
    assert summary["paced_makespan_over_oracle"] == pytest.approx(75 / 59, abs=1e-3)
    assert summary["first_request"] == pytest.approx(5.0)
    where = summary["per_round"][0]["makespan_site"]
    assert where == {"site": "bucket02", "end": 80.0, "oracle_end_there": 40.0, "oracle_site": "bucket01",
                     "oracle_end": 60.0, "first_request": 5.0, "oracle_first_request": 1.0}
    line = bench.makespan_line(summary["per_round"][0])
    assert line.startswith("r1: makespan set by bucket02 at 80.0 s (the oracle's there 40.0 s; its own set "
                           "by bucket01 at 60.0 s); first request 5.0 s")
    assert line.endswith("(the oracle's 1.0 s); makespan from the first request 1.27 x oracle")


# -- the oracle's pacing ------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "period", "lag"), [(10, 1.3, 0.0), (10, 1.3, 0.01), (150, 13.0, 0.005),
                                                      (12, 6.0, 0.02), (10, 1.0, 0.02)])
def test_counter_shadow_is_never_refused_and_keeps_the_counters_pace(limit: int, period: float,
                                                                    lag: float) -> None:
    shadow = oracle.CounterShadow()
    counter = RequestRate(limit, period)  # the simulator's own counter, as the site keeps it
    now, sends, refused = 0.0, 0, 0
    for index in range(20 * limit):
        now = shadow.due(now, limit, period)
        shadow.take(now, period)
        # Arrivals lag their send by 0 or ``lag``, the first one too: the site's periods start later
        # than the shadow's, and two arrivals may come closer than their sends.
        refused += not counter.take(now + lag * ((index + 1) % 2))
        sends += 1
    assert refused == 0
    # After the first period's count at once, limit - 1 per period: even sends at the limit per period
    # would read limit + 1 (the request counted, a whole previous period).
    assert sends / now >= 0.95 * (limit - 1) / period


@pytest.mark.parametrize("phase", [0.28, 0.6, 0.93])
def test_counter_shadow_told_the_phase_is_never_refused(phase: float) -> None:
    # The site's periods follow its clock (``phase`` of the first one gone at the first request);
    # a shadow that started them at its first send would spend the first count twice in one period.
    limit, period, lag = 100, 10.0, 0.005
    shadow, counter = oracle.CounterShadow(), RequestRate(limit, period, phase)
    now, refused = 0.0, 0
    for index in range(6 * limit):
        now = shadow.due(now, limit, period, phase)
        shadow.take(now, period, phase)
        refused += not counter.take(now + lag * ((index + 1) % 2))
    assert refused == 0
    assert 6 * limit / now >= 0.95 * (limit - 1) / period
    blind = oracle.CounterShadow()
    counter, now, refused = RequestRate(limit, period, phase), 0.0, 0
    for _ in range(3 * limit):
        now = blind.due(now, limit, period)
        blind.take(now, period)
        refused += not counter.take(now)
    assert refused > 0  # not told the phase: refused (12, 44 and 77 times)


def test_shadow_waits_for_the_previous_periods_weight() -> None:
    shadow = oracle.CounterShadow()
    for _ in range(9):
        shadow.take(0.0, 1.0)
    assert shadow.due(0.5, 10, 1.0) == 0.5  # the first period has no previous one: 10 pass
    # With 9 allowed the period is spent; in the next one a send reads 1 + 9 * (time left), kept
    # 9 * COUNTER_LAG below 9 for the site's later start.
    drained = 2.0 - (9 - 1 - 9 * oracle.COUNTER_LAG) / 9
    assert shadow.due(0.5, 9, 1.0) == pytest.approx(drained, abs=1e-5)


def test_best_inflight_counts_the_clients_turn() -> None:
    falling = OverloadSite(latency=0.2, per_inflight=0.0, knee=4, exponent=2.0, limit=12)
    level = OverloadSite(latency=0.2, per_inflight=0.0, knee=4, exponent=1.0, limit=12)
    plain = OverloadSite(latency=0.2, per_inflight=0.01, limit=6)
    assert oracle.best_inflight(falling) == 4
    assert 4 < oracle.best_inflight(level) <= 12
    assert oracle.best_inflight(plain) == 6


def test_a_bucket_with_room_catches_a_late_send_up() -> None:
    roomy = oracle.plan_of(RateLimitSite(rate=10.0, burst=6))
    tight = oracle.plan_of(RateLimitSite(rate=10.0, burst=2))
    assert roomy.catch_up == pytest.approx(3 * roomy.gap)
    assert tight.catch_up == 0.0
    assert tight.inflight == 1


def test_a_counter_site_is_judged_on_its_own_periods() -> None:
    # A counter whose first period was 0.6 gone at the first request: the oracle's shadow (told the
    # phase) sends a whole count in that short first period and the next one right after. The judge
    # reads the site's own periods, so a sender the site never refused is never over its limit.
    limit, period, phase = 100, 10.0, 0.6
    site = RequestRateSite(limit=limit, period=period, phase=phase)
    shadow, now = oracle.CounterShadow(), 0.0
    for _ in range(4 * limit):
        now = shadow.due(now, limit, period, phase)
        shadow.take(now, period, phase)
        assert site.counter.take(now)
        site.stats.limited(now)
    assert site.stats.peak_per_window <= limit


def test_the_first_lock_out_is_read_in_arrival_order_not_answer_order() -> None:
    # A page that arrived at 1.0 s is answered after the refusal of 1.01 s (a page takes longer than a
    # refusal): it did not end the lock-out, so the refused probe of 1.2 s is still the lock-out's.
    stats = SiteStats(1.0)
    stats.watch_window(10.0, "sliding")
    for at in (0.0, 0.5, 1.0, 1.01):
        stats.limited(at)
    stats.answered(0.0, 200)
    stats.answered(0.5, 200)
    stats.answered(1.01, 429)
    stats.answered(1.0, 200)
    stats.limited(1.2)
    stats.answered(1.2, 429)
    assert stats.as_dict()["peak_per_window_without_lockout"] is None  # (not ended yet)
    stats.limited(3.0)
    stats.answered(3.0, 200)
    stats.limited(3.5)
    stats.answered(3.5, 429)  # after the lock-out: counted
    assert stats.peak_per_window == 7
    assert stats.peak_per_window_without_lockout == 5  # (1.01 and 1.2 left out)
    stats.limited(4.0)
    stats.answered(4.0, 0)  # never answered: counted, as the site's own count has it
    assert stats.peak_per_window_without_lockout == 6


def test_the_judges_second_figure_leaves_the_first_lock_out_out() -> None:
    # r1:reqrate18 of stop 52 on the fake clock: 353 in its 345 per 39 s with the first lock-out's
    # probes, 19 after it: over its limit + 1 (the verdict), not over once the lock-out had ended.
    figures = bench.SiteFigures(pages=357, done=357, requests=372, ok=357, throttled=15, violations=0,
                                violation_kinds={}, goodput=20.0, capacity=345 / 39, goodput_ratio=2.3,
                                last_request=20.0, busiest_window=353, window=39.0, window_limit=345.0,
                                busiest_window_without_lockout=19)
    assert figures.over_limit
    assert not figures.over_limit_without_lockout
    figures.busiest_window_without_lockout = 347
    assert figures.over_limit_without_lockout
    site = farm_site(peak_per_window_without_lockout=19)
    assert site["peak_per_window_without_lockout"] == 19
    older = bench.SiteFigures(pages=1, done=1, requests=1, ok=1, throttled=0, violations=0,
                              violation_kinds={}, goodput=None, capacity=None, goodput_ratio=None,
                              last_request=None, busiest_window=400, window=39.0, window_limit=345.0)
    assert older.over_limit
    assert not older.over_limit_without_lockout  # (a farm that does not report it)


@pytest.mark.parametrize(("burst", "delay", "inflight"),
                         [(12, 0, 4), (5, 0, 4), (3, 0, 2), (1, 0, 1), (6, 4, 1)])
def test_the_oracle_keeps_nginxs_line_busy_without_filling_it(burst: int, delay: int, inflight: int) -> None:
    # Each send follows an answer, so it finds the others in flight ahead of it (plus nginx's
    # ``delay=`` served at once): one place of the line stays spare, no gap, the line never empty.
    plan = oracle.plan_of(QueueSite(rate=10.0, burst=burst, delay=delay))
    assert (plan.gap, plan.inflight) == (0.0, inflight)
    nodelay = oracle.plan_of(QueueSite(rate=10.0, burst=3, delay=3))  # a token bucket of 4
    assert nodelay.gap == pytest.approx(1 / 9.5)
