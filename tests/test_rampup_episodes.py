"""Rampup's overshoot episodes and fits, rule by rule, on a scripted clock."""

from __future__ import annotations

import pytest

from crawlpace.policy._rampup_tuning import TUNING
from crawlpace.policy.rampup import Rampup


def controller(**overrides: object) -> Rampup:
    options: dict[str, object] = {"start_rate": 1.0, "min_rate": 1 / 300, "max_rate": 100.0,
                                  "max_concurrency": 8, "window": 60.0, "target": (1.0, 1.0)}
    options.update(overrides)
    return Rampup(**options)  # type: ignore[arg-type]


def answer(ramp: Rampup, sent: float, *, refused: bool = False, latency: float = 0.01) -> None:
    """One request sent at ``sent`` and answered ``latency`` later, under the current generation."""
    ramp.on_send(sent)
    ramp.on_response(sent + latency, pushback=refused, current=True, latency=latency, elapsed=latency)


def steady(ramp: Rampup, rate: float, until: float) -> float:
    """Accepted sends at ``rate`` from 0 to ``until``, the scope put in its steady phase at ``rate``."""
    ramp.phase, ramp.rate, ramp.ceiling = "steady", rate, rate
    now = 0.0
    while now < until:
        answer(ramp, now)
        now += 1.0 / rate
    return now


def test_the_refusals_of_one_overshoot_cut_once_and_slow_the_probes() -> None:
    ramp = controller()
    now = steady(ramp, 20.0, 5.0)
    answer(ramp, now, refused=True)
    cut, generation = ramp.rate, ramp.generation
    assert ramp.in_episode()
    # Every send that follows is refused (a lock-out): none cuts again, each doubles the gap.
    gaps = []
    for _ in range(8):
        gap = 1.0 / ramp.allowed_rate(now)
        gaps.append(gap)
        now += gap
        answer(ramp, now, refused=True)
    assert ramp.rate == cut
    assert ramp.generation == generation
    assert gaps[1] == pytest.approx(2 * gaps[0])
    assert max(gaps) == pytest.approx(TUNING.probe_gap_max)
    assert "same overshoot" in ramp.decision
    answer(ramp, now + TUNING.probe_gap_max)
    assert not ramp.in_episode()


def test_a_lock_out_paces_at_the_rate_the_cycle_let_through() -> None:
    # A window of 30 per 10 s: 30 accepted at 20/s, then refused until the window ends.
    ramp = controller()
    now = steady(ramp, 20.0, 1.5)  # 30 sends
    while now < 10.0:
        answer(ramp, now, refused=True)
        now += 1.0 / ramp.allowed_rate(now)
    answer(ramp, now)  # the next window
    # Cycle: 30 accepted from 0 to the end of the lock-out. The first cycle was not sent at that
    # rate throughout (it began at 20/s), so it is a floor: the level is the middle of it and the cut.
    assert ramp.rate < 20.0
    fit = TUNING.fit_share * 30 / (now + 0.01)
    assert ramp.rate >= fit
    assert "a lock-out" in ramp.decision
    # The lock-out's length (about 8.5 s) is what the next refusal costs: probing waits as after a hold.
    assert ramp.hold_learned > 5.0
    assert ramp._probe_after >= now + 20 * 5.0


def test_a_refusal_just_under_the_shortest_accepted_gap_is_a_bucket_with_no_burst() -> None:
    ramp = controller()
    now = steady(ramp, 9.0, 5.0)  # gaps of 0.111 s accepted
    ramp.rate = 9.5
    last = now - 1.0 / 9.0
    answer(ramp, last + 0.1, refused=True)  # a gap of 0.1 s refused
    assert ramp.rate == pytest.approx(TUNING.fit_share * 9.0, rel=0.01)
    assert "no burst" in ramp.decision


