"""The Redis store on a real three-node Redis Cluster started on 127.0.0.1.

The store contract's behaviours, with scopes that live in different hash
slots (and so on different nodes); the two-phase admission of such requests:
all or nothing, what a rollback puts back, workers racing over overlapping
scopes, a worker killed between the two phases; and the parts that read the
whole cluster (``scopes()`` on every primary, ``crawlpace status``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio.connection
from redis.asyncio.cluster import RedisCluster as ClusterClient
from redis.crc import key_slot

from crawlpace import ConfigError, Settings
from crawlpace._clock import AsyncioClock
from crawlpace.cli import main
from crawlpace.frontier._shared import SharedFrontier
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Blocked, Lease, Outcome, open_store
from crawlpace.stores.redis import RedisLease, RedisStore
from crawlpace.stores.redis._cluster import SlotAdmission, _part, groups, slot_of
from crawlpace.stores.redis._script_args import ACQUIRE
from crawlpace.testing import MockClock

from .deadlines import REACH
from .redis_cluster import RedisCluster
from .redis_server import free_port, reap

pytestmark = pytest.mark.redis

SRC = Path(__file__).resolve().parents[1] / "src"

RAW: dict[str, Any] = {
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "THROTTLING_SCOPES": {
        "a": {"concurrency": 2, "delay": 0.5, "delay_per_slot": 1.0},
        "b": {"concurrency": 1, "delay": 0.0, "delay_per_slot": 0.0},
        "x.example": {"concurrency": 1, "delay": 0.5, "delay_per_slot": 0.0},
        "y.example": {"concurrency": 1, "delay": 0.0, "delay_per_slot": 0.0},
        "z.example": {"concurrency": 2, "delay": 0.0, "delay_per_slot": 0.0},
    },
}
SETTINGS = Settings.from_scrapy(RAW)


def slot(scope: str, namespace: str = "any") -> int:
    """The scope's slot, as redis-py computes it for the store's admission key."""
    return key_slot(f"cp:{namespace}:{{{scope}}}:a".encode())


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> RedisCluster:
    """The session's three-node cluster (started by ``conftest.redis_cluster``)."""
    return redis_cluster


@pytest.fixture
def cluster_url(cluster: RedisCluster) -> str:
    """The cluster's store URL with a namespace of the test's own."""
    return f"{cluster.url}&namespace=t{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def local(cluster_url: str) -> AsyncIterator[tuple[RedisStore, MockClock]]:
    """A cluster store on the fake clock (``time=local``)."""
    clock = MockClock()
    store = open_store(cluster_url + "&time=local", SETTINGS, clock, random.Random(1))
    assert isinstance(store, RedisStore)
    yield store, clock
    await store.aclose()


