"""The pure circuit breaker, driven by hand-picked float times."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlpace.policy.breaker import CLOSED, FIRST_PAUSE_SHARE, GIVEN_UP, HALF_OPEN, OPEN, Breaker

INF = float("inf")


def fail(breaker: Breaker, now: float, sent_at: float | None = None) -> bool:
    return breaker.on_outcome(now, failed=True, sent_at=now if sent_at is None else sent_at)


def succeed(breaker: Breaker, now: float, sent_at: float | None = None) -> bool:
    return breaker.on_outcome(now, failed=False, sent_at=now if sent_at is None else sent_at)


def open_at_zero() -> Breaker:
    """A breaker opened by 16 simultaneous failures at t=0, paused until 60."""
    breaker = Breaker()
    for _ in range(16):
        breaker.on_send(0.0)
    assert not any([fail(breaker, 0.0, sent_at=0.0) for _ in range(16)])
    return breaker


# -- (a) a dead site ---------------------------------------------------------


def test_dead_site_at_concurrency_one_is_given_up_within_two_minutes() -> None:
    breaker = Breaker()
    sends = [0.0, 2.0, 6.0, 14.0, 30.0]
    for i, sent in enumerate(sends):
        assert breaker.blocked_until(sent) == -INF
        breaker.on_send(sent)
        assert not fail(breaker, sent)
        assert breaker.state == (OPEN if i == 4 else CLOSED)
    assert breaker.reason == "5 of 5 outcomes failed in the last 60s; paused 60s"
    assert breaker.blocked_until(30.0) == 90.0
    assert breaker.blocked_until(89.9) == 90.0
    # The pause is over: one probe may go, and then nothing until it answers or has been out as
    # long as the pause it followed.
    assert breaker.blocked_until(90.0) == -INF
    assert breaker.state == HALF_OPEN
    breaker.on_send(90.0)
    assert breaker.blocked_until(90.0) == 150.0
    assert fail(breaker, 90.0, sent_at=90.0) is True
    assert breaker.state == GIVEN_UP
    assert breaker.consecutive_failures == 6  # the sixth request
    assert breaker.reason == "gave up after 6 consecutive failures, the last one a probe"
    assert breaker.blocked_until(1e9) == INF
    # Sticky: later outcomes never revive it, nor report a second give-up.
    assert not succeed(breaker, 100.0, sent_at=90.0)
    assert breaker.snapshot(1e9).state == GIVEN_UP


# -- (b) a burst of failures -------------------------------------------------


def test_simultaneous_failures_open_but_do_not_give_up() -> None:
    breaker = open_at_zero()
    snap = breaker.snapshot(0.0)
    assert snap.state == OPEN
    assert snap.open_until == 60.0
    assert snap.consecutive_failures == 16
    assert snap.outcomes == 16
    assert snap.error_share == 1.0


def test_failed_probe_after_a_burst_gives_up() -> None:
    breaker = open_at_zero()
    assert breaker.blocked_until(60.0) == -INF
    breaker.on_send(60.0)
    assert fail(breaker, 61.0, sent_at=60.0) is True
    assert breaker.state == GIVEN_UP


def test_successful_probe_after_a_burst_closes_with_a_clean_slate() -> None:
    breaker = open_at_zero()
    breaker.on_send(60.0)
    assert succeed(breaker, 61.0, sent_at=60.0) is False
    snap = breaker.snapshot(61.0)
    assert snap.state == CLOSED
    assert snap.outcomes == 0
    assert snap.error_share is None
    assert snap.consecutive_failures == 0
    assert breaker.blocked_until(61.0) == -INF


def test_failed_probe_below_the_give_up_count_pauses_again() -> None:
    breaker = Breaker(min_requests=2, give_up_after=5)
    fail(breaker, 0.0)
    fail(breaker, 1.0)  # opens: 2 of 2, paused until 61
    breaker.on_send(61.0)
    assert fail(breaker, 62.0, sent_at=61.0) is False  # only 3 in a row
    assert breaker.snapshot(62.0).open_until == 122.0
    assert breaker.reason == "the probe failed (3 failures in a row); paused 60s"


def test_give_up_after_zero_never_gives_up() -> None:
    breaker = Breaker(give_up_after=0, pause=10.0)
    now = 0.0
    for _ in range(1000):
        until = breaker.blocked_until(now)
        assert until is not None
        now = max(now, until)
        breaker.on_send(now)
        assert not fail(breaker, now)
        now += 1.0
    assert breaker.state in (OPEN, HALF_OPEN)
    assert breaker.consecutive_failures == 1000


def test_failures_must_clearly_exceed_the_share() -> None:
    breaker = Breaker(error_share=0.2, min_requests=5)
    for second in range(4):
        succeed(breaker, float(second))
    # Failures must pass share * n + 2 standard deviations: 1 of 5, 2 of 6 and
    # 3 of 7 are within chance of a 20 % site; 4 of 8 (threshold 3.86) is not.
    for when, state in ((4.0, CLOSED), (5.0, CLOSED), (6.0, CLOSED), (7.0, OPEN)):
        fail(breaker, when)
        assert breaker.state == state


def test_one_failure_among_few_outcomes_does_not_open() -> None:
    # Right after a pause the window is nearly empty: 1 of 5 is 20 %, but says little.
    breaker = Breaker(min_requests=5)
    for t in range(4):
        succeed(breaker, float(t))
    fail(breaker, 4.0)
    assert breaker.state == CLOSED


def test_fewer_than_min_requests_never_open() -> None:
    breaker = Breaker(min_requests=5)
    for t in range(4):
        fail(breaker, float(t))
    assert breaker.state == CLOSED


def test_old_outcomes_leave_the_window() -> None:
    breaker = Breaker(min_requests=5)
    for t in range(4):
        fail(breaker, float(t))
    succeed(breaker, 61.0)  # resets the run; the failures at 0..3 have left the window
    fail(breaker, 62.0)
    snap = breaker.snapshot(62.0)
    assert snap.outcomes == 2
    assert snap.error_share == 0.5
    assert snap.state == CLOSED


# -- (c) a site with a steady 10 % error rate -----------------------------------


def run_site(breaker: Breaker, failures: list[bool], step: float = 1.0) -> tuple[float, int]:
    """Serve ``failures`` in order at concurrency 1, one send per ``step`` when allowed.

    Returns:
        The time of the last outcome and how many outcomes the breaker opened on.
    """
    now, opened = 0.0, 0
    for failed in failures:
        until = breaker.blocked_until(now)
        assert until is not None  # concurrency 1: the probe always answered
        now = max(now, until)
        breaker.on_send(now)
        was_open = breaker.state == OPEN
        assert breaker.on_outcome(now, failed=failed, sent_at=now) is False
        opened += breaker.state == OPEN and not was_open
        now += step
    return now, opened


def test_steady_ten_percent_errors_are_never_given_up() -> None:
    breaker = Breaker()
    # Every 10th outcome fails, so failures never come two in a row: no run of
    # failed probes can build up, however often the breaker opens.
    run_site(breaker, [i % 10 == 9 for i in range(3600)])
    assert breaker.state != GIVEN_UP
    assert breaker.consecutive_failures <= 1


@pytest.mark.parametrize("seed", range(40))
def test_random_ten_percent_errors_are_not_given_up(seed: int) -> None:
    # A 10 % site opens the breaker hundreds of times in 20,000 outcomes, and a
    # run of five failures ending in a failed probe does happen (seed 1 had one
    # before the recent-share test); giving up also needs half of the last 20
    # outcomes failed, which a 10 % site practically never shows.
    rng = random.Random(seed)
    breaker = Breaker()
    _, opened = run_site(breaker, [rng.random() < 0.1 for _ in range(20_000)])
    assert breaker.state != GIVEN_UP
    assert opened > 0  # the threshold is the site's own rate: it does pause


def test_five_failures_and_a_failed_probe_need_a_failing_recent_past() -> None:
    breaker = Breaker(min_requests=5)
    now = 0.0
    for _ in range(15):  # fifteen successes, then five failures: 5 of 20 failed
        breaker.on_send(now)
        breaker.on_outcome(now, failed=False, sent_at=now)
        now += 1.0
    for _ in range(5):
        breaker.on_send(now)
        breaker.on_outcome(now, failed=True, sent_at=now)
        now += 1.0
    assert breaker.state == OPEN
    probes = 0
    while breaker.state != GIVEN_UP:
        until = breaker.blocked_until(now)
        assert until is not None
        now = max(now, until)
        breaker.on_send(now)
        breaker.on_outcome(now, failed=True, sent_at=now)
        probes += 1
    # Failures say "down" (15 of the last 20: clearly more than half, by the exact binomial tail)
    # only at the tenth failed probe.
    assert probes == 10


# -- (d) stragglers, (e) abandoned probes ------------------------------------------


def test_stragglers_neither_close_nor_reopen_a_half_open_breaker() -> None:
    breaker = Breaker(min_requests=1, pause=10.0)
    breaker.on_send(0.0)
    breaker.on_send(0.0)
    breaker.on_send(0.0)
    fail(breaker, 1.0, sent_at=0.0)  # opens until 11
    assert breaker.blocked_until(11.0) == -INF
    breaker.on_send(11.0)  # the probe
    assert succeed(breaker, 12.0, sent_at=0.0) is False  # a late success
    assert breaker.state == HALF_OPEN
    assert breaker.blocked_until(12.0) == 21.0  # the probe's wait: the pause it followed
    assert fail(breaker, 13.0, sent_at=0.0) is False  # a late failure
    assert breaker.state == HALF_OPEN
    assert breaker.blocked_until(13.0) == 21.0
    snap = breaker.snapshot(13.0)  # both were still counted in the window
    assert snap.consecutive_failures == 0  # but a failure sent before the opening is old news for the run
    assert snap.outcomes == 3
    assert succeed(breaker, 14.0, sent_at=11.0) is False  # the probe decides
    assert breaker.state == CLOSED


def test_straggler_failures_while_open_do_not_extend_the_pause() -> None:
    breaker = Breaker(min_requests=1)
    fail(breaker, 0.0)
    fail(breaker, 30.0, sent_at=0.0)
    assert breaker.blocked_until(30.0) == 60.0


def test_abandoning_the_probe_frees_the_probe_slot() -> None:
    breaker = open_at_zero()
    breaker.on_send(60.0)
    assert breaker.blocked_until(60.5) == 120.0
    breaker.on_abandon(59.0)  # a straggler abandoned: the probe is still out
    assert breaker.blocked_until(60.5) == 120.0
    breaker.on_abandon(60.0)
    assert breaker.blocked_until(60.5) == -INF
    breaker.on_send(60.5)
    assert breaker.blocked_until(60.5) == 120.5
    assert succeed(breaker, 61.0, sent_at=60.5) is False
    assert breaker.state == CLOSED


# -- (f) bounded memory, (g) idleness ----------------------------------------------


def test_window_memory_does_not_grow_with_the_outcomes() -> None:
    breaker = Breaker(error_share=0.5)
    for i in range(100_000):
        breaker.on_outcome(i * 0.01, failed=i % 4 == 0, sent_at=i * 0.01)
        assert len(breaker._buckets) <= 12  # reaching in: the bound is the point
    snap = breaker.snapshot(1000.0)
    assert snap.state == CLOSED
    assert 5500 <= snap.outcomes <= 6000
    assert snap.error_share == pytest.approx(0.25, abs=0.01)


def test_is_idle_only_when_equivalent_to_a_fresh_breaker() -> None:
    breaker = Breaker()
    assert breaker.is_idle(0.0)
    succeed(breaker, 0.0)
    assert not breaker.is_idle(30.0)  # an outcome in the window
    assert breaker.is_idle(60.0)
    fail(breaker, 100.0)
    assert not breaker.is_idle(1000.0)  # a run of failures outlives the window
    succeed(breaker, 1000.0)
    assert breaker.is_idle(1060.0)

    opened = open_at_zero()
    assert not opened.is_idle(30.0)
    assert not opened.is_idle(60.0)  # half-open
    opened.on_send(60.0)
    succeed(opened, 60.0)
    assert opened.is_idle(60.0)  # the probe's success cleared everything


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"window": 0.0}, "window"),
        ({"window": float("nan")}, "window"),
        ({"error_share": 1.0}, "error_share"),
        ({"error_share": -0.1}, "error_share"),
        ({"min_requests": 0}, "min_requests"),
        ({"pause": -1.0}, "pause"),
        ({"give_up_after": -1}, "give_up_after"),
    ],
)
def test_bad_arguments_are_rejected_by_name(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Breaker(**kwargs)  # type: ignore[arg-type]


# -- (h) invariants under any sequence ---------------------------------------------


@dataclass(frozen=True)
class Tick:
    dt: float


@dataclass(frozen=True)
class Send:
    count: int


@dataclass(frozen=True)
class Outcome:
    pick: int
    failed: bool


@dataclass(frozen=True)
class Abandon:
    pick: int


# Failures are favoured and sends come in small bursts, so that runs reach give-up
# regularly and stragglers are often still out when a pause ends.
steps = st.one_of(
    st.builds(Tick, st.sampled_from([0.0, 0.5, 1.0, 3.0, 10.0, 30.0])),
    st.builds(Send, st.integers(1, 3)),
    st.builds(Outcome, st.integers(0, 50), st.sampled_from([True, True, True, False])),
    st.builds(Outcome, st.integers(0, 50), st.sampled_from([True, True, True, False])),
    st.builds(Abandon, st.integers(0, 50)),
)
configs = st.fixed_dictionaries({
    "window": st.sampled_from([5.0, 10.0, 60.0]),
    "error_share": st.sampled_from([0.0, 0.1, 0.5, 0.9]),
    "min_requests": st.integers(1, 5),
    "pause": st.sampled_from([0.0, 1.0, 10.0]),
    "give_up_after": st.integers(0, 4),
})


# 120 random sequences per run (each 30-120 steps long); new ones every run.
@settings(max_examples=120, deadline=None)
@given(configs, st.lists(steps, min_size=30, max_size=120))
def test_invariants_hold_under_any_sequence(config: dict[str, float], actions: list[object]) -> None:
    breaker = Breaker(**config)  # type: ignore[arg-type]
    now = 0.0
    inflight: list[float] = []
    half_open_start = -INF  # the end of the latest pause seen, by observation
    gave_up = False
    for action in actions:
        match action:
            case Tick(dt):
                now += dt
            case Send(count):
                for _ in range(count):  # as many as the breaker lets through
                    until = breaker.blocked_until(now)
                    if until is not None and until <= now:
                        breaker.on_send(now)
                        inflight.append(now)
            case Outcome(pick, failed) if inflight:
                sent_at = inflight.pop(pick % len(inflight))
                if breaker.on_outcome(now, failed=failed, sent_at=sent_at):
                    assert not gave_up, "gave up twice"
                    assert failed
                    # With a pause the opening is always observed below; without one the
                    # breaker turns half-open within the same call, so ask it instead.
                    start = half_open_start if config["pause"] > 0 else breaker.half_open_since
                    assert sent_at >= start
                    assert config["give_up_after"] > 0
                    gave_up = True
            case Abandon(pick) if inflight:
                breaker.on_abandon(inflight.pop(pick % len(inflight)))
        until = breaker.blocked_until(now)
        snap = breaker.snapshot(now)
        assert snap.state in (CLOSED, OPEN, HALF_OPEN, GIVEN_UP)
        assert (snap.state == GIVEN_UP) == gave_up
        if snap.state == CLOSED:
            assert until == -INF
            assert snap.open_until is None
        elif snap.state == OPEN:
            assert snap.open_until is not None
            assert until == snap.open_until > now
            half_open_start = snap.open_until
        elif snap.state == HALF_OPEN:
            # Free, waiting for the probe, or until it has been out as long as its pause.
            assert until is None or until == -INF or until > now
            assert snap.open_until is None
            if config["pause"] > 0:
                assert breaker.half_open_since == half_open_start
        else:
            assert until == INF
        assert snap.consecutive_failures >= 0
        assert snap.error_share is None or 0.0 <= snap.error_share <= 1.0


# -- (h) escalating pauses, (i) errors that do not depend on the pace ---------------


def test_pauses_escalate_from_the_first_pause_and_a_dead_site_goes_early() -> None:
    breaker = Breaker(pause=60.0, first_pause=15.0, give_up_after=0)
    now, opened_for = 0.0, []
    for _ in range(40):
        until = breaker.blocked_until(now)
        assert until is not None
        if until > now:
            opened_for.append(until - now)
            now = until
        breaker.on_send(now)
        fail(breaker, now)
    # Every request fails: 15 s, then each failed probe doubles the pause, up to 60 s.
    assert opened_for[:4] == [15.0, 30.0, 60.0, 60.0]


def test_a_dead_site_is_given_up_within_30_s_and_10_requests_with_the_policy_defaults() -> None:
    breaker = Breaker(pause=60.0, first_pause=60.0 * FIRST_PAUSE_SHARE)
    now, sent = 0.0, 0
    while breaker.state != GIVEN_UP:
        until = breaker.blocked_until(now)
        assert until is not None
        now = max(now, until)
        breaker.on_send(now)
        sent += 1
        fail(breaker, now)
        now += 1.0
    assert now <= 30.0
    assert sent <= 10


def test_a_close_resets_the_pause_to_the_first() -> None:
    breaker = Breaker(pause=60.0, first_pause=10.0, min_requests=1)
    fail(breaker, 0.0)  # 10 s
    breaker.on_send(10.0)
    fail(breaker, 10.0)  # the probe fails: 20 s
    assert breaker.blocked_until(10.0) == 30.0
    breaker.on_send(30.0)
    succeed(breaker, 30.0)
    for t in (31.0, 32.0, 33.0, 34.0, 35.0, 36.0, 37.0):
        fail(breaker, t)
        # So few outcomes since the pause may be chance: the probe that closed it succeeded, and a
        # site failing half of its requests fails four of five one time in 5, six of seven one in 16.
        assert breaker.state == CLOSED
    fail(breaker, 38.0)  # eight of nine: clearly more than half fail (one time in 50 at a half share)
    assert breaker.state == OPEN
    assert breaker.blocked_until(38.0) == 48.0


def flaky_run(share: float, seed: int, seconds: float = 600.0) -> tuple[Breaker, float]:
    """Ten requests a second to a site failing ``share`` of them whatever the pace; the time spent paused."""
    breaker = Breaker(pause=60.0, first_pause=15.0)
    return breaker, steady_run(breaker, share, seed, seconds)


def test_a_steady_quarter_of_errors_costs_one_pause_not_one_a_minute() -> None:
    pauses = []
    for seed in range(20):
        breaker, paused = flaky_run(0.25, seed)
        assert breaker.state != GIVEN_UP
        assert 0.0 < breaker.tolerated_share <= 0.5
        pauses.append(paused)
    # Mostly the first pause alone, which told the errors from overload; a failed probe
    # (one in four) adds a second one. Before the rule: a minute's pause every minute or so.
    assert sorted(pauses)[10] <= 15.0
    assert max(pauses) <= 45.0


def test_errors_that_fall_with_the_pace_are_not_learned() -> None:
    # Overload: 60 % failures before the pause, none after it (the pause let the site recover).
    breaker = Breaker(pause=60.0, first_pause=15.0, min_requests=5)
    for t in range(10):
        breaker.on_outcome(float(t) * 0.1, failed=t % 5 < 3, sent_at=float(t) * 0.1)
    assert breaker.state == OPEN
    now = breaker.blocked_until(1.0)
    assert now is not None
    breaker.on_send(now)
    succeed(breaker, now)
    for i in range(50):
        succeed(breaker, now + 0.1 * i)
    assert breaker.tolerated_share == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_a_site_where_most_requests_fail_is_still_stopped(seed: int) -> None:
    breaker, paused = flaky_run(0.7, seed=seed, seconds=300.0)
    assert breaker.tolerated_share <= 0.5
    assert breaker.state == GIVEN_UP or paused >= 200.0


def test_the_documented_flaky_timeline() -> None:
    # docs/concepts/circuit-breaker.md, "Pauses that escalate, and errors that are the site's own".
    rng = random.Random(1)
    breaker = Breaker(pause=60.0, first_pause=10.0)
    now = 0.0
    pauses: list[tuple[float, float]] = []
    learned: list[tuple[float, float]] = []
    while now < 60.0:
        until = breaker.blocked_until(now)
        assert until is not None
        if until > now:
            pauses.append((round(now, 1), round(until, 1)))
            now = until
        breaker.on_send(now)
        breaker.on_outcome(now, failed=rng.random() < 0.25, sent_at=now)
        if breaker.tolerated_share and not learned:
            learned.append((round(now, 1), breaker.tolerated_share))
        now += 0.1
    # Opened by the outcome at 0.9 s; 7 of its 10 outcomes succeeded, so the first pause is a
    # sample of a tenth of first_pause (it was 10 s, as long as a site that is down gets).
    assert pauses == [(1.0, 1.9)]
    assert learned == [(2.9, 0.5)]
    assert breaker.state == CLOSED


def test_an_unlucky_start_of_a_flaky_site_is_not_given_up() -> None:
    # A site failing three requests in ten (flaky25's share, another seed): four 200s,
    # then four failures that open the breaker, and a failed probe. Five failures in a row
    # and five of nine: half, but on nine outcomes that is chance, and the site answers.
    breaker = Breaker(min_requests=5)
    now = 0.0
    for failed in (False, False, False, False, True, True, True, True):
        breaker.on_send(now)
        breaker.on_outcome(now, failed=failed, sent_at=now)
        now += 0.5
    assert breaker.state == OPEN
    until = breaker.blocked_until(now)
    assert until is not None
    breaker.on_send(until)
    assert fail(breaker, until + 0.1, sent_at=until) is False
    assert breaker.state == OPEN


def test_hung_requests_timing_out_during_a_pause_do_not_give_a_flaky_site_up() -> None:
    # Issue 30: a site answering most requests well but hanging on a few. The breaker opens; during
    # the pause nothing arrives but the hung requests' timeouts, nine in a row. They were sent before
    # it opened: old news. A failed probe then must not give the site up.
    breaker = Breaker(min_requests=5, pause=60.0, first_pause=10.0, give_up_after=5)
    t = 0.0
    for n in range(30):  # one failure in three (a flaky site at a bad moment): it opens
        t += 0.1
        (fail if n % 3 == 0 else succeed)(breaker, t, sent_at=t - 0.05)
        if breaker.state == OPEN:
            break
    assert breaker.state == OPEN
    opened = t
    for n in range(9):  # the hung requests time out, one after another
        assert fail(breaker, opened + 1.0 + n, sent_at=opened - 5.0) is False
    assert breaker.snapshot(opened + 9.5).consecutive_failures < 5
    breaker.on_send(opened + 10.0)  # the probe
    assert fail(breaker, opened + 10.5, sent_at=opened + 10.0) is False  # a failed probe
    assert breaker.state == OPEN  # paused again, not given up


def test_a_site_that_died_is_still_given_up_at_a_failed_probe() -> None:
    breaker = Breaker(min_requests=5, pause=60.0, first_pause=10.0, give_up_after=5)
    for n in range(8):
        fail(breaker, 0.1 * n, sent_at=0.1 * n - 0.05)
    assert breaker.state == OPEN
    breaker.on_send(10.5)
    assert fail(breaker, 11.0, sent_at=10.5) is True
    assert breaker.state == GIVEN_UP


def test_an_unlucky_probe_of_a_mostly_answering_site_keeps_the_pause_short() -> None:
    # The first opening of a site whose successes outnumber its failures is a 1 s sample pause.
    # Its probe may fail by chance (one time in four at 25 % errors): that alone must not cost
    # the site the full first pause while most of its recent answers are good.
    breaker = Breaker(pause=60.0, first_pause=10.0)
    now = 0.0
    for failed in (False, True, False, False, True, False, False, True):
        breaker.on_send(now)
        breaker.on_outcome(now, failed=failed, sent_at=now)
        now += 0.1
    assert breaker.state == OPEN
    assert breaker.pause_end == pytest.approx(1.7)  # 3 of 8 failed at 0.7 s
    breaker.on_send(1.7)
    breaker.on_outcome(1.75, failed=True, sent_at=1.7)  # the probe fails
    assert breaker.state == OPEN
    assert breaker.pause_end == pytest.approx(2.75)  # was 11.75
    # A site that is down fails everything: its pauses are the usual ones from the start.
    down = Breaker(pause=60.0, first_pause=10.0)
    for i in range(5):
        down.on_send(i * 0.1)
        down.on_outcome(i * 0.1, failed=True, sent_at=i * 0.1)
    assert down.state == OPEN
    assert down.pause_end == pytest.approx(10.4)


def test_an_unlucky_first_opening_of_a_flaky_site_is_a_sample() -> None:
    # A random farm's site with 24 % 502s opened its breaker with three failures among its first five
    # outcomes: more than half, but on five outcomes that is luck, and two of them succeeded. It was
    # paused 10 s, its probe failed (20 s), then 40 s: 1 page of 88 in 36 s, the oracle's 88 in 15 s.
    breaker = Breaker(pause=60.0, first_pause=10.0)
    for i, failed in enumerate((True, False, True, False, True)):
        breaker.on_outcome(0.1 * i, failed=failed, sent_at=0.1 * i)
    assert breaker.state == OPEN
    assert breaker.blocked_until(0.4) == pytest.approx(1.4)  # a sample: a tenth of the first pause
    breaker.on_send(1.4)
    assert fail(breaker, 1.5, sent_at=1.4) is False  # an unlucky probe: 4 of 6 failed, still not clear
    assert breaker.blocked_until(1.5) == pytest.approx(2.5)


def test_a_share_after_the_pause_not_clearly_lower_is_the_sites_own() -> None:
    # 15 % 500s: the first opening came at 3 of 9 (33 %, a sample), the share after the pause was
    # 22 of 146 (15 %): under half of 33 %, which read as errors that fell with the pace and paused
    # the site 10 s, then 20 s. On nine outcomes 33 % and 15 % are the same share.
    breaker = Breaker(pause=60.0, first_pause=10.0)
    now = 0.0
    for failed in (False, False, True, False, False, True, False, False, True):
        breaker.on_outcome(now, failed=failed, sent_at=now)
        now += 0.02
    assert breaker.state == OPEN
    until = breaker.blocked_until(now)
    assert until is not None
    now = until
    breaker.on_send(now)
    succeed(breaker, now)
    for i in range(400):
        now += 0.02
        assert breaker.blocked_until(now) == -INF, i
        breaker.on_send(now)
        breaker.on_outcome(now, failed=i % 20 in (0, 7, 13), sent_at=now)
    assert breaker.tolerated_share > 0.15


def test_a_probe_out_longer_than_its_pause_lets_another_go() -> None:
    # A flaky site's first pause is a short sample (a tenth of the first pause); a probe that hangs
    # 5 s held the site for the hang, 6 s in all. After the pause's length another probe may go; the
    # first one's answer, when it comes, still counts as a probe's.
    breaker = Breaker(min_requests=1, pause=60.0, first_pause=10.0)
    assert not succeed(breaker, 0.0)
    t = 0.0
    while breaker.state != OPEN:
        t += 1.0
        fail(breaker, t)
    assert breaker.blocked_until(t) == t + 1.0  # the sample pause
    breaker.on_send(t + 1.0)  # the probe, which hangs
    assert breaker.blocked_until(t + 1.5) == t + 2.0
    assert breaker.blocked_until(t + 2.0) == -INF
    breaker.on_send(t + 2.0)  # a second probe
    assert breaker.blocked_until(t + 2.5) == t + 3.0
    assert succeed(breaker, t + 2.1, sent_at=t + 2.0) is False
    assert breaker.state == CLOSED


def test_a_hung_probe_of_a_site_that_is_down_still_gives_it_up() -> None:
    breaker = Breaker(pause=10.0)
    for t in range(5):
        fail(breaker, float(t))
    assert breaker.state == OPEN
    breaker.on_send(14.0)  # the probe, which times out at 30
    breaker.on_send(24.0)  # out 10 s, as long as the pause: a second one
    assert fail(breaker, 30.0, sent_at=14.0) is True
    assert breaker.state == GIVEN_UP


# -- the pause's length and the give-up are a judgement of "down" (breaker1) ----------------------


def test_a_reopening_of_a_site_not_clearly_down_is_a_sample_too() -> None:
    # A random farm's site failing 13 % (500s) opened its breaker at 4 of its first 5 outcomes (a
    # sample: 1 s), and after the pause 23 of 153 failed: above 10 %, and "clearly lower" than the
    # 4 of 5 the trip itself had picked, which read as errors that fell with the pace and paused
    # the site the full first pause (10 s of its 15 s crawl; its clean crawl takes 1 s).
    breaker = Breaker(pause=60.0, first_pause=10.0)
    now = 0.0
    for failed in (True, False, True, True, True):
        breaker.on_outcome(now, failed=failed, sent_at=now)
        now += 0.2
    assert breaker.state == OPEN
    assert breaker.blocked_until(now) == pytest.approx(1.8)  # the sample
    now = 1.8
    breaker.on_send(now)
    succeed(breaker, now)  # the probe closes it
    for i in range(400):
        now += 0.01
        if breaker.state == OPEN:
            break
        breaker.on_send(now)
        breaker.on_outcome(now, failed=i % 20 in (0, 7, 13), sent_at=now)  # 15 %
    assert breaker.state == OPEN
    assert breaker.pause_end - now <= 1.0 + 1e-9  # a sample's pause, not the first pause's 10 s


def test_seven_failures_of_eight_after_a_close_are_no_sign_of_down() -> None:
    # A site failing 28 % whose errors were judged its own (tolerated up to 50 %) failed 7 of the 8
    # outcomes after its breaker closed: two standard deviations past half on 8 outcomes, "down", a
    # 10 s pause of a 16 s crawl. A site failing half of its requests shows as many one time in 28.
    breaker = Breaker(pause=60.0, first_pause=10.0)
    breaker.tolerate(0.5)
    now = 0.0
    for failed in (True, False, True, True, True):
        breaker.on_outcome(now, failed=failed, sent_at=now)
        now += 0.2
    assert breaker.state == CLOSED  # tolerated
    for _ in range(5):
        fail(breaker, now)
        now += 0.2
    assert breaker.state == OPEN  # 8 of 10: past the tolerated share
    now = breaker.pause_end
    breaker.on_send(now)
    succeed(breaker, now)
    for failed in (True, True, True, True, False, True, True, True):
        breaker.on_send(now)
        breaker.on_outcome(now, failed=failed, sent_at=now)
        now += 0.05
    assert breaker.state == CLOSED  # 7 of 8: not clearly more than half
    while breaker.state == CLOSED:  # a site that does fail nearly everything: a sample, then probes
        fail(breaker, now)
        now += 0.05
    for _ in range(5):
        if breaker.state == GIVEN_UP or breaker.pause_end - now >= 9.0:
            break
        now = breaker.pause_end
        breaker.on_send(now)
        fail(breaker, now + 0.01, sent_at=now)
        now += 0.01
    assert breaker.state == GIVEN_UP or breaker.pause_end - now >= 9.0  # down: the usual pauses


def test_a_flaky_site_whose_failures_cluster_round_failed_probes_is_not_given_up() -> None:
    # A random farm's site failing 24 % of its requests at once: a cluster of failures opened the
    # breaker (a sample), and three probes in a row failed: five failures in a row and 11 of the last
    # 20 outcomes. "Half of the last 20" gave it up with 218 of its 265 pages left; it does not look
    # down (15 of 20 would), so it is paused briefly and probed again.
    breaker = Breaker(pause=60.0, first_pause=10.0)
    now = 0.0
    pattern = [False] * 25 + [False, False, False, True, False, False, True, True, False, True, True,
                              False, True, False, True, True]
    for failed in pattern:
        breaker.on_send(now)
        breaker.on_outcome(now, failed=failed, sent_at=now)
        now += 0.03
        if breaker.state == OPEN:
            break
    assert breaker.state == OPEN
    for _ in range(3):  # three failed probes
        now = breaker.pause_end
        breaker.on_send(now)
        assert fail(breaker, now + 0.001, sent_at=now) is False
        assert breaker.pause_end - now <= 1.1  # still a sample's pause
    assert breaker.consecutive_failures >= 5
    assert breaker.state == OPEN


def test_the_quick_failures_first_after_a_close_are_no_sign_of_down() -> None:
    # A random farm's site failing 17 % of its requests with 500s at once, 31 ms pages: its breaker's
    # sample closed on a probe's success, the scope sent a burst, and the six failures answered in 1 ms
    # came back before any 200 sent beside them: "6 of 6 failed", every one, and a 10 s pause (13.7 s
    # where its clean crawl takes 1.6). The probe that closed the breaker is one of the outcomes since.
    breaker = Breaker(pause=60.0, first_pause=10.0)
    now = 0.0
    for i in range(103):  # 17 of 103: clearly above 10 %, a sample
        breaker.on_outcome(now, failed=i % 6 == 0, sent_at=now)
        now += 0.01
        if breaker.state == OPEN:
            break
    assert breaker.state == OPEN
    now = breaker.pause_end
    breaker.on_send(now)
    succeed(breaker, now + 0.03, sent_at=now)
    assert breaker.state == CLOSED
    for i in range(6):  # the quick 5xx of the burst, before its 200s
        fail(breaker, now + 0.031 + 0.001 * i)
    # 6 of 7 since the pause: not down, and too few to compare with the share before it.
    assert breaker.state == CLOSED


# -- (j) a sample without a pause (in_place: a scope whose pace rampup measures) ---------------


def steady_run(breaker: Breaker, share: float, seed: int, seconds: float = 60.0) -> float:
    """Ten requests a second to a site failing ``share`` of them whatever the pace: the seconds paused."""
    rng = random.Random(seed)
    now, paused = 0.0, 0.0
    while now < seconds:
        until = breaker.blocked_until(now)
        assert until is not None
        if until > now:
            paused += until - now
            now = until
        breaker.on_send(now)
        breaker.on_outcome(now, failed=rng.random() < share, sent_at=now)
        now += 0.1
    return paused


@pytest.mark.parametrize("seed", range(5))
def test_an_in_place_sample_of_a_flaky_site_pauses_nothing_and_learns_its_share(seed: int) -> None:
    # A site failing a quarter of its requests whatever the pace: the sample that opened the breaker
    # with its 1 s pause is taken in place, and the share after it, about the same, is learned as the
    # site's own, as it was after the pause.
    breaker = Breaker(pause=60.0, first_pause=10.0, in_place=True)
    assert steady_run(breaker, 0.25, seed) == 0.0
    assert breaker.state == CLOSED
    assert 0.25 <= breaker.tolerated_share <= 0.5
    # The same site's breaker without in_place (a fixed delay, AutoThrottle): the 1 s sample pause.
    assert steady_run(Breaker(pause=60.0, first_pause=10.0), 0.25, seed) >= 0.8  # (sends 0.1 s apart)


def test_an_in_place_sample_is_the_sample_and_the_comparison_follows() -> None:
    breaker = Breaker(pause=60.0, first_pause=10.0, min_requests=5, in_place=True)
    now = 0.0
    for failed in (False, True, False, True, True):  # 3 of 5: not down, a sample
        breaker.on_send(now)
        breaker.on_outcome(now, failed=failed, sent_at=now)
        now += 0.1
    assert breaker.state == CLOSED
    assert breaker.blocked_until(now) == -INF
    assert breaker.reason == "3 of 5 outcomes failed in the last 60s; sampled without a pause"
    assert breaker.snapshot(now).outcomes == 0  # the outcomes from here on are the ones after it
    for i in range(12):  # 6 of 12 after it, against 3 of 5: steady, learned (at most a half)
        breaker.on_outcome(now, failed=i % 2 == 0, sent_at=now)
        now += 0.1
    assert breaker.state == CLOSED
    assert breaker.tolerated_share == 0.5


def test_a_dead_site_is_paused_probed_and_given_up_in_place_or_not() -> None:
    # A site that is down looks down at its first opening: the full pause, whether or not samples are
    # taken in place, and given up at its first failed probe (seed 003).
    for in_place in (False, True):
        breaker = Breaker(pause=60.0, first_pause=10.0, in_place=in_place)
        for i in range(5):
            fail(breaker, 0.1 * i)
        assert breaker.state == OPEN
        assert breaker.pause_end == pytest.approx(10.4)
        breaker.on_send(10.4)
        assert fail(breaker, 10.5, sent_at=10.4) is True
        assert breaker.state == GIVEN_UP


def test_a_site_that_dies_after_an_in_place_sample_is_still_paused_and_given_up() -> None:
    breaker = Breaker(pause=60.0, first_pause=10.0, in_place=True)
    now = 0.0
    for i in range(40):  # a flaky start: a fifth of the requests fail, a sample taken in place
        breaker.on_outcome(now, failed=i % 5 == 0 or i in (11, 12, 13), sent_at=now)
        now += 0.1
    assert breaker.reason.endswith("sampled without a pause")
    while breaker.state == CLOSED:  # then it dies: 8 of 9 since the sample look down
        fail(breaker, now)
        now += 0.1
    assert breaker.state == OPEN
    assert breaker.pause_end - now >= 9.0  # the full first pause, not a sample's
    for _ in range(10):
        if breaker.state == GIVEN_UP:
            break
        now = breaker.pause_end
        breaker.on_send(now)
        fail(breaker, now + 0.01, sent_at=now)
        now += 0.01
    assert breaker.state == GIVEN_UP
