"""Gradual slots: a no-delay scope opens its slots 1, 2, 4, 8 as its site answers well.

Through the throttler on the autojumping fake clock (memory store; the store
contract in ``test_stores.py`` shows the Redis store agrees), and the pure
rule on its own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from crawlpace import Settings, Throttler
from crawlpace.policy._gradual_slots import in_force, next_open
from crawlpace.policy.scope import ScopePolicy
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.policy.state import export_state, restore_state
from crawlpace.stores import PolicyFactory
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

#: A library user's set-up: 8 slots per host and nothing else spacing the sends.
EIGHT_SLOTS: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0,
                               "DOWNLOAD_DELAY_PER_SLOT": 0.0}
GRADUAL = {**EIGHT_SLOTS, "THROTTLING_GRADUAL_SLOTS": True}
URL = "https://api.example/items"


@dataclass
class Answer:
    """The part of a response the throttler reads."""

    status_code: int
    headers: dict[str, str] = field(default_factory=dict)


def policy_for(settings: dict[str, Any], scope: str = "api.example") -> ScopePolicy:
    return PolicyFactory(Settings.from_scrapy(settings)).new(scope)


async def send_times(clock: MockClock, make_throttler: ThrottlerFactory, settings: dict[str, Any],
                     count: int) -> list[float]:
    """When each of ``count`` requests went, all started at once, each answered 200 after 0.2 s."""
    throttler = make_throttler(settings)
    sends: list[float] = []

    async def fetch() -> None:
        async with throttler.slot(URL) as permit:
            sends.append(round(clock.now(), 6))
            await clock.sleep(0.2)
            permit.feedback(status=200)

    await asyncio.gather(*(fetch() for _ in range(count)))
    return sends


async def open_slots_one_answer_at_a_time(throttler: Throttler, clock: MockClock, *, step: float, top: int,
                                          tries: int) -> list[int]:
    """Send one request every ``step`` s, each answered 200, until ``top`` slots are open.

    Returns the top of each round once no delay is in force: how many slots were open as they grew.
    """
    seen: list[int] = []
    for _ in range(tries):
        await clock.sleep(step)
        async with throttler.slot(URL) as permit:
            permit.feedback(status=200)
        stats = await throttler.scope_stats("api.example")
        assert stats is not None
        if stats.delay == 0.0 and (not seen or stats.concurrency > seen[-1]):  # each round's top
            seen.append(stats.concurrency)
        if stats.concurrency == top:
            break
    return seen

async def test_slots_open_one_two_four_eight_per_round_of_good_answers(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    sends = await send_times(clock, make_throttler, GRADUAL, 15)
    assert sends == [0.0] + [0.2] * 2 + [0.4] * 4 + [0.6] * 8


async def test_off_by_default_so_seed_001_bursts_stay_as_they_were(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    sends = await send_times(clock, make_throttler, EIGHT_SLOTS, 8)
    assert sends == [0.0] * 8


async def test_a_refusal_closes_the_slots_and_they_reopen_only_once_unpaced(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**GRADUAL, "BACKOFF_WINDOW": 10.0, "BACKOFF_JITTER": False})
    # Open all eight: 1 + 2 + 4 good answers.
    for opened in (1, 2, 4):
        permits = [await throttler.acquire(URL) for _ in range(opened)]
        for permit in permits:
            permit.feedback(status=200)
            await permit.release()
    stats = await throttler.scope_stats("api.example")
    assert stats is not None
    assert stats.concurrency == 8
    refused = await throttler.acquire(URL)
    refused.feedback(Answer(429))
    await refused.release()
    # Backing off: one slot, and good answers under the backoff delay open nothing.
    for _ in range(6):
        async with throttler.slot(URL) as permit:
            permit.feedback(status=200)
    stats = await throttler.scope_stats("api.example")
    assert stats is not None
    assert stats.concurrency == 1
    assert stats.delay > 0.0
    # The backoff wears off in steps; then the slots double up to half of the eight refused (the
    # threshold), and open one more per round past it.
    seen = await open_slots_one_answer_at_a_time(throttler, clock, step=5.0, top=8, tries=200)
    assert seen in ([1, 2, 4, 5, 6, 7, 8], [2, 4, 5, 6, 7, 8]), seen


async def test_a_first_answer_with_retry_after_holds_the_scope_before_any_other_slot_opens(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(GRADUAL)
    sends: list[float] = []
    answered = False

    async def fetch() -> None:
        nonlocal answered
        async with throttler.slot(URL) as permit:
            sends.append(clock.now())
            await clock.sleep(0.1)
            if not answered:  # the site's first answer: too fast, come back in 5 s
                answered = True
                permit.feedback(Answer(429, {"Retry-After": "5"}))
            else:
                permit.feedback(status=200)

    await asyncio.gather(*(fetch() for _ in range(4)))
    assert sends[0] == 0.0
    assert all(sent >= 0.1 + 5.0 for sent in sends[1:]), sends


async def test_while_opening_a_round_is_heard_whole_before_its_slots_are_used_again(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(GRADUAL)
    first = await throttler.acquire(URL)
    first.feedback(status=200)
    await first.release()  # two slots open
    sends: list[float] = []

    async def fetch(answer_after: float, answer: Answer) -> None:
        async with throttler.slot(URL) as permit:
            sends.append(clock.now())
            await clock.sleep(answer_after)
            permit.feedback(answer)

    await asyncio.gather(fetch(0.1, Answer(200)), fetch(0.2, Answer(429, {"Retry-After": "5"})),
                         fetch(0.1, Answer(200)))
    # The third waited for the whole round, heard the refusal, and went after the hold: it did
    # not take the first one's slot at 0.1 s, inside the 5 s the site was about to ask for.
    assert sends[:2] == [0.0, 0.0]
    assert sends[2] >= 0.2 + 5.0, sends


def test_the_rule_in_numbers() -> None:
    step = {"refused": False, "answered_well": True, "unpaced": True}
    assert next_open(1, 0, 8, 8, **step) == (2, 0, 8)
    assert next_open(2, 0, 8, 8, **step) == (2, 1, 8)
    assert next_open(2, 1, 8, 8, **step) == (4, 0, 8)
    assert next_open(4, 3, 6, 6, **step) == (6, 0, 6)  # never past the configured slots
    assert next_open(8, 0, 8, 8, **step) == (8, 0, 8)
    assert next_open(4, 2, 8, 8, **{**step, "answered_well": False}) == (4, 2, 8)  # a failure: nothing
    assert next_open(4, 2, 8, 8, **{**step, "unpaced": False}) == (4, 2, 8)  # nor an answer under backoff
    # A refusal with four open: one slot, and half of four is the new threshold.
    assert next_open(4, 1, 8, 8, **{**step, "refused": True, "answered_well": False}) == (1, 0, 2)
    assert next_open(1, 0, 2, 8, **step) == (2, 0, 2)  # doubling up to the threshold...
    assert next_open(2, 1, 2, 8, **step) == (3, 0, 2)  # ... then one more slot per round
    assert next_open(3, 2, 2, 8, **step) == (4, 0, 2)
    # While opening, a round's answered slots stay shut until the round is whole.
    assert [in_force(4, good, 8) for good in range(4)] == [4, 3, 2, 1]
    assert in_force(8, 0, 8) == 8


async def test_after_a_refusal_the_slots_climb_back_slowly_past_half_of_what_was_refused(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**GRADUAL, "BACKOFF_WINDOW": 5.0, "BACKOFF_JITTER": False})
    for opened in (1, 2):  # four slots open
        permits = [await throttler.acquire(URL) for _ in range(opened)]
        for permit in permits:
            permit.feedback(status=200)
            await permit.release()
    permits = [await throttler.acquire(URL) for _ in range(4)]
    permits[0].feedback(Answer(429))
    for permit in permits:
        if permit is not permits[0]:
            permit.feedback(status=200)
        await permit.release()
    seen = await open_slots_one_answer_at_a_time(throttler, clock, step=2.0, top=4, tries=300)
    assert seen in ([1, 2, 3, 4], [2, 3, 4]), seen  # doubling to 2 (half of 4), then one per round


def test_the_rule_applies_only_when_on_without_a_delay_and_with_several_slots() -> None:
    assert policy_for(GRADUAL).limits.concurrency == 1
    assert policy_for(EIGHT_SLOTS).limits.concurrency == 8
    # A configured delay already spaces the first sends.
    assert policy_for({**GRADUAL, "DOWNLOAD_DELAY": 0.3}).limits.concurrency == 8
    # Rampup and AutoThrottle have start rules of their own.
    assert not policy_for({**GRADUAL, "THROTTLING_SCOPE_DEFAULTS": {"rampup": True}}).gradual
    assert not policy_for({**GRADUAL, "AUTOTHROTTLE_ENABLED": True}).gradual
    assert not policy_for({**GRADUAL, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}).gradual


def test_the_open_slots_travel_with_the_learned_state() -> None:
    heard = policy_for(GRADUAL)
    heard.on_outcome(0.5, ScopeFeedback(status=200), generation=0, sent_at=0.0, expected_use=1.0)
    assert heard.limits.concurrency == 2
    fresh = policy_for(GRADUAL)
    restore_state(fresh, export_state(heard))  # another worker reads what this one learned
    assert fresh.opened == 2
    assert fresh.limits.concurrency == 2


def open_all_eight(policy: ScopePolicy) -> float:
    """Open a gradual policy's eight slots with 1 + 2 + 4 good answers; returns the clock after them."""
    now = 0.0
    for opened in (1, 2, 4):
        for _ in range(opened):
            now += 0.1
            policy.on_outcome(now, ScopeFeedback(status=200), generation=0, sent_at=now - 0.05,
                              expected_use=1.0)
    assert policy.opened == 8
    return now