@pytest.fixture
async def raw(cluster: RedisCluster) -> AsyncIterator[ClusterClient]:
    """A plain cluster client, to look at the keys themselves."""
    client = ClusterClient(host="127.0.0.1", port=cluster.ports[0], decode_responses=True)
    await client.initialize()
    yield client
    await client.aclose()


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Round trips: every command (or pipeline) written on a redis-py asyncio connection."""
    counter: Counter[str] = Counter()
    connection = redis.asyncio.connection.AbstractConnection
    send = connection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        counter["sent"] += 1
        await send(self, command, check_health)

    monkeypatch.setattr(connection, "send_packed_command", counted)
    return counter


# -- slots and URLs ------------------------------------------------------------------


def test_the_scopes_used_here_live_in_different_slots() -> None:
    assert slot("b") < slot("c") < slot("a")
    assert slot("x.example") < slot("y.example")
    assert len({slot(name) for name in ("a", "b", "c")}) == 3
    # The store's own slot function agrees with redis-py's, hash tags and all.
    for key in ("cp:ns:{a}:a", "cp:ns:{a}:l", "plain", "{}x", "a{}{b}", "x{y}z{w}", "{ü.example}:p"):
        assert slot_of(key) == key_slot(key.encode()), key
    # Every key of a scope shares its slot.
    assert len({slot_of(f"cp:job:{{api.example}}:{suffix}") for suffix in "alrp"}) == 1


def test_cluster_urls() -> None:
    store = open_store("redis://10.0.0.5:7000,10.0.0.6:7001/0?cluster=1&namespace=job", SETTINGS,
                       MockClock(), random.Random())
    assert isinstance(store, RedisStore)
    assert (store.cluster, store.namespace, store.url) == (True, "job",
                                                           "redis://10.0.0.5:7000,10.0.0.6:7001/0")
    plain = open_store("redis://127.0.0.1:6379/0?cluster=0", SETTINGS, MockClock(), random.Random())
    assert isinstance(plain, RedisStore)
    assert plain.cluster is False
    bad = {
        "redis://h:7000/0?cluster=maybe": "cluster='maybe' is not a flag",
        "unix:///tmp/redis.sock?cluster=1": "cluster=1 needs redis:// or rediss://",
        "redis://h:7000/2?cluster=1": "a Redis Cluster has only database 0",
        "redis://h:7000/0?cluster=1&namespace=a{b}": "braces are not allowed",
        "redis://h:7000,h:7001/0": "several hosts name a Redis Cluster; add cluster=1",
        "redis://h:7000,h:99999/0?cluster=1": "'h:99999' is not host:port",
    }
    for url, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            open_store(url, SETTINGS, MockClock(), random.Random())


# -- the store contract across slots -------------------------------------------------
# (Every single-scope behaviour of the contract runs on this cluster in test_stores.py.)


async def test_multi_slot_admission_is_all_or_nothing(local: tuple[RedisStore, MockClock]) -> None:
    store, _clock = local
    held = await store.acquire((("b", 1.0),))
    assert isinstance(held, Lease)
    # "b" comes first (lower slot) and is full: "a" is only probed, never reserved.
    assert await store.acquire((("a", 1.0), ("b", 1.0))) == Blocked(None, (("b", None),))
    assert await store.snapshot("a") is None
    await store.release(held, Outcome())
    both = await store.acquire((("a", 1.0), ("b", 1.0)))
    assert isinstance(both, RedisLease)
    assert len(both.slot_ready) == 2
    assert both.slot_ready == (1.0, 0.0)  # in the request's order, not the slots'
    for name in ("a", "b"):
        snap = await store.snapshot(name)
        assert snap is not None
        assert (snap.inflight, snap.sends) == (1, 2 if name == "b" else 1)
    assert store._slots is not None
    assert store._slots.rollbacks == 0
    await store.release(both, Outcome(status=200, latency=0.2))
    for name in ("a", "b"):
        snap = await store.snapshot(name)
        assert snap is not None
        assert (snap.inflight, snap.responses, snap.last_latency) == (0, 1, 0.2)


async def test_blocked_reports_the_latest_time_over_slots(local: tuple[RedisStore, MockClock]) -> None:
    store, clock = local
    first = await store.acquire((("a", 1.0),))
    assert isinstance(first, Lease)
    await store.release(first, Outcome())
    clock.advance(0.1)
    # "c" (defaults, lower slot) is free and reserved, then "a" waits for its delay: "c" is rolled back.
    assert await store.acquire((("a", 1.0), ("c", 1.0))) == Blocked(0.5, (("a", 0.5),))
    assert await store.snapshot("c") is None  # the reservation created c's state: none is left
    # And when the first group is the one that waits, the later groups are probed for their times.
    hold = await store.acquire((("x.example", 1.0),))
    assert isinstance(hold, Lease)
    await store.release(hold, Outcome())
    assert await store.acquire((("x.example", 1.0), ("a", 1.0))) == Blocked(
        0.6, (("x.example", 0.6), ("a", 0.5)))
    assert "a" in await store.scopes()


async def test_a_backoff_over_two_slots_steps_each_scope_once(
        local: tuple[RedisStore, MockClock]) -> None:
    store, clock = local
    # Two 429s of one generation, on a request over two slots: each scope backs off once.
    refused = Outcome(status=429, feedback=(ScopeFeedback(backoff=True, status=429),) * 2)
    assert slot("z.example") < slot("a")
    first = await store.acquire((("a", 1.0), ("z.example", 1.0)))
    assert isinstance(first, Lease)
    clock.advance(0.5)
    second = await store.acquire((("a", 1.0), ("z.example", 1.0)))
    assert isinstance(second, Lease)
    await store.release(first, refused)
    await store.release(second, refused)
    for name, delay in (("a", 1.0), ("z.example", 1.0)):
        snap = await store.snapshot(name)
        assert snap is not None
        assert (snap.backoff, snap.generation, snap.delay, snap.inflight) == (1, 1, delay, 0)
    assert await store.acquire((("a", 1.0),)) == Blocked(1.5, (("a", 1.5),))



# -- two-phase admission ------------------------------------------------------------


async def test_rollback_leaves_no_lease_and_the_pace_unchanged(
        local: tuple[RedisStore, MockClock], raw: ClusterClient) -> None:
    store, clock = local
    prefix = f"cp:{store.namespace}:"
    # x.example (lower slot) has sent once: next ready at 0.5.
    sent = await store.acquire((("x.example", 1.0),))
    assert isinstance(sent, Lease)
    await store.release(sent, Outcome(status=200, latency=0.1))
    clock.advance(1.0)
    before = await raw.hgetall(f"{prefix}{{x.example}}:a")
    # y.example (higher slot) has its one slot in flight.
    busy = await store.acquire((("y.example", 1.0),))
    assert isinstance(busy, RedisLease)

    # x.example is reserved, then y.example refuses: x.example is given back as it was.
    assert await store.acquire((("x.example", 1.0), ("y.example", 1.0))) == Blocked(
        None, (("y.example", None),))
    assert store._slots is not None
    assert store._slots.rollbacks == 1
    assert await raw.zcard(f"{prefix}{{x.example}}:l") == 0
    assert await raw.hgetall(f"{prefix}{{x.example}}:a") == before
    snap = await store.snapshot("x.example")
    assert snap is not None
    assert (snap.inflight, snap.sends, snap.ready_in) == (0, 1, 0.0)
    assert store._held == {busy.lease_id: ("y.example",)}  # the rolled-back lease is not renewed

    # Nothing was lost either: x.example admits at once, alone or with y.example once it is free.
    await store.release(busy, Outcome(status=200, latency=0.1))
    both = await store.acquire((("x.example", 1.0), ("y.example", 1.0)))
    assert isinstance(both, RedisLease)
    assert both.granted_at == 1.0
    await store.release(both, Outcome(status=200, latency=0.1))


async def test_rollback_never_undoes_another_workers_send(
        cluster_url: str, raw: ClusterClient) -> None:
    """A reservation that another admission followed stays counted: its pace is not put back."""
    clock = MockClock()
    url = cluster_url + "&time=local"
    one, two = (open_store(url, SETTINGS, clock, random.Random(n)) for n in (1, 2))
    assert isinstance(one, RedisStore)
    assert isinstance(two, RedisStore)
    prefix = f"cp:{one.namespace}:"
    try:
        busy = await two.acquire((("y.example", 1.0),))
        assert isinstance(busy, Lease)
        assert one._slots is not None
        run = one._slots._run
        interloper: list[Lease | Blocked] = []

        async def between_phases(name: str, keys: list[str], args: list[Any]) -> Any:
            # Worker two sends to z.example after worker one reserved it, before y.example refuses.
            if name == "acquire" and keys[0].startswith(f"{prefix}{{y.example}}") and not interloper:
                interloper.append(await two.acquire((("z.example", 1.0),)))
            return await run(name, keys, args)

        one._slots._run = between_phases
        clock.advance(0.25)
        assert slot("z.example") < slot("y.example")
        assert await one.acquire((("y.example", 1.0), ("z.example", 1.0))) == Blocked(
            None, (("y.example", None),))
        assert isinstance(interloper[0], RedisLease)
        state = await raw.hgetall(f"{prefix}{{z.example}}:a")
        # The reservation's lease is gone; worker two's send and its pace stay as it left them.
        assert await raw.zrange(f"{prefix}{{z.example}}:l", 0, -1) == [interloper[0].lease_id]
        assert (state["sends"], state["rb"], state["last"]) == ("2", "1", "0.25")
        snap = await one.snapshot("z.example")
        assert snap is not None
        assert (snap.sends, snap.inflight) == (1, 1)
        await two.release(interloper[0], Outcome(status=200, latency=0.1))
        await two.release(busy, Outcome(status=200, latency=0.1))
    finally:
        await one.aclose()
        await two.aclose()


async def test_round_trips(local: tuple[RedisStore, MockClock], trips: Counter[str]) -> None:
    store, clock = local
    # Warm up: every script loaded on every node, every connection open, every policy cached.
    warmups: list[tuple[str, ...]] = [("b",), ("a", "b"), ("a", "c")]
    for warmup in warmups:
        lease = await store.acquire(tuple((name, 1.0) for name in warmup))
        assert isinstance(lease, Lease)
        await store.release(lease, Outcome())
        clock.advance(2.0)
    blocker = await store.acquire((("a", 1.0),))
    assert isinstance(blocker, Lease)
    await store.release(blocker, Outcome())
    clock.advance(2.0)

    counts = []
    requests: list[tuple[str, ...]] = [("b",), ("a", "b"), ("a", "b", "c")]
    for names in requests:
        trips.clear()
        lease = await store.acquire(tuple((name, 1.0) for name in names))
        assert isinstance(lease, Lease)
        acquired = trips["sent"]
        await store.release(lease, Outcome())
        counts.append((acquired, trips["sent"] - acquired))
        clock.advance(2.0)
    # One slot: one script each way. Several: one reservation per slot, in order, and one release
    # per slot, sent together.
    assert counts == [(1, 1), (2, 2), (3, 3)]

    # Refused by the second group ("a" is waiting out its delay): one reservation rolled back.
    first = await store.acquire((("a", 1.0),))
    assert isinstance(first, Lease)
    await store.release(first, Outcome())
    trips.clear()
    assert await store.acquire((("a", 1.0), ("b", 1.0))) == Blocked(clock.now() + 0.5,
                                                                     (("a", clock.now() + 0.5),))
    assert trips["sent"] == 3  # reserve b, refused by a, roll back b


async def test_racing_workers_never_exceed_a_scope_and_both_progress(cluster_url: str) -> None:
    """Three workers, overlapping multi-slot scope sets, real time: limits hold and nobody starves."""
    clock = AsyncioClock()
    stores = [open_store(cluster_url, SETTINGS, clock, random.Random(n)) for n in range(3)]
    # b: 1 slot, y.example: 1 slot, z.example: 2 slots; three different slots.
    requests = [(("b", 1.0), ("y.example", 1.0)), (("y.example", 1.0), ("z.example", 1.0)),
                (("z.example", 1.0), ("b", 1.0), ("y.example", 1.0)), (("z.example", 1.0),)]
    limit = {"b": 1, "y.example": 1, "z.example": 2}
    inflight: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    admitted: Counter[int] = Counter()
    sends: Counter[str] = Counter()
    refused = 0
    # Starving is waiting forever: a deadline only ends it. Ten seconds (a second's work idle) failed
    # at load 25, the cluster's three servers and three workers sharing two cores with everything else.
    deadline = time.monotonic() + REACH

    async def work(worker: int, task: int) -> None:
        nonlocal refused
        store = stores[worker]
        demands = requests[(worker + task) % len(requests)]
        while admitted[worker] < 25:
            assert time.monotonic() < deadline, f"worker {worker} stalled: {admitted}"
            result = await store.acquire(demands)
            if isinstance(result, Blocked):
                refused += 1
                await asyncio.sleep(0.001)  # wait for another worker's release
                continue
            for name, _use in demands:
                inflight[name] += 1
                peak[name] = max(peak[name], inflight[name])
                assert inflight[name] <= limit[name], (name, inflight)
                sends[name] += 1
            await asyncio.sleep(random.uniform(0.0, 0.003))  # the request
            for name, _use in demands:
                inflight[name] -= 1
            await store.release(result, Outcome(status=200, latency=0.001))
            admitted[worker] += 1

    try:
        await asyncio.gather(*(work(worker, task) for worker in range(3) for task in range(3)))
        assert min(admitted.values()) >= 25
        assert refused > 0  # they did contend
        assert peak == limit  # every scope was used to its limit, never past it
        rollbacks = 0
        for store in stores:
            assert isinstance(store, RedisStore)
            assert not store._held
            assert store._slots is not None
            rollbacks += store._slots.rollbacks
        assert rollbacks > 0  # reservations were taken back along the way ...
        for name in limit:
            snap = await stores[0].snapshot(name)
            assert snap is not None
            # ... and left no lease behind, and the store counts exactly the sends that happened.
            assert (snap.inflight, snap.sends) == (0, sends[name])
    finally:
        for store in stores:
            await store.aclose()


# -- a worker dying between the phases ----------------------------------------------

# The child: reserve the first slot group of a two-slot request, say so, then hang (renewing).
CHILD = """
import asyncio, json, random, sys
from crawlpace import Settings
from crawlpace._clock import AsyncioClock
from crawlpace.stores import open_store

