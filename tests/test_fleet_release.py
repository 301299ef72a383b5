"""A fleet worker's refusal reaches the shared store at once, whatever else the worker is settling.

A refusal's release first reads the server's counts (accepted answers, leases in
flight), after this worker's earlier releases have landed. It used to wait for
every write-back the worker was redoing as well (other workers had written
first), on every scope: in a busy fleet those follow one another, and on a
random farm a refusal's release took up to 7.8 s. Its lease held the start's
only slot meanwhile, and its ``Retry-After`` reached nobody: a strict bucket
that one process crawled at 0.73 of its rate got 0.34 in a fleet of 4, with
5-13 s of silence after its first refusals.
"""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest

from crawlpace import Settings
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Blocked, Lease, Outcome, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.testing import MockClock

SETTINGS = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "CONCURRENT_REQUESTS": 16})
SCOPE = (("site", 1.0),)


@pytest.mark.redis
async def test_a_refusals_release_does_not_wait_for_write_backs_being_redone(redis_url: str) -> None:
    clock = MockClock()
    url = redis_url.split("?")[0] + f"?namespace=f{uuid.uuid4().hex[:10]}&time=local"
    store = open_store(url, SETTINGS, clock, random.Random(1))
    assert isinstance(store, RedisStore)
    redoing = asyncio.Event()

    async def redo_elsewhere() -> None:  # another scope's write-back, redone after losing a race
        await redoing.wait()

    try:
        lease = await store.acquire(SCOPE)
        assert isinstance(lease, Lease)
        store._releases._background(redo_elsewhere())
        clock.advance(0.01)
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=2.0)
        # It waited for the redo to end (never, here; seconds in a busy fleet).
        await asyncio.wait_for(store.release(lease, Outcome(status=429, latency=0.01, feedback=(feedback,))),
                               timeout=2.0)
        # The refusal landed (a worker's calls reach the server in order): the slot is free, and
        # the whole fleet is held for the Retry-After.
        got = await store.acquire(SCOPE)
        assert isinstance(got, Blocked)
        assert got.ready_at is not None
        assert got.ready_at >= clock.now() + 1.9
    finally:
        redoing.set()
        await store.aclose()
