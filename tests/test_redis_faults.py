"""The Redis store under faults: a worker killed, the server gone and back, clocks that disagree.

Everything here is real: a real redis-server on 127.0.0.1, a real child
process killed with SIGKILL, real time. Waits are short because leases are
(``lease=1``), and a test only sleeps where the passing of real time is the
point (a lease running out, a delay being kept between two processes).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from crawlpace import Settings
from crawlpace._clock import AsyncioClock, Clock
from crawlpace.stores import Blocked, Lease, Outcome, Store, open_store
from crawlpace.stores.redis import RedisLease, RedisStore
from crawlpace.stores.redis._pending import PendingRelease, ReleaseQueue
from crawlpace.testing import MockClock

from .conftest import serve
from .redis_server import RedisServer, delivered, reap, redis_binary

pytestmark = pytest.mark.redis

SRC = Path(__file__).resolve().parents[1] / "src"
LEASE = 1.0

#: One scope of two slots, no delay at all: only leases in flight hold it.
FULL_RAW: dict[str, Any] = {
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "THROTTLING_SCOPES": {"held.example": {"concurrency": 2, "delay": 0.0, "delay_per_slot": 0.0}},
}
#: One slot, half a second between any two sends, no per-slot rest.
PACED = Settings.from_scrapy({
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "THROTTLING_SCOPES": {"paced.example": {"concurrency": 1, "delay": 0.5, "delay_per_slot": 0.0}},
})

# The child: take both slots, say so, then hang on to them (renewing) until killed.
CHILD = """
import asyncio, json, random, sys
from crawlpace import Settings
from crawlpace._clock import AsyncioClock
from crawlpace.stores import Lease, open_store

async def main():
    store = open_store(sys.argv[1], Settings.from_scrapy(json.loads(sys.argv[2])), AsyncioClock(),
                       random.Random(1))
    leases = [await store.acquire((("held.example", 1.0),)) for _ in range(2)]
    if not all(isinstance(lease, Lease) for lease in leases):
        print("not admitted:", leases, flush=True)
        sys.exit(3)
    print("held", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


class SkewedClock:
    """The system's monotonic clock, read ``skew`` seconds ahead, with timers in the same frame."""

    def __init__(self, skew: float) -> None:
        self.skew = skew

    def now(self) -> float:
        return time.monotonic() + self.skew

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def call_at(self, when: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, when - self.now()), callback)


def spawn_holder(url: str) -> subprocess.Popen[bytes]:
    """Start the child that takes both slots of ``held.example`` (it prints "held" once it has)."""
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-c", CHILD, url, json.dumps(FULL_RAW)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": path})


def make_store(url: str, settings: Settings, clock: Clock) -> Store:
    return open_store(url, settings, clock, random.Random(1))


async def admit(store: Store, scope: str, clock: Clock, *, within: float) -> tuple[RedisLease, int]:
    """Acquire ``scope``, waiting out each ``Blocked`` it is told; the lease and how many refusals."""
    deadline = time.monotonic() + within
    refusals = 0
    while True:
        result = await store.acquire(((scope, 1.0),))
        if isinstance(result, Lease):
            assert isinstance(result, RedisLease)
            return result, refusals
        refusals += 1
        assert time.monotonic() < deadline, f"not admitted within {within}s: {result}"
        wait = 0.05 if result.ready_at is None else result.ready_at - clock.now()
        await clock.sleep(min(max(wait, 0.0), 0.5))


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of the test's own, which it may stop and start again."""
    yield from serve(redis_binary(), "no redis-server on PATH (scripts/test installs one)")


