"""Rampup after a limit falls and comes back: the level held before the fall is searched for again.

Whole crawls in virtual time (the harness of ``test_rampup_limiters``) against limiters whose
limit is cut mid-run and then raised, as the random farm's ``shifting`` sites do, and the pure
controller against a token bucket. Before the recall the climb back probed past the lower
ceiling at the pace made for a limit that stays put (one refusal per window), and stayed at the
lower rate for a minute or more after the limit had come back.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

import pytest

from crawlpace.policy.rampup import RAMPUP_JITTER
from crawlpace.sim._limits import TokenBucket

from .test_rampup import controller, send_and_answer
from .test_rampup_limiters import Bucket, ClockWindow, RequestRate, Response, crawl


@dataclass
class Shifting:
    """A limiter whose limit is multiplied by ``factor`` from each ``(seconds, factor)`` step on."""

    inner: Bucket | ClockWindow | RequestRate
    steps: list[tuple[float, float]]
    accepted: list[float] = field(default_factory=list)
    refused: list[float] = field(default_factory=list)
    _base: float = 0.0

    def __post_init__(self) -> None:
        inner = self.inner
        self._base = inner.rate if isinstance(inner, Bucket) else float(inner.limit)

    @property
    def capacity(self) -> float:
        return self.inner.capacity

    def _scale(self, now: float, factor: float) -> None:
        inner = self.inner
        if isinstance(inner, Bucket):
            inner.rate = self._base * factor
            inner.bucket.set_rate(now, inner.rate)
        elif isinstance(inner, RequestRate):
            inner.limit = self._base * factor
        else:
            inner.limit = max(round(self._base * factor), 1)

    def arrive(self, now: float) -> Response:
        while self.steps and now >= self.steps[0][0]:
            self._scale(now, self.steps.pop(0)[1])
        answer = self.inner.arrive(now)
        (self.accepted if answer.status_code == 200 else self.refused).append(now)
        return answer

    def leave(self, now: float) -> None:
        self.inner.leave(now)

    def rate(self, start: float, end: float) -> float:
        return sum(start <= t < end for t in self.accepted) / (end - start)


# Limits of 12/s, 20/s and 20/s that halve at 15 s and come back 1.4 times as high at 30 s (16.8/s,
# 28/s, 28/s): what the crawl got from 40 s to 60 s (a one-second Retry-After hold on every 429 of
# the second bucket). Before the recall: 6.5/s, 13.5/s and 9.3/s; with it 10.9/s, 23.9/s, 10.6/s.
# The last: a fall soon after the start phase (40/s, bursts of 3, x0.45 at 8 s, x1.2 at 16 s, as
# the random farm draws them): 17.5/s from 40 s to 60 s before, 39/s of 48 with it.
@pytest.mark.parametrize(("limiter", "steps", "least"),
                         [(Bucket(12.0, 9.0), [(15.0, 0.5), (30.0, 1.4)], 9.5),
                          (Bucket(20.0, 6.0, hold=1), [(15.0, 0.5), (30.0, 1.4)], 20.0),
                          (ClockWindow(40, 2.0), [(15.0, 0.5), (30.0, 1.4)], 10.2),
                          (Bucket(40.0, 3.0), [(8.0, 0.45), (16.0, 1.2)], 30.0)],
                         ids=["bucket", "bucket-held", "window", "early-fall"])
async def test_a_limit_that_falls_and_comes_back_is_found_again(limiter: Bucket | ClockWindow,
                                                                  steps: list[tuple[float, float]],
                                                                  least: float) -> None:
    fall, rise = steps[0][0], steps[1][0]
    site = Shifting(limiter, list(steps))
    await crawl(site, 60.0)
    assert site.rate(fall + 5.0, rise) <= site.capacity  # it followed the limit down
    assert site.rate(40.0, 60.0) >= least


def test_a_limit_that_falls_for_good_costs_about_one_refusal_per_window() -> None:
    # The pure controller on a bucket of 10/s (burst 5) that falls to 4/s at 60 s for good: each
    # recall that fails is a refused send, and the next waits twice as long.
    bucket = TokenBucket(10.0, 5.0)
    ramp = controller()
    rng = random.Random(5)
    now, refused_after, good_after = 0.0, 0, 0
    while now < 300.0:
        if now >= 60.0 and bucket.rate > 4.0:
            bucket.set_rate(now, 4.0)
        accepted = bucket.take(now) == 0.0
        send_and_answer(ramp, now, pushback=not accepted)
        if now >= 120.0:
            refused_after += not accepted
            good_after += accepted
        now += rng.uniform(1.0 + RAMPUP_JITTER.low, 1.0 + RAMPUP_JITTER.high) / ramp.allowed_rate(now)
    # Three windows after the fall settled: 2-3 refusals before the recall, 4 with it (each failed
    # recall costs about one, and goes back to the level it left).
    assert refused_after <= 3 + 2
    assert good_after / 180.0 >= 0.85 * 4.0


# Limits that come back after a fall, with what a refusal costs there. Before: the recall waited for
# the steady probe's rule after a lock-out (its length / 5 %: 85 s after a 4 s lock-out), a deep
# cut's search ran to its end before a due recall, and a refused step went back to the level the
# recall had started from. Per second in the span, before -> now: 1.13 -> 2.67 (a window of 13 per
# 3.3 s, x0.36 at 6.7 s, x1.4 at 11 s: 5.5/s), 3.35 -> 7.5 (a counter of 30 per 3 s, 13/s after the
# rise), 9.3 -> 12.0 (a bucket with no burst, 17.8/s after the rise), 9.7 -> 13.8 (a bucket with
# 1 s holds whose memory, 28.6/s, is above the 15.2/s it came back to), 7.6 -> 17.2 (a window of
# 20 per second falling to 8 with the start phase's first refusal: no level held, nothing remembered).
@pytest.mark.parametrize(("limiter", "steps", "seconds", "least"),
                         [(ClockWindow(13, 3.3), [(6.7, 0.36), (11.0, 1.4)], 30.0, 2.2),
                          (RequestRate(30.0, 3.0), [(6.0, 0.4), (14.0, 1.3)], 40.0, 6.0),
                          (Bucket(13.7, 1.0), [(4.3, 0.51), (11.0, 1.3)], 30.0, 11.0),
                          (Bucket(12.7, 12.0, hold=1), [(14.0, 0.45), (27.0, 1.2)], 60.0, 12.5),
                          (ClockWindow(20, 1.0), [(0.8, 0.4), (6.0, 1.2)], 30.0, 14.0)],
                         ids=["window-lockout", "counter", "after-a-deep-cut", "part-way", "at-the-start"])
async def test_a_recall_waits_what_a_refusal_costs_and_keeps_what_it_found(
        limiter: Bucket | ClockWindow | RequestRate, steps: list[tuple[float, float]], seconds: float,
        least: float) -> None:
    rise = steps[1][0]
    site = Shifting(limiter, list(steps))
    await crawl(site, seconds)
    assert site.rate(rise + 0.4 * (seconds - rise), seconds) >= least


async def test_a_level_let_through_by_a_counters_allowance_is_no_memory() -> None:
    # HAProxy-style, 253 per 8.2 s (30.9/s), steady: the start phase reaches its cap of 100/s and
    # goes 2 s at it before a refusal, then a lock-out of 6 s. Remembered, 100/s drew a recall
    # into the counter every few seconds (112 refusals in 60 s, where there are 26 without).
    site = Shifting(RequestRate(253.0, 8.2), [])
    await crawl(site, 60.0)
    assert len(site.refused) <= 30
    assert site.rate(10.0, 60.0) >= 0.9 * site.capacity


async def test_a_fall_after_a_memory_a_lock_out_discards_is_remembered() -> None:
    # A window of 15 per 1.1 s falling to 5 at 14 s and rising to 20 (17.7/s) at 29 s. The start's
    # trip left a memory held 0.07 s, which the lock-out's fit discards; the fall's own level (13.2/s,
    # held 11 s) was not remembered since it was lower, and the scope stayed at 4/s to the end.
    site = Shifting(ClockWindow(15, 1.1), [(14.0, 0.34), (29.0, 1.3)])
    await crawl(site, 60.0)
    assert site.rate(14.0, 29.0) <= 5.0 / 1.1  # it followed the limit down
    assert site.rate(45.0, 60.0) >= 9.0  # was 4.13
    assert len(site.refused) <= 14


async def test_a_recall_refused_past_a_level_it_reached_keeps_the_rise() -> None:
    # A bucket of 12.9/s (burst 5, 1 s holds) falling to 5/s at 12.8 s and coming back to 11.9/s at
    # 27 s. The recall reached 13.4/s and was refused on its way to 15.9/s: the limit had risen, yet
    # the scope went back to 9.5/s, the level before the last step, and waited 15 s to try again.
    site = Shifting(Bucket(12.9, 5.0, hold=1), [(12.77, 0.39), (27.0, 0.92)])
    await crawl(site, 60.0)
    assert site.rate(38.0, 52.0) >= 10.5  # was 9.29
    assert len(site.refused) <= 10


async def test_a_counter_that_falls_as_the_search_leaves_its_fit_is_recalled_at_the_fit() -> None:
    # HAProxy-style, 275 per 7.2 s (38/s): the first lock-out fits 35/s over its 8 s cycle, and the
    # limit falls by a third (25/s) as the search leaves the fit. The next lock-out, its counter still
    # full of the old count, fits 4.6/s; the level refused had been held only 0.5 s, less than a
    # lock-out lasts, so nothing was remembered and the scope stayed at 4.6/s after the limit rose to
    # 46/s. The fit's own level, taken over its whole cycle, is the memory.
    # Since the start doubles past 100/s on a site answering in 50 ms (start6), it spends the allowance
    # by 2.5 s at about 150/s (eight more refused in flight), and the fall comes inside the first
    # lock-out: its fit is the fallen limit's (25.8/s), so no level above it is remembered, and the
    # search's step past the fallen limit at 19 s draws its own lock-out (21 refusals before, 33-34
    # since; 35/s from 35 s before, 26/s since, of 45.8/s).
    site = Shifting(RequestRate(275.0, 7.2), [(8.6, 0.66), (22.0, 1.2)])
    await crawl(site, 60.0)
    assert site.rate(35.0, 60.0) >= 20.0  # was 4.5
    assert len(site.refused) <= 36


async def test_a_fall_whose_level_the_memory_outweighed_is_recalled_when_a_lock_out_discards_it() -> None:
    # A window of 29 per 4.3 s (6.7/s) falling to 19 at 6.2 s and rising to 38 (8.8/s) at 11 s, 20 ms
    # answers. The start's trip left a memory of 21/s held a round; the fall came from 8.6/s held
    # 2.8 s, lower, so not remembered; then the second lock-out (2.2 s) showed the memory held for
    # less time than a lock-out lasts and discarded it: 4/s to the end. The fall's level stands in.
    site = Shifting(ClockWindow(29, 4.3), [(6.2, 0.66), (11.0, 1.3)])
    await crawl(site, 30.0, latency=0.02)
    assert site.rate(22.0, 30.0) >= 7.0  # was 4.0
    assert len(site.refused) <= 10


async def test_a_recall_after_a_deep_fall_weighs_a_lock_out_at_the_rate_held() -> None:
    # HAProxy-style, 60 per 6 s (10/s), falling to 3.5/s at 10 s and rising to 11/s at 20 s. The
    # fall's fit paced 3.2/s, locked out 3.9 s a time: the recall waited hold / late_share (15.6 s,
    # till 27.6 s), a lock-out's time being costed as if the rise were no more than the rate held.
    # A lock-out at 3.2/s costs far less than 6.7/s missed while the limit is back: it tries at 17.8 s.
    site = Shifting(RequestRate(60.0, 6.0), [(10.0, 0.35), (20.0, 1.1)])
    await crawl(site, 50.0)
    assert site.rate(25.0, 35.0) >= 7.5  # was 6.0
    assert len(site.refused) <= 40


async def test_a_slow_scopes_recall_holds_each_level_it_searches() -> None:
    # HAProxy-style, 11 per 5.6 s, falling to a third at 10 s and rising to 2.2/s at 19 s: the fall's
    # fit paced 0.19/s, one answer per 5.3 s, longer than a search step's climb (3.75 s). Each step
    # took the climb's time for the level held and restarted from 0.19/s: the search "held" 0.5 ...
    # 1.33/s, its top, and sent at 0.19/s all along (4 pages in the last 20 s).
    site = Shifting(RequestRate(11.0, 5.6), [(10.0, 0.34), (19.0, 1.1)])
    await crawl(site, 60.0)
    assert site.rate(40.0, 60.0) >= 0.9  # was 0.2 (0.35 with the wait above)
    assert len(site.refused) <= 16


async def test_a_level_held_before_a_fall_outlives_the_falls_longer_lock_out() -> None:
    # HAProxy-style, 42 per 12 s (3.5/s), falling to 18 at 15 s and rising to 59 (4.9/s) at 28 s, 20 ms
    # answers (r3:shifting21). The search after the start's lock-out (6 s) was refused at 5.3/s held
    # 10 s; the limit fell in the lock-out that refusal opened, which lasted 12 s (the reading drains to
    # the lower limit), and judged by it the level was forgotten: 1.35/s to the end (the wall-clock
    # crawl took 269 s where the oracle took 30). Held longer than the lock-out known before, it stays.
    site = Shifting(RequestRate(42.0, 12.0, _start=-0.431 * 12.0), [(15.0, 0.44), (28.0, 1.4)])
    await crawl(site, 50.0, latency=0.02)
    assert site.rate(35.0, 50.0) >= 3.5  # was 1.3
    assert len(site.refused) <= 20



async def test_a_recall_back_at_its_level_probes_past_it_without_the_hold_rules_wait() -> None:
    # HAProxy-style, 37 per 2.8 s (13.2/s), falling to 6.3/s at 23 s and rising to 15.9/s at 38 s, 20 ms
    # answers (seed 102's shifting08 of the random farm). The recall came back to 9.3/s, the level held
    # before the fall, at 59 s, "probing beyond it quickly, since the limit has moved"; but the hold
    # rule, set by the fall's lock-outs of 3 s, kept the probe at that level until a failure would cost
    # a twentieth of the time (90 s): 9.0/s from 60 s to 90 s. Its wait is the recall's: a failure may
    # cost a quarter of the time since the last refusal, and that time has passed.
    site = Shifting(RequestRate(37.0, 2.8, _start=-0.236 * 2.8), [(23.0, 0.48), (38.0, 1.2)])
    await crawl(site, 100.0, latency=0.02)
    assert site.rate(23.0, 38.0) <= 6.3  # it followed the limit down
    assert site.rate(60.0, 90.0) >= 11.5  # was 9.0
    assert len(site.refused) <= 24  # was 18: the probe's overshoot, a few sends of one lock-out


async def test_a_recall_whose_step_holds_over_a_rate_refused_since_the_fall_climbs_to_its_level() -> None:
    # HAProxy-style, 101 per 2.2 s (45.9/s), halved at 17 s and raised to 59.7/s at 33 s, 20 ms answers
    # (seed 308's shifting04 of the random farm). The recall at 46.8 s held 28.6/s, over the 24.4/s the
    # limit had refused since the fall: it had risen, yet the search went on by halves to the 38/s held
    # before the fall (32.8, 35.3, 38/s, one step of 3.8 s each), and probed past it only at 61.8 s. The
    # limit came back, so the level it had is the likeliest place: the next step goes there.
    site = Shifting(RequestRate(101.0, 2.2, _start=-0.366 * 2.2), [(17.0, 0.5), (33.0, 1.3)])
    await crawl(site, 70.0, latency=0.02)
    assert site.rate(17.0, 33.0) <= 23.0  # it followed the limit down
    assert site.rate(50.0, 62.0) >= 36.5  # was 34.3
    assert len(site.refused) <= 26  # was 17: the quicker probe past 38/s found the limit within the crawl


async def test_a_level_carried_before_a_fall_outlives_a_counter_fit_near_the_level() -> None:
    # HAProxy-style, 52 per 11 s (4.7/s), falling to 1.5/s at 16 s and rising to 4.0/s at 31 s, 20 ms
    # answers (seed 310's shifting07 of the random farm). The fall's first refusal fitted counters letting
    # at most 4.8/s through, and the scope was at 4.75/s then: the memory of the level carried before the
    # fall was forgotten as "no step above the level", the lock-out's fit paced at 1.58/s, and the hold
    # rule's wait (a twentieth of the crawl per probe) kept it there to the end (1.58/s from 28 s on). A
    # level carried longer than a lock-out survives the fit, capped at its fastest counter.
    limiter = RequestRate(52.0, 11.0)
    limiter._start = -0.289 * 11.0
    site = Shifting(limiter, [(16.0, 0.32), (31.0, 0.85)])
    await crawl(site, 70.0, latency=0.02)
    assert site.rate(16.0, 31.0) <= 2.0  # it followed the limit down
    assert site.rate(42.0, 56.0) >= 3.0  # was 1.6
    assert len(site.refused) <= 24  # was 18


async def test_a_level_carried_before_a_fall_outlives_a_pinned_counter() -> None:
    # HAProxy-style, 85 per 8.8 s (9.7/s), falling to 5.7/s at 18 s and back to 9.7/s at 41 s, 20 ms
    # answers (seed 102's shifting02 of the random farm). The recall's first step, at 34.8 s while the
    # limit was still low, was refused, and every send fitted one counter, 88 per 18.6 s: pinned at
    # 4.6/s, the 7.7/s held before the fall forgotten, the next probe 370 s away (the hold rule, a
    # failed probe costing a period): 4.6/s to the end. The refusal came under the level carried before
    # it, so that level survives the pin, and the recall tries it again once a failure would cost a
    # quarter of the wait (a lock-out of 18.6 s: 74 s after the refusal).
    limiter = RequestRate(85.0, 8.8)
    limiter._start = -0.662 * 8.8
    site = Shifting(limiter, [(18.0, 0.59), (41.0, 1.0)])
    await crawl(site, 112.0, latency=0.02)
    assert site.rate(18.0, 41.0) <= 5.9  # it followed the limit down
    assert site.rate(98.0, 112.0) >= 6.5  # was 4.6
    assert len(site.refused) <= 20  # was 18


async def test_a_lock_out_fit_far_under_the_cycle_before_is_a_fall_recalled_at_that_cycle() -> None:
    # HAProxy-style, 85 per 13 s (6.5/s), falling to 3.6/s at 24 s and rising to 8.5/s at 44 s, 20 ms
    # answers (seed 311's shifting07 of the random farm). The fall's refusal came at 6.8/s, where the
    # scope had climbed over the counter, and the counter fit forgot it as an overshoot; the fall's
    # lock-out fitted 2.2/s where the cycle before had let 7.3/s through, and with no memory left the hold
    # rule (a twentieth of the crawl per probe, after a lock-out of 7.4 s) kept it at 2.2/s to the end.
    # A fit under half the cycle before is no steady counter's: that cycle's rate is recalled.
    limiter = RequestRate(85.0, 13.0)
    limiter._start = -0.128 * 13.0
    site = Shifting(limiter, [(24.0, 0.55), (44.0, 1.3)])
    await crawl(site, 70.0, latency=0.02)
    assert site.rate(24.0, 44.0) <= 3.6  # it followed the limit down
    assert site.rate(50.0, 70.0) >= 6.5  # was 2.2
    assert len(site.refused) <= 22  # was 20


# Slow buckets with no burst, 30 s (the simulator's 429 at 70 ms; its Retry-After wait at 70 ms): after
# the start's overshoot the scope paced at 2.0/s and 4.75/s for a round and more with no refusal, while
# the bucket took one send a second (1.5/s and 2.4/s). Remembered as the level held before a fall, that
# pace drew the recall's search back up to it twice, each try refused at a limit that never moved
# (bench/results/recall1.md and recall2.md). What the site took in the round is the level.
@pytest.mark.parametrize(("rate", "style", "most"), [(1.5, "sim", 5), (2.4, "simwait", 3)])
async def test_a_pace_the_site_took_under_half_of_is_remembered_at_what_it_took(
        rate: float, style: str, most: int, caplog: pytest.LogCaptureFixture) -> None:
    bucket = Bucket(rate, 1.0, wait=style == "simwait")
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        out = await crawl(bucket, 30.0, latency=0.07, seed=1, lag=0.003, told=True, robots=0.005,
                          instant=True, robots_unmeasured=True)
    assert "searching back up to" not in caplog.text  # two searches each before
    assert out.refused <= most  # 6 and 5 before


async def test_a_round_that_ends_a_lock_out_leaves_the_cycles_rate_as_the_memory() -> None:
    # A request-rate counter of 258 per 31 s, its first period mostly spent (seed 310's shifting03 of the
    # random farm), x0.68 at 17 s, x1.4 at 30 s (11.7/s), 20 ms answers. The start's lock-out fitted
    # 28.7/s over its 9.2 s cycle; the search from there was refused 0.2 s later, in a round that was
    # mostly the lock-out's end: the site took 6 sends of it, not for want of room. Remembered at those
    # 6/s, the recall after the rise stopped there (4.1/s from 30 s to 50 s); the cycle's rate is what
    # the site took over a whole cycle, and the recall finds the rise.
    limiter = RequestRate(258.0, 31.0)
    limiter._start = -0.829 * 31.0
    site = Shifting(limiter, [(17.0, 0.68), (30.0, 1.4)])
    await crawl(site, 50.0, latency=0.02)
    assert site.rate(30.0, 50.0) >= 10.0
    assert len(site.refused) <= 30  # 29
