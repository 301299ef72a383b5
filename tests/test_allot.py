"""Local allotments of the Redis store (``stores/redis/_allot.py``), on real redis-server and valkey-server.

A worker keeps the slots its requests used on a busy plain scope and admits
from them locally; these tests hold it to the rules: never over a limit (two
workers, tight limits), refusals sent at once and ending the allotment,
another worker's write-back ending it at the next refresh, idle and dead
workers' slots coming back, and the same figures as the memory store.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from crawlpace import ConfigError, Settings
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Blocked, Lease, MemoryStore, Outcome, Store, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.stores.redis._allot import IDLE_AFTER, REFRESH_EVERY, REFRESH_MOST, TRIM_AFTER
from crawlpace.stores.redis._keys import prefix, scope_keys
from crawlpace.testing import MockClock

from .redis_server import RedisServer

pytestmark = pytest.mark.redis

SETTINGS = Settings.from_scrapy({
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "THROTTLING_SCOPES": {
        "wide": {"concurrency": 8, "delay": 0.0, "delay_per_slot": 0.0},
        "four": {"concurrency": 4, "delay": 0.0, "delay_per_slot": 0.0},
        "two": {"concurrency": 2, "delay": 0.0, "delay_per_slot": 0.0},
        "paced": {"concurrency": 8, "delay": 0.5, "delay_per_slot": 0.0},
    },
})
OK = Outcome(status=200, latency=0.1)
REFUSED = Outcome(status=429, feedback=(ScopeFeedback(backoff=True, status=429),))


@pytest.fixture(params=["redis", "valkey"])
def url(request: pytest.FixtureRequest) -> str:
    server: RedisServer = request.getfixturevalue(f"{request.param}_server")
    return f"{server.url}?namespace=t{uuid.uuid4().hex[:12]}&time=local"


def redis_store(url: str, clock: MockClock, extra: str = "") -> RedisStore:
    store = open_store(url + extra, SETTINGS, clock, random.Random(1))
    assert isinstance(store, RedisStore)
    return store


async def held(url: str, scope: str) -> int:
    """Members of the scope's lease set: every slot held, by requests and by allotments."""
    client = aioredis.from_url(url.split("?")[0])
    try:
        namespace = url.split("namespace=")[1].split("&")[0]
        return int(await client.zcard(scope_keys(prefix(namespace), scope)[1]))
    finally:
        await client.aclose()


async def acquired(store: Store, scope: str) -> Lease:
    lease = await store.acquire(((scope, 1.0),))
    assert isinstance(lease, Lease), lease
    return lease


async def allotted(store: RedisStore, scope: str) -> None:
    """Form the worker's allotment of ``scope``: the first answer makes the breaker, the next is kept."""
    for _ in range(2):
        await store.release(await acquired(store, scope), OK)
    assert scope in store._allot.scopes


@pytest.fixture(params=["memory", "redis", "valkey"])
async def any_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    clock = MockClock()
    if request.param == "memory":
        store: Store = MemoryStore(SETTINGS, clock, random.Random(1))
    else:
        server: RedisServer = request.getfixturevalue(f"{request.param}_server")
        store = redis_store(f"{server.url}?namespace=t{uuid.uuid4().hex[:12]}&time=local", clock)
    yield store
    await store.aclose()