async def test_a_killed_workers_slots_come_back_within_the_lease(redis_url: str) -> None:
    url = f"{redis_url}&lease={LEASE:g}"
    settings = Settings.from_scrapy(FULL_RAW)
    clock = AsyncioClock()
    child = spawn_holder(url)
    store = make_store(url, settings, clock)
    try:
        assert child.stdout is not None
        # The child's start-up (an interpreter, crawlpace, redis-py) took over 15 s on a loaded
        # machine: wait for its line as long as the timeout of the whole test allows.
        try:
            line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 120.0)
        except TimeoutError:
            line = b"nothing within 120 s"
        if line.strip() != b"held":
            child.kill()
            _out, err = child.communicate(timeout=5.0)
            raise AssertionError(f"the child said {line!r}; stderr:\n{err.decode()}")

        full = await store.acquire((("held.example", 1.0),))
        assert full == Blocked(None, (("held.example", None),))
        snap = await store.snapshot("held.example")
        assert snap is not None
        assert (snap.inflight, snap.sends, snap.ready_in) == (2, 2, None)

        # Twice the lease time later the child's renewals still hold both slots.
        await asyncio.sleep(2 * LEASE)
        assert child.poll() is None
        assert await store.acquire((("held.example", 1.0),)) == Blocked(None, (("held.example", None),))
        snap = await store.snapshot("held.example")
        assert snap is not None
        assert snap.inflight == 2

        child.send_signal(signal.SIGKILL)
        child.wait(5.0)
        killed_at = time.monotonic()
        assert child.returncode == -signal.SIGKILL

        deadline = killed_at + LEASE + 1.5
        while True:
            result = await store.acquire((("held.example", 1.0),))
            if isinstance(result, Lease):
                break
            assert result == Blocked(None, (("held.example", None),))
            assert time.monotonic() < deadline, "the killed worker's slots did not come back"
            await asyncio.sleep(0.05)
        back_after = time.monotonic() - killed_at
        assert back_after <= LEASE + 1.5
        # Both slots came back, not just one.
        second = await store.acquire((("held.example", 1.0),))
        assert isinstance(second, Lease)
        snap = await store.snapshot("held.example")
        assert snap is not None
        assert (snap.inflight, snap.sends) == (2, 4)
        await store.release(result, Outcome(status=200, latency=0.1))
        await store.release(second, Outcome(status=200, latency=0.1))
    finally:
        reap(child, signal_first=False)
        await store.aclose()


async def test_the_store_fails_closed_while_redis_is_down_and_recovers(
        own_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="crawlpace")
    clock = AsyncioClock()
    settings = Settings.from_scrapy(FULL_RAW)
    store = make_store(f"{own_server.url}?namespace=down", settings, clock)
    scope = (("held.example", 1.0),)
    try:
        first = await store.acquire(scope)
        assert isinstance(first, Lease)
        await store.release(first, Outcome(status=200, latency=0.1))
        held = await store.acquire(scope)
        assert isinstance(held, Lease)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

        own_server.stop()
        before = clock.now()
        started = time.monotonic()
        down = await store.acquire(scope)
        assert time.monotonic() - started < 2.0, "an acquire against a dead server took too long"
        assert isinstance(down, Blocked)
        assert down.ready_at is not None
        assert down.ready_at > before
        assert [name for name, _ in down.waiting_on] == ["held.example"]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("unreachable" in message for message in warnings), warnings
        # Still down: still closed, and the warning is not repeated for every attempt.
        before = clock.now()
        again = await store.acquire(scope)
        assert isinstance(again, Blocked)
        assert again.ready_at is not None
        assert again.ready_at > before
        assert sum("unreachable" in r.getMessage() for r in caplog.records
                   if r.levelno == logging.WARNING) == 1

        # A lease taken before the outage is given back during it: no exception.
        assert await store.release(held, Outcome(status=200, latency=0.1)) == ()
        await delivered(store)  # tried while the server is down (the start below blocks the loop)

        own_server.start()
        lease, _refusals = await admit(store, "held.example", clock, within=5.0)
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("answers again" in message for message in messages), messages
        await store.release(lease, Outcome(status=200, latency=0.1))
        snap = await store.snapshot("held.example")
        assert snap is not None
        assert (snap.inflight, snap.sends, snap.responses) == (0, 1, 1)  # the restarted server is empty
    finally:
        await store.aclose()


async def test_skewed_worker_clocks_keep_one_pace(redis_url: str) -> None:
    url = f"{redis_url}&lease={LEASE:g}&time=server"
    plain, skewed = AsyncioClock(), SkewedClock(30.0)
    stores: list[tuple[Store, Clock]] = [(make_store(url, PACED, plain), plain),
                                         (make_store(url, PACED, skewed), skewed)]
    granted: list[float] = []
    skewed_refusals = 0
    try:
        for turn in range(6):
            store, clock = stores[turn % 2]
            while True:
                # Bounds from the asking to the answer: the round trip to Redis took 0.16 s once at load 25.
                asked = clock.now()
                result = await store.acquire((("paced.example", 1.0),))
                if isinstance(result, Lease):
                    break
                assert result.ready_at is not None, result
                # The ready time is in this store's own clock, whatever its skew.
                assert asked - 0.05 <= result.ready_at <= clock.now() + 1.0, \
                    (turn, asked, result.ready_at, clock.now())
                if clock is skewed:
                    skewed_refusals += 1
                await clock.sleep(result.ready_at - clock.now())
            assert isinstance(result, RedisLease)
            assert asked - 0.5 < result.granted_at < clock.now() + 0.5, \
                (turn, asked, result.granted_at, clock.now())
            granted.append(result.server_granted_at)
            await store.release(result, Outcome(status=200, latency=0.01))
        gaps = [later - earlier for earlier, later in itertools.pairwise(granted)]
        assert all(gap >= 0.5 - 0.01 for gap in gaps), gaps
        assert all(gap < 1.0 for gap in gaps), gaps  # and no store waited far longer than told
        assert skewed_refusals >= 1
        await delivered(*(store for store, _clock in stores))
        snap = await stores[0][0].snapshot("paced.example")
        assert snap is not None
        assert (snap.sends, snap.responses, snap.inflight) == (6, 6, 0)
    finally:
        for store, _clock in stores:
            await store.aclose()


