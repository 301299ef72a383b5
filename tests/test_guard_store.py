"""The guard's shared store fails safely, and at start-up (issue 36, item 3).

Before: ``?namspace=x``, ``?fallback=memory`` and ``redis:/127.0.0.1:6388``
were accepted by ``Guard()``, a closed port was found at the first request,
which then let everything through ("open") or answered 503 to everyone
("closed"); a frozen Redis stalled each costly request 5-10 s; a ``reddis://``
URL's error printed the password.

Now the URL is checked by the crawler's own validator when the guard is
built, the store is reached at the ASGI lifespan start-up, and while it is
away each process counts its part of what was left of the quota. Everything
runs against real redis-server processes on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from crawlpace.guard import Guard
from crawlpace.guard._shared import ResilientBrake

from .redis_server import RedisServer, free_port, redis_binary
from .test_guard import Backend, call, http_scope
from .test_guard_uvicorn import loopback_listener

pytestmark = pytest.mark.redis


@pytest.mark.parametrize(("store", "expected"), [
    ("redis://127.0.0.1:6379/0?namspace=x", "unknown option 'namspace'; did you mean 'namespace'?"),
    ("redis://127.0.0.1:6379/0?fallback=memory", "the guard has no 'fallback' option"),
    ("redis://127.0.0.1:6379/0?lease=30", "'lease' is an option of the crawler's store"),
    ("redis:/127.0.0.1:6388", "starts with 'redis://' (two slashes)"),
    ("reddis://:s3cret@127.0.0.1:6379/0", "unknown scheme 'reddis'; did you mean 'redis://'?"),
    ("redis://:s3cret@127.0.0.1:6379/0?cluster=maybe", "cluster='maybe' is not a flag"),
    ("redis://:s3cret@127.0.0.1:6379/0?namespace=a:b", "a colon would make"),
])
def test_a_bad_store_url_fails_when_the_guard_is_built(store: str, expected: str) -> None:
    with pytest.raises(ValueError, match="store") as caught:
        Guard(Backend(), quota=10, store=store)
    assert expected in str(caught.value)
    assert "s3cret" not in str(caught.value)


def lifespan_messages(*incoming: str) -> tuple[list[dict[str, Any]], Any, Any]:
    sent: list[dict[str, Any]] = []
    queue = [{"type": f"lifespan.{name}"} for name in incoming]

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def send(message: Any) -> None:
        sent.append(dict(message))

    return sent, receive, send


async def lifespan_app(scope: Any, receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        else:
            await send({"type": "lifespan.shutdown.complete"})
            return


@pytest.fixture
def guarded_redis() -> Iterator[RedisServer]:
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH")
    server = RedisServer(binary, extra=("--requirepass", "s3cret"), persist=True)
    server.start()
    try:
        yield server
    finally:
        server.close()


def url_of(server: RedisServer, password: str = "s3cret") -> str:
    return f"redis://:{password}@127.0.0.1:{server.port}/0?namespace=t{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("problem", ["closed port", "wrong password"])
async def test_the_lifespan_start_up_fails_clearly_when_the_store_cannot_be_used(
        guarded_redis: RedisServer, problem: str) -> None:
    store = (f"redis://:s3cret@127.0.0.1:{free_port()}/0" if problem == "closed port"
             else url_of(guarded_redis, "wrong-one"))
    guard = Guard(lifespan_app, quota=10, store=store)
    sent, receive, send = lifespan_messages("startup")
    await guard({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    assert [message["type"] for message in sent] == ["lifespan.startup.failed"]
    text = sent[0]["message"]
    assert "cannot be reached" in text
    assert ("password" in text) if problem == "wrong password" else ("host and port" in text)
    assert "s3cret" not in text
    assert "wrong-one" not in text
    await guard.aclose()


async def test_the_lifespan_start_up_reaches_the_store_and_the_shutdown_closes_it(
        guarded_redis: RedisServer) -> None:
    guard = Guard(lifespan_app, quota=10, store=url_of(guarded_redis))
    sent, receive, send = lifespan_messages("startup", "shutdown")
    await guard({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    assert [message["type"] for message in sent] == ["lifespan.startup.complete",
                                                     "lifespan.shutdown.complete"]
    assert guard.core.started
    assert not guard.shared.connection.connected


async def test_uvicorn_does_not_start_on_an_unreachable_store(caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard(lifespan_app, quota=10, store=f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    listener = loopback_listener()
    config = uvicorn.Config(guard, lifespan="on", log_config=None, http="h11", ws="none", loop="asyncio")
    server = uvicorn.Server(config)
    try:
        with pytest.raises(SystemExit):  # uvicorn's way out of a failed start-up
            await server.serve(sockets=[listener])
    finally:
        listener.close()
    assert not server.started
    assert "crawlpace guard: store redis://:***@127.0.0.1" in caplog.text
    assert "s3cret" not in caplog.text


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def resilient(guard: Guard) -> ResilientBrake:
    return next(iter(guard.core.shared.values()))


async def test_an_outage_falls_back_to_each_workers_part_of_what_is_left_then_hands_it_back(
        guarded_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    backend = Backend()
    guard = Guard(backend, quota=40, stages=(), store=url_of(guarded_redis), workers=4, key="site")
    fallback, monotonic = resilient(guard), Monotonic()
    fallback._monotonic = monotonic  # the pause before Redis is asked again, moved by hand
    # A stopped server refuses at once; the quarter second a decision may wait is for a frozen one
    # (the next test). Here a loaded machine's slow answer (over 0.25 s at load 25) must not count as
    # the outage: the local count took over at the 11th request, before the server was stopped.
    fallback._timeout = 10.0
    try:
        await guard.astart()
        assert [(await call(guard, http_scope())).status for _ in range(20)] == [200] * 20
        guarded_redis.stop()
        # 20 left, 4 workers: this one may let 5 through on its own, then refuses (neither "open" nor 503).
        away = [(await call(guard, http_scope())).status for _ in range(8)]
        assert away == [200] * 5 + [429] * 3
        assert caplog.text.count("cannot be reached") == 1
        assert "s3cret" not in caplog.text
        guarded_redis.start()  # persisted (appendonly): the day's count survives the restart
        monotonic.now += 60.0
        assert (await call(guard, http_scope())).status == 200
        stats = await guard.astats()
        assert stats["totals"]["used"] == 26.0  # 20 + the 5 let through meanwhile + this one
        assert "answers again" in caplog.text
    finally:
        await guard.aclose()


async def test_a_frozen_store_costs_a_request_a_quarter_second_at_most(guarded_redis: RedisServer) -> None:
    guard = Guard(Backend(), quota=40, stages=(), store=url_of(guarded_redis), workers=2)
    try:
        await guard.astart()
        assert (await call(guard, http_scope())).status == 200
        pid = guarded_redis._process.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGSTOP)
        try:
            took = []
            for _ in range(6):
                began = time.monotonic()
                assert (await call(guard, http_scope())).status == 200
                took.append(time.monotonic() - began)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert max(took) < 1.0
        assert sum(took) < 1.5  # one short wait, then the local count without asking
    finally:
        await guard.aclose()


async def test_an_error_reply_is_counted_locally_not_a_crash(guarded_redis: RedisServer,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    import redis.asyncio as aioredis

    guard = Guard(Backend(), quota=40, stages=(), store=url_of(guarded_redis), workers=4)
    admin = aioredis.from_url(f"redis://:s3cret@127.0.0.1:{guarded_redis.port}/0")
    try:
        await guard.astart()
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", "1")  # every write now answers "OOM command not allowed"
        codes = [(await call(guard, http_scope())).status for _ in range(12)]
        assert codes == [200] * 10 + [429] * 2  # this worker's part: 40 / 4
        assert "OutOfMemoryError" in caplog.text
        assert "command not allowed when used memory" in caplog.text
    finally:
        await admin.config_set("maxmemory", "0")
        await admin.aclose()
        await guard.aclose()
