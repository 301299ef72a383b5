"""The time a fleet worker's slot is held past its answer, as the store's lease set counts it.

A fleet's rampup reads the store's count of leases as the scope's requests in
flight, and counts the time a lease is held past its answer's latency in the
slots a rate needs (fleetknee1's held time). A worker applies each answer
before its release reaches the store: the release rides with the worker's next
call, and until then the store still counts the lease. Traced on real HTTP (a
fleet of 4, bench/results/fleetheld3.md), those replies came 0.14-0.21 s
(median) after the crawl released, on a 0.26-0.30 s held time. A real
redis-server; the fake clock stands for the worker's pace.
"""

from __future__ import annotations

import random
import uuid

from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Outcome, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.testing import MockClock

from .redis_server import delivered
from .test_fleet_learning import SETTINGS, admitted_on

LATENCY = 0.05
OK = ScopeFeedback(status=200, latency=LATENCY)


async def test_a_release_that_reaches_the_store_late_counts_in_the_time_its_slot_is_held(
        redis_url: str) -> None:
    clock = MockClock()
    url = redis_url.split("?")[0] + f"?namespace=r{uuid.uuid4().hex[:10]}&time=local"
    store = open_store(url, SETTINGS, clock, random.Random(1))
    assert isinstance(store, RedisStore)
    try:
        lease = await admitted_on(store, clock)
        for _ in range(30):
            clock.advance(LATENCY)  # answered at once, in its latency: held no longer at the apply
            await store.release(lease, Outcome(status=200, latency=LATENCY, feedback=(OK,)))
            clock.advance(0.3)  # the worker's next call, which the release rides with, comes 0.3 s later
            lease = await admitted_on(store, clock)
            await delivered(store)
        rampup = store._policies.policy("site").rampup
        assert rampup is not None
        # Main: 0.0 (the slot timed as freed at the apply, where the store counted it 0.3 s more).
        assert 0.2 <= rampup._held_over <= 0.35
        assert 0.25 <= store._writer.release_after <= 0.35
    finally:
        await store.aclose()
