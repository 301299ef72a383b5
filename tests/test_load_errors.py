"""Errors that are not about load (issue 30 item 5), on the fake clock.

A site with no limit that answers a steady share of its requests with 503,
whatever the pace, must keep >= 0.9 of its pace; an overloaded site whose
errors fall when the pace falls still slows it; a site that is down is still
paused and given up by the circuit breaker.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from crawlpace import Throttler
from crawlpace.policy._load_errors import CROWD, EARLY, JUDGE, LoadErrors, crowded, scattered, tallied
from crawlpace.testing import MockClock

URL = "https://flaky.example/page"
#: 20 requests a second at most: 2 slots, 0.1 s apart each, 0.05 s between any two.
PACED: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 2, "DOWNLOAD_DELAY": 0.05,
                         "DOWNLOAD_DELAY_PER_SLOT": 0.1, "RANDOMIZE_DOWNLOAD_DELAY": False,
                         "BACKOFF_JITTER": False}


@dataclass
class Response:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


async def run(clock: MockClock, settings: dict[str, Any], status: Callable[[float], int],
              seconds: float) -> tuple[list[float], Throttler]:
    """Send through two tasks for ``seconds``; ``status(now)`` answers each after 0.02 s."""
    throttler = Throttler({**PACED, **settings}, clock=clock)
    sends: list[float] = []

    async def task() -> None:
        while clock.now() < seconds:
            try:
                async with throttler.slot(URL) as permit:
                    sends.append(clock.now())
                    await clock.sleep(0.02)
                    permit.feedback(Response(status(clock.now())))
            except Exception:  # the breaker gave the scope up
                return

    await asyncio.gather(task(), task())
    return sends, throttler


async def test_a_steady_share_of_503s_does_not_slow_the_site(clock: MockClock) -> None:
    draw = random.Random(7)
    sends, throttler = await run(clock, {}, lambda now: 503 if draw.random() < 0.25 else 200, 180.0)
    late = [t for t in sends if t >= 60.0]
    # 20/s is the pace the settings allow; after the first minute (one cut, judged, climbed back):
    assert len(late) / 120.0 >= 0.9 * 20.0, len(late) / 120.0
    stats = await throttler.scope_stats("flaky.example")
    assert stats is not None
    assert stats.breaker == "closed"
    await throttler.aclose()


async def test_errors_that_fall_with_the_pace_still_slow_it(clock: MockClock) -> None:
    # An overloaded site: above 10/s every other answer is a 503, below it none.
    recent: list[float] = []

    def status(now: float) -> int:
        recent.append(now)
        while recent and recent[0] < now - 1.0:
            recent.pop(0)
        return 503 if len(recent) > 10 and len(recent) % 2 else 200

    sends, throttler = await run(clock, {"BREAKER_ENABLED": False}, status, 120.0)
    late = [t for t in sends if t >= 60.0]
    assert len(late) / 60.0 <= 12.0  # held near the knee, not back at 20/s
    await throttler.aclose()


async def test_a_site_that_is_down_is_still_given_up(clock: MockClock) -> None:
    sends, throttler = await run(clock, {"BREAKER_PAUSE": 6.0, "BREAKER_GIVE_UP_AFTER": 5},
                                 lambda now: 503, 120.0)
    stats = await throttler.scope_stats("flaky.example")
    assert stats is not None
    assert stats.breaker == "given_up"
    assert len(sends) < 40
    await throttler.aclose()


def test_the_verdict_compares_the_share_before_a_cut_with_the_share_after() -> None:
    errors = LoadErrors()
    for n in range(40):  # 25 % errors at the old pace
        errors.record("s", sent_at=n, error=n % 4 == 0)
    errors.slowed(40.0, None)
    assert errors.judging
    n = 0
    while n < JUDGE and (n == 0 or errors.judging):  # 25 % again at the new pace: not load
        errors.record("s", sent_at=41.0 + n, error=n % 4 == 0)
        n += 1
    assert errors.plain
    # One error among the first EARLY: even successes for the rest of JUDGE could not show a fall.
    assert n == EARLY
    after = sum(i % 4 == 0 for i in range(n))
    assert errors.share == (10 + after) / (40 + n)  # both samples pooled, not the few after the cut
    assert errors.tolerable == max(0.25, errors.share)  # the breaker tolerates the higher of the two

    overloaded = LoadErrors()
    for n in range(40):
        overloaded.record("s", sent_at=n, error=n % 2 == 0)
    overloaded.slowed(40.0, None)
    for n in range(JUDGE):  # one error in twenty after the cut: it was load
        overloaded.record("s", sent_at=41.0 + n, error=n == 0)
    assert not overloaded.plain

    judged = errors
    for n in range(40):  # a site judged flaky that starts failing most requests: believed again
        judged.record("s", sent_at=100.0 + n, error=n % 5 != 0)
    assert not judged.plain


def test_the_verdict_comes_early_when_the_rest_could_not_show_a_fall() -> None:
    # A cut at 0.5/s whose share before rests on the breaker's four outcomes (2 of 4): no sample after
    # it can be clearly lower, so ten outcomes at that pace (20 s) only delayed the verdict.
    # Nor could any: under rampup the verdict comes with the cut (waiting for EARLY outcomes at the
    # cut's 0.5/s cost a flaky site 6 s, and the climb back after it).
    errors = LoadErrors()
    errors.slowed(5.0, 1 / 3, 3, at_once=True)  # the breaker's 1 of 3, and the error that made the cut
    assert errors.plain
    assert not errors.judging
    assert errors.tolerable == 0.5  # the breaker tolerates the higher of the two
    # The share learned pools the four outcomes before and those after the verdict until there are
    # _KNOWN of them.
    assert errors.share == 0.5
    assert not errors.learned()
    for n in range(6):
        errors.record("s", sent_at=6.0 + n, error=False)
    assert errors.learned()
    assert errors.share == 0.2
    # Two of twenty before can be beaten by none after the cut either, nor 10 of 40 (all ten fall
    # before by chance 8 % of the time: both shares are samples); 20 of 40 can: that one waits.
    for period, judging in ((10, False), (4, False), (2, True)):
        errors = LoadErrors()
        for n in range(40 if period < 10 else 20):
            errors.record("s", sent_at=n, error=n % period == 0)
        errors.slowed(40.0, None, at_once=True)
        assert errors.judging is judging
        assert errors.plain is not judging
    # The default backoff keeps its cut for EARLY outcomes (at_once=False).
    errors = LoadErrors()
    errors.slowed(5.0, 1 / 3, 3)
    assert errors.judging
    for n in range(EARLY):
        errors.record("s", sent_at=6.0 + 2.0 * n, error=n == 1)
    assert errors.plain
    # A share before measured on forty outcomes can be beaten: the verdict waits for the whole sample.
    overloaded = LoadErrors()
    for n in range(40):
        overloaded.record("s", sent_at=n, error=n % 2 == 0)
    overloaded.slowed(40.0, None)
    for n in range(JUDGE - 1):
        overloaded.record("s", sent_at=41.0 + n, error=False)
        assert overloaded.judging
    overloaded.record("s", sent_at=50.0, error=False)
    assert not overloaded.judging
    assert not overloaded.plain


def test_a_share_on_two_outcomes_is_never_clearly_beaten() -> None:
    # Two errors in a row first: the breaker's 1 of 1 and the error that made the cut, a share of 1
    # with a Wald spread of 0. One error in the ten after the cut read as a clear fall: "about load".
    errors = LoadErrors()
    errors.slowed(1.0, 1.0, 1)
    assert errors.judging
    for n in range(EARLY):
        errors.record("s", sent_at=2.0 + n, error=n == 1)
    assert errors.plain
    # Under rampup the verdict is known at the cut; three errors of three can be beaten.
    errors = LoadErrors()
    errors.slowed(1.0, 1.0, 1, at_once=True)
    assert errors.plain
    errors = LoadErrors()
    errors.slowed(1.0, 1.0, 2, at_once=True)
    assert errors.judging


def test_a_share_learned_on_two_errors_first_is_learned_on_and_believed_again() -> None:
    # Two 503s among a site's first sends: a share of 1 on two outcomes, judged not about load at the
    # cut. Kept as the share learned, no error rate could be "clearly above" twice of it, and a site
    # whose errors then followed its load was never believed again.
    errors = LoadErrors()
    errors.record("s", sent_at=0.0, error=True)
    errors.record("s", sent_at=1.0, error=True)
    errors.slowed(1.5, 1.0, 1, at_once=True)  # the breaker's 1 of 1, and the error that made the cut
    assert errors.plain
    assert not errors.learned()
    for n in range(9):  # the outcomes after the verdict are the sample
        errors.record("s", sent_at=2.0 + n, error=False)
    assert errors.learned()
    assert errors.share == 0.1
    for n in range(30):  # then half of the answers fail: clearly past twice the share learned
        errors.record("s", sent_at=11.0 + n, error=n % 2 == 0)
    assert not errors.plain


def _tally(draws: list[tuple[int, bool]]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    answers = quick = (0.0,) * CROWD
    for met, refused in draws:
        answers = tallied(answers, met)
        if refused:
            quick = tallied(quick, met)
    return answers, quick


def test_quick_errors_that_follow_the_count_in_flight_are_a_caps() -> None:
    rng = random.Random(5)
    # A door of 6 in flight, and a backend failing 10 % at once whatever the count.
    door = _tally([(met, met > 6 or rng.random() < 0.1) for met in rng.choices(range(1, 9), k=400)])
    assert crowded(*door, 7)
    assert not scattered(*door, 7)
    assert not crowded(*door, 4)  # under the door: the backend's share, as under any count
    # The backend's failures alone: the same share at every count, at any split.
    flat = _tally([(met, rng.random() < 0.1) for met in rng.choices(range(1, 9), k=400)])
    assert not any(crowded(*flat, met) for met in range(1, CROWD + 1))
    assert scattered(*flat, 6)
    # A site that is down refuses at every count: neither (the breaker's, seed 003).
    down = _tally([(met, True) for met in rng.choices(range(1, 9), k=400)])
    assert not any(crowded(*down, met) or scattered(*down, met) for met in range(1, CROWD + 1))
    # Too few answers past the count to say either.
    few = _tally([(1, False)] * 20 + [(7, True)] * (EARLY - 1))
    assert not crowded(*few, 7)
    assert not scattered(*few, 7)


def test_the_crowding_test_weighs_thousands_of_answers_past_a_count() -> None:
    # Past a thousand answers at a count (the tally is kept for the whole crawl), the binomial tail's
    # coefficients outgrew a float and the scope's outcome raised OverflowError (a site failing half
    # of its requests at once, whatever the count, on a long crawl).
    below = [(1, n % 5 == 0) for n in range(100)]
    cap = _tally(below + [(3, n % 10 != 0) for n in range(2400)])  # 90 % refused past it
    assert crowded(*cap, 3)
    even = _tally(below + [(3, n % 2 == 0) for n in range(2400)])  # half: within chance of the pooled share
    assert not crowded(*even, 3)


def test_an_error_soon_after_refusals_judged_stopped_is_the_sites_own() -> None:
    # A quick 503 in 4 of 16 outcomes, none in the 23 after the cut: "about load" (all four errors of
    # 39 outcomes among the first 16 by chance: 2 %). An error among as many outcomes
    # again, sent after the cut at the slower pace, is no limiter's below its rate: the site's own.
    errors = LoadErrors()
    for t in range(16):
        errors.record("s", sent_at=float(t), error=t % 4 == 3)
    errors.slowed(16.0, None, at_once=True, quick=True)
    assert errors.judging
    assert errors.quick == 23
    for t in range(errors.quick):
        errors.record("s", sent_at=17.0 + t, error=False)
    assert errors.slows()  # about load: neither plain nor judging
    for t in range(3):
        errors.record("s", sent_at=40.0 + t, error=False)
    errors.record("s", sent_at=43.0, error=True)
    assert errors.plain  # judged again with it: 1 of 27 after, a quarter before, not clearly fewer
    assert not errors.slows()


def test_refusals_that_stay_stopped_are_still_load() -> None:
    # The same cut, but the refusals do not come back while watched: load it stays, and an error long
    # after (the pace climbed back to the limiter's rate) slows the scope as load does.
    errors = LoadErrors()
    for t in range(16):
        errors.record("s", sent_at=float(t), error=t % 4 == 3)
    errors.slowed(16.0, None, at_once=True, quick=True)
    for t in range(2 * errors.quick):
        errors.record("s", sent_at=17.0 + t, error=False)
    errors.record("s", sent_at=50.0, error=True)
    assert not errors.plain
    assert errors.slows()



@pytest.mark.parametrize(("bad", "n", "clean"), [(2, 5, 10), (3, 33, 25), (2, 12, 13)])
def test_a_few_quick_errors_that_stop_after_a_cut_are_weighed_as_two_samples(
        bad: int, n: int, clean: int) -> None:
    # Two quick 502s in a site's first five outcomes, then ten clean ones after the cut, were "about
    # load": at 40 % taken as known, none in ten is a rarity (0.6 %); so were 25 clean after 3 in 33 and
    # 13 after 2 in 12 (a tenth each). Both shares are samples: with every outcome as likely to be an
    # error, all the errors fall among the outcomes before one time in ten, six and five. A site failing
    # 11 % of its requests (5123:errors26) was fitted a bucket at 2-4/s and took 23 s (1.4 s clean).
    # The verdict waits for the outcomes that tell (or, where no patience would, is the site's own).
    errors = LoadErrors()
    for t in range(n):
        errors.record("s", sent_at=float(t), error=t % (n // bad) == n // bad - 1 and t < bad * (n // bad))
    assert errors.recent.bit_count() == bad
    # The breaker's share before (under ten outcomes the rule's own memory is no share yet).
    errors.slowed(float(n), (bad - 1) / (n - 1), n - 1, at_once=True, quick=True)
    for t in range(clean):
        errors.record("s", sent_at=n + 1.0 + t, error=False)
    assert not errors.slows()  # not "about load" on so few
    errors.record("s", sent_at=n + 1.0 + clean, error=True)  # the site's own errors recur at its share
    assert errors.plain


def test_quick_errors_no_clean_run_could_tell_from_chance_are_the_sites_own_at_once() -> None:
    # 4 quick 503s in 40 outcomes (10 %): at 10 % taken as known, 22 clean outcomes after the cut were
    # "load", and a Wald test calls 0 of 10 after clearly fewer; all four fall among the first 40 of 62
    # one time in six, and no run of 30 clean ones makes that a rarity: the verdict is known at the cut.
    errors = LoadErrors()
    for t in range(40):
        errors.record("s", sent_at=float(t), error=t % 10 == 9)
    errors.slowed(40.0, None, at_once=True, quick=True)
    assert errors.plain
    assert not errors.judging


def test_a_share_after_of_none_is_weighed_as_a_sample_too() -> None:
    # 4 errors of 40 before a cut, none of the 10 after: all four fall before by chance 40 % of the
    # time, so slowing down did not clearly lower them (two standard deviations of the two shares
    # had called it "clearly fewer": the spread of a share of 0 is 0). The default backoff's cut
    # (at_once=False) waits for its sample and judges it the site's own.
    errors = LoadErrors()
    for n in range(40):
        errors.record("s", sent_at=n, error=n % 10 == 0)
    errors.slowed(40.0, None)
    waits_for_its_sample = errors.judging
    assert waits_for_its_sample
    for n in range(JUDGE):
        errors.record("s", sent_at=41.0 + n, error=False)
    assert not errors.judging
    assert errors.plain
    # Half of forty before, none of ten after: clearly fewer, about load.
    overloaded = LoadErrors()
    for n in range(40):
        overloaded.record("s", sent_at=n, error=n % 2 == 0)
    overloaded.slowed(40.0, None)
    for n in range(JUDGE):
        overloaded.record("s", sent_at=41.0 + n, error=False)
    assert not overloaded.judging
    assert not overloaded.plain


def test_a_failure_at_the_starting_pace_with_nothing_known_before_it_is_judged_at_once() -> None:
    # The first error (a hang at 1/s, right after robots.txt) with no outcome counted before it and
    # no breaker window yet: the cut was not judged at all ("nothing to compare with"), the next
    # errors read as a lock-out's, and a flaky site was probed once per 4-5 s (4514:errors03: 45 s).
    errors = LoadErrors()
    errors.record("s", sent_at=1.0, error=True)
    errors.slowed(1.0, None, 0, at_once=True, unrisen=True)
    assert errors.plain
    assert not errors.judging
    assert not errors.learned()  # its share is learned from the outcomes that follow
    # Past the start (not unrisen), nothing to compare with still leaves the cut unjudged.
    errors = LoadErrors()
    errors.record("s", sent_at=1.0, error=True)
    errors.slowed(1.0, None, 0, at_once=True)
    assert not errors.plain
    assert not errors.judging


def test_a_burst_at_the_share_learned_is_not_believed_again() -> None:
    # A share of 8.6 % learned on 58 outcomes (the breaker's 4 of 57 and the error that made the cut);
    # then 5 errors in the next 12: at twice that share (17 %), 5 or more in 12 come 5 % of the time,
    # no rarity past two standard deviations (the binomial tail, as the crowding test weighs it). Two
    # standard deviations of a share had believed them about load again (5111:errors24, 18 % 503s).
    errors = LoadErrors()
    errors.record("s", sent_at=0.0, error=True)
    errors.slowed(0.0, 4 / 57, 57, at_once=True)
    assert errors.plain
    assert errors.learned()
    for n in range(11):
        errors.record("s", sent_at=1.0 + n, error=n in (2, 5, 8, 10))
    assert errors.plain
    # Errors clearly past twice the share (9 of the last 16) are believed about load again.
    for n in range(4):
        errors.record("s", sent_at=20.0 + n, error=True)
    assert not errors.plain
