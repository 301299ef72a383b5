"""RFC 9309 in ``crawlpace crawl``: what each robots.txt answer does to a site's pages, on real servers."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crawlpace import Settings, Throttler
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.crawl._fetch import AiohttpFetcher, Page
from crawlpace.sim import Farm, SimServer

from .test_crawl import FAST, lines, pages


def robots_site(robots: Any) -> Any:
    """An ASGI app whose robots.txt answer is ``robots(n)`` -> (status, headers, body) for the n-th ask."""
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        seen.append(path)
        if path.startswith("/robots") or path.startswith("/hop"):
            status, headers, body = robots(path, seen.count(path))
        else:
            status, headers, body = 200, [], b"page"
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    app.seen = seen  # type: ignore[attr-defined]
    return app


async def run(tmp_path: Path, urls: list[str], **options: Any) -> list[dict[str, Any]]:
    output = tmp_path / "out.jsonl"
    settings = Settings.from_scrapy({**FAST, "BACKOFF_MIN_DELAY": 0.01, "BACKOFF_MAX_DELAY": 0.05})
    await CrawlJob(settings, CrawlOptions(output=output, trust_env=False, **options)).run(urls)
    return lines(output)


async def test_a_robots_txt_answering_503_forbids_the_site_until_a_resume(tmp_path: Path) -> None:
    state = {"down": True}

    def robots(path: str, n: int) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if state["down"]:
            return 503, [], b"<html>maintenance</html>"
        return 200, [], b"User-agent: *\nDisallow: /private\n"

    app = robots_site(robots)
    async with SimServer(app, "127.0.0.2") as server:
        urls = [f"{server.url}/page/{n}" for n in range(5)] + [f"{server.url}/private/1"]
        results = await run(tmp_path, urls)
        assert app.seen == ["/robots.txt"] * 2  # the first try and robots_retries = 1; no page sent
        assert {result["outcome"] for result in results} == {"exhausted"}  # not final: a resume asks again
        assert "RFC 9309" in results[0]["error"]
        state["down"] = False
        resumed = await run(tmp_path, urls, resume=True)
    outcomes = Counter(result["outcome"] for result in resumed)
    assert outcomes == {"ok": 5, "disallowed": 1}  # the resume asked again, and got the rules
    assert "/private/1" not in app.seen


async def test_a_dead_site_costs_only_its_robots_txt_and_never_stalls_the_others(tmp_path: Path) -> None:
    spec = {"site": [{"name": "dead", "profile": "dead", "pages": 20},
                     {"name": "alive", "profile": "ratelimit", "rate": 1000.0, "burst": 100, "pages": 20}]}
    async with Farm(spec) as farm:
        urls = pages(farm)
        results = await run(tmp_path, urls)
        report = farm.stats()
    assert Counter((r["scope"], r["outcome"]) for r in results) == {("127.0.0.2", "exhausted"): 20,
                                                                   ("127.0.0.3", "ok"): 20}
    assert report["dead"]["requests"] == 2  # robots.txt twice (one retry), not one page


async def test_4xx_allows_everything_and_redirects_are_followed_five_hops(tmp_path: Path) -> None:
    def robots(path: str, n: int) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if path == "/robots.txt":
            return 301, [(b"location", b"/hop/1")], b""
        if path == "/hop/real":
            return 200, [], b"User-agent: *\nDisallow: /private\n"
        hop = int(path.rsplit("/", 1)[1])
        if hop < 4:  # /robots.txt -> /hop/1 -> ... -> /hop/4 -> /hop/real: five hops
            return 302, [(b"location", f"/hop/{hop + 1}".encode())], b""
        return 307, [(b"location", b"/hop/real")], b""

    def sixth(path: str, n: int) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if path == "/robots.txt":
            return 301, [(b"location", b"/hop/1")], b""
        hop = int(path.rsplit("/", 1)[1])  # an endless chain: after five hops it counts as unavailable
        return 302, [(b"location", f"/hop/{hop + 1}".encode())], b""

    def gone(path: str, n: int) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        return 404, [], b"not here"

    cases = (("five", robots, "disallowed"), ("six", sixth, "ok"), ("gone", gone, "ok"))
    for name, answer, expected in cases:
        app = robots_site(answer)
        async with SimServer(app, "127.0.0.2") as server:
            (tmp_path / name).mkdir()
            results = await run(tmp_path / name, [f"{server.url}/private/1", f"{server.url}/open"])
        outcomes = {result["url"].rsplit("/", 1)[1]: result["outcome"] for result in results}
        assert outcomes == {"1": expected, "open": "ok"}, name
        hops = [path for path in app.seen if path.startswith("/hop")]
        assert len(hops) == {"five": 5, "six": 5, "gone": 0}[name], (name, app.seen)


async def test_a_crawl_delay_removed_from_a_refetched_file_is_cleared(tmp_path: Path) -> None:
    def robots(path: str, n: int) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        body = b"User-agent: *\nCrawl-delay: 0.2\n" if n == 1 else b"User-agent: *\nDisallow: /x\n"
        return 200, [], body

    app = robots_site(robots)
    settings = Settings.from_scrapy({**FAST})
    async with SimServer(app, "127.0.0.2") as server, Throttler(settings) as throttler:
        options = CrawlOptions(output=tmp_path / "out.jsonl", trust_env=False)
        job = CrawlJob(settings, options, throttler=throttler)
        assert job.robots is not None
        job.robots.ttl = 0.5  # re-fetch the file within the crawl
        summary = await job.run([f"{server.url}/page/{n}" for n in range(6)])
        stats = await throttler.scope_stats("127.0.0.2")
    assert summary.complete
    assert app.seen.count("/robots.txt") == 2
    assert stats is not None
    assert stats.crawl_delay is None  # 0.2 s was in force until the second file said nothing
    assert stats.delay < 0.2


async def test_a_robots_txt_redirect_the_crawl_cannot_follow_does_not_hold_the_pages_forever(
        tmp_path: Path) -> None:
    # The hop has no host: the crawl refuses it up front. The pages waiting for the file then
    # used to wait forever (the crawl never ended); now the file counts as unreachable.
    def robots(path: str, n: int) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        return 301, [(b"location", b"http://:80/robots.txt")], b""

    app = robots_site(robots)
    async with SimServer(app, "127.0.0.2") as server:
        urls = [f"{server.url}/page/{n}" for n in range(3)]
        results = await asyncio.wait_for(run(tmp_path, urls), 20.0)
    assert {result["outcome"] for result in results} == {"exhausted"}  # not final: a resume asks again
    assert "RFC 9309" in results[0]["error"]
    assert app.seen == ["/robots.txt"]


async def test_an_unexpected_error_in_a_fetch_loses_no_url(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    # Whatever escapes the layers below (a bug, a driver error no one translated), the URL is tried
    # again: a task that vanished kept a shared worker from ever ending.
    class Flaky(AiohttpFetcher):
        calls = 0

        async def get(self, url: str, limit: int) -> Page:
            Flaky.calls += 1
            if Flaky.calls == 2:  # the first page, after robots.txt
                raise RuntimeError("an error nothing below expected")
            return await super().get(url, limit)

    app = robots_site(lambda path, n: (404, [], b""))
    output = tmp_path / "out.jsonl"
    settings = Settings.from_scrapy({**FAST, "BACKOFF_MIN_DELAY": 0.01, "BACKOFF_MAX_DELAY": 0.05})
    async with SimServer(app, "127.0.0.2") as server:
        fetcher = Flaky(user_agent="test", timeout=5.0, max_connections=4, trust_env=False,
                        clock=time.monotonic)
        try:
            urls = [f"{server.url}/page/{n}" for n in range(3)]
            job = CrawlJob(settings, CrawlOptions(output=output, trust_env=False), fetcher=fetcher)
            summary = await asyncio.wait_for(job.run(urls), 20.0)
        finally:
            await fetcher.aclose()
    assert summary.complete
    assert Counter(result["outcome"] for result in lines(output)) == {"ok": 3}
    assert "unexpected error while fetching it" in caplog.text
    assert "an error nothing below expected" in caplog.text  # with its traceback


async def test_a_location_no_url_can_be_made_of_is_not_followed(tmp_path: Path) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        status, headers = (301, [(b"location", b"http://[::1/x")]) if scope["path"] == "/moved" else (404, [])
        await send({"type": "http.response.start", "status": status,
                    "headers": [*headers, (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async with SimServer(app, "127.0.0.2") as server:
        results = await asyncio.wait_for(run(tmp_path, [f"{server.url}/moved"]), 20.0)
    assert [(result["outcome"], result["status"]) for result in results] == [("ok", 301)]



async def test_a_sites_pages_wait_for_its_crawl_delay_to_be_applied(tmp_path: Path) -> None:
    """A fleet's store takes a round trip or two to apply a Crawl-delay; the pages used to go at once
    meanwhile, at the start's pace, and the site saw its second request closer than the delay."""
    app = robots_site(lambda path, n: (200, [], b"User-agent: *\nCrawl-delay: 0.2\n"))
    arrivals: list[float] = []

    async def timed(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"].startswith("/page"):
            arrivals.append(time.monotonic())
        await app(scope, receive, send)

    settings = Settings.from_scrapy({**FAST})
    applied: list[float] = []
    async with SimServer(timed, "127.0.0.2") as server, Throttler(settings) as throttler:
        apply = throttler.set_crawl_delay

        async def set_crawl_delay(scope: str, delay: float | None) -> None:  # a store far away
            await asyncio.sleep(0.3)
            await apply(scope, delay)
            applied.append(time.monotonic())

        throttler.set_crawl_delay = set_crawl_delay  # type: ignore[method-assign]
        options = CrawlOptions(output=tmp_path / "out.jsonl", trust_env=False)
        job = CrawlJob(settings, options, throttler=throttler)
        summary = await job.run([f"{server.url}/page/{n}" for n in range(2)])
    assert summary.complete
    assert len(arrivals) == 2
    assert applied
    assert arrivals[0] >= applied[0]  # main: the first page went 0.3 s before the delay was in force
    assert arrivals[1] - arrivals[0] >= 0.2 - 0.02
