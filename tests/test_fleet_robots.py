"""A fleet fetches each site's robots.txt once, and a worker can wait for its URLs.

Workers of one shared frontier (in-process ``SharedCrawlJob`` objects on a real
redis-server) against a real HTTP server on 127.0.0.x that counts its robots.txt
requests.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from crawlpace import Settings
from crawlpace._clock import AsyncioClock
from crawlpace.crawl import CrawlOptions
from crawlpace.crawl._robots_answers import FLEET_DELAY_SPREAD, fleet_crawl_delay
from crawlpace.crawl._shared_job import SharedCrawlJob
from crawlpace.frontier._shared import RobotsCopy, SharedFrontier
from crawlpace.sim import SimServer
from crawlpace.stores.redis import RedisStore

from .test_crawl import FAST, lines
from .test_robots_crawl import robots_site

pytestmark = pytest.mark.redis

RULES = b"User-agent: *\nDisallow: /private\n"


def site() -> Any:
    return robots_site(lambda path, n: (200, [], RULES))


async def crawl(redis_url: str, output: Path, worker: str, *, wait: float = 0.0) -> list[dict[str, Any]]:
    """One worker of the fleet, run until the frontier is drained."""
    frontier = SharedFrontier(redis_url, worker=worker)
    options = CrawlOptions(output=output, store=redis_url, trust_env=False, wait_for_urls=wait)
    job = SharedCrawlJob(Settings.from_scrapy(FAST), options, frontier=frontier)
    await asyncio.wait_for(job.run(None), 20.0)
    return lines(output)


async def test_the_frontier_hands_the_fetch_to_one_worker_and_the_copy_to_all(redis_url: str) -> None:
    one, two = SharedFrontier(redis_url, worker="one"), SharedFrontier(redis_url, worker="two")
    origin = "http://127.0.0.2:8080"
    try:
        assert await one.robots(origin, hold=30.0) is True  # the right to fetch is one's
        assert await two.robots(origin, hold=30.0) is False  # two waits for it
        assert await one.robots(origin, hold=30.0) is True  # asked again: still one's
        body = bytes(range(256))  # any byte comes back as it went in
        await one.store_robots(origin, RobotsCopy(200, body), keep=60.0)
        assert await two.robots(origin, hold=30.0) == RobotsCopy(200, body, "")
        await two.store_robots("http://127.0.0.3:8080", RobotsCopy(None, b"", "timeout"), keep=60.0)
        assert await one.robots("http://127.0.0.3:8080", hold=30.0) == RobotsCopy(None, b"", "timeout")
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_right_to_fetch_that_is_never_used_passes_to_the_next_worker(redis_url: str) -> None:
    one, two = SharedFrontier(redis_url, worker="one"), SharedFrontier(redis_url, worker="two")
    try:
        assert await one.robots("http://127.0.0.2:8080", hold=0.05) is True
        await asyncio.sleep(0.1)  # one died with the right: it lapses in server time
        assert await two.robots("http://127.0.0.2:8080", hold=30.0) is True
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_later_worker_obeys_the_robots_txt_an_earlier_one_fetched(redis_url: str,
                                                                          tmp_path: Path) -> None:
    app = site()
    async with SimServer(app, "127.0.0.2") as server:
        frontier = SharedFrontier(redis_url, worker="filler")
        try:
            await frontier.enqueue([f"{server.url}/page/1", f"{server.url}/private/1"])
            first = await crawl(redis_url, tmp_path / "one.jsonl", "one")
            await frontier.enqueue([f"{server.url}/page/2", f"{server.url}/private/2"])
            second = await crawl(redis_url, tmp_path / "two.jsonl", "two")
        finally:
            await frontier.aclose()
    assert app.seen.count("/robots.txt") == 1
    for results in (first, second):
        assert {row["url"].rsplit("/", 2)[1]: row["outcome"] for row in results} == {
            "page": "ok", "private": "disallowed"}


async def test_a_worker_waits_for_the_copy_another_worker_is_fetching(redis_url: str, tmp_path: Path) -> None:
    app = site()
    async with SimServer(app, "127.0.0.2") as server:
        other = SharedFrontier(redis_url, worker="other")
        try:
            assert await other.robots(server.url, hold=30.0) is True  # "other" is fetching it
            await other.enqueue([f"{server.url}/page/1", f"{server.url}/private/1"])
            worker = asyncio.ensure_future(crawl(redis_url, tmp_path / "out.jsonl", "one"))
            await asyncio.sleep(0.3)
            assert not worker.done()  # the site's pages wait for the rules
            await other.store_robots(server.url, RobotsCopy(200, RULES), keep=60.0)
            results = await worker
        finally:
            await other.aclose()
    assert app.seen.count("/robots.txt") == 0
    assert sorted(row["outcome"] for row in results) == ["disallowed", "ok"]


async def test_a_worker_started_before_the_urls_waits_for_them(redis_url: str, tmp_path: Path) -> None:
    app = site()
    async with SimServer(app, "127.0.0.2") as server:
        frontier = SharedFrontier(redis_url, worker="filler")
        try:
            early = asyncio.ensure_future(crawl(redis_url, tmp_path / "early.jsonl", "early", wait=10.0))
            impatient = await crawl(redis_url, tmp_path / "late.jsonl", "impatient")
            assert impatient == []  # without a wait, an empty frontier ends a worker at once
            await asyncio.sleep(0.6)  # a claim or two on the empty frontier
            assert not early.done()
            await frontier.enqueue([f"{server.url}/page/{n}" for n in range(3)])
            results = await early
        finally:
            await frontier.aclose()
    assert sorted(row["url"] for row in results) == [f"{server.url}/page/{n}" for n in range(3)]


def test_wait_for_urls_must_be_a_number_of_seconds(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"wait_for_urls: -1 is not a number of seconds >= 0; use e\.g\. 60"):
        CrawlOptions(output=tmp_path / "out.jsonl", wait_for_urls=-1)


def test_a_fleet_keeps_room_for_its_workers_lags_in_a_crawl_delay() -> None:
    # Admissions are spaced by the store, sends by each worker's own lag after its admission.
    assert fleet_crawl_delay(1.33, 60.0) == pytest.approx(1.33 + FLEET_DELAY_SPREAD)
    assert fleet_crawl_delay(None, 60.0) is None  # a removed Crawl-delay stays removed
    assert fleet_crawl_delay(59.99, 60.0) == 60.0  # the room never passes the cap...
    assert fleet_crawl_delay(90.0, 60.0) == 90.0  # ...and a delay past it is the store's to clamp


async def test_a_fleet_worker_stores_the_crawl_delay_with_room_for_the_lags(redis_url: str,
                                                                           tmp_path: Path) -> None:
    app = robots_site(lambda path, n: (200, [], b"User-agent: *\nCrawl-delay: 0.1\n"))
    async with SimServer(app, "127.0.0.2") as server:
        frontier = SharedFrontier(redis_url, worker="filler")
        try:
            await frontier.enqueue([f"{server.url}/page/1", f"{server.url}/page/2"])
            await crawl(redis_url, tmp_path / "one.jsonl", "one")
        finally:
            await frontier.aclose()
        store = RedisStore(redis_url, Settings.from_scrapy(FAST), AsyncioClock())
        try:
            snapshot = await store.snapshot("127.0.0.2")
        finally:
            await store.aclose()
    assert snapshot is not None
    assert snapshot.crawl_delay == pytest.approx(0.1 + FLEET_DELAY_SPREAD)
