"""Rampup, the pure controller: every rule with a scripted clock, then whole runs
against a token bucket driven by virtual time (no sockets, no sleeping)."""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from crawlpace import Settings, Throttler
from crawlpace.policy._rampup_tuning import TUNING
from crawlpace.policy.rampup import RAMPUP_JITTER, Rampup
from crawlpace.testing import MockClock


def controller(**overrides: object) -> Rampup:
    options: dict[str, object] = {"start_rate": 1.0, "min_rate": 1 / 300, "max_rate": 100.0,
                                  "max_concurrency": 8, "window": 60.0, "target": (1.0, 1.0)}
    options.update(overrides)
    return Rampup(**options)  # type: ignore[arg-type]


def send_and_answer(ramp: Rampup, now: float, *, pushback: bool = False, latency: float = 0.002,
                    generation: int | None = None) -> None:
    """One request sent at ``now`` under ``generation`` (the current one by default)."""
    sent_under = ramp.generation if generation is None else generation
    ramp.on_send(now)
    ramp.on_response(now + latency, pushback=pushback, current=sent_under == ramp.generation,
                     latency=latency)


def drive(ramp: Rampup, start: float, end: float, **kwargs: object) -> float:
    """Send as fast as the controller allows from ``start`` to ``end``; return the end time."""
    now = start
    while now < end:
        send_and_answer(ramp, now, **kwargs)  # type: ignore[arg-type]
        now += 1.0 / ramp.allowed_rate(now)
    return now


# -- the start phase ------------------------------------------------------------


def test_a_new_scope_doubles_its_rate_every_three_answers_at_the_pace_while_it_uses_it() -> None:
    # A site answering in 2 ms: latency says nothing of its load, so a doubling waits for three
    # answers at the pace it doubles (TUNING.confirm), within [0.5 s, 1 s]: a whole second under
    # 3/s, where a limit of a few per second is met no sooner than before, half a second from 6/s.
    ramp = controller()
    assert ramp.phase == "start"
    assert ramp.rate == 1.0
    drive(ramp, 0.0, 2.0)
    # The first answer counts a whole round, then one-second rounds, held back a little by the
    # send-rate cap: at most 2 ** 2.
    assert 2.0 <= ramp.rate <= 4.5
    drive(ramp, 2.0, 4.0)
    assert ramp.phase == "start"
    # Then half-second rounds: about 2 ** 4 more in two seconds. (With one-second rounds
    # throughout, at most 2 ** 5 = 32 by now: a 40/s site took two seconds longer to reach.)
    assert 40.0 <= ramp.rate <= 4.5 * 2 ** 4.5


def test_the_start_phase_ends_at_the_cap_and_never_crosses_it() -> None:
    ramp = controller(max_rate=5.0)
    drive(ramp, 0.0, 10.0)
    assert ramp.rate == 5.0
    assert ramp.phase == "steady"
    assert "reached the cap" in ramp.decision


def test_an_idle_scope_learns_nothing_and_banks_nothing() -> None:
    ramp = controller(start_rate=2.0)
    for second in range(60):  # answers trickle in, but the scope sends one request a minute
        ramp.on_response(float(second), pushback=False, current=True, latency=0.01)
    assert ramp.rate == 2.0
    ramp.rate = 50.0  # as if it had learned 50/s long ago
    ramp.on_send(100.0)
    # One send in the last second: twice that is what it may send now, never 50/s.
    assert ramp.allowed_rate(100.0) == pytest.approx(2.0)
    assert ramp.allowed_rate(160.0) == 2.0  # the starting rate is the floor of the cap


def test_a_scope_sending_under_half_its_rate_does_not_grow() -> None:
    ramp = controller(start_rate=10.0)
    now = 0.0
    for _ in range(30):  # one send per second against an allowance of 10/s
        send_and_answer(ramp, now)
        now += 1.0
    assert ramp.rate == 10.0


def test_a_shared_send_record_follows_the_spacings_in_the_start_phase_and_the_stores_mean_after() -> None:
    # A shared store's mean gap weighs each new gap by a quarter; the start phase weighs
    # them by three quarters, so while it lasts the spacings of the worker's own sends count.
    ramp = controller(start_rate=2.0)
    ramp._start_latency(0.6)  # a site answering in 0.6 s: it doubles every 0.6 s
    ramp.sync_sends(None, 0.0)
    ramp.sync_sends(0.5, 0.5, 0.5)
    ramp.sync_sends(0.44, 0.6, 0.1)  # the store's mean lags; the spacing says 10/s
    assert ramp._gap == pytest.approx(0.5 + 0.75 * (0.1 - 0.5))
    ramp.phase = "steady"
    ramp.sync_sends(0.3, 0.7, 0.1)
    assert ramp._gap == 0.3  # past the start, the store's mean is the record


# -- cuts ---------------------------------------------------------------------


def test_a_pushback_in_the_start_phase_halves_the_rate_and_levels_out_under_the_good_rate() -> None:
    # Answers in 2 ms, one-second rounds: sends 0.5 s apart grow the rate by a factor
    # 2 ** 0.5 each, so the last answered send (the good rate) is 0.71 of the refused one.
    ramp = controller(start_rate=2.0)
    for now in (0.0, 0.5, 0.854):
        send_and_answer(ramp, now)
    good = ramp._good_rate
    refused = ramp.allowed_rate(1.1)
    send_and_answer(ramp, 1.1, pushback=True)
    assert ramp.last_pushback_rate == pytest.approx(refused)
    assert 0.5 * refused < good < refused
    assert ramp.generation == 1
    assert ramp.pushbacks(1.1) == 1
    assert ramp.rate == pytest.approx(0.5 * refused, rel=0.01)
    # The climb levels out at 0.95 x the good rate (the limit lies between it and the
    # refused one), not at 0.85 x the refused rate, which is above it.
    assert ramp.ceiling == pytest.approx(0.95 * good)
    assert 0.95 * good < 0.85 * refused


def test_a_good_rate_a_whole_doubling_below_the_refused_one_sets_no_ceiling() -> None:
    ramp = controller()
    send_and_answer(ramp, 0.0)
    send_and_answer(ramp, 1.0)  # a whole round: 1/s -> 2/s
    send_and_answer(ramp, 1.5, pushback=True)
    assert ramp.rate == pytest.approx(1.0, rel=0.01)
    assert ramp.ceiling == pytest.approx(0.85 * 2.0, rel=0.01)


def test_without_a_good_rate_the_ceiling_is_a_share_of_the_refused_rate() -> None:
    ramp = controller(start_rate=2.0)
    ramp.on_send(0.0)
    send_and_answer(ramp, 0.5, pushback=True)  # a gap sent, refused before any send was answered
    assert ramp.rate == pytest.approx(1.0)
    assert ramp.ceiling == pytest.approx(TUNING.start_ceiling_share * 2.0)


def test_a_refusal_of_the_first_send_cuts_nothing() -> None:
    # No gap was sent yet: the refusal says nothing of a rate. The next refusal, after a gap, cuts.
    ramp = controller(start_rate=2.0)
    send_and_answer(ramp, 0.0, pushback=True)
    assert (ramp.phase, ramp.rate, ramp.generation) == ("start", 2.0, 0)
    send_and_answer(ramp, 0.5, pushback=True)
    assert ramp.phase == "steady"
    assert ramp.rate == pytest.approx(1.0)


def test_errors_judged_the_sites_own_give_back_the_good_rate() -> None:
    # A 503 at 4/s halved the rate; judged the site's own, the doubling starts again from the start
    # phase's good rate, not from the cut.
    ramp = controller()
    end = drive(ramp, 0.0, 3.0)
    good = ramp._good_rate
    assert good >= 2.0
    send_and_answer(ramp, end, pushback=True)
    assert ramp.rate < good
    ramp.forgive(end + 0.1)
    assert ramp.phase == "start"
    assert ramp.rate == pytest.approx(good)


def test_a_start_phase_begun_again_takes_the_rate_in_force_as_good() -> None:
    ramp = controller()
    drive(ramp, 0.0, 3.0)
    send_and_answer(ramp, 3.0, pushback=True)
    ramp._start_again()  # what a window above the ceiling without pushback does
    assert ramp.phase == "start"
    assert ramp._good_rate == ramp.rate