HANG = ScopeFeedback(failed=True, backoff=True)  # a timeout: no answer, and a backoff exception


def test_a_hang_while_later_requests_were_answered_well_keeps_the_slots_open() -> None:
    policy = policy_for(GRADUAL)
    now = open_all_eight(policy)
    # A request sent at `now` hangs for 10 s; meanwhile one sent after it is answered well.
    policy.on_outcome(now + 1.0, ScopeFeedback(status=200), generation=0, sent_at=now + 0.5, expected_use=1.0)
    policy.on_outcome(now + 10.0, HANG, generation=0, sent_at=now, expected_use=1.0)
    assert policy.opened == 8  # the site kept serving: that hang was the request's own
    # A 500 at a steady share is a failure, not a refusal: it closes nothing either.
    policy.on_outcome(now + 10.1, ScopeFeedback(status=500, failed=True), generation=0, sent_at=now + 10.0,
                      expected_use=1.0)
    assert policy.opened == 8


def test_a_hang_with_no_later_good_answer_is_a_refusal() -> None:
    policy = policy_for(GRADUAL)
    now = open_all_eight(policy)
    # Nothing sent after it came back well: the site may be overloaded, so the slots close.
    policy.on_outcome(now + 10.0, HANG, generation=0, sent_at=now, expected_use=1.0)
    assert policy.opened == 1
    assert policy.opened_threshold == 4


