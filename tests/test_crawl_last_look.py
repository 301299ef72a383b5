"""The crawl's last look (``crawl/_fetch.py``): a Crawl-delay holds between writes, not only admissions,
and a request admitted before a Retry-After the crawl has since heard is not written inside it.

A real site on loopback judges the gaps between the requests' arrivals; the
throttler, the site and the crawl share one autojumping fake clock. A slow
first write (a new connection, a loop busy with other sites' answers) is a
fetcher that waits before handing the request to aiohttp, after its permit
was granted.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict
from yarl import URL

from crawlpace import Settings, Throttler
from crawlpace._clients._last_look import WRITING, LastLook, NotSent, Writing
from crawlpace.crawl import CrawlJob, CrawlOptions, CrawlSummary
from crawlpace.crawl._fetch import AiohttpFetcher, Page
from crawlpace.sim import CrawlDelaySite, RetryAfterSite, SimServer, Site
from crawlpace.sim._asgi import Receive, Scope, Send
from crawlpace.stores.base import LocalStore
from crawlpace.testing import MockClock

from .conftest import EXACT, ThrottlerFactory
from .far_store import FarStore

HOST = "127.0.0.2"


class NotingSite(CrawlDelaySite):
    """A Crawl-delay site that notes when each page arrived."""

    arrivals: list[float]

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        self.arrivals.append(now)
        await super().handle(scope, receive, send, now)


class SlowFirstWrite(AiohttpFetcher):
    """An aiohttp fetcher whose request for ``slow`` reaches the wire ``lag`` seconds after its permit."""

    def __init__(self, clock: MockClock, lag: float, slow: str) -> None:
        super().__init__(user_agent="test", timeout=5.0, max_connections=10, trust_env=False,
                         clock=clock.now, sleep=clock.sleep)
        self.clock, self.lag, self.slow = clock, lag, slow

    async def get(self, url: str, limit: int) -> Page:
        if url.endswith(self.slow):
            await self.clock.sleep(self.lag)
        return await super().get(url, limit)


async def crawl_three_pages(tmp_path: Path, clock: MockClock, throttler: Throttler, site: Site,
                            fetcher: AiohttpFetcher, **options: Any) -> CrawlSummary:
    """``crawlpace crawl`` of ``site``'s /page/1-3 on loopback through ``fetcher`` (closed after it);
    ``options``: more of :class:`CrawlOptions`."""
    async with SimServer(site, HOST) as server:
        job = CrawlJob(throttler.settings, CrawlOptions(output=tmp_path / "out.jsonl", trust_env=False,
                                                        **options),
                       throttler=throttler, fetcher=fetcher)
        try:
            return await job.run([f"{server.url}/page/{n}" for n in (1, 2, 3)])
        finally:
            await fetcher.aclose()


async def test_a_crawl_delay_is_kept_between_the_writes_of_a_crawl(
        tmp_path: Path, clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = NotingSite(delay=1.0, pages=4, clock=clock.now, tolerance=0.0)
    site.arrivals = []
    throttler = make_throttler({"CONCURRENT_REQUESTS_PER_DOMAIN": 4, "DOWNLOAD_DELAY": 0.0,
                                "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    summary = await crawl_three_pages(tmp_path, clock, throttler, site, SlowFirstWrite(clock, 0.6, "/page/1"))
    assert summary.complete
    assert len(site.arrivals) == 3
    # /page/1 was admitted first but written 0.6 s late; /page/2 was admitted 1 s after it, so
    # without the last look the two would reach the site 0.4 s apart.
    gaps = [later - earlier for earlier, later in itertools.pairwise(site.arrivals)]
    assert min(gaps) >= 1.0 - 1e-6, site.arrivals
    assert not site.stats.violations


class NotingHolds(RetryAfterSite):
    """A Retry-After site that notes when each page arrived."""

    arrivals: list[tuple[str, float]]

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        self.arrivals.append((str(scope.get("path")), now))
        await super().handle(scope, receive, send, now)


async def test_a_request_admitted_before_a_retry_after_is_not_written_inside_it(
        tmp_path: Path, clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # One token, then 429 with Retry-After: 5 for whatever comes before the next one.
    site = NotingHolds(rate=1.0, embargo=5, pages=3, clock=clock.now)
    site.arrivals = []
    throttler = make_throttler({"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0,
                                "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    summary = await crawl_three_pages(tmp_path, clock, throttler, site, SlowFirstWrite(clock, 0.3, "/page/3"),
                                      retries=5)
    assert summary.complete
    # The three were admitted at once: one took the token, another drew the 429 and its hold,
    # and /page/3's write lagged its permit by 0.3 s. By then the crawl had read the hold, so
    # /page/3 went back to the throttler, unwritten (no attempt used up), instead of reaching
    # the site 0.3 s into a 5 s quiet time.
    assert not site.stats.violations, site.arrivals
    first = next(at for path, at in site.arrivals if path == "/page/3")
    assert first >= 5.0, site.arrivals
    assert summary.requests == site.stats.requests  # the request stopped unwritten is not counted


async def test_a_write_just_after_a_stall_lets_answers_already_received_be_read_first() -> None:
    # Traced on a loaded machine: the crawl's process got no CPU for 0.1-0.8 s; meanwhile a
    # sibling's 429 came in. On waking, a request admitted then was written before that answer
    # was read (the site saw it inside the hold). Now a write right after a stall gives the loop
    # a few turns first: the answer is read, its hold noted, and the write stopped.
    fetcher = AiohttpFetcher(user_agent="test", timeout=5.0, max_connections=4, trust_env=False,
                             clock=time.monotonic)
    try:
        loop = asyncio.get_running_loop()
        look = LastLook()
        granted = time.monotonic()
        permit = SimpleNamespace(scopes=("site",), granted_at=granted, outcome=None)
        refused = SimpleNamespace(scopes=("site",), granted_at=granted,
                                  outcome=SimpleNamespace(feedback=[SimpleNamespace(hold=5.0)]))
        # The 429's bytes are read at the next turn; its hold is noted at the one after.
        loop.call_soon(lambda: loop.call_soon(lambda: look.note(refused, time.monotonic())))
        fetcher._stalls.note(loop.time() - 0.3, loop.time())  # the loop is just out of a 0.3 s stall
        fetcher._flying["site"] = 2  # this request and the refused one
        params = aiohttp.TraceRequestHeadersSentParams("GET", URL(f"http://{HOST}/page/2"), CIMultiDict())
        token = WRITING.set(Writing(permit, look, time.monotonic))
        try:
            with pytest.raises(NotSent):
                await fetcher._last_look(fetcher._session, SimpleNamespace(), params)
        finally:
            WRITING.reset(token)
    finally:
        await fetcher.aclose()


async def test_the_refused_workers_own_write_hears_the_hold_before_the_release_reaches_the_store(
        tmp_path: Path, clock: MockClock) -> None:
    """A fleet's refused worker told its last look of the hold only once the release had reached the
    store (a round trip or more: 30-300 ms on a loaded fleet). Its own other request of the scope,
    admitted before the hold landed and written meanwhile, went on the store's word alone, into the
    hold (traced, bench/results/retry4.md). Now the hold is noted as soon as the answer is classified,
    before the release. main: /page/3, written 0.3 s after its admission while the 429's release
    was still on its way (0.5 s), reached the site inside the 5 s hold."""
    site = NotingHolds(rate=1.0, embargo=5, pages=3, clock=clock.now)
    site.arrivals = []
    settings = Settings.from_scrapy({**EXACT, "CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0,
                                     "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    store = FarStore(settings, clock, 0.5)
    assert not isinstance(store, LocalStore)
    async with Throttler(settings, store=store, clock=clock, rng=random.Random(1)) as throttler:
        summary = await crawl_three_pages(tmp_path, clock, throttler, site,
                                          SlowFirstWrite(clock, 0.3, "/page/3"), retries=5)
    assert summary.complete
    assert not site.stats.violations, site.arrivals
    first = next(at for path, at in site.arrivals if path == "/page/3")
    assert first >= 5.0, site.arrivals
    assert summary.requests == site.stats.requests  # the request stopped unwritten is not counted
