"""robots.txt in the httpx client (``robots_txt=True``), over real HTTP on loopback sites.

The throttler and the sites share one autojumping fake clock, so a
Crawl-delay of 2 s costs no real time and every arrival time is exact.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from crawlpace import RobotsDisallowed
from crawlpace.http import throttled_client
from crawlpace.sim import CrawlDelaySite, SimServer
from crawlpace.sim._asgi import Receive, Scope, Send, respond
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

HOST = "127.0.0.2"
#: A library user's set-up: 8 slots per host and no delay.
EIGHT: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0,
                         "DOWNLOAD_DELAY_PER_SLOT": 0.0}


class RobotsSite:
    """An ASGI app with a given robots.txt answer; every other path answers 200. Notes each arrival."""

    def __init__(self, clock: MockClock, status: int = 200, body: str = "", *,
                 headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.clock = clock
        self.status = status
        self.body = body
        self.headers = headers
        self.arrivals: list[tuple[str, float]] = []

    def paths(self) -> list[str]:
        return [path for path, _ in self.arrivals]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        path = str(scope.get("path", ""))
        self.arrivals.append((path, self.clock.now()))
        if path == "/robots.txt":
            await respond(send, self.status, self.body.encode(), headers=self.headers)
        else:
            await respond(send, 200, b"page\n")


def client_for(server: SimServer, **kwargs: Any) -> httpx.AsyncClient:
    return throttled_client(base_url=server.url, trust_env=False, timeout=5.0, robots_txt=True, **kwargs)


async def test_disallowed_urls_raise_and_are_never_sent(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = RobotsSite(clock, body="User-agent: *\nDisallow: /private\n")
    async with SimServer(site, HOST) as server, client_for(server, throttler=make_throttler(EIGHT)) as client:
        assert (await client.get("/public")).status_code == 200
        with pytest.raises(RobotsDisallowed, match="forbids it") as refused:
            await client.get("/private/page")
        assert (await client.get("/other")).status_code == 200
    assert refused.value.final
    assert refused.value.origin == server.url.rstrip("/")
    # robots.txt once, before anything else; the disallowed page never reached the site.
    assert site.paths() == ["/robots.txt", "/public", "/other"]


async def test_the_rules_of_the_clients_user_agent_apply(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = RobotsSite(clock, body="User-agent: pacebot\nDisallow: /\n\nUser-agent: *\nAllow: /\n")
    async with SimServer(site, HOST) as server:
        async with client_for(server, throttler=make_throttler(EIGHT),
                              headers={"User-Agent": "pacebot/1.0"}) as client:
            with pytest.raises(RobotsDisallowed):
                await client.get("/page")
        async with client_for(server, throttler=make_throttler(EIGHT)) as client:
            assert (await client.get("/page")).status_code == 200  # python-httpx is let in


async def test_crawl_delay_paces_the_host_one_request_at_a_time(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = CrawlDelaySite(delay=2.0, pages=6, clock=clock.now)
    async with SimServer(site, HOST) as server, client_for(server, throttler=make_throttler(EIGHT)) as client:
        answers = await asyncio.gather(*(client.get(f"/page/{n}") for n in range(1, 6)))
    assert [answer.status_code for answer in answers] == [200] * 5
    assert site.stats.requests == 6  # robots.txt and five pages
    assert not site.stats.violations  # the 8 slots did not break the 2 s Crawl-delay
    assert site.stats.peak_inflight == 1


async def test_concurrent_first_requests_share_one_robots_fetch(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = RobotsSite(clock, body="User-agent: *\nAllow: /\n")
    async with SimServer(site, HOST) as server, client_for(server, throttler=make_throttler(EIGHT)) as client:
        await asyncio.gather(*(client.get(f"/p{n}") for n in range(6)))
    assert site.paths().count("/robots.txt") == 1
    assert site.paths()[0] == "/robots.txt"


@pytest.mark.parametrize(("status", "allowed"), [(404, True), (410, True), (503, False), (500, False)])
async def test_what_a_robots_answer_means(clock: MockClock, make_throttler: ThrottlerFactory,
                                          status: int, allowed: bool) -> None:
    site = RobotsSite(clock, status=status, body="whatever")
    throttler = make_throttler({**EIGHT, "BACKOFF_HTTP_CODES": []})  # no retries of the 503
    async with SimServer(site, HOST) as server, client_for(server, throttler=throttler) as client:
        if allowed:  # RFC 9309: no file (4xx), no rules
            assert (await client.get("/page")).status_code == 200
        else:  # unreachable (5xx): nothing of the site for now
            with pytest.raises(RobotsDisallowed, match="could not be fetched") as refused:
                await client.get("/page")
            assert not refused.value.final
    assert "/page" in site.paths() if allowed else site.paths() == ["/robots.txt"]


async def test_a_redirected_robots_txt_is_followed(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    rules = RobotsSite(clock, body="User-agent: *\nDisallow: /no\n")
    async with SimServer(rules, "127.0.0.3") as target:
        location = f"{target.url.rstrip('/')}/robots.txt".encode()
        moved = RobotsSite(clock, status=301, headers=((b"location", location),))
        async with SimServer(moved, HOST) as server, \
                client_for(server, throttler=make_throttler(EIGHT)) as client:
            with pytest.raises(RobotsDisallowed):
                await client.get("/no/entry")
            assert (await client.get("/yes")).status_code == 200
    assert rules.paths() == ["/robots.txt"]
    assert moved.paths() == ["/robots.txt", "/yes"]


async def test_robots_txt_is_off_by_default(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    site = RobotsSite(clock, body="User-agent: *\nDisallow: /\n")
    async with SimServer(site, HOST) as server, \
            throttled_client(base_url=server.url, trust_env=False, throttler=make_throttler(EIGHT)) as client:
        assert (await client.get("/page")).status_code == 200
    assert site.paths() == ["/page"]


async def test_a_robots_txt_that_answers_503_is_tried_twice_as_in_the_crawl(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # The client resends backoff answers 3 times, but robots.txt only once (ROBOTS_RETRIES): a
    # site that is down costs two requests, not four, before its pages are held back.
    site = RobotsSite(clock, status=503)
    async with SimServer(site, HOST) as server, client_for(server, throttler=make_throttler(EIGHT)) as client:
        with pytest.raises(RobotsDisallowed) as refused:
            await client.get("/page")
    assert not refused.value.final  # unreachable for now: asked again later
    assert site.paths() == ["/robots.txt", "/robots.txt"]
