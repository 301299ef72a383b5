"""A worker's script calls reach the server while the reply of its previous batch is still on its way.

A fleet worker sends its script calls in batches. It used to write a batch only
once the reply of the one before had been read: a release queued while the
worker's acquires were out waited for their reply (a round trip, and on a loaded
machine the worker's loop's delay to read it) before it even left, and the store
counted its lease in flight all that while. Traced on real HTTP (a fleet of 4,
bench/results/fleetrel1.md): 0.02-0.03 s of wait per call before it was written,
on top of its own round trip. Batches are now written at once, pipelined on one
connection: the server runs them in the order they were written, and their
replies are read in that order.

The replies are held back by a loopback proxy (tests/fault_proxy.py), so the
worker cannot read them: nothing here depends on timing.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable

import pytest

from crawlpace import Settings
from crawlpace.stores import Blocked, Lease, Outcome, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.stores.redis.connection import RedisConnection
from crawlpace.testing import MockClock

from .fault_proxy import FaultProxy
from .redis_server import RedisServer

pytestmark = pytest.mark.redis

PUT = "redis.call('SET', KEYS[1], ARGV[1]) return 1"
SETTINGS = Settings.from_scrapy({
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "THROTTLING_SCOPES": {
        "one": {"concurrency": 1, "delay": 0.0, "delay_per_slot": 0.0},
        "other": {"concurrency": 4, "delay": 0.0, "delay_per_slot": 0.0},
    },
})


async def reached(check: Callable[[], Awaitable[object]], within: float = 5.0) -> bool:
    """Whether ``check`` comes true within ``within`` seconds (looked at every 10 ms)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not await check():
        if loop.time() >= end:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_a_call_is_written_while_the_reply_before_it_is_on_its_way(redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis

    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    # "put" is written at once (as the store's releases are), "wait" like an acquire.
    conn = RedisConnection(f"redis://127.0.0.1:{proxy.port}/0", {"put": PUT, "wait": PUT},
                           decode_responses=True, at_once=("put",))
    direct = aioredis.from_url(redis_server.url, decode_responses=True)
    first, second = f"p{uuid.uuid4().hex[:10]}", f"p{uuid.uuid4().hex[:10]}"
    try:
        assert await conn.call("put", [first], ["0"]) == 1  # connected, the scripts loaded
        proxy.hold_replies()
        one = conn.submit("wait", [first], ["1"])
        assert await reached(lambda: direct.exists(first))
        assert await direct.get(first) == "1"
        # The first call ran; its reply waits in the proxy. The next call goes out anyway.
        two = conn.submit("put", [second], ["2"])
        # Before: it waited in the worker for the first reply (held here: for ever).
        assert await reached(lambda: direct.exists(second), within=2.0)
        assert not one.done()
        assert not two.done()
        proxy.pass_replies()
        assert await asyncio.wait_for(one, 5.0) == 1
        assert await asyncio.wait_for(two, 5.0) == 1  # the replies were read in order
    finally:
        proxy.pass_replies()
        await conn.aclose()
        await direct.aclose()
        await proxy.close()


async def test_a_release_frees_its_slot_while_the_workers_acquire_is_on_its_way(
        redis_server: RedisServer) -> None:
    """Another worker gets the slot a release gave back, though the releasing worker has not yet
    read the reply of the acquire it sent before (the proxy holds it back)."""
    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    namespace = f"f{uuid.uuid4().hex[:10]}"
    clock = MockClock()
    here = open_store(f"redis://127.0.0.1:{proxy.port}/0?namespace={namespace}", SETTINGS, clock,
                      random.Random(1))
    there = open_store(f"{redis_server.url}?namespace={namespace}", SETTINGS, clock, random.Random(2))
    assert isinstance(here, RedisStore)
    assert isinstance(there, RedisStore)
    try:
        lease = await here.acquire((("one", 1.0),))
        assert isinstance(lease, Lease)
        assert isinstance(await there.acquire((("one", 1.0),)), Blocked)  # the one slot is held
        proxy.hold_replies()
        out = asyncio.ensure_future(here.acquire((("other", 1.0),)))  # its reply will wait in the proxy
        await asyncio.sleep(0)  # (queued: the batch leaves at the loop's next turn)
        await asyncio.sleep(0)
        await here.release(lease, Outcome(status=200, latency=0.01))

        async def slot_free() -> bool:
            got = await there.acquire((("one", 1.0),))
            if isinstance(got, Lease):
                await there.release(got, Outcome())
                return True
            return False

        # Before: the release left only after the acquire's reply was read (held here: never).
        assert await reached(slot_free, within=2.0)
        assert not out.done()
        proxy.pass_replies()
        other = await asyncio.wait_for(out, 5.0)
        assert isinstance(other, Lease)
        await here.release(other, Outcome())
    finally:
        proxy.pass_replies()
        await here.aclose()
        await there.aclose()
        await proxy.close()


async def test_calls_made_while_an_awaited_reply_is_out_go_out_together_when_it_is_read(
        redis_server: RedisServer) -> None:
    """Nagle's rule: while a batch with an awaited call (an acquire) is out, the calls made in
    later turns are held and leave as one batch once its reply is read; a call of ``at_once``
    (a release) is not held. A broad crawl wrote its calls turn by turn in batches of 1-3 and
    spent about 30 % more CPU per page (bench/results/batch1.md)."""
    import redis.asyncio as aioredis

    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    conn = RedisConnection(f"redis://127.0.0.1:{proxy.port}/0", {"put": PUT, "go": PUT},
                           decode_responses=True, at_once=("go",))
    direct = aioredis.from_url(redis_server.url, decode_responses=True)
    keys = [f"p{uuid.uuid4().hex[:10]}" for _ in range(4)]
    try:
        assert await conn.call("put", [keys[0]], ["0"]) == 1  # connected, the scripts loaded
        proxy.hold_replies()
        one = conn.submit("put", [keys[0]], ["1"])
        assert await reached(lambda: direct.exists(keys[0]))
        two = conn.submit("put", [keys[1]], ["2"])
        for _ in range(3):
            await asyncio.sleep(0)
        three = conn.submit("put", [keys[2]], ["3"])
        go = conn.submit("go", [keys[3]], ["4"])  # a release: it leaves, the held calls stay
        assert await reached(lambda: direct.exists(keys[3]), within=2.0)
        # Held in the worker while the first reply is out (main wrote each at the next turn).
        assert not await direct.exists(keys[1])
        assert not await direct.exists(keys[2])
        assert conn.batches == 0
        proxy.pass_replies()
        for reply in (one, go, two, three):
            assert await asyncio.wait_for(reply, 5.0) == 1
        assert await direct.get(keys[2]) == "3"
        assert conn.batches == 1  # the two held calls went out as one batch
    finally:
        proxy.pass_replies()
        await conn.aclose()
        await direct.aclose()
        await proxy.close()