def test_a_site_with_a_measurable_latency_doubles_every_round_trip() -> None:
    # 50 ms answers: the rate starts from one request in flight back to back (1 / 50 ms),
    # and the round is the lowest latency seen, at least half a second, so an answer
    # 0.5 s after the last growth doubles the rate (at most once), where a 2 ms site
    # (one-second rounds, no window of one) gains a factor 2 ** 0.5.
    slow, quick = controller(), controller()
    send_and_answer(slow, 0.0, latency=0.05)
    send_and_answer(quick, 0.0, latency=0.002)
    # One answer lets the next send go at once (the window of one), but the doubling starts
    # from it only once three answers have shown the latency.
    assert slow.allowed_rate(0.05) == pytest.approx(20.0)
    assert slow.rate == pytest.approx(2 ** (0.05 / 0.5), rel=0.01)
    for i in range(1, 10):  # back to back for another 0.45 s of answers
        send_and_answer(slow, 0.05 * i, latency=0.05)
    send_and_answer(quick, 0.5, latency=0.002)
    # 50 ms answers in half-second rounds: 2 ** 0.1 per answer from 20/s (the measured send
    # rate, catching up with the jump, holds one of them back).
    assert 20.0 * 2 ** 0.7 <= slow.rate <= 20.0 * 2 ** 0.9 * 1.01
    assert quick.rate == pytest.approx(2 ** 0.5, rel=0.01)
    # A first answer slowed by its connection's set-up does not make a quick site slow.
    first_slow = controller()
    send_and_answer(first_slow, 0.0, latency=0.08)
    send_and_answer(first_slow, 0.5, latency=0.001)
    assert first_slow._start_round() == 1.0
    assert first_slow._start_floor() == 0.0  # nor keeps it a window of one ...
    before = first_slow.rate
    send_and_answer(first_slow, 0.85, latency=0.001)
    assert first_slow.rate == pytest.approx(before * 2 ** 0.35, rel=0.01)  # ... nor doubled from one


def test_a_site_that_shows_service_time_may_keep_one_request_in_flight_back_to_back() -> None:
    # The window of one: a 50 ms site may send its next request as soon as an answer is
    # in (20/s), from its first answer on; a 2 ms site keeps the polite start.
    slow, quick = controller(), controller()
    for ramp, latency in ((slow, 0.05), (quick, 0.002)):
        send_and_answer(ramp, 0.0, latency=latency)
    assert 1.0 / slow.allowed_rate(0.05) == pytest.approx(0.05)  # the next may go at once
    assert quick.allowed_rate(0.002) <= 1.1
    send_and_answer(slow, 0.05, latency=0.05)
    assert slow.allowed_rate(0.1) >= 20.0
    # Outside the start phase there is no floor: a refusal takes the scope under it.
    send_and_answer(slow, 0.1, pushback=True)
    assert slow.phase == "steady"
    assert slow._start_floor() == 0.0
    assert slow.allowed_rate(0.2) < 20.0


def test_a_robots_txt_answer_lets_the_first_page_go_at_once() -> None:
    # robots.txt (no latency measured) answered 10 ms after the first send: the first page
    # may follow at once, not a whole second after; the send after it is paced again.
    ramp = controller()
    ramp.on_send(0.0)
    assert ramp.allowed_rate(0.005) == 1.0  # not answered yet: the starting rate
    ramp.on_response(0.01, pushback=False, current=True, latency=None)
    assert 1.0 / ramp.allowed_rate(0.01) == pytest.approx(0.01)  # the gap since the first send is enough
    # ... on one slot: the workers of a fleet all read the door open before any of them sends.
    assert ramp.concurrency(ramp.allowed_rate(0.01)) == 1
    ramp.on_send(0.01)
    assert ramp.allowed_rate(0.02) <= 2.0  # the door is used: the polite start again
    # ... and its 10 ms gap is no rate the scope sent at: the send-rate cap still holds the climb.
    assert ramp.sent_rate(0.02) <= 1.05
    # Under a pace the server announced (two a second, say), the send after the door's keeps
    # the time it had without the door: two gaps after robots.txt, not one after the first page.
    assert ramp.door_gap(0.5, announced=True) == pytest.approx(1.0 - 0.01)
    # Without one, the early page is the one extra request of the polite start: the next keeps
    # the starting gap after it, however quick the rate allowed.
    assert ramp.door_gap(0.1) == 1.0
    ramp.on_send(1.0)
    assert ramp.door_gap(0.5, announced=True) == 0.5  # from then on, the pace alone
    assert ramp.door_gap(0.1) == 0.1
    # A first answer that is a refusal opens nothing, nor does a page's: two pages back to
    # back may be what a limit without room for a burst refuses.
    refused, page = controller(), controller()
    refused.on_send(0.0)
    refused.on_response(0.01, pushback=True, current=True, latency=0.01)
    assert refused.allowed_rate(0.01) <= 1.0
    page.on_send(0.0)
    page.on_response(0.01, pushback=False, current=True, latency=0.01)
    assert page.allowed_rate(0.01) <= 1.1


def test_the_start_phase_stops_doubling_when_its_slots_hold_the_sends_back() -> None:
    # A slow site (1.5 s answers) whose sends wait for free slots: the measured send rate
    # falls under 40 % of the rate, and the rate stays where it is.
    ramp = controller()
    for second in range(10):
        ramp.on_send(float(second) * 1.5)
        ramp.on_response(float(second) * 1.5 + 1.5, pushback=False, current=True, latency=1.5)
    assert ramp.phase == "start"
    # The first answers doubled it; sending 0.67/s, under 40 % of that, it grows no more.
    assert ramp.rate <= 2.0 * 1.01


def past_the_start(ramp: Rampup) -> float:
    """Drive ``ramp`` to a first refusal at 2 s, then 98 s of climbing back; return the time then."""
    drive(ramp, 0.0, 2.0)
    send_and_answer(ramp, 2.0, pushback=True)  # ends the start phase
    return drive(ramp, 2.0, 100.0)


def test_pushbacks_from_before_the_last_cut_count_once() -> None:
    ramp = controller(start_rate=8.0)
    drive(ramp, 0.0, 2.0)
    old = ramp.generation
    # Eight requests went out together; all eight come back 429.
    for i in range(8):
        ramp.on_send(2.0 + i * 0.001)
    for i in range(8):
        ramp.on_response(2.1 + i * 0.001, pushback=True, current=old == ramp.generation, latency=0.1)
    assert ramp.generation == old + 1
    assert ramp.pushbacks(3.0) == 1


def test_an_ordinary_cut_is_gentle_and_levels_out_below_the_failing_rate() -> None:
    ramp = controller(start_rate=8.0)
    end = past_the_start(ramp)  # a first refusal, then a long climb back with no other
    failing = ramp.allowed_rate(end)
    send_and_answer(ramp, end, pushback=True)
    assert ramp.rate == pytest.approx(0.9 * failing, rel=0.05)
    assert ramp.ceiling == pytest.approx(0.92 * failing, rel=0.05)
    assert "cut: pushback" in ramp.decision


def test_a_cut_that_did_not_help_is_followed_by_a_gentle_one_near_the_last_refusal_then_a_deep_one() -> None:
    ramp = controller(start_rate=8.0)
    end = past_the_start(ramp)  # a first refusal, then a long climb back with no other
    send_and_answer(ramp, end, pushback=True)
    # Refused again soon after, before the rate grew back: the ordinary cut was not enough.
    # The refusal came near the last one's rate, so the limit is just under it: cut gently
    # from this refusal's own send rate (a halving would leave half the limit unused).
    end = drive(ramp, end, end + 0.3)
    sent = min(ramp.allowed_rate(end), ramp.sent_rate(end))
    send_and_answer(ramp, end, pushback=True)
    assert ramp.rate == pytest.approx(0.9 * sent, rel=0.02)
    assert ramp.ceiling == pytest.approx(0.92 * sent, rel=0.02)
    assert "near the last one's rate" in ramp.decision
    # Not enough either: now the limit is further down, and the cut is deep.
    end = drive(ramp, end, end + 0.3)
    before = ramp.allowed_rate(end)
    send_and_answer(ramp, end, pushback=True)
    assert ramp.rate == pytest.approx(before * 0.5, rel=0.1)


