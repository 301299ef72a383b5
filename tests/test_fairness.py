"""No request waits longer than its own scopes' pace implies (the library API, fake clock).

Two ways a waiting request used to starve:

* with ``CONCURRENT_REQUESTS`` reached, each release served the releasing
  request's own scope first, so a busy scope kept the global slots and a
  request of another scope waited until the busy scope ran dry;
* a request with scopes {a, b} needs both free at once; single-scope traffic
  on a and on b took each slot the moment it freed, so it could wait as long
  as that traffic lasted.

Each property below runs traffic that lasts far longer than the bound, so a
throttler with either fault fails it.
"""

from __future__ import annotations

import asyncio
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawlpace import Throttler
from crawlpace.testing import MockClock

EPS = 1e-6
ROUNDS = 25  # each looping client sends this many requests: far past every bound

tenths = st.integers(min_value=1, max_value=20).map(lambda n: n / 10)


async def _loop(throttler: Throttler, clock: MockClock, scope: str, hold: float) -> None:
    """A client that sends requests of ``scope`` back to back, each lasting ``hold`` seconds."""
    for _ in range(ROUNDS):
        async with throttler.slot(scopes=scope):
            await clock.sleep(hold)


async def _one(throttler: Throttler, clock: MockClock, scopes: set[str], arrival: float) -> float:
    """Send one request at ``arrival``; return how long it waited."""
    await clock.sleep(arrival)
    async with throttler.slot(scopes=scopes):
        return clock.now() - arrival


async def _global_cap_case(cap: int, clients: int, hold: float, arrival: float) -> float:
    clock = MockClock(autojump=True)
    config = {"CONCURRENT_REQUESTS": cap, "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
              "DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
              "RANDOMIZE_DOWNLOAD_DELAY": False}
    async with Throttler(config, clock=clock, rng=random.Random(0)) as throttler:
        loops = [_loop(throttler, clock, "busy", hold) for _ in range(clients)]
        quiet = asyncio.ensure_future(_one(throttler, clock, {"quiet"}, arrival))
        await asyncio.gather(quiet, *loops)
    return quiet.result()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cap=st.integers(1, 3), extra=st.integers(0, 3), hold=tenths, arrival=tenths)
def test_at_the_global_cap_a_release_serves_the_longest_waiting_scope(
        cap: int, extra: int, hold: float, arrival: float) -> None:
    clients = cap + extra  # enough busy clients to keep every global slot taken
    waited = asyncio.run(_global_cap_case(cap, clients, hold, arrival))
    # Ahead of the quiet request: the busy requests in flight and those queued
    # before it, at most ``clients`` in all, ``cap`` at a time.
    rounds = -(-clients // cap) + 1
    assert waited <= rounds * hold + EPS, (waited, rounds * hold)


async def _two_scope_case(delay_a: float, hold_a: float | None, hold_b: float,
                          arrival: float) -> float:
    clock = MockClock(autojump=True)
    config = {"CONCURRENT_REQUESTS": 16, "RANDOMIZE_DOWNLOAD_DELAY": False,
              "THROTTLING_SCOPES": {
                  "a": {"concurrency": 1, "delay": delay_a, "delay_per_slot": 0.0},
                  "b": {"concurrency": 1, "delay": 0.0, "delay_per_slot": 0.0}}}
    async with Throttler(config, clock=clock, rng=random.Random(0)) as throttler:
        loops = [_loop(throttler, clock, "b", hold_b)]
        if hold_a is not None:
            loops.append(_loop(throttler, clock, "a", hold_a))
        else:  # a single earlier send starts scope a's delay
            first = await throttler.acquire(scopes="a")
            await first.release()
        both = asyncio.ensure_future(_one(throttler, clock, {"a", "b"}, arrival))
        await asyncio.gather(both, *loops)
    return both.result()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(delay_a=st.integers(0, 20).map(lambda n: n / 10), hold_a=st.none() | tenths, hold_b=tenths,
       arrival=tenths)
def test_a_two_scope_request_is_not_starved_by_single_scope_traffic(
        delay_a: float, hold_a: float | None, hold_b: float, arrival: float) -> None:
    waited = asyncio.run(_two_scope_case(delay_a, hold_a, hold_b, arrival))
    # Its scopes' own pace: a's delay (twice: once before it reserved the
    # scopes, once after a's last send) and one request in flight on each.
    bound = 2 * delay_a + (hold_a or 0.0) + hold_b
    assert waited <= bound + EPS, (waited, bound)


async def test_the_issue_timelines(clock: MockClock) -> None:
    # CONCURRENT_REQUESTS = 2 and four clients on "busy": "quiet" goes within two rounds.
    waited = await _global_cap_case(2, 4, 1.0, 0.5)
    assert waited <= 2.5
    # {a, b} between two steady single-scope streams, arriving at 0.2 s. At 1.0 s a frees
    # while b is still busy: a serves the stream behind {a, b} (no idle slot) and b is
    # reserved. At 1.5 s b frees and is kept for {a, b}, which reserves a too; a frees at
    # 2.0 s and {a, b} goes: 1.8 s of waiting, where 0.6 let the two streams run first.
    waited = await _two_scope_case(0.0, 1.0, 1.5, 0.2)
    assert abs(waited - 1.8) <= EPS, waited