async def test_synced_time_admits_blocks_and_releases(redis_url: str) -> None:
    clock = SkewedClock(-1000.0)  # a frame far from the server's, so a mix-up cannot pass unseen
    # A long lease: none runs out here. With lease=1, a loaded machine that starved the loop for a
    # second let the first lease lapse, and the "full" acquire below was granted.
    store = make_store(f"{redis_url}&lease=30&time=synced", PACED, clock)
    assert isinstance(store, RedisStore)
    try:
        first = await store.acquire((("paced.example", 1.0),))
        assert isinstance(first, RedisLease)
        assert abs(first.granted_at - clock.now()) < 0.5
        assert abs(first.server_granted_at - time.time()) < 1.0  # the server runs on this machine

        # Its one slot is in flight: full, only a release helps.
        assert await store.acquire((("paced.example", 1.0),)) == Blocked(None, (("paced.example", None),))
        snap = await store.snapshot("paced.example")
        assert snap is not None
        assert (snap.inflight, snap.sends, snap.ready_in) == (1, 1, None)

        assert await store.release(first, Outcome(status=200, latency=0.1)) == ()
        snap = await store.snapshot("paced.example")
        assert snap is not None
        assert (snap.inflight, snap.sends, snap.responses) == (0, 1, 1)

        # The slot is free, the delay is not over: blocked until half a second after the send.
        blocked = await store.acquire((("paced.example", 1.0),))
        assert isinstance(blocked, Blocked)
        assert blocked.ready_at is not None
        assert blocked.ready_at == pytest.approx(first.granted_at + 0.5, abs=0.05)
        assert 0.0 < blocked.ready_at - clock.now() <= 0.5
        assert blocked.waiting_on == (("paced.example", blocked.ready_at),)

        second, _refusals = await admit(store, "paced.example", clock, within=10.0)  # a loaded machine
        assert second.server_granted_at - first.server_granted_at >= 0.5 - 0.01
        assert abs(second.granted_at - clock.now()) < 0.5
        await store.release(second, Outcome(status=200, latency=0.1))
        assert store.time == "synced"  # it never fell back to another source
    finally:
        await store.aclose()


async def test_a_release_that_failed_is_sent_again_when_redis_answers(
        persistent_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="crawlpace")
    clock = AsyncioClock()
    settings = Settings.from_scrapy(FULL_RAW)
    url = f"{persistent_server.url}?namespace=retry&lease=30"
    store, other = make_store(url, settings, clock), make_store(url, settings, clock)
    scope = (("held.example", 1.0),)
    try:
        held = [await store.acquire(scope) for _ in range(2)]
        assert isinstance(held[0], Lease)
        assert isinstance(held[1], Lease)
        assert await other.acquire(scope) == Blocked(None, (("held.example", None),))

        persistent_server.stop()
        assert await store.release(held[0], Outcome(status=200, latency=0.1)) == ()
        await delivered(store)
        assert any("sent again when the server answers" in r.getMessage() for r in caplog.records)
        persistent_server.start()  # with its data: both leases are still there, held for 30 s
        back = time.monotonic()

        # The other worker sees the slot free again within about a second (the retry timer of the
        # store that failed to release it), not when the 30 s lease runs out.
        while not isinstance(lease := await other.acquire(scope), Lease):
            assert time.monotonic() - back < 2.0, "the failed release was not sent again"
            await asyncio.sleep(0.05)
        assert time.monotonic() - back < 2.0
        snap = await other.snapshot("held.example")
        assert snap is not None
        assert (snap.inflight, snap.sends, snap.responses) == (2, 3, 1)  # the outcome was counted too
        await other.release(lease, Outcome(status=200))
        await store.release(held[1], Outcome(status=200))
    finally:
        await store.aclose()
        await other.aclose()