def test_a_refusal_once_a_gentle_cuts_level_was_held_is_an_ordinary_one() -> None:
    # The gentle level is a few per cent over its rate, so a refusal there after a while
    # would pass the growth test for "not enough"; it says the level is a little high.
    ramp = controller(start_rate=8.0)
    end = past_the_start(ramp)
    send_and_answer(ramp, end, pushback=True)  # ordinary
    end = drive(ramp, end, end + 0.3)
    send_and_answer(ramp, end, pushback=True)  # gentle
    level = ramp.ceiling
    assert level is not None
    end = drive(ramp, end, end + 20.0)  # the quick climb (7.5 s) reached the level and held it
    sent = min(ramp.allowed_rate(end), ramp.sent_rate(end))
    send_and_answer(ramp, end, pushback=True)
    assert ramp.rate >= 0.8 * sent * 0.99  # at most the over-the-band cut, not a halving
    assert ramp.ceiling == pytest.approx(0.92 * sent, rel=0.02)


def test_a_refusal_far_under_the_last_ones_rate_is_cut_deep_at_once() -> None:
    # A limit that fell far (10/s to 3/s): the second refusal comes well under the rate of
    # the first, which says the limit is not near it. No gentle step there.
    ramp = controller(start_rate=8.0)
    end = past_the_start(ramp)
    send_and_answer(ramp, end, pushback=True)  # an ordinary cut
    assert ramp.last_pushback_rate is not None
    ramp.last_pushback_rate *= 2.0  # as if that refusal had come at twice the rate
    end = drive(ramp, end, end + 0.3)
    before = ramp.allowed_rate(end)
    send_and_answer(ramp, end, pushback=True)
    assert ramp.rate == pytest.approx(before * 0.5, rel=0.1)


def test_more_pushbacks_than_the_band_cut_deeper() -> None:
    # (The refusal comes before the start reaches its cap: 100/s for a site answering in milliseconds,
    # whatever max_rate allows.)
    ramp = controller(start_rate=8.0, max_rate=1000.0)
    drive(ramp, 0.0, 1.5)
    send_and_answer(ramp, 1.5, pushback=True)
    end = drive(ramp, 1.5, 30.0)
    rate = ramp.allowed_rate(end)
    send_and_answer(ramp, end, pushback=True)  # the second in the window: over a band of 1
    assert ramp.rate == pytest.approx(0.8 * rate, rel=0.05)


def test_cuts_stop_at_the_lowest_rate() -> None:
    ramp = controller(start_rate=1.0, min_rate=0.5)
    now = 0.0
    for _ in range(20):
        send_and_answer(ramp, now, pushback=True)
        now += 5.0
    assert ramp.rate == 0.5


def test_after_a_retry_after_hold_it_resumes_at_the_rate_in_force_not_from_the_bottom() -> None:
    ramp = controller(start_rate=1.0)
    end = drive(ramp, 0.0, 4.0)  # doubling: about 8/s
    ramp.on_send(end)
    ramp.on_response(end + 0.002, pushback=True, current=True, latency=0.002)
    cut = ramp.rate
    assert cut > 3.0
    ramp.hold(end + 5.0)  # the refusal said Retry-After: 5
    resumed = end + 5.0
    # Without the rule, five silent seconds read as a send rate of 0.2/s and the
    # scope may send only at its starting rate of 1/s.
    assert ramp.allowed_rate(resumed) == pytest.approx(cut)
    drive(ramp, resumed, resumed + 2.0)
    assert ramp.allowed_rate(resumed + 2.0) >= cut
    # The hold is not averaged into the gaps: the sends after it keep the old spacing.
    assert ramp.sent_rate(resumed + 2.0) >= 0.8 * cut


def first_refusal(ramp: Rampup, hold: float | None) -> tuple[float, float]:
    """Double for 4 s, then a refusal (with a ``hold`` of that many seconds, as a
    Retry-After sets it before the answer reaches rampup); return (refused rate, end)."""
    end = drive(ramp, 0.0, 4.0)
    ramp.on_send(end)
    if hold is not None:
        ramp.hold(end + 0.002 + hold)
    ramp.on_response(end + 0.002, pushback=True, current=True, latency=0.002)
    assert ramp.last_pushback_rate is not None
    return ramp.last_pushback_rate, end


def test_a_first_refusal_with_a_hold_resumes_under_the_ceiling_not_at_half() -> None:
    halved, held, short, second = controller(), controller(), controller(), controller()
    refused, _ = first_refusal(halved, None)
    assert halved.rate == pytest.approx(0.5 * refused, rel=0.01)
    # The same refusal with a 2 s Retry-After: the bucket refilled during the silence,
    # so the sends resume just under the ceiling, not from half the refused rate; and
    # another refusal would cost a whole hold again, so the ceiling keeps more room under
    # the good rate.
    refused_held, end = first_refusal(held, 2.0)
    assert refused_held == pytest.approx(refused)
    # (The climb levels out at 0.85 x the refused rate, or under the good rate when that is lower.)
    good, share = held._good_rate, TUNING.start_ceiling_share
    assert good == pytest.approx(halved._good_rate)
    assert halved.ceiling == pytest.approx(min(share * refused, TUNING.good_ceiling * good))
    assert held.ceiling == pytest.approx(min(share * refused, TUNING.cut * good))
    assert held.ceiling is not None
    assert held.rate == pytest.approx(TUNING.cut * held.ceiling)
    assert held.rate > 0.7 * refused
    # After the hold, the scope may send at that rate at once (not capped by the silence).
    assert held.allowed_rate(end + 2.01) >= held.rate
    # A hold shorter than one gap at the ceiling refills no token: the rate is halved.
    first_refusal(short, 0.05)
    assert short.rate == pytest.approx(halved.rate)
    # Retry-After: 1 is a bucket's wait for its next token, no penalty: halved too.
    first_refusal(second, 1.0)
    assert second.rate == pytest.approx(halved.rate)


def test_a_hold_that_ended_long_ago_changes_nothing() -> None:
    ramp = controller(start_rate=4.0)
    drive(ramp, 0.0, 1.0)
    ramp.hold(2.0)
    # An idle scope still falls back to its starting rate once it stops sending.
    assert ramp.allowed_rate(60.0) == 4.0


def deep_cut(ramp: Rampup) -> float:
    """Drive ``ramp`` to an ordinary cut and then a deep one; return the rate the deep cut came at."""
    end = past_the_start(ramp)  # a first refusal, then a long climb back with no other
    send_and_answer(ramp, end, pushback=True)  # an ordinary cut
    end = drive(ramp, end, end + 0.3)
    send_and_answer(ramp, end, pushback=True)  # again before the rate grew back: a gentle cut
    end = drive(ramp, end, end + 0.3)
    failing = ramp.allowed_rate(end)
    send_and_answer(ramp, end, pushback=True)  # and again: a deep cut
    return failing


def test_after_a_deep_cut_the_search_climbs_quickly_to_an_ordinary_cuts_level() -> None:
    ramp = controller(start_rate=8.0)
    deep_cut(ramp)
    failing = ramp.last_pushback_rate  # the measured send rate the cut started from
    assert failing is not None
    start = ramp._last_growth
    assert ramp.ceiling == pytest.approx(math.sqrt(0.5) * failing, rel=0.01)  # the geometric middle
    # Without the search the climb would level out at the middle for the length of a
    # climb (45 s) and then probe at the ordinary pace: about 0.71x the failing rate.
    # With it, each level held is safe and the next is halfway (geometrically) to 0.92x.
    now = start
    while ramp._top > 0.0 and now < start + 25.0:
        now = drive(ramp, now, now + 0.5)
    drive(ramp, now, ramp._epoch + ramp._k)  # its last quick climb
    # At the ordinary cut's level at least: the refusals came at a level held for a long climb (a
    # fall), so once the recall is due its search takes over, up to the level held before them
    # (_rampup_recall, tests/test_rampup_recall.py).
    assert ramp.ceiling is not None
    assert ramp.ceiling >= 0.99 * 0.92 * failing
    assert ramp.rate >= 0.9 * failing
    assert ramp._top == 0.0  # the search is over; the ordinary probe takes it from here