def test_a_bursty_bucket_is_cut_as_before() -> None:
    ramp = controller()
    now = steady(ramp, 9.0, 5.0)
    answer(ramp, now)
    answer(ramp, now + 0.01)  # the burst let a gap of 10 ms through
    before = ramp.rate
    answer(ramp, now + 0.11, refused=True)  # a gap of 0.1 s refused
    assert ramp.rate < before
    assert "no burst" not in ramp.decision


def test_a_held_refusal_soon_after_the_last_resume_is_fitted_as_a_large_burst() -> None:
    ramp = controller()
    now = steady(ramp, 20.0, 3.0)  # shorter than a hold: 20/s was never kept up for one
    ramp.hold(now + 5.0)
    answer(ramp, now, refused=True)  # the first: an ordinary cut, resumed at the level after the hold
    now += 5.0
    answer(ramp, now)  # the hold is over: the episode ends
    answer(ramp, now + 0.05)  # a burst: two accepted at once
    level = ramp.rate
    now += 0.3
    ramp.hold(now + 5.0)
    answer(ramp, now, refused=True)  # refused again within a quarter of a hold of resuming
    # Only a large burst at a low rate fits both stretches (a small one at 20/s would have had a
    # token again 0.3 s after the hold): the level is at least as deep as the old halving's.
    assert ramp.rate <= 0.5 * min(level, ramp.sent_rate(now))


def test_a_held_refusal_after_one_accepted_send_is_cut_as_before() -> None:
    # A bucket with no burst takes one send from a level a little too high: no halving.
    ramp = controller()
    now = steady(ramp, 20.0, 5.0)
    ramp.hold(now + 5.0)
    answer(ramp, now, refused=True)
    now += 5.0
    answer(ramp, now)
    level = ramp.rate
    now += 0.3
    ramp.hold(now + 5.0)
    answer(ramp, now, refused=True)
    assert ramp.rate > 0.6 * min(level, ramp.sent_rate(now))


def test_a_refusal_at_a_count_accepted_before_is_a_slot_freed_late() -> None:
    ramp = controller(start_rate=4.0)
    now = 0.0
    for inflight in (1, 2, 3, 3, 2):  # pages take 0.1 s, up to 3 accepted at once
        ramp.on_send(now)
        ramp.on_response(now + 0.1, pushback=False, current=True, latency=0.1, elapsed=0.1, inflight=inflight)
        now += 0.05
    ramp.on_send(now)
    ramp.on_response(now + 0.001, pushback=True, current=True, latency=0.001, elapsed=0.001, inflight=3)
    assert ramp.slot_cap == 3  # not 2: the server's count held a slot its answer had left
    ramp.on_send(now + 1.0)
    ramp.on_response(now + 1.001, pushback=True, current=True, latency=0.001, elapsed=0.001, inflight=4)
    assert ramp.slot_cap == 3  # 4 were never accepted: the cap is under 4


def test_a_held_refusal_past_a_quarter_of_a_hold_or_at_a_pace_kept_up_is_cut_as_before() -> None:
    # A bucket with no burst refuses now and then a send that the crawler's own delays bunched,
    # at a pace a little under its limit: no burst was spent, and a halving would waste the rest.
    ramp = controller()
    now = steady(ramp, 20.0, 5.0)
    ramp.hold(now + 5.0)
    answer(ramp, now, refused=True)
    now += 5.0
    answer(ramp, now)
    answer(ramp, now + 1.0)
    level = ramp.rate
    ramp.hold(now + 7.5)
    answer(ramp, now + 2.5, refused=True)  # half a hold after resuming
    assert ramp.rate > 0.6 * min(level, ramp.sent_rate(now + 2.5))
    # That stretch was short of a hold; one of a whole hold's length is noted as kept up, and a
    # relapse at that pace or under, however soon, is not a burst's.
    now += 7.5
    answer(ramp, now)
    pace = ramp.rate
    t = now
    while t < now + 5.5:
        t += 1.0 / pace
        answer(ramp, t)
    ramp.hold(t + 0.3 + 5.0)
    answer(ramp, t + 0.3, refused=True)  # kept up for 5.5 s: noted as kept up
    resumed = t + 5.3
    answer(ramp, resumed)
    answer(ramp, resumed + 0.1)
    level = ramp.rate
    ramp.hold(resumed + 0.2 + 5.0)
    answer(ramp, resumed + 0.2, refused=True)  # soon after resuming, at a pace kept up before
    assert ramp.rate > 0.6 * min(level, ramp.sent_rate(resumed + 0.2))


