"""``complete`` means the same in a fleet worker's summary as in a single process's.

A URL that ended ``exhausted`` (a robots.txt that answers 503 forbids its
site, RFC 9309) has no answer: a single process counts it as left and its run
incomplete; a worker of the shared frontier, where the URL is settled and not
handed out again, must say the same, not ``complete: true``. A real
redis-server and a real HTTP server on 127.0.0.x.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from crawlpace import Settings
from crawlpace.crawl import CrawlJob, CrawlOptions, CrawlSummary
from crawlpace.crawl._shared_job import SharedCrawlJob
from crawlpace.frontier._shared import SharedFrontier
from crawlpace.sim import SimServer

from .test_crawl import FAST
from .test_robots_crawl import robots_site

pytestmark = pytest.mark.redis

QUICK_BACKOFF = {**FAST, "BACKOFF_MIN_DELAY": 0.01, "BACKOFF_MAX_DELAY": 0.05}


def down_site() -> Any:
    """A site whose robots.txt answers 503: its pages end ``exhausted`` without being sent."""
    return robots_site(lambda path, n: (503, [], b"<html>maintenance</html>"))


def healthy_site() -> Any:
    return robots_site(lambda path, n: (200, [], b"User-agent: *\nAllow: /\n"))


def figures(summary: CrawlSummary) -> dict[str, Any]:
    data = summary.as_dict()
    return {key: data[key] for key in ("complete", "answered", "unfinished", "urls", "outcomes")}


async def test_a_fleet_worker_with_exhausted_urls_is_not_complete_as_a_single_process_is_not(
        redis_url: str, tmp_path: Path) -> None:
    async with SimServer(down_site(), "127.0.0.2") as down, SimServer(healthy_site(), "127.0.0.3") as up:
        urls = [f"{down.url}/page/{n}" for n in range(3)] + [f"{up.url}/page/{n}" for n in range(2)]
        settings = Settings.from_scrapy(QUICK_BACKOFF)
        single = CrawlJob(settings, CrawlOptions(output=tmp_path / "single.jsonl", trust_env=False))
        await asyncio.wait_for(single.run(urls), 20.0)
        frontier = SharedFrontier(redis_url, worker="filler")
        try:
            await frontier.enqueue(urls)
            options = CrawlOptions(output=tmp_path / "worker.jsonl", store=redis_url, trust_env=False)
            worker = SharedCrawlJob(settings, options, frontier=SharedFrontier(redis_url, worker="one"))
            await asyncio.wait_for(worker.run(None), 20.0)
            counts = await frontier.counts()
        finally:
            await frontier.aclose()
    expected = {"complete": False, "answered": 2, "unfinished": 3, "urls": 5,
                "outcomes": {"exhausted": 3, "ok": 2}}
    assert figures(single.summary) == expected
    assert figures(worker.summary) == expected  # was complete: True, answered 5, unfinished 0
    assert counts.queued == 0
    assert counts.outcomes == {"exhausted": 3, "ok": 2}


async def test_a_fleet_worker_whose_urls_all_got_answers_is_complete(redis_url: str, tmp_path: Path) -> None:
    async with SimServer(healthy_site(), "127.0.0.3") as up:
        frontier = SharedFrontier(redis_url, worker="filler")
        try:
            await frontier.enqueue([f"{up.url}/page/{n}" for n in range(3)])
            options = CrawlOptions(output=tmp_path / "worker.jsonl", store=redis_url, trust_env=False)
            worker = SharedCrawlJob(Settings.from_scrapy(FAST), options,
                                    frontier=SharedFrontier(redis_url, worker="one"))
            await asyncio.wait_for(worker.run(None), 20.0)
        finally:
            await frontier.aclose()
    assert figures(worker.summary) == {"complete": True, "answered": 3, "unfinished": 0, "urls": 3,
                                       "outcomes": {"ok": 3}}