def test_a_refusal_during_the_search_ends_it_with_an_ordinary_cut() -> None:
    ramp = controller(start_rate=8.0)
    failing = deep_cut(ramp)
    start = ramp._last_growth
    end = drive(ramp, start, start + 10.0)  # the first levels of the search
    rate = ramp.allowed_rate(end)
    assert ramp._top > 0.0
    send_and_answer(ramp, end, pushback=True)  # the limit lies here
    # Not another deep cut (the rate grew since the last one); the fourth refusal in the
    # window is over the band, so the cut is 0.8, not 0.9.
    assert ramp.rate == pytest.approx(0.8 * rate, rel=0.05)
    assert ramp._top == 0.0
    drive(ramp, end, end + 7.0)  # (from a quick climb's time on, the recall may search: _rampup_recall)
    assert ramp.rate < 0.92 * failing


def test_a_search_finds_a_token_bucket_within_seconds_not_windows() -> None:
    # A refusal echoed by a bucket still paying back an overshoot: deep cut, then the search.
    bucket = Bucket(25.0, 10.0)
    ramp = controller(start_rate=25.0, max_rate=200.0)
    rng = random.Random(4)
    now, good = 0.0, []
    while now < 90.0:
        accepted = bucket.take(now)
        send_and_answer(ramp, now, pushback=not accepted)
        if accepted:
            good.append(now)
        now += rng.uniform(1.0 + RAMPUP_JITTER.low, 1.0 + RAMPUP_JITTER.high) / ramp.allowed_rate(now)
    assert sum(30.0 <= t < 90.0 for t in good) / 60.0 >= 0.9 * 25.0


def test_after_a_held_refusal_the_rate_stays_below_what_drew_it() -> None:
    ramp = controller(start_rate=8.0, max_rate=1000.0)  # (at 100/s the start reaches the cap first)
    end = past_the_start(ramp)  # a first refusal, then a long climb back with no other
    failing = ramp.allowed_rate(end)
    ramp.on_send(end)
    ramp.hold(end + 5.0)  # the refusal said Retry-After: 5 (the policy tells rampup first)
    ramp.on_response(end + 0.002, pushback=True, current=True, latency=0.002)
    assert ramp.hold_learned == pytest.approx(5.0, abs=0.01)
    level = ramp.ceiling
    assert level is not None
    assert 0.5 * failing < level < failing  # the bucket fit's pace worth keeping (_rampup_bucket)
    # A failed step above it would cost 5 s of silence: none until the level has been kept up for a
    # hold's length after the hold (_rampup_bucket); the rate stays under the one that was refused.
    now = drive(ramp, end + 5.0, end + 9.9)
    assert ramp.rate == pytest.approx(level, rel=0.01)
    assert ramp.rate < failing
    # Then it steps above it, each step more likely to hold than not (nothing refuses here).
    drive(ramp, now, end + 150.0)
    assert ramp.rate > level


def test_the_climb_does_not_advance_during_a_hold() -> None:
    ramp = controller(start_rate=1.0)
    end = drive(ramp, 0.0, 4.0)  # doubling: about 8/s
    ramp.on_send(end)
    ramp.hold(end + 1.4)  # a short hold (a long one sets the level at once: _rampup_bucket)
    ramp.on_response(end + 0.002, pushback=True, current=True, latency=0.002)
    cut = ramp.rate
    # The quick climb after the cut takes 7.5 s; the silent 1.4 s must not count,
    # or the first answer after the hold would find the rate near the failing one.
    send_and_answer(ramp, end + 1.4)
    assert ramp.rate == pytest.approx(cut, rel=0.02)
    ceiling = ramp.ceiling
    assert ceiling is not None
    send_and_answer(ramp, end + 2.4)
    assert cut < ramp.rate < cut + 0.6 * (ceiling - cut)


@pytest.mark.parametrize(("hold", "at_level"), [(5.0, True), (1.0, False), (None, False)])
def test_a_long_hold_in_the_steady_phase_resumes_at_the_level_not_under_it(hold: float | None,
                                                                         at_level: bool) -> None:
    # A 5 s silence has paid back whatever the overshoot owed: the sends after it go at the
    # level at once (embargo's second hold, cut x0.8, took the usual 45 s to climb back). A
    # short hold (a token bucket's wait for its next token) or none keeps the cut under the
    # level. (The start phase's first refusal has a rule of its own, _rampup_start's.)
    ramp = controller(start_rate=8.0)
    end = past_the_start(ramp)
    ramp.on_send(end)
    if hold is not None:
        ramp.hold(end + 0.002 + hold)
    ramp.on_response(end + 0.002, pushback=True, current=True, latency=0.002)
    level = ramp.ceiling
    assert level is not None
    after = end + (hold or 0.0) + 0.01
    send_and_answer(ramp, after)
    if at_level:
        assert ramp.rate == pytest.approx(level, rel=0.001)
        drive(ramp, after, after + 4.9)  # and it stays there: no step above it for a hold's length
        assert ramp.rate == pytest.approx(level, rel=0.001)
    else:
        assert ramp.rate < 0.99 * level


def test_a_held_refusal_paces_under_the_rate_allowed_after_a_stall() -> None:
    # A stall of the crawler's own made the measured send rate sag just before the refusal: the
    # level is the bucket fit's (the sends before the stall are on record), under the rate the scope
    # was allowed, not the sagging measure's cut, and it is paced at once after the hold.
    ramp = controller(start_rate=8.0)
    end = past_the_start(ramp)  # a first refusal, then a long climb back with no other
    allowed = ramp.allowed_rate(end + 2.0)  # after a 2 s stall, the cap on the sagging measure
    ramp.on_send(end + 2.0)
    ramp.hold(end + 7.0)
    ramp.on_response(end + 2.002, pushback=True, current=True, latency=0.002)
    level = ramp.ceiling
    assert level is not None
    assert 0.5 * allowed < level < allowed
    send_and_answer(ramp, end + 7.0)
    assert ramp.rate == pytest.approx(level, rel=0.001)


def test_a_refusal_without_a_hold_probes_as_before() -> None:
    ramp = controller(start_rate=8.0)
    end = past_the_start(ramp)  # a first refusal, then a long climb back with no other
    send_and_answer(ramp, end, pushback=True)
    level = ramp.ceiling
    assert level is not None
    assert ramp.hold_learned == 0.0
    drive(ramp, end, end + 70.0)
    assert ramp.rate > level


# -- the climb ------------------------------------------------------------------


def test_the_climb_flattens_at_the_ceiling_then_probes_beyond_it() -> None:
    ramp = controller(start_rate=8.0)
    end = past_the_start(ramp)  # a first refusal, then a long climb back with no other
    send_and_answer(ramp, end, pushback=True)
    ceiling = ramp.ceiling
    assert ceiling is not None
    start = end
    rates = []
    now = start
    while now < start + 70.0:
        send_and_answer(ramp, now)
        rates.append((now - start, ramp.rate))
        now += 1.0 / ramp.allowed_rate(now)
    climb = 0.75 * 60.0  # the climb time for a band of 1 in a 60 s window

    def rate_at(t: float) -> float:
        return next(rate for when, rate in rates if when >= t)
    # Most of the gap is closed in the first third of the climb, little in the last third.
    gap = ceiling - rate_at(0.0)
    assert rate_at(climb / 3) - rate_at(0.0) > 0.6 * gap
    assert rate_at(climb) - rate_at(2 * climb / 3) < 0.1 * gap
    assert rate_at(climb) == pytest.approx(ceiling, rel=0.01)
    assert rate_at(69.0) > ceiling  # then it probes beyond
    assert "probe" in ramp.decision


