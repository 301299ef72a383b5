"""First contact: a scope with several slots and no delay hears its site once before it fills them.

All on the autojumping fake clock, through the throttler (memory store),
plus the policy on its own for the cases a store never shows.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from crawlpace import Settings
from crawlpace.policy.scope import ScopePolicy
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.policy.state import export_state, restore_state
from crawlpace.stores import PolicyFactory
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

#: A library user's set-up: 8 slots per host and nothing else spacing the sends.
EIGHT_SLOTS: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0,
                               "DOWNLOAD_DELAY_PER_SLOT": 0.0}
URL = "https://api.example/items"


@dataclass
class Answer:
    """The part of a response the throttler reads."""

    status_code: int
    headers: dict[str, str] = field(default_factory=dict)


def policy_for(settings: dict[str, Any], scope: str = "api.example") -> ScopePolicy:
    return PolicyFactory(Settings.from_scrapy(settings)).new(scope)


async def test_the_other_slots_wait_for_the_first_answer(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(EIGHT_SLOTS)
    sends: list[float] = []

    async def fetch() -> None:
        async with throttler.slot(URL) as permit:
            sends.append(clock.now())
            await clock.sleep(0.2)  # the site takes 0.2 s to answer
            permit.feedback(status=200)

    await asyncio.gather(*(fetch() for _ in range(8)))
    # One request alone, then, once its answer is in, the seven others together.
    assert sends == [0.0] + [0.2] * 7


async def test_a_first_answer_with_retry_after_holds_every_slot(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(EIGHT_SLOTS)
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
    # Nothing was sent inside the 5 s the first answer asked for.
    assert sends[0] == 0.0
    assert all(sent >= 0.1 + 5.0 for sent in sends[1:]), sends


async def test_a_failed_first_request_also_ends_first_contact(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**EIGHT_SLOTS, "BACKOFF_EXCEPTIONS": []})
    first = await throttler.acquire(URL)
    first.feedback(exception=ConnectionResetError("reset"))
    await first.release()
    permits = [await throttler.acquire(URL) for _ in range(8)]
    assert clock.now() == 0.0  # all eight slots open at once after the failure
    for permit in permits:
        await permit.release()


async def test_a_first_request_released_without_a_word_ends_first_contact_too(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # Code that never calls feedback() must not be held to one slot for ever.
    throttler = make_throttler(EIGHT_SLOTS)
    sends: list[float] = []

    async def fetch() -> None:
        async with throttler.slot(URL):
            sends.append(clock.now())
            await clock.sleep(0.3)

    await asyncio.gather(*(fetch() for _ in range(8)))
    assert sends == [0.0] + [0.3] * 7


def test_the_rule_applies_only_without_a_delay_and_with_several_slots() -> None:
    assert policy_for(EIGHT_SLOTS).limits.concurrency == 1
    assert policy_for(EIGHT_SLOTS).first_contact
    # A configured delay already spaces the first sends: seed 001's timeline is untouched.
    assert not policy_for({**EIGHT_SLOTS, "DOWNLOAD_DELAY": 0.3}).first_contact
    assert policy_for({**EIGHT_SLOTS, "DOWNLOAD_DELAY": 0.3}).limits.concurrency == 8
    # One slot: nothing to hold back. Rampup and AutoThrottle have start rules of their own.
    assert not policy_for({**EIGHT_SLOTS, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}).first_contact
    assert not policy_for({**EIGHT_SLOTS, "THROTTLING_SCOPE_DEFAULTS": {"rampup": True}}).first_contact
    assert not policy_for({**EIGHT_SLOTS, "AUTOTHROTTLE_ENABLED": True}).first_contact
    assert not policy_for({}).first_contact  # seed 001's defaults: one slot, 1 s apart


def test_first_contact_travels_with_the_learned_state() -> None:
    heard = policy_for(EIGHT_SLOTS)
    heard.on_outcome(0.5, ScopeFeedback(status=200), generation=0, sent_at=0.0, expected_use=1.0)
    assert heard.limits.concurrency == 8
    assert not heard.first_contact
    fresh = policy_for(EIGHT_SLOTS)
    restore_state(fresh, export_state(heard))  # another worker reads what this one learned
    assert not fresh.first_contact
    assert fresh.limits.concurrency == 8

