"""A latency the crawler's own event loop made is not the server's (crawl/_stalls.py).

A fleet of workers on a loaded machine measured 0.17 s against a site answering in
2 ms, and rampup cut a 30/s site to 17/s for the rest of the crawl with no refusal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from crawlpace import Settings
from crawlpace._clients._last_look import WRITING, LastLook, Writing
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.crawl._fetch import AiohttpFetcher, Page
from crawlpace.crawl._stalls import LoopStalls, local_share_dominates
from crawlpace.policy.rampup import Rampup
from crawlpace.sim import SimServer
from crawlpace.sim._asgi import Receive, Scope, Send, respond
from crawlpace.stores import Outcome
from crawlpace.testing import MockClock

from .test_fetch import answering, server


def test_stalls_are_counted_where_they_overlap_a_flight() -> None:
    stalls = LoopStalls(time.monotonic)
    stalls.note(1.00, 1.05)  # a heartbeat due at 1.00 ran at 1.05
    stalls.note(1.10, 1.10)  # on time: no stall
    stalls.note(2.00, 2.20)
    assert stalls.within(0.90, 1.50) == pytest.approx(0.05)
    assert stalls.within(1.02, 2.10) == pytest.approx(0.03 + 0.10)
    assert stalls.within(3.00, 4.00) == 0.0


@pytest.mark.parametrize(("latency", "stalled", "dominates"), [
    (0.17, 0.16, True),           # nearly all of it was this process's lateness
    (0.17, 0.02, False),          # the server's time, mostly
    (0.004, 0.003, False),        # under the floor: noise
    (None, 1.0, False),           # no answer, no latency to judge
])
def test_a_sample_is_left_out_when_the_loops_stalls_make_most_of_it(latency: float | None, stalled: float,
                                                                     dominates: bool) -> None:
    assert local_share_dominates(latency, stalled) is dominates


async def test_a_fetch_whose_answer_waited_for_a_blocked_loop_says_how_long() -> None:
    async def quick(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "http":
            await respond(send, 200, b"page")

    async with SimServer(quick, "127.0.0.2") as server:
        http = AiohttpFetcher(user_agent="test", timeout=5.0, max_connections=4, trust_env=False,
                              clock=time.monotonic)
        try:
            await http.get(f"{server.url}/warm", 100)  # the connection is open: the next flight is short
            fetch = asyncio.ensure_future(http.get(f"{server.url}/page", 100))
            await asyncio.sleep(0)  # the request goes out...
            time.sleep(0.15)  # noqa: ASYNC251 - this process does something else, holding the loop
            page = await fetch
        finally:
            await http.aclose()
    assert page.status == 200
    assert page.latency is not None
    assert page.latency >= 0.15
    assert page.stalled >= 0.1
    assert local_share_dominates(page.latency, page.stalled)


@dataclass
class _Granted:
    scopes: tuple[str, ...]
    granted_at: float
    outcome: Outcome | None = None


async def test_a_fleets_last_look_at_the_store_is_not_the_sites_latency() -> None:
    """The store's round trip before a lagging write (0.05-0.15 s on a loaded machine, on every scope
    at once) counted as the site's latency: a strict bucket answering in 2 ms was cut for it, over
    and over (fleet6: 307 latency cuts in one fleet of 8). It is the admission's lag, not the site's."""
    clock = MockClock(100.0)

    async def held_for(scopes: tuple[str, ...], lease_id: str = "", siblings: bool = True) -> float:
        clock.advance(0.12)  # a slow reply of a loaded store; no hold
        return 0.0

    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    async with server(answering(head, b"ok")) as base:
        http = AiohttpFetcher(user_agent="test", timeout=5.0, max_connections=4, trust_env=False,
                              clock=clock.now, sleep=clock.sleep)
        token = WRITING.set(Writing(_Granted(("site",), clock.now() - 0.2), LastLook(), clock.now, held_for))
        try:
            page = await http.get(f"{base}/a", 100)
        finally:
            WRITING.reset(token)
            await http.aclose()
    assert page.status == 200
    assert page.latency is not None
    assert page.latency == pytest.approx(0.0)  # the site's: the fake clock moved only in the round trip
    assert page.asked == pytest.approx(0.12)  # the crawl job adds it to the lag


class StalledFetcher:
    """Every page answered at once, reported as ``latency`` seconds of which ``stalled`` were the loop's."""

    def __init__(self, latency: float, stalled: float) -> None:
        self.latency, self.stalled = latency, stalled

    async def get(self, url: str, limit: int) -> Page:
        return Page(200, {}, b"page", self.latency, stalled=self.stalled)

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(("stalled", "learned"), [(0.0, True), (0.39, False)])
async def test_rampup_learns_no_latency_the_loops_stalls_made(tmp_path: Path, stalled: float,
                                                             learned: bool) -> None:
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 0.0, "RANDOMIZE_DOWNLOAD_DELAY": False,
                                     "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
                                     "THROTTLING_SCOPE_DEFAULTS": {"rampup": True}})
    job = CrawlJob(settings, CrawlOptions(output=tmp_path / "out.jsonl", robots=False, trust_env=False),
                   fetcher=StalledFetcher(0.4, stalled))
    summary = await asyncio.wait_for(job.run([f"http://127.0.0.2:9/page/{n}" for n in range(2)]), 10.0)
    assert summary.complete
    snapshot = await job.throttler.store.snapshot("127.0.0.2")
    assert snapshot is not None
    assert snapshot.rampup is not None
    # Rampup would read 0.4 s as the site's latency; the stalls made it, so it learns none.
    assert (snapshot.rampup.latency is not None) is learned
    assert snapshot.mean_latency == pytest.approx(0.4)  # the scope's record keeps what was measured



@pytest.mark.parametrize(("inflight", "cut"), [(1, False), (3, True)])
def test_a_latency_rise_with_one_request_in_flight_is_not_load_to_cut(
        inflight: int, cut: bool, caplog: pytest.LogCaptureFixture) -> None:
    """A loaded machine reads a 2 ms site's answers 60-90 ms late: alone in flight, the crawler
    queues nothing at the site, so that is no load a cut relieves (a site's own overload grows
    with its requests in flight, which still cuts)."""
    ramp = Rampup(start_rate=4.0, min_rate=1 / 300, max_rate=100.0, max_concurrency=8, window=60.0,
                  target=(1.0, 1.0))
    now, before = 0.0, None
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        while now < 3.0:
            latency = 0.002 if now < 2.0 else 0.09
            if latency > 0.002 and before is None:
                before = ramp.rate
            ramp.on_send(now)
            ramp.on_response(now + latency, pushback=False, current=True, latency=latency,
                             elapsed=latency, inflight=inflight)
            now += 1.0 / ramp.allowed_rate(now)
    assert ramp.latency is not None
    assert ramp.latency > 0.06  # the smoothed latency is past the cut line
    assert before is not None
    # (With three in flight the rise cuts once; the answers after the cut come no quicker, so the
    # rate then holds there: the decision now says so, and the cut is read from the log.)
    assert ("cut: latency" in caplog.text) is cut
    assert (ramp.rate < before) is cut