def test_the_probe_pace_is_a_share_of_the_rate() -> None:
    # The same shape at 2/s and at 200/s: after an ordinary cut, the rate gained
    # in the same time is the same share of the ceiling.
    shares = []
    for scale in (2.0, 200.0):
        ramp = controller(start_rate=scale, max_rate=10 * scale)
        ramp.on_send(0.0)
        send_and_answer(ramp, 1.0 / scale, pushback=True)  # ends the start phase (no good rate: halved)
        end = drive(ramp, 0.5, 20.0)
        send_and_answer(ramp, end, pushback=True)  # an ordinary cut
        ceiling = ramp.ceiling
        assert ceiling is not None
        drive(ramp, end, end + 55.0)
        shares.append(ramp.rate / ceiling)
    assert shares[0] > 1.0
    assert shares[0] == pytest.approx(shares[1], rel=0.02)


def test_a_window_above_the_ceiling_without_pushback_restarts_the_search(
        caplog: pytest.LogCaptureFixture) -> None:
    ramp = controller(start_rate=8.0, max_rate=1000.0)
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        drive(ramp, 0.0, 1.0)
        send_and_answer(ramp, 1.0, pushback=True)
        drive(ramp, 1.0, 150.0)
    assert "start: a whole window above the ceiling with no pushback" in caplog.text


# -- latency -------------------------------------------------------------------


def test_latency_past_the_knee_ends_the_start_phase_and_holds_the_rate() -> None:
    ramp = controller(start_rate=4.0)
    drive(ramp, 0.0, 2.0, latency=0.05)
    held = ramp.rate
    drive(ramp, 2.0, 3.0, latency=0.1)  # past 1.6 x 50 ms + 10 ms
    assert ramp.phase == "steady"
    assert "past the knee" in ramp.decision
    assert ramp.rate <= held * 1.5
    frozen = ramp.rate
    drive(ramp, 3.0, 10.0, latency=0.1)
    assert ramp.rate == frozen


def test_latency_far_above_the_baseline_cuts_the_rate(caplog: pytest.LogCaptureFixture) -> None:
    ramp = controller(start_rate=4.0)
    drive(ramp, 0.0, 2.0, latency=0.05)
    generation = ramp.generation
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        drive(ramp, 2.0, 2.5, latency=0.3)
    assert ramp.generation > generation
    assert "cut: latency" in caplog.text
    assert ramp.last_pushback_rate is None  # a slow answer is not a refusal
    # The answers since the cut came no quicker (0.3 s at any rate): no further cut, the rate holds.
    assert "did not fall with the last cut" in ramp.decision
    assert ramp.generation == generation + 1


def test_the_slots_follow_the_rate_and_the_latency_within_the_cap() -> None:
    ramp = controller(max_concurrency=4)
    # Before any latency: a second's worth of sends at the rate may be out at once.
    assert ramp.concurrency(1.0) == 2
    assert ramp.concurrency(2.0) == 3
    assert ramp.concurrency(10.0) == 4
    ramp.latency = 0.1
    assert ramp.concurrency(10.0) == 3  # ceil(10/s x 0.1 s x 2) + 1
    assert ramp.concurrency(100.0) == 4


def test_stats_describe_the_state() -> None:
    ramp = controller(start_rate=4.0, target=(1.0, 3.0))
    drive(ramp, 0.0, 2.0)
    send_and_answer(ramp, 2.0, pushback=True)
    stats = ramp.stats(2.5)
    assert stats.phase == "steady"
    assert stats.target == (1.0, 3.0)
    assert stats.pushbacks == 1
    assert stats.last_pushback_rate == ramp.last_pushback_rate
    assert stats.rate == ramp.allowed_rate(2.5)
    assert stats.decision.startswith("cut: pushback")
    assert ramp.stats(70.0).pushbacks == 0  # out of the window


def test_decisions_are_logged_at_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    ramp = controller(start_rate=8.0, scope="api.example")
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        drive(ramp, 0.0, 1.0)
        send_and_answer(ramp, 1.0, pushback=True)
    assert any(r.levelno == logging.DEBUG and "scope api.example: rampup cut: pushback" in r.getMessage()
               for r in caplog.records)


# -- whole runs against a token bucket, in virtual time -----------------------------


@dataclass
class Bucket:
    """A token bucket as the simulator's ``ratelimit`` profile keeps it."""

    rate: float
    burst: float
    level: float = field(init=False)
    stamp: float | None = None

    def __post_init__(self) -> None:
        self.level = self.burst

    def take(self, now: float) -> bool:
        if self.stamp is not None:
            self.level = min(self.burst, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.level >= 1.0:
            self.level -= 1.0
            return True
        return False


def bucket_run(rate: float, burst: float, seconds: float, *, target: tuple[float, float] = (1.0, 1.0),
               seed: int = 1) -> tuple[float, int, int]:
    """Goodput after the first window (share of the limit), 429s in all, 429s after the first window."""
    rng = random.Random(seed)
    bucket = Bucket(rate, burst)
    ramp = controller(target=target)
    good_after = refused = refused_after = 0
    now = 0.0
    while now < seconds:
        accepted = bucket.take(now)
        send_and_answer(ramp, now, pushback=not accepted)
        if not accepted:
            refused += 1
            refused_after += now >= 60.0
        elif now >= 60.0:
            good_after += 1
        now += rng.uniform(1.0 + RAMPUP_JITTER.low, 1.0 + RAMPUP_JITTER.high) / ramp.allowed_rate(now)
    return good_after / (seconds - 60.0) / rate, refused, refused_after


@pytest.mark.parametrize(("rate", "burst"), [(2.0, 2.0), (10.0, 5.0), (50.0, 10.0)])
def test_it_holds_a_hidden_limit_with_about_one_refusal_per_window(rate: float, burst: float) -> None:
    goodput, refused, after = bucket_run(rate, burst, 180.0)
    assert goodput >= 0.9
    assert after <= 1 * 2 + 1  # after the first window: target x windows + 1
    # The first window holds the start's overshoot and the cuts after it: a burst hides the limit
    # from a climb until it is spent, so a quick one passes a bursty 2/s further (8 refusals in all
    # at half-second rounds from 6/s, 5 at one-second rounds) and gets there seconds sooner.
    assert refused <= 1 * 3 + 5


def test_a_wider_band_probes_more_often() -> None:
    _, _, narrow = bucket_run(10.0, 5.0, 420.0, target=(1.0, 1.0))
    _, _, wide = bucket_run(10.0, 5.0, 420.0, target=(1.0, 3.0))
    assert wide > narrow
    assert wide <= 3 * 6 + 2


def test_a_short_crawl_reaches_the_limit_within_seconds() -> None:
    bucket = Bucket(10.0, 5.0)
    ramp = controller()
    rng = random.Random(3)
    now, done, refused = 0.0, 0, 0
    while done < 300:
        accepted = bucket.take(now)
        send_and_answer(ramp, now, pushback=not accepted)
        done += accepted
        refused += not accepted
        now += rng.uniform(1.0 + RAMPUP_JITTER.low, 1.0 + RAMPUP_JITTER.high) / ramp.allowed_rate(now)
    assert 300 / now >= 0.85 * 10.0
    assert refused <= 5


def test_it_follows_a_limit_that_halves_and_comes_back() -> None:
    bucket = Bucket(10.0, 5.0)
    ramp = controller()
    rng = random.Random(2)
    now = 0.0
    refusals: list[float] = []
    good: list[float] = []
    while now < 420.0:
        bucket.rate = 5.0 if 60.0 <= now < 240.0 else 10.0
        accepted = bucket.take(now)
        send_and_answer(ramp, now, pushback=not accepted)
        (good if accepted else refusals).append(now)
        now += rng.uniform(1.0 + RAMPUP_JITTER.low, 1.0 + RAMPUP_JITTER.high) / ramp.allowed_rate(now)

    def goodput(start: float, end: float, limit: float) -> float:
        return sum(start <= t < end for t in good) / (end - start) / limit
    # Two windows after each change, it is back in the band and near the new limit.
    assert sum(180.0 <= t < 240.0 for t in refusals) <= 2
    assert goodput(180.0, 240.0, 5.0) >= 0.85
    assert sum(360.0 <= t < 420.0 for t in refusals) <= 2
    assert goodput(360.0, 420.0, 10.0) >= 0.85


# -- many workers, one scope ---------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 8])
async def test_eight_workers_ramp_like_one(workers: int) -> None:
    clock = MockClock(autojump=True)
    bucket = Bucket(20.0, 5.0)
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True},
                                     "CONCURRENT_REQUESTS": 32})
    refused = 0
    async with Throttler(settings, clock=clock, rng=random.Random(1)) as throttler:

        async def worker() -> None:
            nonlocal refused
            while clock.now() < 120.0:
                async with throttler.slot("https://api.example/") as permit:
                    await clock.sleep(0.01)
                    accepted = bucket.take(clock.now())
                    refused += not accepted
                    permit.feedback(status=200 if accepted else 429, latency=0.01)

        await asyncio.gather(*(worker() for _ in range(workers)))
        stats = (await throttler.stats())["api.example"]
    assert stats.rampup is not None
    # Whether one worker or eight send, the scope finds the same limit with about
    # the same few refusals: feedback counts once per generation.
    assert refused <= 2 * 2 + 3
    assert stats.rampup.rate == pytest.approx(20.0, rel=0.25)
    assert math.isfinite(stats.rampup.rate)


