"""crawlpace.aiohttp: a throttled aiohttp session, over real HTTP on loopback sites.

Like the httpx tests, most run the throttler and the sites on one
autojumping fake clock, so a ``Retry-After: 2`` costs no real time and every
send time is exact; the sockets are real.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aiohttp
import pytest

from crawlpace import ScopeGivenUp, ThrottlerClosed
from crawlpace.aiohttp import ThrottledSession, ThrottleMiddleware, throttled_session
from crawlpace.sim import DeadSite, OverloadSite, RetryAfterSite, SimServer, Site
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory
from .redis_server import RedisServer
from .test_http import FAST, HOST, OTHER_HOST, Redirector


def session_for(server: SimServer, **kwargs: Any) -> ThrottledSession:
    return throttled_session(base_url=server.url, timeout=aiohttp.ClientTimeout(total=5), **kwargs)


async def test_429_with_retry_after_is_retried_after_the_wait(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = RetryAfterSite(rate=1.0, embargo=2, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, session_for(server, throttler=throttler) as session:
        async with session.get("/page/1") as first:
            assert first.status == 200
        async with session.get("/page/2") as second:  # 429 with Retry-After: 2, then 200
            assert second.status == 200
            assert "page" in await second.text()
    assert site.stats.statuses == {200: 2, 429: 1}
    assert not site.stats.violations
    assert clock.now() == 2.0


async def test_retries_zero_returns_the_429(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = RetryAfterSite(rate=1.0, embargo=3, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            session_for(server, throttler=throttler, retries=0) as session:
        async with session.get("/page/1") as first:
            assert first.status == 200
        async with session.get("/page/1") as refused:
            assert refused.status == 429
            assert refused.headers["Retry-After"] == "3"
    assert site.stats.requests == 2


async def test_the_delay_spaces_requests(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = Site(clock=clock.now)
    throttler = make_throttler({"DOWNLOAD_DELAY": 1.5, "RANDOMIZE_DOWNLOAD_DELAY": False})
    async with SimServer(site, HOST) as server, session_for(server, throttler=throttler) as session:
        for n in range(1, 4):
            async with session.get(f"/page/{n}") as response:
                assert response.status == 200
    assert (site.stats.first, site.stats.last) == (0.0, 3.0)


async def test_concurrency_per_host_is_respected() -> None:
    site = OverloadSite(latency=0.03, per_inflight=0.0, limit=50)
    settings = {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 2}

    async with SimServer(site, HOST) as server, session_for(server, settings=settings) as session:
        async def fetch(n: int) -> int:
            async with session.get(f"/page/{n}") as response:
                await response.read()
                return response.status

        statuses = await asyncio.gather(*(fetch(n) for n in range(1, 9)))
    assert statuses == [200] * 8
    assert site.stats.peak_inflight == 2


async def test_a_dead_site_is_given_up(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = DeadSite(status=503, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            session_for(server, throttler=throttler, retries=100) as session:
        with pytest.raises(ScopeGivenUp) as caught:
            await session.get("/page/1")
    assert caught.value.scope == HOST
    assert 5 <= site.stats.requests < 100


async def test_a_reset_connection_is_retried(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = DeadSite(status=503, resets=1.0, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            session_for(server, throttler=throttler, retries=2) as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get("/page/1")
    # aiohttp itself sends once more when a kept-alive connection turns out closed; that send
    # goes through the middleware too, so every request the site saw was throttled and counted.
    assert site.stats.requests >= 3
    stats = await throttler.scope_stats(HOST)
    assert stats is not None
    assert stats.sends == stats.errors == site.stats.requests


async def test_redirect_hops_are_throttled_each_under_its_own_host(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    target = Site(clock=clock.now)
    redirector = Redirector(clock)
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {HOST: {"delay": 5.0}}})
    async with SimServer(target, HOST) as target_server, SimServer(redirector, OTHER_HOST) as server:
        redirector.target = f"{target_server.url}/page/1"
        async with session_for(server, throttler=throttler) as session:
            for _ in range(2):
                async with session.get("/go") as response:
                    assert response.status == 200
                    assert len(response.history) == 1
    assert redirector.arrivals == [0.0, 0.0]
    assert (target.stats.first, target.stats.last) == (0.0, 5.0)
    stats = await throttler.stats()
    assert {name: snap.sends for name, snap in stats.items()} == {HOST: 2, OTHER_HOST: 2}


async def test_explicit_scopes_through_a_request_middleware(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = Site(clock=clock.now)
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {"api": {"delay": 2.0}}})
    async with SimServer(site, HOST) as server, session_for(server, throttler=throttler) as session:
        scoped = (session.throttle.with_scopes(["api", "everything"]),)
        for _ in range(2):
            async with session.get("/page/1", middlewares=scoped) as response:
                assert response.status == 200
    assert set(await throttler.stats()) == {"api", "everything"}
    assert clock.now() == 2.0


async def test_an_owned_throttler_is_closed_with_the_session() -> None:
    session = throttled_session(FAST)
    throttler = session.throttler
    async with session:
        pass
    with pytest.raises(ThrottlerClosed):
        await throttler.acquire("http://127.0.0.2/")


async def test_a_shared_throttler_stays_open(make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    async with throttled_session(throttler=throttler) as session:
        assert session.throttler is throttler
    async with throttler.slot("http://127.0.0.2/") as permit:
        assert permit.scopes == (HOST,)


async def test_the_middleware_throttles_a_session_built_by_hand(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = Site(clock=clock.now)
    throttler = make_throttler({"DOWNLOAD_DELAY": 2.0, "RANDOMIZE_DOWNLOAD_DELAY": False})
    async with SimServer(site, HOST) as server, \
            aiohttp.ClientSession(middlewares=(ThrottleMiddleware(throttler),)) as session:
        for _ in range(2):
            async with session.get(f"{server.url}/page/1") as response:
                assert response.status == 200
    assert site.stats.last == 2.0


@pytest.mark.redis
async def test_a_redis_store_is_taken_by_url(redis_server: RedisServer) -> None:
    store = f"{redis_server.url}?namespace=t{uuid.uuid4().hex[:12]}"
    site = Site()
    async with SimServer(site, HOST) as server, session_for(server, settings=FAST, store=store) as session:
        async with session.get("/page/1") as response:
            assert response.status == 200
        stats = await session.throttler.scope_stats(HOST)
    assert stats is not None
    assert stats.sends == 1


async def test_arguments_are_checked(make_throttler: ThrottlerFactory) -> None:
    with pytest.raises(ValueError, match="retries must be an integer >= 0"):
        throttled_session(retries=-1)
    with pytest.raises(TypeError, match="not both"):
        throttled_session(FAST, throttler=make_throttler())