async def test_every_store_admits_a_busy_scope_up_to_its_limit_and_counts_alike(any_store: Store) -> None:
    store = any_store
    latencies = iter([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    for _round in range(2):
        leases = [await acquired(store, "four") for _ in range(4)]
        assert isinstance(await store.acquire((("four", 1.0),)), Blocked)  # the fifth waits, allotted or not
        for lease in leases:
            await store.release(lease, Outcome(status=200, latency=next(latencies)))
    mean = None
    for x in [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]:
        mean = x if mean is None else mean + 0.2 * (x - mean)
    snap = await store.snapshot("four")
    assert snap is not None
    assert (snap.inflight, snap.sends, snap.responses, snap.errors) == (0, 8, 8, 0)
    assert snap.last_latency == pytest.approx(0.8)
    assert snap.mean_latency == pytest.approx(mean, rel=1e-4)
    if isinstance(store, RedisStore):
        assert store._allot.local >= 1  # the second round started from this worker's allotment


async def test_two_workers_never_hold_more_than_the_limit(url: str) -> None:
    clock = MockClock()
    workers = [redis_store(url, clock), redis_store(url, clock)]
    inflight = most = admitted = 0

    async def run(store: RedisStore, turns: int) -> None:
        nonlocal inflight, most, admitted
        for turn in range(turns):
            lease = await store.acquire((("wide", 1.0),))
            if isinstance(lease, Blocked):
                await asyncio.sleep(0)
                continue
            inflight += 1
            admitted += 1
            most = max(most, inflight)
            assert inflight <= 8
            for _ in range(turn % 4 + 1):
                await asyncio.sleep(0)
            inflight -= 1
            await store.release(lease, OK)
            if turn % 10 == 0:
                clock.advance(REFRESH_EVERY / 2)  # refreshes and idle give-backs happen on the way
                assert await held(url, "wide") <= 8

    try:
        await asyncio.gather(*(run(store, 60) for store in workers for _ in range(8)))
        assert most == 8  # the limit was reached, and never passed
        assert all(store._allot.local > 0 for store in workers)
        for store in workers:
            await store.flush()
        snap = await workers[0].snapshot("wide")
        assert snap is not None
        # Every admission is counted, local ones included, and nothing stays held.
        assert (snap.sends, snap.responses, snap.inflight) == (admitted, admitted, 0)
        assert await held(url, "wide") == 0
    finally:
        for store in workers:
            await store.aclose()


async def test_a_refusal_goes_out_at_once_and_ends_the_allotment(url: str) -> None:
    clock = MockClock()
    first, other = redis_store(url, clock), redis_store(url, clock)
    try:
        await allotted(first, "wide")
        lease = await acquired(first, "wide")
        assert first._allot.local == 1
        await first.release(lease, REFUSED)
        assert "wide" not in first._allot.scopes
        await first.connection.drain()  # on the wire already: no flush of the allotment needed
        assert isinstance(await other.acquire((("wide", 1.0),)), Blocked)  # backed off for every worker
        assert await held(url, "wide") == 0
    finally:
        await first.aclose()
        await other.aclose()


async def test_another_workers_refusal_ends_the_allotment_at_the_next_refresh(url: str) -> None:
    clock = MockClock()
    first, other = redis_store(url, clock), redis_store(url, clock)
    try:
        await allotted(first, "wide")
        await other.release(await acquired(other, "wide"), REFUSED)
        await other.flush()
        clock.advance(REFRESH_MOST)
        # The refresh hears of the write-back: the allotment goes, and the usual path says "wait".
        assert isinstance(await first.acquire((("wide", 1.0),)), Blocked)
        assert "wide" not in first._allot.scopes
        await first.connection.drain()
        assert await held(url, "wide") == 0
    finally:
        await first.aclose()
        await other.aclose()


async def wait_idle(store: RedisStore, clock: MockClock, seconds: float) -> None:
    """Let ``seconds`` pass in steps of the keeper's period, the keeper running at each."""
    for _ in range(round(seconds / REFRESH_EVERY) + 1):
        clock.advance(REFRESH_EVERY)
        for _ in range(5):
            await asyncio.sleep(0)
    await store.connection.drain()


async def test_an_idle_allotment_shrinks_to_one_slot_then_goes_back(url: str) -> None:
    clock = MockClock()
    store = redis_store(url, clock)
    try:
        await allotted(store, "wide")
        both = [await acquired(store, "wide"), await acquired(store, "wide")]  # one kept, one by the script
        for lease in both:
            await store.release(lease, OK)
        await store.connection.drain()
        assert await held(url, "wide") == 2  # "wide" has 8 slots: this worker keeps 2 at most
        await wait_idle(store, clock, TRIM_AFTER)
        assert await held(url, "wide") == 1
        assert "wide" in store._allot.scopes
        await wait_idle(store, clock, IDLE_AFTER)
        assert not store._allot.scopes
        assert await held(url, "wide") == 0
    finally:
        await store.aclose()


async def test_a_dead_workers_allotment_expires_with_its_lease(url: str) -> None:
    clock = MockClock()
    dead, alive = redis_store(url, clock, "&lease=2"), redis_store(url, clock)
    try:
        await allotted(dead, "four")
        await dead.connection.drain()
        await dead._renewer.aclose()  # the worker stops: nothing renews or gives back its slot
        dead._allot.scopes.clear()
        leases = [await acquired(alive, "four") for _ in range(3)]
        assert isinstance(await alive.acquire((("four", 1.0),)), Blocked)
        clock.advance(2.5)
        leases.append(await acquired(alive, "four"))
        for lease in leases:
            await alive.release(lease, OK)
    finally:
        await dead.aclose()
        await alive.aclose()


@pytest.mark.parametrize("scope", ["two", "paced"])
async def test_small_or_paced_scopes_take_the_usual_path(url: str, scope: str) -> None:
    clock = MockClock()
    store = redis_store(url, clock)
    try:
        for _ in range(3):
            await store.release(await acquired(store, scope), OK)
            clock.advance(0.5)
        assert not store._allot.scopes
        await store.connection.drain()
        assert await held(url, scope) == 0
    finally:
        await store.aclose()


async def test_allot_0_admits_every_request_in_redis(url: str) -> None:
    store = redis_store(url, MockClock(), "&allot=0")
    try:
        for _ in range(3):
            await store.release(await acquired(store, "wide"), OK)
        assert not store._allot.scopes
        await store.connection.drain()
        assert await held(url, "wide") == 0
    finally:
        await store.aclose()


def test_a_bad_allot_flag_names_the_fix(url: str) -> None:
    with pytest.raises(ConfigError, match=r"allot='maybe' is not a flag; give allot=0"):
        redis_store(url, MockClock(), "&allot=maybe")


async def test_slots_kept_through_an_outage_go_back_when_the_server_returns(
        persistent_server: RedisServer) -> None:
    clock = MockClock()
    url = f"{persistent_server.url}?namespace=t{uuid.uuid4().hex[:12]}&time=local"
    store = redis_store(url, clock)
    try:
        await allotted(store, "wide")
        await store.connection.drain()
        persistent_server.stop()
        clock.advance(REFRESH_MOST)
        assert isinstance(await store.acquire((("wide", 1.0),)), Blocked)  # the refresh failed: fail closed
        assert not store._allot.scopes
        persistent_server.start()  # with its data: the kept slot is still held there
        assert await held(url, "wide") == 1
        await wait_idle(store, clock, REFRESH_MOST)
        assert await held(url, "wide") == 0  # given back, not held until its lease ran out
    finally:
        await store.aclose()