def test_a_refusal_of_the_page_sent_at_once_after_robots_txt_cuts_nothing() -> None:
    # nginx's limit_req with no burst refuses a page 9 ms after robots.txt: a gap, not a rate.
    ramp = controller()
    ramp.on_send(0.0)
    ramp.on_response(0.005, pushback=False, current=True, latency=None, elapsed=0.005)  # robots.txt
    assert ramp.door_open()
    ramp.on_send(0.009)  # the first page, at once
    rate, generation = ramp.rate, ramp.generation
    ramp.on_response(0.011, pushback=True, current=True, latency=0.002, elapsed=0.002)
    assert (ramp.rate, ramp.generation, ramp.phase) == (rate, generation, "start")
    assert "door" in ramp.decision
    # A refusal of a later page, at the rate, is judged as before.
    ramp.on_send(1.009)
    ramp.on_response(1.011, pushback=True, current=True, latency=0.002, elapsed=0.002)
    assert ramp.generation == generation + 1


def test_a_lock_out_after_a_plain_cut_is_fitted_over_twice_its_length() -> None:
    # A sliding window of 113 per 5.1 s that counts refusals, halved at 20 s (56: 11/s), sent one request
    # at a time at the pace rampup allows. After the first lock-out's fit the search overshoots, is cut
    # (an episode that ends at its first probe: no lock-out), and the window's fall locks the scope out
    # 3.4 s after that episode's end. Fitting that cycle alone, 15 through in 4.2 s, paced the scope at
    # 3.5/s: the window still counted the sends from before the cut.
    ramp = controller()
    counted: list[float] = []
    now, fits = 0.0, []
    while now < 30.0:
        now += 1.0 / ramp.allowed_rate(now)
        counted = [at for at in counted if at > now - 5.1]
        counted.append(now)
        before = ramp.decision
        answer(ramp, now, refused=len(counted) > (113 if now < 20.0 else 56))
        if ramp.decision != before and ramp.decision.startswith("fit:"):
            fits.append((now, ramp.rate))
    after = [rate for at, rate in fits if at > 20.0]
    assert after
    assert 0.6 * 56 / 5.1 <= after[0] <= 56 / 5.1


def test_a_lock_out_after_a_burst_counts_the_burst_as_tokens_spent_at_once() -> None:
    # A window of 4 per 1.53 s on the clock, sent by a start at the gap cap (one send per 10 ms, the
    # timing slack): robots.txt and four pages accepted within 40 ms, then refused until the window
    # ends 0.647 s after the first send. The cycle's 5 / 0.647 s paced at 11.7/s, over four times
    # the window's 2.6/s, and the search above it drew refusal after refusal. The burst shows the
    # window's depth, not its rate: one send per lock-out is the floor, the count over the cycle
    # the top of the search.
    ramp = controller()
    now = steady(ramp, 100.0, 0.05)  # 5 accepted, 10 ms apart
    while now < 0.647:
        answer(ramp, now, refused=True)
        now += 1.0 / ramp.allowed_rate(now)
    answer(ramp, now)
    span = now + 0.01  # from the first send to the answer that ended the lock-out
    assert "5 of them at once" in ramp.decision
    assert ramp.rate == pytest.approx(TUNING.fit_share / span)
    assert ramp.rate < 4 / 1.53
    assert ramp._top >= TUNING.fit_share * 5 / span


