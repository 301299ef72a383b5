"""Rampup's load fit: a latency per count in flight, and the count that serves the most (pure, no clock).

Whole crawls against knees and caps are in ``test_rampup_limiters``; these cases pin the
fit's own rules: which samples it takes, and where it puts the best load.
"""

from __future__ import annotations

import pytest

from crawlpace.policy.rampup import Rampup


def controller() -> Rampup:
    return Rampup(start_rate=1.0, min_rate=1 / 300, max_rate=100.0, max_concurrency=16, window=60.0,
                  target=(1.0, 1.0))


def fill(ramp: Rampup, latency_at: dict[int, float], rounds: int = 3) -> None:
    """Answers at each count in flight, each sent after the count settled, ``rounds`` rounds of it."""
    now = 0.0
    for n, latency in latency_at.items():
        ramp._note_load(now, n, latency, now)  # the first answer at a new count only marks it
        for _ in range(rounds * n):
            now += latency / n
            ramp._note_load(now, n, latency, now - latency)
        now += 1.0


@pytest.mark.parametrize(("exponent", "best"), [(1.0, 5), (2.0, 5)])
def test_the_best_load_is_where_more_in_flight_stops_paying(exponent: float, best: int) -> None:
    # Past a knee of 5 the latency grows as (n / 5) ** exponent: the throughput stays level
    # (exponent 1) or falls (2). The level stretch adds nothing, so the knee is the best load.
    ramp = controller()
    fill(ramp, {n: 0.2 * max(1.0, n / 5) ** exponent for n in range(1, 11)})
    assert ramp.best_load() == best


def test_latency_that_buys_throughput_is_the_loads_price() -> None:
    # Each request held adds a sixth of the latency, up to a hard limit of 9: the throughput still
    # grows at 9 (by 4 % a step), so the best load is the top, though latency there is 2.4 times
    # the baseline, past rampup's cut line.
    ramp = controller()
    fill(ramp, {n: 0.355 + 0.0613 * (n - 1) for n in range(1, 10)})
    assert ramp.best_load() == 9


def test_one_slow_answer_among_quick_ones_moves_the_fit_little() -> None:
    ramp = controller()
    fill(ramp, {3: 0.2})
    ramp._note_load(100.0, 3, 6.0, 94.0)  # a success answered after 6 s
    got = ramp.throughput(3)
    assert got is not None
    assert got >= 0.8 * 3 / 0.2


def test_a_sample_counts_only_when_its_count_held_from_send_to_answer() -> None:
    ramp = controller()
    ramp._note_load(0.0, 4, 0.2, -0.2)
    for i in range(1, 5):
        # Sent before the count in flight settled at 4: its latency belongs to another load.
        ramp._note_load(0.01 * i, 4, 0.2, -0.1)
    assert ramp.throughput(4) is None
    for i in range(1, 5):
        ramp._note_load(1.0 + 0.05 * i, 4, 0.2, 0.5)
    assert ramp.throughput(4) == pytest.approx(4 / 0.2)


def busy(baseline: float, latency: float, send_rate: float, rate: float, now: float = 3.0) -> Rampup:
    """A controller at ``rate`` that sent at ``send_rate`` for ``now`` seconds to a site answering in
    ``baseline`` alone and in ``latency`` now."""
    ramp = controller()
    ramp._baseline.append(baseline)
    ramp.latency, ramp._samples, ramp.rate = latency, 10, rate
    for i in range(int(now * send_rate)):
        ramp.on_send(i / send_rate)
    return ramp


@pytest.mark.parametrize(("sample", "opens"), [(0.3, True), (0.55, False)])
def test_a_slot_opens_past_eight_only_on_an_answer_itself_quick(sample: float, opens: bool) -> None:
    # Eight in flight at an answer, the smoothed latency still at the baseline (0.3 s). An answer
    # that took 1.8 times the baseline left with fewer out (a knee of 3 filling its slots behind it):
    # its count is not the one it was served with, so it opens nothing.
    ramp = busy(0.3, 0.3, 40.0, 100.0)
    ramp.on_response(3.0, pushback=False, current=True, latency=sample, elapsed=sample, inflight=8)
    assert ramp.slot_limit() == (9 if opens else 8)


@pytest.mark.parametrize(("inflight", "lifted"), [(12, True), (10, False)])
def test_a_refusal_past_the_most_accepted_leaves_the_capped_slots_to_pace(inflight: int,
                                                                           lifted: bool) -> None:
    # Eleven were accepted at once; a 503 at once at twelve is a hard limit of 11 (the cap), and the
    # rate must not bind under the slots: 11 answered at the baseline 0.324 s serve 34/s. (Cut from
    # the 30/s sent to 27/s, a hardknee of 11 stayed at 0.85 of its 27.6/s.) At ten, a slot was
    # freed late (a connection cap): the cut's spacing stands.
    ramp = busy(0.324, 0.4, 30.0, 30.0)
    ramp._inflight_ok = 11
    ramp.on_response(3.0, pushback=True, current=True, latency=0.001, elapsed=0.001, inflight=inflight)
    assert ramp.slot_cap == (inflight - 1 if lifted else inflight)
    assert (ramp.rate >= 11 / 0.324) is lifted


def test_the_load_fit_enters_at_the_count_the_answer_shows_not_a_low_best() -> None:
    # The start phase measured 1 and 2 in flight; an answer with 13 in flight at 0.32 s (a site 0.2 s
    # alone, slower by 10 ms per request held, refusing past 13) passes the knee line. By Little's
    # law 8 serve as much at the baseline: the fit holds 8, and measures it before walking on (it
    # walked up from 3, one count a round, for five seconds of a 20 s crawl).
    ramp = controller()
    fill(ramp, {1: 0.2, 2: 0.2})
    ramp._baseline.append(0.2)
    ramp.latency = 0.32
    assert ramp.best_load() == 2
    ramp._judge_load(10.0, 1, 13, 0.32)
    assert ramp._knee_hold == 8
    ramp._judge_load(10.1, 1, 8, 0.26)
    assert ramp._knee_hold == 8


@pytest.mark.parametrize("asked", [False, True])
def test_the_load_fit_lifts_past_a_lock_outs_level_but_not_past_a_held_sites(asked: bool) -> None:
    # The scope was cut to 2/s and has waited out a lock-out of its own (hold_learned; a hardknee's
    # 503s past its count draw one in a fleet): the slots, not a rate, are that limit, and the load fit
    # lifts the rate over what the count it holds serves. (Capped at the level, a hardknee of 14 in a
    # fleet of 4 lost 0.80 -> 0.76 of its capacity.) A site whose refusal came in a hold it asked for limits
    # the rate: the lift stops at the level its refusals set.
    ramp = controller()
    fill(ramp, {1: 0.2, 2: 0.2})
    ramp._baseline.append(0.2)
    ramp.latency = 0.32
    if asked:
        ramp.hold(6.0)  # Retry-After: 1, the least a header says, in force when the refusal's cut comes
        ramp._after_cut(5.0, sent=2.5, allowed=2.5, cascade=False, steady=False, refused=True)
    else:
        ramp.hold_learned = 0.5  # a lock-out's length (_rampup_episode), no hold asked
    ramp.rate = ramp.ceiling = 2.0
    ramp._judge_load(20.0, 1, 13, 0.32)
    assert ramp._knee_hold == 8
    assert ramp.rate == 2.0 if asked else ramp.rate >= 8 / 0.32