async def test_an_acquire_whose_reply_was_lost_does_not_hold_its_slot(redis_url: str) -> None:
    # The server ran an acquire and went away before its reply was read (a persistent server stopped
    # mid-crawl in the suite): the lease it wrote held a slot until it expired, 30 s by default.
    from redis.exceptions import ConnectionError as RedisConnectionError

    clock = AsyncioClock()
    settings = Settings.from_scrapy(FULL_RAW)
    url = f"{redis_url}&lease=30" if "?" in redis_url else f"{redis_url}?lease=30"
    store, other = make_store(url, settings, clock), make_store(url, settings, clock)
    assert isinstance(store, RedisStore)
    scope = (("held.example", 1.0),)
    submit = store._conn.submit
    lost: list[str] = []

    def reply_lost(name: str, keys: Sequence[str], args: Sequence[Any]) -> asyncio.Future[Any]:
        reply = submit(name, keys, args)
        if name != "acquire" or lost:
            return reply
        lost.append(name)
        never: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        reply.add_done_callback(
            lambda _: never.set_exception(RedisConnectionError("Connection closed by server.")))
        return never

    store._conn.submit = reply_lost  # type: ignore[method-assign]
    try:
        assert isinstance(await store.acquire(scope), Blocked)  # granted on the server, unknown here
        assert lost == ["acquire"]
        mine = await store.acquire(scope)  # sends the lost lease's release first
        assert isinstance(mine, Lease)
        theirs = await other.acquire(scope)
        assert isinstance(theirs, Lease), "the lost acquire's lease still holds a slot"
        snap = await other.snapshot("held.example")
        assert snap is not None
        assert snap.inflight == 2
        await store.release(mine, Outcome(status=200))
        await other.release(theirs, Outcome(status=200))
    finally:
        await store.aclose()
        await other.aclose()


async def test_waiting_releases_are_dropped_once_their_lease_expired(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="crawlpace")
    clock = MockClock()
    sent: list[str] = []
    up = False

    async def send(item: PendingRelease) -> None:
        if not up:
            raise ConnectionError("down")
        sent.append(item.lease_id)

    queue = ReleaseQueue(send, (ConnectionError,), clock.now, clock.sleep, limit=2)
    for n, expires in enumerate((5.0, 50.0, 60.0)):
        queue.add(PendingRelease(f"L{n}", expires, None))
    assert len(queue) == 2  # bounded: the oldest went
    assert any("L0 dropped" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConnectionError):
        await queue.flush()
    assert len(queue) == 2
    clock.advance(55.0)  # L1's lease has expired by now: not worth sending
    up = True
    await queue.flush()
    assert sent == ["L2"]
    assert (len(queue), queue.sent, queue.dropped) == (0, 1, 2)
    assert any("L1 dropped" in r.getMessage() for r in caplog.records)
    await queue.aclose()


async def test_the_memory_fallback_admits_slowly_while_redis_is_down(
        own_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="crawlpace")
    clock = AsyncioClock()
    settings = Settings.from_scrapy({
        "RANDOMIZE_DOWNLOAD_DELAY": False,
        "THROTTLING_SCOPES": {"fb.example": {"concurrency": 2, "delay": 0.1, "delay_per_slot": 0.0}},
    })
    store = make_store(f"{own_server.url}?namespace=fb&fallback=memory&fallback_workers=4", settings, clock)
    scope = (("fb.example", 1.0),)

    def switches() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and ("fallback" in r.getMessage())]

    try:
        shared = await store.acquire(scope)
        assert isinstance(shared, RedisLease)
        await store.release(shared, Outcome(status=200))

        own_server.stop()
        local = await store.acquire(scope)
        assert isinstance(local, Lease)
        assert not isinstance(local, RedisLease)  # admitted by the fallback
        # One slot only, whatever the scope's concurrency ...
        assert await store.acquire(scope) == Blocked(None, (("fb.example", None),))
        await store.release(local, Outcome(status=200))
        # ... and the delay four times the configured one.
        paced = await store.acquire(scope)
        assert isinstance(paced, Blocked)
        assert paced.ready_at == pytest.approx(local.granted_at + 0.4)
        assert len(switches()) == 1
        assert "memory fallback" in switches()[0]

        own_server.start()
        deadline = time.monotonic() + 8.0
        while not isinstance(result := await store.acquire(scope), RedisLease):
            assert time.monotonic() < deadline, "never went back to Redis"
            if isinstance(result, Lease):
                await store.release(result, Outcome(status=200))
            await asyncio.sleep(0.05)
        assert len(switches()) == 2
        assert "back to the shared state" in switches()[1]
        await store.release(result, Outcome(status=200))
        snap = await store.snapshot("fb.example")
        assert snap is not None
        assert (snap.inflight, snap.sends, snap.concurrency) == (0, 1, 2)  # Redis's own state again
    finally:
        await store.aclose()