def test_a_lock_out_after_sends_at_a_pace_is_fitted_as_before() -> None:
    # The same window sent at 25/s (40 ms apart, wider than the timing slack): the cycle's count over
    # its length is the rate the limiter let through, and nothing of it was spent at once.
    ramp = controller()
    now = steady(ramp, 25.0, 0.2)
    while now < 1.53:
        answer(ramp, now, refused=True)
        now += 1.0 / ramp.allowed_rate(now)
    answer(ramp, now)
    assert "a lock-out" in ramp.decision
    assert ramp.rate >= TUNING.fit_share * 5 / (now + 0.01)


def test_an_accepted_gap_is_the_longest_the_arrivals_may_have_had() -> None:
    # Sends stamped 70 ms apart, the second answered 0.2 s later than the quickest answer: it may have
    # reached the site that much late, so the site is known to have accepted no gap under 0.27 s, and
    # the shortest accepted gap stays the 0.2 s of the even pace (from the stamps it read 70 ms).
    ramp = controller()
    now = steady(ramp, 5.0, 5.0)
    answer(ramp, now)
    answer(ramp, now + 0.07, latency=0.21)
    assert ramp.shortest_ok_gap == pytest.approx(0.2)


def test_an_answer_within_a_timers_slack_moves_no_accepted_gap() -> None:
    # The site's own spread (an answer 5 ms slower than the quickest) is no late arrival.
    ramp = controller()
    now = steady(ramp, 5.0, 5.0)
    answer(ramp, now)
    answer(ramp, now + 0.07, latency=0.015)
    assert ramp.shortest_ok_gap == pytest.approx(0.07)


def test_a_refusal_that_may_have_arrived_past_the_shortest_accepted_gap_is_no_bucket_with_no_burst() -> None:
    # Gaps of 0.111 s accepted; a send 0.1 s after the last is refused, but its answer came 50 ms late:
    # it may have reached the site 0.15 s after the accepted one, longer than any gap accepted, so it
    # is no sign of a bucket with no burst, which lets the jitter rule forgive later refusals whose
    # delays lie within the arrivals' usual spread. (Read from the stamps, it was.)
    ramp = controller()
    now = steady(ramp, 9.0, 5.0)
    ramp.rate = 9.5
    last = now - 1.0 / 9.0
    answer(ramp, last + 0.1, refused=True, latency=0.06)
    assert not ramp._no_burst
    # The same refusal answered as quickly as the others is the sign.
    ramp = controller()
    now = steady(ramp, 9.0, 5.0)
    ramp.rate = 9.5
    last = now - 1.0 / 9.0
    answer(ramp, last + 0.1, refused=True)
    assert ramp._no_burst


def test_a_steady_refusal_that_may_have_arrived_past_the_shortest_accepted_gap_fits_no_strict_gap() -> None:
    # Gaps of 0.2 s accepted; a send 0.19 s after the last is refused, its answer 60 ms late: it may have
    # reached the site 0.24 s after the accepted one, longer than any gap accepted, so the cut stands
    # and the level is not lifted to the accepted gap's rate. (Read from the stamps, it was: under lag
    # a 5.44/s bucket with holds was paced "evenly" at twice its fit after the hold.)
    ramp = controller()
    now = steady(ramp, 5.0, 5.0)
    last = now - 0.2
    answer(ramp, last + 0.19, refused=True, latency=0.07)
    assert "no burst" not in ramp.decision
    assert ramp.rate < TUNING.fit_share / 0.2
    # The same refusal answered as quickly as the others fits a bucket with no burst.
    ramp = controller()
    now = steady(ramp, 5.0, 5.0)
    last = now - 0.2
    answer(ramp, last + 0.19, refused=True)
    assert "a bucket with no burst" in ramp.decision
    assert ramp.rate == pytest.approx(TUNING.fit_share / 0.2)
