"""Announced budgets (policy/budget.py): the window's edge and the staged brake learned, the
budget spent evenly; scripted times against the simulator's and the guard's own counters."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from crawlpace.guard import Decision, StagedBrake
from crawlpace.policy.budget import HeaderBudget
from crawlpace.sim._limits import Embargo, FixedWindow, SlidingWindow, TokenBucket
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory
from .test_feedback import FAST, URL, Response

LATENCY = 0.002


def crawl_fixed_window(limit: int, window: float, seconds: float, *, opened_at: float = 0.0,
                       jitter: float = 0.05, seed: int = 1) -> tuple[int, int]:
    """Send as the advice allows to a fixed-window counter for ``seconds``; (successes, refusals)."""
    rng = random.Random(seed)
    counter = FixedWindow(limit, window)
    counter.take(opened_at)  # someone else opened the window: its phase is unknown to the crawler
    budget = HeaderBudget()
    now, ok, refused = opened_at + 0.01, 0, 0
    while now < opened_at + seconds:
        allowed = counter.take(now)
        ok += allowed
        refused += not allowed
        span = float(max(math.ceil(counter.reset(now)), 0))
        advice = budget.observe(now + LATENCY, sent_at=now, remaining=float(counter.remaining(now)),
                                quota=float(counter.limit), window=window, span=span, refused=not allowed)
        gap = advice.pace * (1.0 + rng.uniform(0.0, jitter))
        if not allowed:
            gap = max(gap, span)  # the 429's Retry-After: up to the end of the window
        now = max(now + gap, now + LATENCY + (advice.hold or 0.0))
    return ok, refused


def test_a_one_second_window_is_used_to_at_least_95_percent() -> None:
    # t is always "1" in a 1 s window: only the resets seen tell where the windows begin.
    ok, refused = crawl_fixed_window(8, 1.0, 60.0, opened_at=0.37)
    assert ok >= 0.97 * 8 * 60
    assert refused <= 2


def test_the_naive_pace_of_t_over_r_wastes_a_quarter() -> None:
    # What the rule replaces: t / r with t rounded up to the second, and a spent budget
    # holding sends for the whole t.
    counter, now, ok = FixedWindow(8, 1.0), 0.0, 0
    counter.take(0.37)
    now = 0.38
    while now < 60.37:
        ok += counter.take(now)
        left, span = counter.remaining(now), max(math.ceil(counter.reset(now)), 0)
        now += span if left < 1 else max(span / left, 1.0 / 8)
    assert ok < 0.85 * 8 * 60


@pytest.mark.parametrize(("limit", "window"), [(10, 5.0), (3, 1.0), (100, 20.0)])
def test_other_windows_are_spent_evenly_too(limit: int, window: float) -> None:
    ok, refused = crawl_fixed_window(limit, window, 20 * window, opened_at=0.11)
    assert ok >= 0.93 * limit * 20
    assert refused <= 2


def crawl_moving_window(limit: int, window: float, seconds: float, *, count_refused: bool,
                        jitter: float = 0.05, seed: int = 1) -> tuple[int, int]:
    """As :func:`crawl_fixed_window`, against a moving window announcing ``t`` (0 while units are left)."""
    rng = random.Random(seed)
    counter = SlidingWindow(limit, window, count_refused=count_refused)
    budget = HeaderBudget()
    now, ok, refused = 0.01, 0, 0
    while now < seconds:
        budget.on_send()
        allowed = counter.take(now)
        ok += allowed
        refused += not allowed
        span = float(max(math.ceil(counter.reset(now)), 0))
        advice = budget.observe(now + LATENCY, sent_at=now, remaining=float(counter.remaining(now)),
                                quota=float(limit), window=window, span=span, refused=not allowed, inflight=1)
        gap = advice.pace * (1.0 + rng.uniform(0.0, jitter))
        if not allowed:
            gap = max(gap, span)
        now = max(now + gap, now + LATENCY + (advice.hold or 0.0))
    return ok, refused


@pytest.mark.parametrize(("limit", "window", "count_refused"),
                         [(9, 9.0, True), (10, 5.0, False), (3, 1.0, True)])
def test_a_moving_window_is_used_to_at_least_95_percent(limit: int, window: float,
                                                        count_refused: bool) -> None:
    # At its full pace a moving window shows no unit left on every answer, and its T (the oldest
    # request's leaving, in whole seconds) is no window edge: held for T each time, or spread over
    # an edge fitted to its rises, a crawl got half of it.
    ok, refused = crawl_moving_window(limit, window, 20 * window, count_refused=count_refused)
    assert ok >= 0.95 * limit * 20
    assert refused == 0


def test_a_spent_budget_comes_back_as_the_oldest_own_answer_leaves() -> None:
    def spend(*, seen: bool, inflight: int) -> float | None:
        budget = HeaderBudget()
        if seen:
            budget.on_send()
        for now, left in ((0.01, 2.0), (0.11, 1.0)):
            budget.observe(now, sent_at=now - 0.005, remaining=left, quota=3.0, window=1.0, span=0.0,
                           refused=False, inflight=1)
        return budget.observe(0.21, sent_at=0.205, remaining=0.0, quota=3.0, window=1.0, span=1.0,
                              refused=False, inflight=inflight).hold

    # Three answers of its own in the window: the first leaves it at 1.01, not at T's whole second.
    assert spend(seen=True, inflight=1) == pytest.approx(0.8)
    # With another request in flight the server counted it too: the second answer must leave.
    assert spend(seen=True, inflight=2) == pytest.approx(0.9)
    # A fleet's worker does not hear of every send: others may have spent the budget, T stands.
    assert spend(seen=False, inflight=1) == pytest.approx(1.0)


def test_the_edge_sharpens_with_each_reset_seen() -> None:
    budget = HeaderBudget()
    budget.observe(0.31, sent_at=0.3, remaining=7.0, quota=8.0, window=1.0, span=1.0, refused=False)
    assert budget.window_end(0.31) is None  # "t=1" of a 1 s window says nothing yet
    budget.observe(0.61, sent_at=0.6, remaining=6.0, quota=8.0, window=1.0, span=1.0, refused=False)
    budget.observe(1.11, sent_at=1.1, remaining=7.0, quota=8.0, window=1.0, span=1.0, refused=False)
    assert (budget.edge_lo, budget.edge_hi) == (0.6, 1.1)  # a window began between those sends
    budget.observe(1.91, sent_at=1.9, remaining=5.0, quota=8.0, window=1.0, span=1.0, refused=False)
    budget.observe(2.01, sent_at=2.0, remaining=7.0, quota=8.0, window=1.0, span=1.0, refused=False)
    # Moved by a whole window onto the first interval, then intersected: (1.9, 2.0].
    assert budget.edge_lo == pytest.approx(1.9)
    assert budget.edge_hi == pytest.approx(2.0)
    assert budget.window_end(2.5) == pytest.approx(3.0)
    assert budget.window_end(2.5, latest=False) == pytest.approx(2.9)


def test_windows_that_moved_replace_the_old_edge() -> None:
    budget = HeaderBudget()
    budget.observe(0.61, sent_at=0.6, remaining=2.0, quota=8.0, window=1.0, span=1.0, refused=False)
    budget.observe(0.71, sent_at=0.7, remaining=7.0, quota=8.0, window=1.0, span=1.0, refused=False)
    budget.observe(1.21, sent_at=1.2, remaining=2.0, quota=8.0, window=1.0, span=1.0, refused=False)
    budget.observe(1.31, sent_at=1.3, remaining=7.0, quota=8.0, window=1.0, span=1.0, refused=False)
    assert (budget.edge_lo, budget.edge_hi) == (1.2, 1.3)


def test_a_spent_budget_holds_until_the_learned_end_not_the_whole_second() -> None:
    budget = HeaderBudget()
    budget.observe(0.51, sent_at=0.5, remaining=3.0, quota=8.0, window=1.0, span=1.0, refused=False)
    budget.observe(1.01, sent_at=1.0, remaining=7.0, quota=8.0, window=1.0, span=1.0, refused=False)
    advice = budget.observe(1.86, sent_at=1.85, remaining=0.0, quota=8.0, window=1.0, span=1.0,
                            refused=False)
    assert advice.hold is not None
    assert advice.hold == pytest.approx(2.0 - 1.86)


def test_a_spent_budget_holds_no_sooner_than_its_own_header_says() -> None:
    # One request per 2 s (a moving window), its first answer "r=0;t=2": the edge lies in (1, 2.05],
    # which is also (-1, 0.05] a window sooner. The hold once ended there, 0.05 s after the send.
    budget = HeaderBudget()
    advice = budget.observe(0.046, sent_at=0.0, remaining=0.0, quota=1.0, window=2.0, span=2.0, refused=False)
    assert advice.hold is not None
    assert advice.hold >= 1.0 - 0.046


def test_a_rising_budget_is_followed_at_once() -> None:
    budget = HeaderBudget()
    slow = budget.observe(0.01, sent_at=0.0, remaining=2.0, quota=3.0, window=1.0, span=1.0, refused=False)
    fast = budget.observe(0.35, sent_at=0.34, remaining=11.0, quota=12.0, window=1.0, span=1.0,
                          refused=False)
    assert slow.pace >= 0.95 / 3.0
    assert fast.pace == pytest.approx(1.0 / 12.0, rel=0.3)


def crawl_staged(quota: int, window: float, windows: int, seed: int = 3) -> tuple[list[int], list[int]]:
    """Pace by the advice against the guard's staged brake; successes and refusals per window."""
    brake = StagedBrake(quota, window, rng=random.Random(seed))
    budget = HeaderBudget()
    ok, refused = [0] * windows, [0] * windows
    now = 0.05
    while now < windows * window:
        decision = brake.decide("crawler", now)
        index = int(now // window)
        if decision.allowed:
            ok[index] += 1
        else:
            refused[index] += 1
        advice = budget.observe(now + LATENCY, sent_at=now, remaining=decision.remaining, quota=quota,
                                window=window, span=float(math.ceil(decision.reset)),
                                refused=not decision.allowed)
        gap = advice.pace
        if decision.retry_after is not None:
            gap = max(gap, decision.retry_after)
        now = max(now + gap, now + LATENCY + (advice.hold or 0.0))
    return ok, refused


def test_a_staged_brake_is_learned_from_its_first_refusal_and_never_hit_again() -> None:
    ok, refused = crawl_staged(100, 20.0, 10)
    # The first window runs into the brake at half the quota; from then on the usable half
    # is spread over each window: no refusal, and close to 50 successes per window.
    assert sum(refused[2:]) == 0
    assert all(count >= 46 for count in ok[2:]), ok
    assert sum(refused) <= 4


def test_a_brake_with_other_stages_is_learned_the_same_way() -> None:
    ok, refused = crawl_staged(60, 15.0, 8, seed=11)
    assert sum(refused[2:]) == 0
    assert all(count >= 27 for count in ok[2:]), ok


# -- through the throttler, as a library user with 8 slots and no delay would -------------------


def guard_headers(quota: float, window: float, decision: Decision) -> dict[str, str]:
    """The guard's RateLimit fields (crawlpace.guard) for one decision."""
    headers = {"RateLimit-Policy": f'"site";q={quota:g};w={window:g}',
               "RateLimit": f'"site";r={math.floor(decision.remaining)};t={math.ceil(decision.reset)}'}
    if decision.retry_after is not None:
        headers["Retry-After"] = str(max(math.ceil(decision.retry_after), 1))
    return headers


async def test_library_defaults_learn_a_staged_quota_instead_of_backing_off(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # Issue 16 item 7's quota case: 600 per minute, braked in stages. The defaults used to back
    # off at every refusal, to one request a second for a whole window at least.
    throttler = make_throttler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 8})
    brake = StagedBrake(600, 60.0, rng=random.Random(5))
    ok, refused = [0] * 5, [0] * 5
    while clock.now() < 300.0:
        async with throttler.slot(URL) as permit:
            decision = brake.decide("me", clock.now())
            index = int(clock.now() // 60.0)
            if index < 5:
                ok[index] += decision.allowed
                refused[index] += not decision.allowed
            permit.feedback(Response(200 if decision.allowed else 429, guard_headers(600, 60.0, decision)))
    assert sum(refused) <= 2
    assert all(count >= 285 for count in ok[1:]), ok  # the usable half, spread over each minute


async def test_library_defaults_do_not_burst_when_backoff_ends(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # Issue 16 item 7: 8 slots, no delay, a site allowing 5/s that demands 5 s of silence after
    # each 429. Every time backoff recovered, all 8 slots fired at once and most of them
    # arrived inside the embargo their neighbour had just drawn.
    throttler = make_throttler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 8})
    bucket, embargo = TokenBucket(5.0, 1.0), Embargo()
    inside: list[float] = []
    refusals: list[float] = []

    async def worker() -> None:
        while clock.now() < 600.0:
            async with throttler.slot(URL) as permit:
                now = clock.now()  # the site decides as the request arrives
                if embargo.breached(now, 0.01):
                    inside.append(now)
                refused = embargo.remaining(now) > 0.0 or bucket.take(now) > 0.0
                if refused:
                    embargo.extend(now, 5.0)
                    refusals.append(now)
                await clock.sleep(LATENCY)
                permit.feedback(Response(429, {"Retry-After": "5"}) if refused else Response(200))

    await asyncio.gather(*(worker() for _ in range(8)))
    # The first burst (before anything is known) may break the embargo; nothing after it.
    assert [t for t in inside if t > 10.0] == []
    assert len([t for t in refusals if t > 10.0]) <= 10