def test_a_slow_sites_slots_reopen_under_a_backoff_delay_that_spaces_nothing() -> None:
    policy = policy_for({**GRADUAL, "BACKOFF_JITTER": False})
    now = open_all_eight(policy)
    # A 503 past the site's in-flight limit: one slot, threshold four, and a 1 s backoff delay.
    policy.on_outcome(now, ScopeFeedback(status=503, failed=True, backoff=True), generation=0,
                      sent_at=now - 1.5, expected_use=1.0)
    assert policy.opened == 1
    delay = policy.limits.delay
    assert 0.0 < delay <= 1.5
    # Each answer takes 1.5 s: one slot busy that long sends less often than the delay allows,
    # so good answers count and the slots double (1 -> 2) although the delay is still in force.
    now += 1.5
    policy.on_outcome(now, ScopeFeedback(status=200, latency=1.5), generation=0, sent_at=now - 1.5,
                      expected_use=1.0)
    assert policy.opened == 2
    assert policy.limits.delay == delay
    # A fast site's answer under the same delay counts for nothing: the delay spaced those sends.
    fast = policy_for({**GRADUAL, "BACKOFF_JITTER": False})
    now = open_all_eight(fast)
    fast.on_outcome(now, ScopeFeedback(status=503, failed=True, backoff=True), generation=0,
                    sent_at=now - 0.05, expected_use=1.0)
    fast.on_outcome(now + 1.0, ScopeFeedback(status=200, latency=0.05), generation=0, sent_at=now + 0.95,
                    expected_use=1.0)
    assert fast.opened == 1
