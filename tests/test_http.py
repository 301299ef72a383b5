"""The throttled httpx transport, over real HTTP on loopback sites.

Most tests run the throttler and the sites on one autojumping fake clock, so a
``Retry-After: 2`` costs no real time and every send time is exact; the
sockets are real. The concurrency test runs on the real clock with tiny
latencies.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from crawlpace import QuotaError, ScopeGivenUp, Throttler, ThrottlerClosed
from crawlpace.http import ATTEMPTS_EXTENSION, SCOPES_EXTENSION, ThrottledTransport, throttled_client
from crawlpace.sim import DeadSite, OverloadSite, RateLimitSite, RetryAfterSite, SimServer, Site
from crawlpace.sim._asgi import Receive, Scope, Send, respond
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

HOST = "127.0.0.2"
OTHER_HOST = "127.0.0.3"
#: No configured delay at all: whatever spacing shows up comes from feedback.
FAST: dict[str, Any] = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}


def client_for(server: SimServer, **kwargs: Any) -> httpx.AsyncClient:
    """A throttled client aimed at ``server`` (kwargs go to :func:`throttled_client`)."""
    return throttled_client(base_url=server.url, trust_env=False, timeout=5.0, **kwargs)


class Hanging:
    """An ASGI app that never answers, and says when a request has arrived."""

    def __init__(self) -> None:
        self.arrivals = 0
        self.arrived = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        self.arrivals += 1
        self.arrived.set()
        await asyncio.Event().wait()


class Redirector:
    """An ASGI app that answers 302 to ``target`` and notes when each request came."""

    def __init__(self, clock: MockClock) -> None:
        self.clock = clock
        self.target = ""
        self.arrivals: list[float] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        self.arrivals.append(self.clock.now())
        await respond(send, 302, b"moved\n", headers=[(b"location", self.target.encode("ascii"))])


# --- retrying backoff responses --------------------------------------------------------------------


async def test_429_with_retry_after_is_retried_after_the_wait(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = RetryAfterSite(rate=1.0, embargo=2, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, client_for(server, throttler=throttler) as client:
        first = await client.get("/page/1")
        second = await client.get("/page/2")  # over the rate: 429, Retry-After: 2, then 200
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.extensions[ATTEMPTS_EXTENSION] == 2
    assert site.stats.statuses == {200: 2, 429: 1}
    assert not site.stats.violations  # the retry waited as long as it was asked
    assert clock.now() == 2.0  # and not longer


async def test_retries_zero_returns_the_429(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = RateLimitSite(rate=1.0, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            client_for(server, throttler=throttler, retries=0) as client:
        assert (await client.get("/page/1")).status_code == 200
        refused = await client.get("/page/1")
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.extensions[ATTEMPTS_EXTENSION] == 1
    assert site.stats.requests == 2
    assert clock.now() == 0.0


async def test_exhausted_retries_return_the_last_backoff_response(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = DeadSite(status=503, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            client_for(server, throttler=throttler, retries=2) as client:
        response = await client.get("/page/1")
    assert response.status_code == 503
    assert response.extensions[ATTEMPTS_EXTENSION] == 3
    assert site.stats.statuses == {503: 3}
    # Each retry waited for the backoff delay: level 1 (1 s), then level 2 (2 s).
    assert clock.now() == 3.0
    stats = await throttler.scope_stats(HOST)
    assert stats is not None
    # The first two 503s cut the pace; the third came while that cut was being judged (errors that
    # do not fall with the pace are not load: policy/_load_errors.py), so it cut nothing.
    assert stats.generation == 2


async def test_a_status_outside_the_backoff_codes_is_not_retried(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = DeadSite(status=500, clock=clock.now)  # 500 is a failure, but not a backoff trigger
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, client_for(server, throttler=throttler) as client:
        response = await client.get("/page/1")
    assert response.status_code == 500
    assert site.stats.requests == 1


async def test_per_scope_backoff_codes_decide_what_is_retried(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = DeadSite(status=500, clock=clock.now)
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {HOST: {"backoff": {"http_codes": [500]}}}})
    async with SimServer(site, HOST) as server, \
            client_for(server, throttler=throttler, retries=1) as client:
        response = await client.get("/page/1")
    assert response.status_code == 500
    assert site.stats.requests == 2


# --- retrying backoff exceptions -------------------------------------------------------------------


async def test_a_reset_connection_is_retried_then_raised(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = DeadSite(resets=1.0, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            client_for(server, throttler=throttler, retries=2) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get("/page/1")
    assert site.stats.resets == 3
    stats = await throttler.scope_stats(HOST)
    assert stats is not None
    assert (stats.sends, stats.errors, stats.responses) == (3, 3, 0)
    assert clock.now() == 3.0  # the retries waited for the backoff delays


async def test_a_timeout_is_retried_then_raised(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    app = Hanging()
    throttler = make_throttler(FAST)
    async with SimServer(app, HOST) as server, \
            client_for(server, throttler=throttler, retries=1) as client:
        # Only the read is short: a 50 ms connect timeout failed on a loaded machine (ConnectTimeout),
        # the server being this test's own loop.
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/page/1", timeout=httpx.Timeout(10.0, read=0.05))
    assert app.arrivals == 2


async def test_an_exception_that_is_no_backoff_trigger_is_raised_at_once(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = DeadSite(resets=1.0, clock=clock.now)
    throttler = make_throttler({**FAST, "BACKOFF_EXCEPTIONS": ["httpx.TimeoutException"]})
    async with SimServer(site, HOST) as server, client_for(server, throttler=throttler) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get("/page/1")
    assert site.stats.resets == 1


# --- request bodies --------------------------------------------------------------------------------


async def test_a_body_in_memory_is_sent_again(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = DeadSite(status=503, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            client_for(server, throttler=throttler, retries=2) as client:
        # The simulator's server takes GET and HEAD only, so the body rides on a GET.
        response = await client.request("GET", "/page/1", content=b"hello")
    assert response.extensions[ATTEMPTS_EXTENSION] == 3
    assert site.stats.requests == 3


async def test_a_streamed_body_is_sent_once(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"hello"

    site = DeadSite(status=503, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            client_for(server, throttler=throttler, retries=2) as client:
        # A Content-Length keeps httpx from chunking, which the simulator's server refuses.
        response = await client.request("GET", "/page/1", content=body(), headers={"Content-Length": "5"})
    assert response.status_code == 503
    assert response.extensions[ATTEMPTS_EXTENSION] == 1
    assert site.stats.requests == 1


# --- what is fed back ------------------------------------------------------------------------------


async def test_latency_is_the_time_to_the_response_headers(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # The site's latency runs on the fake clock, so the measured figure is exact.
    site = OverloadSite(latency=0.05, per_inflight=0.0, sleep=clock.sleep, clock=clock.now)
    throttler = make_throttler({"DOWNLOAD_DELAY": 1.0})
    async with SimServer(site, HOST) as server, client_for(server, throttler=throttler) as client:
        latencies = []
        for _ in range(2):
            assert (await client.get("/page/1")).status_code == 200
            stats = await throttler.scope_stats(HOST)
            assert stats is not None
            latencies.append(stats.last_latency)
    # The second request waited 0.95 s for its turn; that wait is not latency.
    assert latencies == [pytest.approx(0.05), pytest.approx(0.05)]
    assert clock.now() == pytest.approx(1.05)


async def test_response_headers_are_fed_back(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # Retry-After on a 429 holds the scope for the next request too, not only for the retry.
    site = RetryAfterSite(rate=1.0, embargo=3, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            client_for(server, throttler=throttler, retries=0) as client:
        statuses = [(await client.get("/page/1")).status_code for _ in range(3)]
    assert statuses == [200, 429, 200]
    assert clock.now() == 3.0
    assert not site.stats.violations


async def test_cancelling_releases_the_permit_without_a_failure(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    app = Hanging()
    throttler = make_throttler(FAST)
    async with SimServer(app, HOST) as server, client_for(server, throttler=throttler) as client:
        task = asyncio.create_task(client.get("/page/1"))
        await app.arrived.wait()
        assert throttler.inflight == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert throttler.inflight == 0
    stats = await throttler.scope_stats(HOST)
    assert stats is not None
    assert (stats.sends, stats.responses, stats.errors, stats.backoff) == (1, 0, 0, 0)
    assert stats.breaker == "closed"


# --- scopes, concurrency, redirects ----------------------------------------------------------------


async def test_concurrency_per_host_is_respected() -> None:
    site = OverloadSite(latency=0.03, per_inflight=0.0, limit=50)
    settings = {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 2}
    async with SimServer(site, HOST) as server, client_for(server, settings=settings) as client:
        responses = await asyncio.gather(*(client.get(f"/page/{n}") for n in range(1, 9)))
    assert [response.status_code for response in responses] == [200] * 8
    assert site.stats.peak_inflight == 2


async def test_redirect_hops_are_throttled_each_under_its_own_host(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    target = Site(clock=clock.now)
    redirector = Redirector(clock)
    # The target host wants 5 s between requests; the redirecting host has no delay.
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {HOST: {"delay": 5.0}}})
    async with SimServer(target, HOST) as target_server, SimServer(redirector, OTHER_HOST) as server:
        redirector.target = f"{target_server.url}/page/1"
        async with client_for(server, throttler=throttler, follow_redirects=True) as client:
            first = await client.get("/go")
            second = await client.get("/go")
    assert (first.status_code, second.status_code) == (200, 200)
    assert [str(r.url) for r in second.history] == [f"{server.url}/go"]
    assert redirector.arrivals == [0.0, 0.0]
    assert (target.stats.first, target.stats.last) == (0.0, 5.0)
    stats = await throttler.stats()
    assert {name: snap.sends for name, snap in stats.items()} == {HOST: 2, OTHER_HOST: 2}


async def test_explicit_scopes_come_from_the_request_extensions(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = Site(clock=clock.now)
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {"api": {"delay": 2.0}}})
    async with SimServer(site, HOST) as server, client_for(server, throttler=throttler) as client:
        for _ in range(2):
            response = await client.get("/page/1", extensions={SCOPES_EXTENSION: ["api", "everything"]})
            assert response.status_code == 200
    assert set(await throttler.stats()) == {"api", "everything"}
    assert clock.now() == 2.0


# --- errors from the throttler ---------------------------------------------------------------------


async def test_a_scope_given_up_reaches_the_caller(clock: MockClock,
                                                   make_throttler: ThrottlerFactory) -> None:
    site = DeadSite(status=503, clock=clock.now)
    throttler = make_throttler(FAST)
    async with SimServer(site, HOST) as server, \
            client_for(server, throttler=throttler, retries=100) as client:
        with pytest.raises(ScopeGivenUp) as caught:
            await client.get("/page/1")
    assert caught.value.scope == HOST
    assert 5 <= site.stats.requests < 100


async def test_a_quota_error_reaches_the_caller(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = Site(clock=clock.now)
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {"api": {"quota": 10.0}}})
    async with SimServer(site, HOST) as server, client_for(server, throttler=throttler) as client:
        with pytest.raises(QuotaError):
            await client.get("/page/1", extensions={SCOPES_EXTENSION: {"api": 50.0}})
    assert site.stats.requests == 0


# --- ownership and arguments -----------------------------------------------------------------------


async def test_an_owned_throttler_is_closed_with_the_client() -> None:
    site = Site()
    async with SimServer(site, HOST) as server:
        client = client_for(server, settings=FAST)
        transport = client._transport
        assert isinstance(transport, ThrottledTransport)
        assert transport.owns_throttler
        async with client:
            assert (await client.get("/page/1")).status_code == 200
    with pytest.raises(ThrottlerClosed):
        await transport.throttler.acquire("http://127.0.0.2/")


async def test_a_shared_throttler_stays_open(make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    transport = ThrottledTransport(throttler=throttler)
    assert not transport.owns_throttler
    async with httpx.AsyncClient(transport=transport):
        pass
    async with throttler.slot("http://127.0.0.2/") as permit:
        assert permit.scopes == (HOST,)


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="retries"):
        ThrottledTransport(retries=-1)
    with pytest.raises(ValueError, match="retries"):
        throttled_client(retries=True)
    with pytest.raises(TypeError, match="not both"):
        ThrottledTransport({}, throttler=Throttler())
    with pytest.raises(TypeError, match="mounts"):
        throttled_client(mounts={})
    with pytest.raises(TypeError, match="verify"):
        throttled_client(transport=httpx.AsyncHTTPTransport(), verify=False)