async def test_eight_slots_follow_a_rising_header_budget_without_bursts(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # The simulator's `rising` site: 3 a second, 12 from 20 s on, in RateLimit fields, with a
    # Retry-After to the window's end on a 429. An answer that came after the pace it set had
    # lapsed used to leave the scope unpaced, and its 8 slots went out together.
    throttler = make_throttler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 8})
    counter, embargo = FixedWindow(3, 1.0), Embargo()
    inside: list[float] = []
    refusals: list[float] = []
    ok = 0

    async def worker() -> None:
        nonlocal ok
        while clock.now() < 60.0:
            async with throttler.slot(URL) as permit:
                now = clock.now()
                if now >= 20.0:
                    counter.limit = 12
                if embargo.breached(now, 0.01):
                    inside.append(now)
                allowed = counter.take(now)
                span = max(math.ceil(counter.reset(now)), 0)
                headers = {"RateLimit-Policy": f'"site";q={counter.limit};w=1',
                           "RateLimit": f'"site";r={counter.remaining(now)};t={span}'}
                if allowed:
                    ok += 1
                else:
                    headers["Retry-After"] = str(max(span, 1))
                    embargo.extend(now, max(span, 1))
                    refusals.append(now)
                await clock.sleep(LATENCY)
                permit.feedback(Response(200 if allowed else 429, headers))

    await asyncio.gather(*(worker() for _ in range(8)))
    # The first burst goes before any answer; after it, nothing is refused or sent too early.
    assert [t for t in refusals if t > 1.0] == []
    assert [t for t in inside if t > 1.0] == []
    assert ok >= 0.95 * (3 * 20 + 12 * 40)