async def test_a_server_lost_between_an_admission_and_its_policy_read_keeps_the_permit(
        own_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # The soak's crashed workers: an acquire answered, then the server went away before this worker
    # could read the newer policy another worker had written. The permit was granted: it must come
    # back as one (renewed, released later), not as redis-py's ConnectionError out of acquire().
    # An acquire's reply now carries the newer policy (acquire.lua), so the read is left only where a
    # reply carries none: a cluster's request whose scopes span slots, whose merged reply is played
    # here (the blobs taken out of the reply) to keep the read this test cuts the server under.
    from dataclasses import replace

    from crawlpace.stores import redis as redis_store
    from crawlpace.stores.redis._redis_admit import granted

    monkeypatch.setattr(redis_store, "granted", lambda reply, n: replace(granted(reply, n), blobs=()))
    clock = AsyncioClock()
    settings = Settings.from_scrapy(FULL_RAW)
    url = f"{own_server.url}?namespace=between"
    writer, reader = make_store(url, settings, clock), make_store(url, settings, clock)
    assert isinstance(reader, RedisStore)
    scope = (("held.example", 1.0),)
    try:
        await writer.set_crawl_delay("held.example", 0.5)  # a newer policy, version 1, for the reader
        fetch = reader._fetch_blob
        reads = 0

        async def server_gone_first(name: str) -> bytes | None:
            nonlocal reads
            reads += 1
            own_server.stop()
            return await fetch(name)

        reader._fetch_blob = server_gone_first  # type: ignore[method-assign]
        lease = await reader.acquire(scope)
        assert reads == 1
        assert isinstance(lease, RedisLease)
        assert lease.lease_id in reader._held  # renewed like any other lease
        own_server.start()
        reader._fetch_blob = fetch  # type: ignore[method-assign]
        assert await reader.release(lease, Outcome(status=200, latency=0.1)) == ()
        again, _refusals = await admit(reader, "held.example", clock, within=5.0)
        await reader.release(again, Outcome(status=200, latency=0.1))
    finally:
        await writer.aclose()
        await reader.aclose()


async def test_a_server_refusing_writes_fails_closed_and_a_failed_release_leaks_no_count(
        own_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    import redis.asyncio as aioredis

    from crawlpace import NotReady, Permit, Throttler

    raw = {**FULL_RAW, "CONCURRENT_REQUESTS": 2}
    admin = aioredis.from_url(own_server.url)
    try:
        async with Throttler(raw, store=f"{own_server.url}?namespace=refusing") as throttler:
            first = await throttler.try_acquire(scopes="held.example")
            assert isinstance(first, Permit)
            # A replica after a failover, a full disk, too few replicas: the server answers, but no write.
            await admin.config_set("min-replicas-to-write", 1)
            refused = await throttler.try_acquire(scopes="held.example")
            assert isinstance(refused, NotReady)  # closed, and asked again later: not redis-py's error
            assert refused.ready_at is not None
            await first.release()  # kept and sent again later, like a release that met a dead server
            await admin.config_set("min-replicas-to-write", 0)

            # A refusal that is not one of those (no permission): a release does not wait for the
            # server (it rides with the next call), so the error is logged, not raised; the
            # throttler's own count of requests in flight must come down all the same.
            held = [await throttler.try_acquire(scopes=name) for name in ("a.example", "b.example")]
            assert all(isinstance(permit, Permit) for permit in held)
            await admin.execute_command("ACL", "SETUSER", "default", "-evalsha")  # type: ignore[no-untyped-call]
            for permit in held:
                assert isinstance(permit, Permit)
                await permit.release()
            await delivered(throttler.store)
            assert "permission" in caplog.text.lower()
            await admin.execute_command("ACL", "SETUSER", "default", "+evalsha")  # type: ignore[no-untyped-call]
            again = [await throttler.try_acquire(scopes=name) for name in ("c.example", "d.example")]
            assert all(isinstance(permit, Permit) for permit in again), again  # the cap is whole
            for permit in again:
                assert isinstance(permit, Permit)
                await permit.release()
    finally:
        await admin.aclose()