async def main():
    store = open_store(sys.argv[1], Settings.from_scrapy(json.loads(sys.argv[2])), AsyncioClock(),
                       random.Random(1))
    run = store._slots._run
    calls = []

    async def stall_after_phase_one(name, keys, args):
        calls.append(name)
        if len(calls) == 2:
            print("reserved", flush=True)
            await asyncio.Event().wait()
        return await run(name, keys, args)

    store._slots._run = stall_after_phase_one
    print("never", await store.acquire((("y.example", 1.0), ("z.example", 1.0))), flush=True)

asyncio.run(main())
"""


def spawn_stalling_worker(url: str) -> subprocess.Popen[bytes]:
    """Start the child that stalls between the phases (it prints "reserved" once it does)."""
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-c", CHILD, url, json.dumps(RAW)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": path})


async def test_a_worker_killed_between_the_phases_leaks_nothing(cluster_url: str) -> None:
    lease_time = 1.0
    url = f"{cluster_url}&lease={lease_time:g}"
    child = spawn_stalling_worker(url)
    store = open_store(url, SETTINGS, AsyncioClock(), random.Random(2))
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 15.0)
        if line.strip() != b"reserved":
            child.kill()
            _out, err = child.communicate(timeout=5.0)
            raise AssertionError(f"the child said {line!r}; stderr:\n{err.decode()}")
        # Phase one took z.example (the lower slot); y.example was never touched.
        assert slot("z.example") < slot("y.example")
        snap = await store.snapshot("z.example")
        assert snap is not None
        assert (snap.inflight, snap.sends) == (1, 1)
        assert await store.snapshot("y.example") is None
        # The stalled worker's renewals keep the reservation well past its lease time.
        await asyncio.sleep(1.5 * lease_time)
        snap = await store.snapshot("z.example")
        assert snap is not None
        assert snap.inflight == 1

        child.send_signal(signal.SIGKILL)
        child.wait(5.0)
        killed_at = time.monotonic()
        while True:
            snap = await store.snapshot("z.example")
            assert snap is not None
            if snap.inflight == 0:
                break
            assert time.monotonic() - killed_at < lease_time + 1.0, "the reservation never expired"
            await asyncio.sleep(0.05)
        # Gone within the lease time, and the whole request now admits, both slots of z.example free.
        assert await store.snapshot("y.example") is None
        lease = await store.acquire((("y.example", 1.0), ("z.example", 1.0)))
        assert isinstance(lease, Lease)
        other = await store.acquire((("z.example", 1.0),))
        assert isinstance(other, Lease)
        await store.release(lease, Outcome(status=200, latency=0.1))
        await store.release(other, Outcome(status=200, latency=0.1))
    finally:
        reap(child, signal_first=False)
        await store.aclose()


async def test_a_cancelled_admission_stops_renewing_its_reservations(cluster_url: str) -> None:
    lease_time = 0.5
    store = open_store(f"{cluster_url}&lease={lease_time:g}", SETTINGS, AsyncioClock(), random.Random(1))
    assert isinstance(store, RedisStore)
    assert store._slots is not None
    run = store._slots._run
    stalled = asyncio.Event()

    async def stall_after_phase_one(name: str, keys: list[str], args: list[Any]) -> Any:
        if name == "acquire" and "{y.example}" in keys[0]:
            stalled.set()
            await asyncio.Event().wait()
        return await run(name, keys, args)

    store._slots._run = stall_after_phase_one
    try:
        task = asyncio.create_task(store.acquire((("y.example", 1.0), ("z.example", 1.0))))
        await asyncio.wait_for(stalled.wait(), 5.0)
        assert len(store._held) == 1  # the phase-one reservation is renewed while it waits
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not store._held
        started = time.monotonic()
        while True:
            snap = await store.snapshot("z.example")
            assert snap is not None
            if snap.inflight == 0:
                break
            assert time.monotonic() - started < lease_time + 1.0
            await asyncio.sleep(0.05)
    finally:
        await store.aclose()


# -- reading the whole cluster -------------------------------------------------------


async def test_scopes_are_listed_from_every_primary(local: tuple[RedisStore, MockClock],
                                                    raw: ClusterClient) -> None:
    store, _clock = local
    names = [f"site{n}.example" for n in range(30)]
    for name in names:
        lease = await store.acquire(((name, 1.0),))
        assert isinstance(lease, Lease)
        await store.release(lease, Outcome())
    nodes = {raw.get_node_from_key(f"cp:{store.namespace}:{{{name}}}:a") for name in names}
    # The scopes really are spread over the three primaries.
    assert len({node.name for node in nodes if node is not None}) == 3
    assert sorted(await store.scopes()) == sorted(names)


def test_status_reads_the_cluster(cluster_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def seed() -> None:
        store = open_store(cluster_url, SETTINGS, AsyncioClock(), random.Random(1))
        try:
            lease = await store.acquire((("a", 1.0), ("b", 1.0)))
            assert isinstance(lease, Lease)
            await store.release(lease, Outcome(status=200, latency=0.05))
            held = await store.acquire((("c", 1.0),))
            assert isinstance(held, Lease)  # still in flight when status reads it
        finally:
            await store.aclose()

    asyncio.run(seed())
    assert main(["status", "--store", cluster_url, "--json"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(": 3 scopes")
    report = json.loads(out.strip().splitlines()[-1])
    rows = {row["scope"]: row for row in report["scopes"]}
    assert sorted(rows) == ["a", "b", "c"]
    assert (rows["a"]["sends"], rows["a"]["responses"], rows["a"]["inflight"]) == (1, 1, 0)
    assert (rows["c"]["sends"], rows["c"]["inflight"]) == (1, 1)


async def test_an_unreachable_cluster_fails_closed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="crawlpace")
    clock = AsyncioClock()
    url = f"redis://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/0?cluster=1&socket_connect_timeout=0.5"
    store = open_store(url, SETTINGS, clock, random.Random(1))
    try:
        before = clock.now()
        result = await store.acquire((("a", 1.0), ("b", 1.0)))
        assert isinstance(result, Blocked)
        assert result.ready_at is not None
        assert result.ready_at > before
        assert [name for name, _ in result.waiting_on] == ["a", "b"]
        assert any("unreachable" in r.getMessage() for r in caplog.records)
    finally:
        await store.aclose()


def test_slot_admission_spans() -> None:
    # An acquire sends four keys a scope, the policy key last (acquire.lua reads it when the worker's
    # copy is stale: bench/results/calls3.md); it sent three.
    per_scope = len(ACQUIRE.keys)
    assert per_scope == 4
    keys = [f"cp:n:{{{name}}}:{suffix}" for name in ("a", "b") for suffix in "alrp"]
    assert SlotAdmission.spans(keys, per_scope)
    assert not SlotAdmission.spans(keys[:per_scope], per_scope)
    assert not SlotAdmission.spans([f"cp:n:{{a}}:{suffix}" for suffix in "alrpalrp"], per_scope)


def test_a_slot_groups_acquire_takes_each_of_its_scopes_keys_and_values_whole() -> None:
    # _part cuts a whole request's acquire call by the layout: four keys and nine values a scope (the
    # known policy version among them), the head's scope count made the group's.
    names = ["a", "b"]
    keys = [f"cp:n:{{{name}}}:{suffix}" for name in names for suffix in "alrp"]
    each = [[f"{name}{i}" for i in range(len(ACQUIRE.each))] for name in names]
    args = ["now", "id", "30", "3600", "2", *each[0], *each[1]]
    for group in groups(names, keys, len(ACQUIRE.keys)):
        [index] = group.indexes
        sub_keys, sub_args = _part(keys, args, group, per_key=len(ACQUIRE.keys), head=len(ACQUIRE.head),
                                   each=len(ACQUIRE.each))
        assert sub_keys == keys[4 * index:4 * index + 4]
        assert sub_args == ["now", "id", "30", "3600", 1, *each[index]]
        assert sub_args[ACQUIRE.at(0, "known_version")] == f"{names[index]}{ACQUIRE.offset('known_version')}"


async def test_a_stale_grant_reads_a_policy_only_when_its_request_spans_slots(
        cluster_url: str, trips: Counter[str]) -> None:
    # One slot: the acquire's reply carries the policy another worker wrote (acquire.lua), no read
    # follows. Several: the merged reply of the slot groups carries none, and the worker reads the
    # newer policy as before (learn_versions), one round trip per stale scope.
    clock = MockClock()
    one, two = (open_store(cluster_url + "&time=local", SETTINGS, clock, random.Random(n)) for n in (1, 2))
    assert isinstance(one, RedisStore)
    assert isinstance(two, RedisStore)
    try:
        for names in (("b",), ("a", "b")):  # every script loaded, every connection open
            lease = await one.acquire(tuple((name, 1.0) for name in names))
            assert isinstance(lease, Lease)
            await one.release(lease, Outcome())
            clock.advance(2.0)
        for name in ("a", "b"):
            await two.set_crawl_delay(name, 0.5)  # a newer policy of each: one's copies are stale
        versions = {name: two._policies.entry(name).version for name in ("a", "b")}
        assert min(versions.values()) > max(one._policies.entry(name).version for name in ("a", "b"))
        trips.clear()
        lease = await one.acquire((("b", 1.0),))
        assert isinstance(lease, Lease)
        assert trips["sent"] == 1  # main: 2, the acquire and a GET of b's policy
        assert one._policies.entry("b").version == versions["b"]
        await one.release(lease, Outcome())
        clock.advance(2.0)
        trips.clear()
        both = await one.acquire((("a", 1.0), ("b", 1.0)))
        assert isinstance(both, Lease)
        assert trips["sent"] == 3  # a reservation per slot group, and the read of a's policy
        assert one._policies.entry("a").version == versions["a"]
        await one.release(both, Outcome())
    finally:
        await one.aclose()
        await two.aclose()


async def test_the_shared_frontier_works_on_the_cluster(cluster_url: str) -> None:
    frontier = SharedFrontier(cluster_url, worker="w")
    try:
        report = await frontier.enqueue([f"http://{host}.test/{n}" for host in "abc" for n in range(2)])
        assert report.added == 6
        claim = await frontier.claim(10, spacing=0.0)
        assert sorted(item.scope for item in claim.urls) == ["a.test", "b.test", "c.test"]
        assert await frontier.ack([item.id for item in claim.urls], "ok") == (3, 0)
        counts = await frontier.counts()
        assert (counts.queued, counts.claimed, counts.done) == (3, 0, 3)
    finally:
        await frontier.aclose()
