"""The shared store at scale: batched round trips, a bounded policy cache, compact idle scopes, clean keys."""

from __future__ import annotations

import asyncio
import pickle
import random
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio.connection

from crawlpace import ConfigError, Settings
from crawlpace.cli import main
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Lease, Outcome
from crawlpace.stores.redis import RedisStore
from crawlpace.stores.redis import _keys as keys
from crawlpace.testing import MockClock

from .redis_server import delivered

pytestmark = pytest.mark.redis

FREE = Settings.from_scrapy({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0,
                             "RANDOMIZE_DOWNLOAD_DELAY": False, "CONCURRENT_REQUESTS_PER_DOMAIN": 100,
                             "CONCURRENT_REQUESTS": 10_000})
SLOWED = Outcome(status=429, feedback=(ScopeFeedback(failed=False, status=429, backoff=True),))


def store_at(url: str, settings: Settings = FREE, **options: str) -> tuple[RedisStore, MockClock, str]:
    url = url.split("?")[0]
    namespace = f"t{uuid.uuid4().hex[:10]}"
    extra = "".join(f"&{key}={value}" for key, value in options.items())
    clock = MockClock()
    return RedisStore(f"{url}?namespace={namespace}&time=local{extra}", settings, clock,
                      random.Random(1)), clock, namespace