# -- failures without an answer ---------------------------------------------------------


def test_a_timeout_while_latency_is_normal_is_not_overload() -> None:
    ramp = controller(start_rate=4.0)
    # 10 ms answers: rounds of half a second at least, so the rate stays far under what one
    # request in flight at a time could send (100/s).
    drive(ramp, 0.0, 1.5, latency=0.01)
    generation, rate = ramp.generation, ramp.rate
    ramp.on_send(3.0)
    assert not ramp.on_response(13.0, pushback=True, current=True, latency=None, answered=False)
    assert ramp.generation == generation
    assert ramp.rate == rate
    assert "not taken for overload" in ramp.decision
    # A flaky site: one hang in twenty, the rest quick. The rate keeps growing.
    now = 3.0
    for i in range(200):
        ramp.on_send(now)
        if i % 20 == 19:
            ramp.on_response(now + 10.0, pushback=True, current=True, latency=None, answered=False)
        else:
            ramp.on_response(now + 0.01, pushback=False, current=True, latency=0.01)
        now += 1.0 / ramp.allowed_rate(now)
    assert ramp.generation == generation
    assert ramp.rate > rate


def test_a_silence_while_hung_requests_held_the_slots_is_not_idleness() -> None:
    # A flaky site: its few slots (answers take 10 ms) all held by requests that hang, nothing
    # is sent until they time out 10 s later. That silence is not the scope stopping: when the
    # timeouts come, it resumes near the rate it had, not at its start rate (the hard farm's
    # flaky25 climbed from 1/s again after every such silence, 95 s for 200 pages).
    ramp = controller(start_rate=4.0)
    now = drive(ramp, 0.0, 5.0, latency=0.01)
    allowed = ramp.allowed_rate(now)
    assert allowed > 4 * 4.0
    ramp.on_response(now + 10.0, pushback=True, current=True, latency=None, answered=False, elapsed=10.0)
    assert "not taken for overload" in ramp.decision
    assert ramp.allowed_rate(now + 10.0) >= 0.9 * allowed


def test_a_timeout_when_latency_has_climbed_is_overload() -> None:
    ramp = controller(start_rate=4.0)
    drive(ramp, 0.0, 2.0, latency=0.05)
    drive(ramp, 2.0, 2.2, latency=0.12)  # past the knee, not yet past the cut line
    generation = ramp.generation
    ramp.on_send(2.2)
    ramp.on_response(12.2, pushback=True, current=True, latency=None, answered=False)
    assert ramp.generation == generation + 1
    assert "cut: pushback" in ramp.decision


def test_a_refusal_is_pushback_whatever_the_latency() -> None:
    ramp = controller(start_rate=4.0)
    drive(ramp, 0.0, 3.0, latency=0.05)
    generation = ramp.generation
    send_and_answer(ramp, 3.0, pushback=True, latency=0.05)
    assert ramp.generation == generation + 1


# -- overload found from latency ------------------------------------------------------------


class KneeServer:
    """A server whose latency is ``base`` up to ``knee`` requests in flight, then grows with the
    square of the load: its throughput peaks at ``knee / base`` per second."""

    def __init__(self, base: float, knee: int) -> None:
        self.base, self.knee = base, knee

    def latency(self, inflight: int) -> float:
        return self.base * max(1.0, inflight / self.knee) ** 2


def knee_run(seconds: float) -> tuple[float, list[float]]:
    """Send at the controller's rate within its slots; the share of the capacity served after 20 s."""
    server = KneeServer(0.2, 3)
    capacity = 3 / 0.2
    ramp = controller(start_rate=1.0, max_concurrency=8)
    now, done_after = 0.0, 0
    pending: list[tuple[float, float, float]] = []
    latencies: list[float] = []
    while now < seconds:
        for finish, sent, latency in [p for p in pending if p[0] <= now]:
            pending.remove((finish, sent, latency))
            ramp.on_response(finish, pushback=False, current=True, latency=latency)
            done_after += finish >= 20.0
            latencies.append(latency)
        rate = ramp.allowed_rate(now)
        if len(pending) < ramp.concurrency(rate):
            ramp.on_send(now)
            latency = server.latency(len(pending) + 1)
            pending.append((now + latency, now, latency))
            now += 1.0 / rate
        else:
            now = min(p[0] for p in pending)
    return done_after / (seconds - 20.0) / capacity, latencies


