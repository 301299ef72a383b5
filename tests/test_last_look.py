"""The last look before the wire (``crawlpace._clients._last_look``), in the httpx transport.

A permit is granted before the request's bytes leave; a slow new connection
can put a long gap between the two. Real sockets on loopback sites, the
throttler and the sites on one autojumping fake clock; a slow connection is
an inner transport that waits before handing the request on (the headers are
written after that wait, which is when the transport looks).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from typing import Any

import httpx
import pytest

from crawlpace import Settings, Throttler
from crawlpace.http import ATTEMPTS_EXTENSION, throttled_client
from crawlpace.sim import CrawlDelaySite, RetryAfterSite, SimServer
from crawlpace.sim._asgi import Receive, Scope, Send, respond
from crawlpace.testing import MockClock

from .conftest import EXACT, ThrottlerFactory
from .far_store import FarStore

HOST = "127.0.0.2"
EIGHT: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0,
                         "DOWNLOAD_DELAY_PER_SLOT": 0.0}


class SlowConnections(httpx.AsyncHTTPTransport):
    """A real transport whose requests for the given paths take ``lag`` seconds to reach the wire."""

    def __init__(self, clock: MockClock, lag: float, paths: set[str]) -> None:
        super().__init__(trust_env=False)
        self.clock, self.lag, self.paths = clock, lag, paths
        self.written: list[tuple[str, float]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path in self.paths:
            self.paths.discard(request.url.path)  # only the first try is slow
            await self.clock.sleep(self.lag)
        if "slow" in request.extensions:  # a second try of the same request: already watched
            return await super().handle_async_request(request)
        chained = request.extensions.get("trace")

        async def trace(event: str, info: Any) -> None:
            if chained is not None:
                await chained(event, info)
            if event.endswith("send_request_headers.started"):
                self.written.append((request.url.path, self.clock.now()))

        request.extensions = {**request.extensions, "trace": trace, "slow": True}
        return await super().handle_async_request(request)


async def test_a_request_admitted_before_a_retry_after_is_not_written_inside_it(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = RetryAfterSite(rate=1.0, embargo=5, clock=clock.now)
    inner = SlowConnections(clock, 0.3, {"/page/2"})
    async with SimServer(site, HOST) as server, throttled_client(
            throttler=make_throttler(EIGHT), transport=inner, retries=0, base_url=server.url,
            trust_env=False) as client:
        assert (await client.get("/page/3")).status_code == 200  # the bucket's one token
        refused, late = await asyncio.gather(client.get("/page/1"), client.get("/page/2"))
    # /page/1 went at once and drew 429 with Retry-After: 5. /page/2 was admitted with it, but
    # its connection took 0.3 s: by then the client knew of the hold, so it was not written
    # then (the site would have seen it 0.3 s into a 5 s embargo) but once the hold was over.
    assert refused.status_code == 429
    assert late.status_code == 200
    assert late.extensions[ATTEMPTS_EXTENSION] == 1  # not written: no attempt used up
    assert not site.stats.violations
    assert [path for path, _ in inner.written] == ["/page/3", "/page/1", "/page/2"], inner.written
    assert inner.written[2][1] >= 5.0


@pytest.mark.parametrize("trip", [0.0, 0.5])
async def test_a_hold_is_heard_before_the_release_reaches_a_shared_store(clock: MockClock,
                                                                          trip: float) -> None:
    """The same race behind a shared store whose release takes ``trip`` seconds (a fleet's round trips).
    The client noted the 429's hold only once the release was back: /page/2, written 0.3 s after its
    admission, went on the store's word into the 5 s hold (main: written at 0.3 s with ``trip`` 0.5).
    Now the hold is noted as soon as the answer is known, before the store is told."""
    site = RetryAfterSite(rate=1.0, embargo=5, clock=clock.now)
    inner = SlowConnections(clock, 0.3, {"/page/2"})
    settings = Settings.from_scrapy({**EXACT, **EIGHT})
    store = FarStore(settings, clock, trip)
    async with Throttler(settings, store=store, clock=clock, rng=random.Random(1)) as throttler, \
            SimServer(site, HOST) as server, throttled_client(
            throttler=throttler, transport=inner, retries=0, base_url=server.url, trust_env=False) as client:
        assert (await client.get("/page/3")).status_code == 200  # the bucket's one token
        refused, late = await asyncio.gather(client.get("/page/1"), client.get("/page/2"))
    assert refused.status_code == 429
    assert late.status_code == 200
    assert late.extensions[ATTEMPTS_EXTENSION] == 1  # stopped unwritten: no attempt used up
    assert not site.stats.violations, inner.written
    assert [path for path, _ in inner.written] == ["/page/3", "/page/1", "/page/2"], inner.written
    assert inner.written[2][1] >= inner.written[1][1] + 5.0, inner.written


async def test_a_crawl_delay_is_kept_between_the_writes_not_only_the_admissions(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = CrawlDelaySite(delay=1.0, pages=4, clock=clock.now, tolerance=0.0)
    inner = SlowConnections(clock, 0.6, {"/page/1"})
    async with SimServer(site, HOST) as server, throttled_client(
            throttler=make_throttler(EIGHT), transport=inner, robots_txt=True, base_url=server.url,
            trust_env=False) as client:
        answers = await asyncio.gather(*(client.get(f"/page/{n}") for n in (1, 2, 3)))
    assert [answer.status_code for answer in answers] == [200] * 3
    # /page/1 was admitted first but reached the wire 0.6 s late; the next admission came 1 s
    # after the first, so without the last look the two writes would be 0.4 s apart.
    pages = [at for path, at in inner.written if path != "/robots.txt"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(pages)]
    assert min(gaps) >= 1.0 - 1e-9, pages
    assert not site.stats.violations


class Gathering:
    """An ASGI app that answers once ``size`` requests are in, or after 5 s; notes the most in flight.

    Five, not one: on a loaded machine thirty new connections once took over a second to arrive.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.requests = self.inflight = self.peak = 0
        self.full = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        self.requests += 1
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        if self.inflight >= self.size:
            self.full.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.full.wait(), 5.0)
        self.inflight -= 1
        if not self.inflight:
            self.full.clear()
        await respond(send, 200, b"ok\n")


async def test_the_pool_keeps_a_connection_for_every_request_the_throttler_lets_fly() -> None:
    # httpx keeps 20 idle connections by default; with 30 in flight, a second round would open
    # 10 new ones (each a later arrival than its permit said). The default pool keeps them all.
    site = Gathering(30)
    settings = {"CONCURRENT_REQUESTS": 30, "CONCURRENT_REQUESTS_PER_DOMAIN": 30, "DOWNLOAD_DELAY": 0.0,
                "DOWNLOAD_DELAY_PER_SLOT": 0.0}
    connects: list[str] = []

    async def trace(event: str, info: Any) -> None:  # the caller's own trace is still called
        if event == "connection.connect_tcp.started":
            connects.append(event)

    async with SimServer(site, HOST) as server, throttled_client(settings, base_url=server.url,
                                                                   trust_env=False) as client:
        for _ in range(2):
            site.peak = 0
            answers = await asyncio.gather(*(client.get(f"/page/{n}", extensions={"trace": trace})
                                             for n in range(30)))
            assert all(answer.status_code == 200 for answer in answers)
            assert site.peak == 30  # all of a round in flight together
    assert site.requests == 60
    assert len(connects) == 30  # the second round reused the first round's connections