class Trips:
    """Counts what redis-py's asyncio connections write (one command or one pipeline: one round trip)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        connection = redis.asyncio.connection.AbstractConnection
        send = connection.send_packed_command

        async def counted(conn: Any, command: Any, check_health: bool = True) -> None:
            self.count += 1
            await send(conn, command, check_health)

        monkeypatch.setattr(connection, "send_packed_command", counted)


async def test_concurrent_admissions_share_round_trips(redis_url: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store, _clock, _ns = store_at(redis_url)
    try:
        warm = await store.acquire((("warm", 1.0),))
        assert isinstance(warm, Lease)
        await store.release(warm, Outcome(status=200))
        trips = Trips(monkeypatch)

        async def one(i: int) -> None:
            lease = await store.acquire(((f"s{i % 10}", 1.0),))
            assert isinstance(lease, Lease)
            await store.release(lease, Outcome(status=200, latency=0.01))

        await asyncio.gather(*(one(i) for i in range(64)))
        # 64 acquires and 64 releases, sent in batches while others were in flight.
        assert trips.count <= 64, trips.count
        assert store._conn.batches >= 1
        snap = await store.snapshot("s3")
        assert snap is not None
        assert (snap.sends, snap.responses, snap.inflight) == (7, 7, 0)
    finally:
        await store.aclose()


async def test_a_lone_tasks_release_rides_with_its_next_acquire(redis_url: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store, clock, ns = store_at(redis_url)
    other = RedisStore(f"{redis_url.split('?')[0]}?namespace={ns}&time=local", FREE, clock, random.Random(2))
    try:
        warm = await store.acquire((("solo", 1.0),))
        assert isinstance(warm, Lease)
        await store.release(warm, Outcome(status=200))
        trips = Trips(monkeypatch)
        for _ in range(20):  # one task, one request at a time
            lease = await store.acquire((("solo", 1.0),))
            assert isinstance(lease, Lease)
            await store.release(lease, Outcome(status=200, latency=0.01))
        # The first acquire also carries the warm-up's release; the last release is still queued.
        assert trips.count <= 21, trips.count
        await asyncio.sleep(0)  # a turn of the loop: the last release leaves on its own
        await asyncio.sleep(0)
        assert trips.count <= 22, trips.count
        await delivered(store)
        snap = await other.snapshot("solo")  # another worker sees every slot back, every outcome
        assert snap is not None
        assert (snap.sends, snap.responses, snap.inflight) == (21, 21, 0)
    finally:
        await store.aclose()
        await other.aclose()


async def test_keys_keep_an_expiry_without_one_expire_per_call(redis_url: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store, _clock, ns = store_at(redis_url)
    client = redis.Redis.from_url(redis_url.split("?")[0])
    try:
        a, leases = f"cp:{ns}:{{e}}:a", f"cp:{ns}:{{e}}:l"
        first = await store.acquire((("e", 1.0),))
        second = await store.acquire((("e", 1.0),))
        assert isinstance(first, Lease)
        assert isinstance(second, Lease)
        await delivered(store)
        assert 0 < client.ttl(a) <= 1.5 * store.idle
        assert 0 < client.ttl(leases) <= 1.5 * store.idle  # made by the first admission, with an expiry
        calls = client.info("commandstats").get("cmdstat_expire", {}).get("calls", 0)
        await store.release(first, Outcome(status=200))
        await store.release(second, Outcome(status=200))
        await delivered(store)  # a slot kept in the worker's allotment goes back: the lease set is empty
        again = await store.acquire((("e", 1.0),))  # the lease set is made anew: it gets an expiry
        assert isinstance(again, Lease)
        await store.release(again, Outcome(status=200))
        await delivered(store)
        assert client.info("commandstats")["cmdstat_expire"]["calls"] - calls == 1  # not one per call
        assert 0 < client.ttl(a) <= 1.5 * store.idle
    finally:
        client.close()
        await store.aclose()


async def test_a_failing_script_in_a_batch_fails_only_its_caller(redis_url: str) -> None:
    store, _clock, _ns = store_at(redis_url)
    try:
        conn = store._conn
        await store._connect()
        # (Each scope: four keys, the policy's last; its limits, jitter factor, known policy version
        # and quota, as _script_args.ACQUIRE lays them out.)
        good = conn.call("acquire", list(store._keys("ok")),
                         ["", "id-1", 30, 3600, 1, 1, "0", "0", "0", "1", "0", "0", "", ""])
        bad = conn.call("acquire", list(store._keys("bad")), ["", "id-2", 30, 3600, 1])  # ARGV cut short
        results = await asyncio.gather(good, bad, return_exceptions=True)
        assert not isinstance(results[0], BaseException)
        assert int(results[0][0]) == 1
        assert isinstance(results[1], redis.exceptions.ResponseError)
    finally:
        await store.aclose()


async def test_the_policy_cache_is_bounded_and_what_it_forgot_comes_back(redis_url: str) -> None:
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 1.0, "DOWNLOAD_DELAY_PER_SLOT": 0,
                                     "RANDOMIZE_DOWNLOAD_DELAY": False, "BACKOFF_JITTER": 0})
    store, clock, _ns = store_at(redis_url, settings, policy_cache="4")
    try:
        for i in range(20):
            lease = await store.acquire(((f"h{i}", 1.0),))
            assert isinstance(lease, Lease)
            await store.release(lease, SLOWED)
        assert len(store._policies) == 4
        assert store._policies.evicted == 16
        assert "h0" not in store._policies
        clock.advance(10.0)
        lease = await store.acquire((("h0", 1.0),))  # read back from the server, not started afresh
        assert isinstance(lease, Lease)
        assert store._policies.policy("h0").limits.delay == 2.0
        assert "policies=4/4" in repr(store)
    finally:
        await store.aclose()


async def test_a_bad_policy_cache_option_names_the_fix(redis_url: str) -> None:
    with pytest.raises(ConfigError, match=r"policy_cache='0' is not a whole number >= 1; give e\.g\."):
        store_at(redis_url, policy_cache="0")


async def test_an_idle_scope_that_learned_nothing_stores_no_policy(redis_url: str) -> None:
    store, _clock, ns = store_at(redis_url)
    try:
        lease = await store.acquire((("quiet", 1.0),))
        assert isinstance(lease, Lease)
        await store.release(lease, Outcome(status=200, latency=0.05))
        await delivered(store)  # read through a client of its own
        client = redis.Redis.from_url(redis_url.split("?")[0])
        names = sorted(k.decode() for k in client.scan_iter(match=keys.namespace_pattern(ns)))
        client.close()
        assert names == [f"cp:{ns}:{{quiet}}:a"]  # no lease set, no resting set, no policy
    finally:
        await store.aclose()


async def test_state_from_an_older_pickle_is_refused_and_started_afresh(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 1.0, "RANDOMIZE_DOWNLOAD_DELAY": False})
    store, clock, _ns = store_at(redis_url, settings)
    try:
        lease = await store.acquire((("old", 1.0),))
        assert isinstance(lease, Lease)
        await store.release(lease, SLOWED)
        client = redis.Redis.from_url(redis_url.split("?")[0])
        policy_key = store._keys("old")[3]
        client.set(policy_key, pickle.dumps({"a": 1}))
        client.hincrby(store._keys("old")[0], "ver", 1)  # as if another (old) worker wrote it
        client.close()
        clock.advance(5.0)
        lease = await store.acquire((("old", 1.0),))
        assert isinstance(lease, Lease)
        assert store._policies.policy("old").limits.delay == 1.0
        assert "a pickle (crawlpace 0.6 or older)" in caplog.text
        await store.release(lease, Outcome(status=200))
    finally:
        await store.aclose()


async def test_learned_state_survives_a_new_worker(redis_url: str) -> None:
    """A rolling upgrade: a worker started later reads what the fleet learned."""
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 1.0, "RANDOMIZE_DOWNLOAD_DELAY": False,
                                     "BACKOFF_JITTER": 0})
    one, clock, ns = store_at(redis_url, settings)
    lease = await one.acquire((("site", 1.0),))
    assert isinstance(lease, Lease)
    await one.release(lease, SLOWED)
    await one.aclose()
    server = redis_url.split("?")[0]
    two = RedisStore(f"{server}?namespace={ns}&time=local", settings, clock, random.Random(2))
    try:
        snap = await two.snapshot("site")
        assert snap is not None
        assert (snap.delay, snap.backoff) == (2.0, 1)
    finally:
        await two.aclose()


NASTY = ["a*b", "x?y", "[ab]", "back\\slash", "br{ace}", "plain"]


async def test_scope_names_with_glob_characters_list_exactly(redis_url: str) -> None:
    store, _clock, _ns = store_at(redis_url)
    other, _clock2, _ns2 = store_at(redis_url)
    try:
        for name in NASTY:
            lease = await store.acquire(((name, 1.0),))
            assert isinstance(lease, Lease)
            await store.release(lease, Outcome(status=200))
        lease = await other.acquire((("a-b", 1.0),))  # "a*b" as a pattern would match this one
        assert isinstance(lease, Lease)
        assert sorted(await store.scopes()) == sorted(NASTY)
    finally:
        await store.aclose()
        await other.aclose()


def test_purge_removes_one_namespace_only_even_with_glob_characters(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url.split("?")[0])
    try:
        mine, theirs, lookalike = "job*", "job-2", "jobX"
        for ns in (mine, theirs, lookalike):
            client.hset(f"cp:{ns}:{{s}}:a", "sends", 1)
            client.rpush(f"cp:{ns}:frontier:{{{ns}}}:q:s", 1)
        server = redis_url.split("?")[0]
        assert main(["purge", "--store", server, "--namespace", mine, "--dry-run"]) == 0
        assert client.exists(f"cp:{mine}:{{s}}:a") == 1
        assert main(["purge", "--store", server, "--namespace", mine]) == 0
        left = sorted(k.decode() for k in client.scan_iter(match="cp:job*"))
        assert left == sorted([f"cp:{theirs}:{{s}}:a", f"cp:{theirs}:frontier:{{{theirs}}}:q:s",
                               f"cp:{lookalike}:{{s}}:a", f"cp:{lookalike}:frontier:{{{lookalike}}}:q:s"])
    finally:
        for key in client.scan_iter(match="cp:job*"):
            client.delete(key)
        client.close()


async def test_the_store_purges_its_own_namespace(redis_url: str) -> None:
    store, _clock, _ns = store_at(redis_url)
    try:
        for name in ("a", "b"):
            lease = await store.acquire(((name, 1.0),))
            assert isinstance(lease, Lease)
            await store.release(lease, SLOWED)
        assert await store.purge() >= 2
        assert await store.scopes() == []
        assert await store.snapshot("a") is None
    finally:
        await store.aclose()


def test_purge_refuses_a_non_redis_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["purge", "--store", "memory://", "--namespace", "x"]) == 3
    assert "--store: 'memory://' is not a Redis URL" in capsys.readouterr().err


def test_glob_escape_quotes_every_special_character() -> None:
    assert keys.glob_escape("a*b?c[d]e\\f") == "a\\*b\\?c\\[d\\]e\\\\f"
    assert keys.namespace_pattern("n[1]") == "cp:n\\[1\\]:*"


async def test_every_frontier_key_expires_once_the_job_is_idle(redis_url: str) -> None:
    from crawlpace.frontier._shared import SharedFrontier

    server = redis_url.split("?")[0]
    ns = f"f{uuid.uuid4().hex[:10]}"
    front = SharedFrontier(f"{server}?namespace={ns}", worker="w", visibility=30.0, idle=900.0)
    client = redis.Redis.from_url(server)
    try:
        await front.enqueue([f"https://h{i % 3}.example/{i}" for i in range(9)])
        claim = await front.claim(2, spacing=0.0)
        await front.touch([u.id for u in claim.urls])
        await front.ack([claim.urls[0].id], "200")
        await front.give_back([claim.urls[1].id])
        names = list(client.scan_iter(match=keys.namespace_pattern(ns)))
        assert len(names) >= 10  # the job-wide keys and a queue per host
        ttls = {name.decode(): client.ttl(name) for name in names}
        assert all(0 < ttl <= 900 for ttl in ttls.values()), ttls
    finally:
        await front.aclose()
        for name in client.scan_iter(match=keys.namespace_pattern(ns)):
            client.delete(name)
        client.close()


def test_a_frontier_idle_time_below_the_visibility_is_refused(redis_url: str) -> None:
    from crawlpace.frontier._shared import SharedFrontier

    with pytest.raises(ConfigError, match=r"idle: 10 is not a number of seconds above the visibility \(30\)"):
        SharedFrontier(redis_url, visibility=30.0, idle=10)


async def test_a_store_on_a_cluster_purges_its_namespace_on_every_node(
        redis_cluster: Any) -> None:
    ns = f"c{uuid.uuid4().hex[:8]}"
    clock = MockClock()
    store = RedisStore(f"{redis_cluster.url}&namespace={ns}&time=local", FREE, clock, random.Random(1))
    other = RedisStore(f"{redis_cluster.url}&namespace={ns}x&time=local", FREE, clock, random.Random(1))
    try:
        names = [f"site{i}.example" for i in range(12)]  # spread over the three nodes' slots
        for name in names:
            for each in (store, other):
                lease = await each.acquire(((name, 1.0),))
                assert isinstance(lease, Lease)
                await each.release(lease, Outcome(status=200))
        assert sorted(await store.scopes()) == sorted(names)
        assert await store.purge() == len(names)
        assert await store.scopes() == []
        assert sorted(await other.scopes()) == sorted(names)  # "<ns>x" is another job
    finally:
        await other.purge()
        await store.aclose()
        await other.aclose()


async def test_batches_survive_a_script_flush(redis_url: str) -> None:
    """A server restarted or flushed forgets the scripts: they are loaded again, batch or not."""
    store, _clock, _ns = store_at(redis_url)

    async def one(i: int) -> None:
        lease = await store.acquire(((f"f{i % 5}", 1.0),))
        assert isinstance(lease, Lease)
        await store.release(lease, Outcome(status=200))

    try:
        await asyncio.gather(*(one(i) for i in range(20)))
        await store.flush()  # the slots kept in allotments go back: the next admissions reach the server
        client = redis.Redis.from_url(redis_url.split("?")[0])
        client.script_flush()
        client.close()
        batches = store._conn.batches
        await asyncio.gather(*(one(i) for i in range(20)))
        assert store._conn.batches > batches
        snap = await store.snapshot("f0")
        assert snap is not None
        assert snap.sends == 8
    finally:
        await store.aclose()