def test_a_server_past_its_knee_is_brought_back_to_it_not_starved() -> None:
    # Doubling overshoots the knee; the measured send rate then understates the rate that
    # overloaded it (slow answers hold the slots). The cuts must come from the rate itself,
    # deeper the further latency is past the knee, and the slots must follow the baseline.
    share, latencies = knee_run(120.0)
    assert share >= 0.7
    assert sorted(latencies)[len(latencies) // 2] <= 0.2 * 1.5  # mostly at the knee, not queueing


def test_a_latency_cut_caps_the_slots_at_what_the_rate_needs_unqueued(
        caplog: pytest.LogCaptureFixture) -> None:
    ramp = controller(start_rate=8.0, max_concurrency=16)
    drive(ramp, 0.0, 2.0, latency=0.2)
    send_and_answer(ramp, 2.0, pushback=True)  # ends the start phase
    end = drive(ramp, 2.0, 40.0, latency=0.2)
    sent = ramp.sent_rate(end)
    assert ramp.slot_cap == math.inf
    assert ramp.concurrency(ramp.allowed_rate(end)) > round(sent * 0.2)
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        end = drive(ramp, end, end + 2.0, latency=0.7)  # the server queues: far past the knee
    assert "cut: latency" in caplog.text
    # Little's law at the baseline: the requests the rate keeps in flight unqueued.
    assert ramp.slot_cap == max(3, round(sent * 0.2))
    assert ramp.concurrency(50.0) == ramp.slot_cap
    # A window without pushback raises it by one, as the refusal cap is raised.
    drive(ramp, end, end + 61.0, latency=0.2)
    assert ramp.slot_cap == max(3, round(sent * 0.2)) + 1


def test_a_site_answering_in_milliseconds_gets_no_slot_cap_from_latency(
        caplog: pytest.LogCaptureFixture) -> None:
    # Its latency swings are the crawler's own machine (a loaded loop adds tens of ms),
    # not a queue at the server: three slots at 100 ms would hold a 25/s site to 30/s.
    ramp = controller(start_rate=8.0, max_concurrency=16)
    drive(ramp, 0.0, 2.0, latency=0.002)
    send_and_answer(ramp, 2.0, pushback=True)
    end = drive(ramp, 2.0, 40.0, latency=0.002)
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        drive(ramp, end, end + 2.0, latency=0.2)
    assert "cut: latency" in caplog.text
    assert ramp.slot_cap == math.inf


def test_a_server_with_a_sharp_knee_is_paced_by_its_slots() -> None:
    share, latencies = knee_run(120.0)
    assert share >= 0.9
    assert sorted(latencies)[len(latencies) * 9 // 10] <= 0.2 * 1.5


def test_slots_follow_the_baseline_latency_not_a_queueing_one() -> None:
    ramp = controller(max_concurrency=16)
    drive(ramp, 0.0, 10.0, latency=0.2)
    before = ramp.concurrency(10.0)
    drive(ramp, 10.0, 11.0, latency=1.5)  # the server queues: slow answers
    assert ramp.concurrency(10.0) == before <= math.ceil(10.0 * 0.2 * 1.5 + 1e-9) + 1


def test_hangs_that_are_not_overload_get_slots_of_their_own() -> None:
    ramp = controller(start_rate=4.0, max_concurrency=16)
    drive(ramp, 0.0, 5.0, latency=0.01)
    quick = ramp.concurrency(20.0)
    now = 5.0
    for i in range(400):  # one request in twenty hangs until a 10 s timeout
        ramp.on_send(now)
        if i % 20 == 0:
            ramp.on_response(now + 10.0, pushback=True, current=True, latency=None, answered=False,
                             elapsed=10.0)
        else:
            ramp.on_response(now + 0.01, pushback=False, current=True, latency=0.01)
        now += 0.05
    # At 20 per second, a twentieth of them held for 10 s keeps about 10 slots busy; the
    # smoothed share swings between about 3 % and 8 % from one hang to the next.
    assert ramp.concurrency(20.0) >= quick + 5


def test_a_refusal_in_the_start_phase_cuts_from_the_rate_allowed_not_a_lagging_measure() -> None:
    # Doubling from 1/s: the mean of recent gaps still says about 1.3/s when the rate is
    # 2.5/s; a cut from the lagging measure left a 2/s site at 1.1/s for a minute.
    ramp = controller(start_rate=1.0)
    now = drive(ramp, 0.0, 2.0)
    allowed = ramp.allowed_rate(now)
    send_and_answer(ramp, now, pushback=True)
    # Half of the rate allowed (a lagging measure gave at most 0.35 of it), and the climb
    # levels out at 85 % of it.
    assert ramp.rate >= 0.45 * allowed
    assert ramp.ceiling is not None
    assert ramp.ceiling >= 0.8 * allowed


def test_a_scope_held_back_by_its_slots_does_not_double_for_nothing() -> None:
    # A knee server: the slots (from the baseline latency) hold the sends back, so the
    # rate must stop doubling where the sends stop following it, and the knee is found
    # within about 15 s, not after a climb to the cap and a long way down.
    share, _ = knee_run(40.0)
    assert share >= 0.75


def test_refusals_on_arrival_with_many_in_flight_cap_the_slots_not_the_rate() -> None:
    # A slow site that answers 503 at once past six requests in flight (the `slow` profile):
    # the refusal says "too many at once", not "too fast".
    ramp = controller(start_rate=4.0)
    now = 0.0
    for _ in range(20):  # pages take about a second
        ramp.on_send(now)
        ramp.on_response(now + 1.0, pushback=False, current=True, latency=1.0, elapsed=1.0)
        now += 0.25
    before = ramp.rate
    ramp.on_send(now)
    ramp.on_response(now + 0.002, pushback=True, current=True, latency=0.002, elapsed=0.002, inflight=7)
    assert ramp.slot_cap == 6
    assert ramp.concurrency(ramp.rate) <= 6
    assert ramp.rate >= 0.85 * before  # gentle, though the start phase cuts deep otherwise
    assert "slots capped at 6" in ramp.decision
    # A window later with no pushback, one slot more is tried.
    later = now + 61.0
    ramp.on_send(later)
    ramp.on_response(later + 1.0, pushback=False, current=True, latency=1.0, elapsed=1.0)
    assert ramp.slot_cap == 7


def test_a_refusal_as_slow_as_a_page_or_with_few_in_flight_caps_nothing() -> None:
    ramp = controller(start_rate=4.0)
    now = 0.0
    for _ in range(20):
        ramp.on_send(now)
        ramp.on_response(now + 0.05, pushback=False, current=True, latency=0.05, elapsed=0.05)
        now += 0.25
    ramp.on_send(now)  # a token bucket's 429 with two in flight
    ramp.on_response(now + 0.001, pushback=True, current=True, latency=0.001, elapsed=0.001, inflight=2)
    assert ramp.slot_cap == math.inf
    now += 5.0
    ramp.on_send(now)  # an overloaded server's slow 503 with many in flight
    ramp.on_response(now + 0.2, pushback=True, current=True, latency=0.2, elapsed=0.2, inflight=9)
    assert ramp.slot_cap == math.inf


async def test_quick_rounds_do_not_overrun_a_window_limit_that_shows_no_latency() -> None:
    # A shop answering in 50 ms that takes 11 requests in any one second and refuses the
    # rest: nothing in its answers warns before the 11 are spent. Rounds as short as its
    # latency drew 15 refusals in one second here; half-second rounds keep it to a few.
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "DOWNLOAD_DELAY": 1.0,
                                     "RANDOMIZE_DOWNLOAD_DELAY": False, "BACKOFF_JITTER": False})
    clock = MockClock(autojump=True)
    recent: deque[float] = deque()
    ok = refused = 0
    async with Throttler(settings, clock=clock) as throttler:
        while clock.now() < 6.0:
            async with throttler.slot("https://shop.example/") as permit:
                now = permit.granted_at
                while recent and recent[0] <= now - 1.0:
                    recent.popleft()
                recent.append(now)
                status = 429 if len(recent) > 11 else 200
                ok += status == 200
                refused += status == 429
                permit.feedback(status=status, latency=0.05)
    # (The window counts refused requests too: the overshoot's probes, one per doubling gap
    # until the count has drained, cost one refusal more than a cascade of cuts did.)
    assert refused <= 6
    assert ok >= 20



def hanging_run(ramp: Rampup, start: float, end: float, *, latency: Callable[[random.Random], float],
                hang_every: int = 20, slots: int = 8, seed: int = 5) -> list[float]:
    """A crawl of a site where one request in ``hang_every`` hangs until a 10 s timeout.

    At most ``slots`` requests are in flight, as in ``crawlpace crawl``, so hangs can
    hold every slot and silence the scope. Returns the times of its sends.
    """
    rng = random.Random(seed)
    pending: list[tuple[float, int, float, bool]] = []  # (answer time, order, send time, hung)
    sends: list[float] = []
    now, count = start, 0
    next_send = start
    while now < end:
        if len(pending) < slots and (not pending or next_send <= pending[0][0]):
            now = max(now, next_send)
            ramp.on_send(now)
            sends.append(now)
            count += 1
            hung = count % hang_every == 0
            heapq.heappush(pending, (now + (10.0 if hung else latency(rng)), count, now, hung))
            next_send = now + 1.0 / ramp.allowed_rate(now)
            continue
        at, _, sent, hung = heapq.heappop(pending)
        now = max(now, at)
        if hung:
            ramp.on_response(now, pushback=True, current=True, latency=None, answered=False,
                             elapsed=now - sent)
        else:
            ramp.on_response(now, pushback=False, current=True, latency=at - sent, elapsed=now - sent)
    return sends


def test_hangs_at_a_quick_site_on_a_busy_machine_are_not_overload() -> None:
    # Pages answered in a millisecond, on a crawler machine busy enough to add 10-30 ms to
    # most answers: the smoothed latency sits at the knee (1.6 x 1 ms + 10 ms), which says
    # nothing of the server. One request in twenty hangs until the timeout. Taken for
    # overload, the hangs cut the rate again and again (a loaded bench round crawled such
    # a site at 0.1 requests a second from 30 s on).
    ramp = controller(start_rate=4.0)
    hanging_run(ramp, 0.0, 5.0, latency=lambda rng: 0.001, hang_every=10_000)  # a quiet start
    assert ramp.baseline() == pytest.approx(0.001)
    rate, generation = ramp.rate, ramp.generation
    sends = hanging_run(ramp, 5.0, 65.0, latency=lambda rng: 0.001 + rng.uniform(0.012, 0.03))
    assert ramp.generation == generation  # no hang cut the rate
    assert ramp.rate >= rate
    assert sum(t >= 35.0 for t in sends) >= 30 * 5


