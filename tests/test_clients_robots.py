"""robots.txt in the other clients: httpx.Client, requests and aiohttp take ``robots_txt=True`` too.

One guard (``crawlpace._robotstxt._robots_guard``) serves every client; each test here
runs the same site through one client. The blocking clients meet a site
served from a thread of its own on the real clock; the Crawl-delay is a
hundredth of a second, so no test waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from crawlpace import RobotsDisallowed
from crawlpace.aiohttp import throttled_session as aiohttp_session
from crawlpace.http import throttled_client, throttled_sync_client
from crawlpace.requests import throttled_session as requests_session
from crawlpace.sim import SimServer
from crawlpace.sim._asgi import Receive, Scope, Send, respond

from .sim_thread import serve_in_thread

HOST = "127.0.0.2"
EIGHT: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0,
                         "DOWNLOAD_DELAY_PER_SLOT": 0.0}
ROBOTS = "User-agent: *\nDisallow: /private\nCrawl-delay: 0.01\n"


class Site:
    """robots.txt as given, 200 for every other path; notes the paths asked for."""

    def __init__(self, body: str = ROBOTS) -> None:
        self.body = body
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        path = str(scope.get("path", ""))
        self.paths.append(path)
        await respond(send, 200, self.body.encode() if path == "/robots.txt" else b"page\n")


def _httpx_sync(url: str, robots: bool) -> tuple[list[int], Any]:
    with throttled_sync_client(EIGHT, trust_env=False, timeout=5.0, robots_txt=robots) as client:
        statuses = [client.get(f"{url}/public").status_code]
        try:
            statuses.append(client.get(f"{url}/private/page").status_code)
        except RobotsDisallowed:
            statuses.append(-1)
        statuses.append(client.get(f"{url}/other").status_code)
        return statuses, client.throttler.scope_stats(HOST)


def _requests(url: str, robots: bool) -> tuple[list[int], Any]:
    with requests_session(EIGHT, robots_txt=robots) as session:
        statuses = [session.get(f"{url}/public", timeout=5).status_code]
        try:
            statuses.append(session.get(f"{url}/private/page", timeout=5).status_code)
        except RobotsDisallowed:
            statuses.append(-1)
        statuses.append(session.get(f"{url}/other", timeout=5).status_code)
        return statuses, session.throttler.scope_stats(HOST)


BLOCKING: dict[str, Callable[[str, bool], tuple[list[int], Any]]] = {"httpx-sync": _httpx_sync,
                                                                      "requests": _requests}


@pytest.mark.parametrize("client", list(BLOCKING))
def test_blocking_clients_obey_disallow_and_crawl_delay(client: str) -> None:
    site = Site()
    with serve_in_thread(site, HOST) as url:
        statuses, stats = BLOCKING[client](url.rstrip("/"), True)
    assert statuses == [200, -1, 200]  # the disallowed URL raised
    assert site.paths == ["/robots.txt", "/public", "/other"]  # and never reached the site
    assert stats.concurrency == 1  # the Crawl-delay: one at a time, that far apart
    assert stats.delay >= 0.01


@pytest.mark.parametrize("client", list(BLOCKING))
def test_blocking_clients_leave_robots_txt_alone_by_default(client: str) -> None:
    site = Site("User-agent: *\nDisallow: /\n")
    with serve_in_thread(site, HOST) as url:
        statuses, _stats = BLOCKING[client](url.rstrip("/"), False)
    assert statuses == [200, 200, 200]
    assert "/robots.txt" not in site.paths


async def test_aiohttp_obeys_disallow_and_crawl_delay() -> None:
    site = Site()
    async with SimServer(site, HOST) as server, \
            aiohttp_session(EIGHT, robots_txt=True, base_url=server.url) as session:
        pages = await asyncio.gather(*(session.get(f"/public/{n}") for n in range(3)))
        assert [page.status for page in pages] == [200] * 3
        for page in pages:
            page.release()
        with pytest.raises(RobotsDisallowed, match="forbids it"):
            await session.get("/private/page")
        stats = await session.throttler.scope_stats(HOST)
    assert site.paths.count("/robots.txt") == 1  # one fetch for the three first requests
    assert site.paths[0] == "/robots.txt"
    assert "/private/page" not in site.paths
    assert stats is not None
    assert stats.concurrency == 1
    assert stats.delay >= 0.01


class SilentRobots:
    """robots.txt never answers; says when its request arrived."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        self.asked.set()
        await asyncio.Event().wait()


class ClosingTransport(httpx.AsyncHTTPTransport):
    """httpx's transport, noting that it was closed."""

    closed = False

    async def aclose(self) -> None:
        self.closed = True
        await super().aclose()


@pytest.mark.parametrize("client", ["httpx", "aiohttp"])
async def test_a_close_cancelled_while_robots_txt_fetches_stop_still_closes_the_connections(
        client: str) -> None:
    """The close first stops the robots.txt fetches under way, which awaits; cancelled there (a
    timeout around the block, a second Ctrl-C), it used to skip closing the connection pool, whose
    sockets were left to the garbage collector."""
    site = SilentRobots()
    async with SimServer(site, HOST) as server:
        inner = ClosingTransport()
        made: Any
        close: Callable[[], Awaitable[None]]
        closed: Callable[[], bool]
        if client == "httpx":
            made = throttled_client(EIGHT, robots_txt=True, transport=inner, base_url=server.url)
            close, closed = made.aclose, lambda: inner.closed
        else:
            made = aiohttp_session(EIGHT, robots_txt=True, base_url=server.url)
            close, closed = made.close, lambda: bool(made.closed)
        get = asyncio.ensure_future(made.get("/page"))
        async with asyncio.timeout(5.0):
            await site.asked.wait()  # the robots.txt fetch is under way
        closing = asyncio.ensure_future(close())
        await asyncio.sleep(0)  # the close has stopped the fetch and waits for it to end
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        assert closed()
        get.cancel()
        await asyncio.gather(get, return_exceptions=True)
