"""The staged brake shared through Redis: same verdicts as in memory, one quota for many processes.

Everything runs against a real redis-server on loopback; the last test puts a
shared Guard behind a real ``uvicorn --workers 4`` and counts what gets
through over HTTP.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from crawlpace.guard import Guard, SharedBrake, Stage, StagedBrake

from .redis_server import RedisServer, free_port, reap
from .test_guard import Backend, ScriptedRandom, call, http_scope

pytestmark = pytest.mark.redis

STAGES = (Stage(0.5, 0.5), Stage(0.8, 1.0))
ROOT = Path(__file__).resolve().parent.parent


def store_url(server: RedisServer) -> str:
    return f"{server.url}?namespace=t{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize(("chance", "share"), [(0.2, 1.0), (0.7, 1.0), (0.3, 0.6)])
async def test_shared_verdicts_match_the_memory_brake(redis_server: RedisServer, chance: float,
                                                      share: float) -> None:
    local = StagedBrake(10, 60.0, STAGES, ScriptedRandom([chance]), share=share)
    shared = SharedBrake(store_url(redis_server), 10, 60.0, STAGES, ScriptedRandom([chance]), share=share)
    try:
        for now in (600.0, 630.0, 659.0, 660.0, 700.0):  # two windows
            for key in ("a", "b", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "b"):
                expected = local.decide(key, now)
                got = await shared.decide(key, now)
                assert got == expected, (key, now)
        # Clients that come back at their pace, early, or late: the same verdicts and paces.
        steps = random.Random(share)
        now = 720.0
        for _ in range(150):
            now += steps.choice((0.0, 0.0, 0.4, 2.0, 6.0, 13.0))
            key = steps.choice("abc")
            expected = local.decide(key, now)
            got = await shared.decide(key, now)
            assert got == expected, (key, now)
        assert (await shared.stats(now)) == local.stats(now)
    finally:
        await shared.aclose()


async def test_a_brake_shares_a_stores_connection_and_batches_decisions(redis_server: RedisServer) -> None:
    import random

    from crawlpace import Settings
    from crawlpace._clock import AsyncioClock
    from crawlpace.stores import Lease
    from crawlpace.stores.redis import RedisStore

    url = store_url(redis_server)
    store = RedisStore(url, Settings.from_scrapy({"DOWNLOAD_DELAY": 0}), AsyncioClock(), random.Random(1))
    brake = SharedBrake(url, 25, 3600.0, (), connection=store.connection)
    try:
        assert brake.connection is store.connection  # one client, one pool: not a second one
        decisions = await asyncio.gather(*(brake.decide("bot") for _ in range(40)))
        assert sum(d.allowed for d in decisions) == 25
        assert store.connection.batches >= 1  # decisions in flight together went out as one call
        await brake.aclose()  # the store owns the connection: it stays open
        lease = await store.acquire((("a.example", 1.0),))
        assert isinstance(lease, Lease)
        assert (await brake.stats())["totals"]["used"] == 25.0
    finally:
        await store.aclose()


async def test_concurrent_processes_never_pass_the_quota_together(redis_server: RedisServer) -> None:
    url = store_url(redis_server)
    brakes = [SharedBrake(url, 25, 3600.0, ()) for _ in range(4)]  # four connections, as four processes
    try:
        decisions = await asyncio.gather(*(brakes[n % 4].decide("bot") for n in range(100)))
        assert sum(d.allowed for d in decisions) == 25
        assert sorted(d.used for d in decisions if d.allowed) == [float(n) for n in range(1, 26)]
        refused = [d for d in decisions if not d.allowed]
        assert all(d.retry_after == d.reset for d in refused)
        assert 0 < refused[0].reset <= 3600.0
    finally:
        for brake in brakes:
            await brake.aclose()


async def test_a_shared_guard_answers_like_a_local_one(redis_server: RedisServer) -> None:
    backend = Backend()
    app = Guard(backend, quota=2, stages=(), store=store_url(redis_server))
    try:
        answers = [await call(app, http_scope()) for _ in range(3)]
        assert [answer.status for answer in answers] == [200, 200, 429]
        # Spent for the day: come back when the server's day ends.
        assert 1 <= int(dict(answers[2].headers)[b"retry-after"]) <= 86400
        assert dict(answers[1].headers)[b"ratelimit"].startswith(b'"guard";r=0;t=')
        assert (await app.astats())["totals"] == {"keys": 1, "used": 2.0, "rejected": 1}
        with pytest.raises(TypeError, match="astats"):
            app.stats()
    finally:
        await app.aclose()


@pytest.mark.parametrize(("mode", "status"), [("open", 200), ("closed", 503)])
async def test_an_unreachable_store_fails_as_the_owner_chose(mode: str, status: int,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    backend = Backend()
    dead = f"redis://127.0.0.1:{free_port()}/0"
    app = Guard(backend, quota=2, stages=(), store=dead, on_store_error=mode)  # type: ignore[arg-type]
    try:
        answers = [await call(app, http_scope()) for _ in range(2)]
    finally:
        await app.aclose()
    assert [answer.status for answer in answers] == [status, status]
    assert caplog.text.count("cannot be reached") == 1  # logged once, not per request
    assert backend.calls == (2 if mode == "open" else 0)


def test_a_bad_store_url_fails_at_start() -> None:
    with pytest.raises(ValueError, match="unknown scheme 'memcached'"):
        Guard(Backend(), quota=1, store="memcached://127.0.0.1")


def test_uvicorn_with_two_workers_spends_one_quota(redis_server: RedisServer) -> None:
    # Two worker processes show the sharing as well as four, at half the start-up.
    port = free_port()
    quota = 12
    env = {**os.environ, "GUARD_STORE": store_url(redis_server), "GUARD_QUOTA": str(quota),
           "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "tests.guard_app:app", "--workers", "2", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60.0
        up: set[str] = set()
        while len(up) < 2:  # wait until both workers answer; /pid is off the quota
            try:
                up.add(httpx.get(f"{base}/pid", timeout=1.0, trust_env=False,
                                 headers={"connection": "close"}).text)
            except httpx.TransportError:
                time.sleep(0.1)
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start its two workers (saw {sorted(up)})")
        statuses: list[int] = []
        pids: set[str] = set()
        # A new connection each time, so the requests spread over the workers. Which worker
        # accepts one is the OS's choice, so past the quota's three rounds it keeps asking
        # (bounded) until both workers have answered, each answer naming its worker.
        while len(statuses) < 3 * quota or (len(pids) < 2 and len(statuses) < 20 * quota):
            with httpx.Client(trust_env=False, timeout=5.0,
                              headers={"user-agent": "ExampleBot/1.0", "connection": "close"}) as client:
                response = client.get(f"{base}/search")
            statuses.append(response.status_code)
            pids.add(response.headers["x-worker"])
    finally:
        reap(server)
    assert statuses.count(200) == quota
    assert statuses[:quota] == [200] * quota
    assert set(statuses[quota:]) == {429}
    assert len(pids) >= 2, "the requests should have reached several workers"


async def test_new_keys_past_the_cap_share_the_overflow_counter_and_windows_expire(
        redis_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    import redis.asyncio as aioredis

    url = store_url(redis_server)
    brake = SharedBrake(url, 10, 60.0, (), max_keys=2, share=0.3)
    try:
        for key in ("a", "b"):
            assert (await brake.decide(key, 600.0)).allowed
        # Two more invented keys count against one shared counter, not a fresh quota each.
        verdicts = [await brake.decide(f"invented-{n}", 600.0) for n in range(5)]
        assert [v.allowed for v in verdicts] == [True, True, True, False, False]
        stats = await brake.stats(600.0)
        assert set(stats["keys"]) == {"a", "b", "<overflow>"}
        assert stats["keys"]["<overflow>"]["used"] == 3.0
        assert caplog.text.count("new keys share the '<overflow>' counter") == 1
    finally:
        await brake.aclose()
    client = aioredis.from_url(url.partition("?")[0])
    try:
        keys = [key async for key in client.scan_iter(match=f"cp:{url.partition('namespace=')[2]}:guard:*")]
        assert len(keys) == 1
        ttl = await client.ttl(keys[0])
        # Laid on the caller's clock at 600 s, a window ending at 660 s: kept a window and a minute
        # past its end (yesterday's totals), counted from the server's "now" as given.
        assert 60 < ttl <= 180
    finally:
        await client.aclose()