def test_a_timeout_cuts_from_the_rate_its_request_was_sent_at() -> None:
    # A 50 ms site whose latency has climbed to its knee: a timeout there is overload. It
    # comes 10 s after its send; if every slot was held meanwhile, the scope sent nothing,
    # and a cut from the send rate measured then (one send in ten seconds) starved it.
    ramp = controller(start_rate=4.0)
    drive(ramp, 0.0, 2.0, latency=0.05)
    now = drive(ramp, 2.0, 2.2, latency=0.12)  # past the knee, not yet past the cut line
    rate = ramp.allowed_rate(now)
    ramp.on_send(now)
    ramp.on_response(now + 10.0, pushback=True, current=True, latency=None, answered=False, elapsed=10.0)
    assert "cut: pushback" in ramp.decision
    assert ramp.rate >= TUNING.cut_deep * 0.5 * rate


def test_a_busy_machine_does_not_freeze_the_climb_of_a_millisecond_site() -> None:
    # A page answered in 2 ms, crawled from a machine busy enough to add 10-40 ms to every
    # answer: 1.6 x 2 ms + 10 ms is passed by most of them, though nothing is wrong with
    # the server. Taken for its knee, that froze the climb after a cut: a loaded bench
    # round held a 25/s bucket at 13/s for a minute after its third refusal.
    ramp = controller(max_rate=10.0)  # gaps of 100 ms or more: answers come back in order
    now = past_the_start(ramp)  # quiet: a baseline of 2 ms
    send_and_answer(ramp, now, pushback=True)
    send_and_answer(ramp, now + 0.5)  # accepted: the overshoot's episode is over
    now += 1.0
    send_and_answer(ramp, now, pushback=True)  # before the rate grew back: a deep cut
    cut, ceiling = ramp.rate, ramp.ceiling
    assert ceiling is not None
    assert cut < 0.75 * ceiling
    rng = random.Random(4)
    end = now + 60.0
    while now < end:
        now += 1.0 / ramp.allowed_rate(now)
        send_and_answer(ramp, now, latency=0.002 + rng.uniform(0.01, 0.04))
    assert ramp.latency is not None
    assert ramp.latency > 1.6 * 0.002 + 0.01  # "at the knee"
    assert ramp.generation == 3  # and short of the cut line: no latency cut
    assert ramp.rate >= ceiling


def test_a_slow_site_refusing_on_arrival_is_told_apart_before_any_baseline() -> None:
    # 1.5 s answers, 503 past four in flight. Two answers give no baseline yet; the lowest
    # latency stands in for it, so a 503 in 4 ms with five in flight caps the slots at four
    # and cuts gently, where it used to halve the rate and leave the slots open for a second 503.
    ramp = controller()
    for at in (0.0, 0.5, 1.0, 1.2, 1.4):
        ramp.on_send(at)
    for at in (0.0, 0.5):
        ramp.on_response(at + 1.5, pushback=False, current=True, latency=1.5, elapsed=1.5, inflight=4)
    assert ramp.baseline() is None
    ramp.on_send(2.1)
    ramp.on_response(2.104, pushback=True, current=True, latency=0.004, elapsed=0.004, inflight=5)
    assert ramp.slot_cap == 4
    assert "slots capped at 4" in ramp.decision
    # The refusal's 4 ms is no service time: the round and the window of one are the answers'.
    assert ramp._low_latency == 1.5


def test_a_refusal_for_too_many_in_flight_cuts_from_what_went_out_at_least() -> None:
    # A fleet's worker may hold a low allowance for a shared scope (its copy of the start
    # phase's floor not yet seen): a 503 on arrival with five in flight, while the scope sent
    # 30/s, must not cut the rate from that allowance to under 1/s.
    ramp = controller()
    for i in range(30):
        ramp.on_send(i / 30.0)
    for at in (0.2, 0.3):
        ramp.on_response(at, pushback=False, current=True, latency=0.6, elapsed=0.6, inflight=4)
    assert ramp.allowed_rate(1.0) < 5.0
    ramp.on_response(1.0, pushback=True, current=True, latency=0.004, elapsed=0.004, inflight=5)
    assert "slots capped at 4" in ramp.decision
    assert ramp.rate >= 0.9 * 0.9 * ramp.sent_rate(1.0)


# -- slots past eight -------------------------------------------------------------


def _fill_slots(ramp: Rampup, start: float, end: float, latency: float = 0.2) -> float:
    """Every slot out at once, each answered after ``latency`` with all of them in flight: a site bound
    by requests in flight (its latency flat, nothing refused)."""
    now = start
    while now < end:
        slots = ramp.concurrency(ramp.allowed_rate(now))
        for _ in range(slots):
            ramp.on_send(now)
        for _ in range(slots):
            ramp.on_response(now + latency, pushback=False, current=True, latency=latency, elapsed=latency,
                             inflight=slots)
        now += latency
    return now


def test_slots_past_eight_open_only_while_every_slot_is_used_and_a_rate_refusal_closes_them() -> None:
    ramp = controller(start_rate=100.0, max_concurrency=16)
    now = _fill_slots(ramp, 0.0, 3.0)
    opened = ramp.concurrency(ramp.allowed_rate(now))
    assert 8 < opened < 16  # one per round trip (at least a second), not all at once
    now = _fill_slots(ramp, now, 30.0)
    assert ramp.concurrency(ramp.allowed_rate(now)) == 16  # the most, and no more
    # A refusal that took as long as a page (a rate limiter's, not a cap on arrival): back to 8.
    ramp.on_send(now)
    ramp.on_response(now + 0.2, pushback=True, current=True, latency=0.2, elapsed=0.2, inflight=16)
    assert ramp.slot_limit() == 8
    # The user's maximum is a hard cap.
    capped = controller(start_rate=100.0, max_concurrency=8)
    now = _fill_slots(capped, 0.0, 30.0)
    assert capped.concurrency(capped.allowed_rate(now)) == 8


def test_a_fleets_lease_count_leaves_out_its_refusals_in_transit_in_whole_requests() -> None:
    # A fleet's counts in flight come from its store's lease set, where a refusal on arrival holds a
    # lease for its round trip and no slot at the site: the share of the lease time that the other
    # answers held says how much of a count they are. Taken off in whole requests only: with no
    # refusal lately, or less than one in a count, every count is the store's.
    fleet, alone = controller(), controller()
    for ramp in (fleet, alone):
        ramp._low_latency = 0.2  # (a refusal in 2 ms is quick against it)
    fleet.also_out([])  # (a fleet's worker: its record of requests out merges every worker's)
    for ramp in (fleet, alone):
        for _ in range(20):
            ramp.note_lease(1.0, 0.3, False, 0.2)  # a 0.2 s page whose lease was held 0.3 s
    assert fleet._accepted_leases(9) == 9
    for _ in range(3):
        fleet.note_lease(2.0, 0.1, True, 0.002)  # refusals on arrival, 0.1 s each in transit
        alone.note_lease(2.0, 0.1, True, 0.002)
    share = fleet._lease_on / fleet._lease_all
    assert 0.5 < share < 0.9
    assert fleet._accepted_leases(9) == 9 - math.floor(8 * (1.0 - share)) < 9
    assert fleet._accepted_leases(2) == 2  # (a fraction of a refusal in transit is none)
    assert fleet._accepted_leases(1) == 1
    assert fleet._accepted_leases(None) is None
    # A 5xx that took a page's time held its slot: no refusal in transit.
    slow = controller()
    slow._low_latency = 0.2
    slow.also_out([])
    for _ in range(20):
        slow.note_lease(1.0, 0.3, True, 0.2)
    assert slow._accepted_leases(9) == 9
    # Read a lease's time or more after the latest answer noted, the refusals it saw have left the set.
    assert fleet._accepted_leases(9, 2.0) == fleet._accepted_leases(9) == 9 - math.floor(8 * (1.0 - share))
    assert fleet._accepted_leases(9, 2.0 + 5.0 * fleet._lease_all) == 9
    # The accepted answer's count is read so: the most accepted at once.
    fleet.on_response(2.0, pushback=False, current=True, latency=0.2, elapsed=0.3, inflight=9)
    assert fleet._inflight_ok == 9 - math.floor(8 * (1.0 - fleet._lease_on / fleet._lease_all)) < 9
    # One process notes nothing: its counts are the site's.
    assert alone._lease_all == 0.0
    assert alone._accepted_leases(9) == 9
