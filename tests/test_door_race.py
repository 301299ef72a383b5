"""A fleet's start door when the write that closes it loses its race (bench/results/door.md).

The worker that sends through robots.txt's door writes the closed door back
(``PolicyWriter.pass_door``); should another worker write the scope first, that
write is dropped and the store keeps the open door's limits (one slot, a short
delay) until the page's answer is written back. The one slot is the page's
own, and the release that frees it writes the closed door in the same script:
no second worker may take the early page meanwhile.
"""

from __future__ import annotations

import copy
import random
import uuid
from collections.abc import Awaitable, Callable

import pytest

from crawlpace.stores import open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.stores.redis._writeback import PolicyWriter
from crawlpace.testing import MockClock

from .test_fleet_learning import SETTINGS, Front, crawl


@pytest.mark.redis
async def test_a_lost_door_write_lets_no_other_worker_through_the_door(redis_url: str) -> None:
    clock = MockClock()
    url = redis_url.split("?")[0] + f"?namespace=d{uuid.uuid4().hex[:10]}&time=local"
    stores = [open_store(url, SETTINGS, clock, random.Random(n)) for n in range(4)]
    lost: list[float] = []
    for index, store in enumerate(stores):
        assert isinstance(store, RedisStore)
        writer = store._writer
        rival = stores[(index + 1) % len(stores)]
        assert isinstance(rival, RedisStore)
        own_pass = writer.pass_door

        async def pass_door(name: str, at: float, writer: PolicyWriter = writer, rival: RedisStore = rival,
                            own_pass: Callable[[str, float], Awaitable[float | None]] = own_pass
                            ) -> float | None:
            # Another worker writes the scope (the door still open) between this worker's
            # admission and its door write: the door write loses and is dropped.
            cached = writer.policies.peek(name)
            if cached is not None and cached.blob is not None:
                mine = copy.deepcopy(writer.policies.policy(name))
                assert await rival._writer.write(name, cached.version, mine, at)
            gap: float | None = await own_pass(name, at)
            if gap is None:
                lost.append(at)
            return gap

        writer.pass_door = pass_door  # type: ignore[method-assign]
    try:
        run = await crawl(stores, clock, latency=0.07, seconds=4.0, site=Front(1.0, 0.07), robots=True)
    finally:
        for store in stores:
            await store.aclose()
    assert lost  # the door's write did lose its race
    first = sorted(run.sends)
    # robots.txt and the one early page in the site's first second (1/s, no burst: limit + 1).
    assert sum(t < first[0] + 1.0 for t in first) <= 2
    assert run.busiest_second() <= 2
