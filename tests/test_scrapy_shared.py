"""A Scrapy fleet on one shared queue: ``SharedScheduler`` over a real redis-server, real crawls.

Each crawl is its own ``python`` process running Scrapy (the runner of
``test_scrapy_crawl``), against simulated sites on loopback that count every
request and every broken rule.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.settings import Settings as ScrapySettings

from crawlpace import ConfigError
from crawlpace.frontier._shared import SharedFrontier
from crawlpace.scrapy._settings import read_config
from crawlpace.scrapy._shared import dump_request, frontier_url_for, load_request
from crawlpace.sim import Farm

from .redis_server import RedisServer
from .test_scrapy_crawl import FAST, IN_FLIGHT, RUNNER, crawl, pages


def shared_settings(url: str, **extra: Any) -> dict[str, Any]:
    return {**FAST, "CRAWLPACE_STORE": url, "SCHEDULER": "crawlpace.scrapy.SharedScheduler", **extra}


# --- settings and serialisation --------------------------------------------------------------------


def test_the_shared_scheduler_takes_the_stores_redis_and_one_namespace_per_spider() -> None:
    settings = ScrapySettings()
    settings.setdict({"SCHEDULER": "crawlpace.scrapy.SharedScheduler",
                      "CRAWLPACE_STORE": "redis://127.0.0.1:6379/0?namespace=shop"}, priority="project")
    config = read_config(settings, lambda cls: cls())
    assert config.frontier_url == "redis://127.0.0.1:6379/0?namespace=shop"
    assert config.scheduler_path == "crawlpace.scrapy.SharedScheduler"
    assert frontier_url_for(config.frontier_url, "books:all") == "redis://127.0.0.1:6379/0?namespace=shop.books-all"
    assert frontier_url_for("redis://h:1/0", "s") == "redis://h:1/0?namespace=crawlpace.s"


def test_the_shared_scheduler_without_redis_is_a_settings_error() -> None:
    settings = ScrapySettings()
    settings.setdict({"SCHEDULER": "crawlpace.scrapy.SharedScheduler", "CRAWLPACE_FRONTIER_VISIBILITY": 0},
                     priority="project")
    with pytest.raises(ConfigError) as caught:
        read_config(settings, lambda cls: cls())
    assert caught.value.problems == [
        "CRAWLPACE_FRONTIER: the shared scheduler needs a Redis URL, got 'memory://'; set "
        "CRAWLPACE_FRONTIER = 'redis://host:6379/0' (by default it is CRAWLPACE_STORE's, which should then "
        "be the same Redis, so that the fleet shares the limits too)",
        "CRAWLPACE_FRONTIER_VISIBILITY: expected a number of seconds above 0, got 0; use e.g. 30"]


class Shop(Spider):
    name = "shop"

    def parse_item(self, response: Any) -> None:
        pass


def test_a_request_crosses_processes_with_its_callback_and_meta() -> None:
    spider = Shop()
    request = Request("https://a.example/p?q=1", callback=spider.parse_item, priority=3, dont_filter=True,
                      meta={"depth": 2, "throttling_scopes": "api", "_crawlpace_ticket": object(),
                            "_crawlpace_frontier_id": 7}, headers={"X-A": "b"}, body=b"\x00\xff")
    back = load_request(dump_request(request, spider), spider)
    assert (back.url, back.priority, back.dont_filter, back.body) == (request.url, 3, True, b"\x00\xff")
    assert back.callback == spider.parse_item
    assert back.meta == {"depth": 2, "throttling_scopes": "api"}
    assert back.headers["X-A"] == b"b"


# --- real fleets -------------------------------------------------------------------------------------


async def test_two_scrapy_processes_share_one_queue_and_fetch_every_url_once(
        tmp_path: Path, redis_server: RedisServer) -> None:
    url = f"{redis_server.url}?namespace=t{uuid.uuid4().hex[:12]}"
    spec = {"site": [
        {"name": "spaced", "profile": "crawldelay", "delay": 0.1, "pages": 8, "tolerance": IN_FLIGHT},
        {"name": "fast", "profile": "ratelimit", "rate": 40.0, "pages": 16, "tolerance": IN_FLIGHT},
    ]}
    async with Farm(spec) as farm:
        urls = [*pages(farm.site("spaced")), *pages(farm.site("fast"))]
        first, second = await asyncio.gather(crawl(tmp_path, urls, shared_settings(url), "first"),
                                             crawl(tmp_path, urls, shared_settings(url), "second"))
        report = farm.stats()
    for result in (first, second):
        assert result.returncode == 0, result.log[-3000:]
        assert "Traceback" not in result.log, result.log[-3000:]
    fetched = [record["url"] for result in (first, second) for record in result.records]
    assert sorted(fetched) == sorted(urls)  # every URL, once, across the two
    pushed = first.stats.get("frontier/pushed", 0) + second.stats.get("frontier/pushed", 0)
    assert pushed == len(urls)  # one queue: each URL went in once, from whichever process made it first
    for name, site in report.items():
        assert site["violations"] == 0, (name, site["violation_kinds"])
    # Each site answered each page once (a 429 and its retry aside), plus one robots.txt per process that
    # had a page of it.
    assert report["spaced"]["ok"] - 8 in (1, 2)
    assert report["fast"]["ok"] - 16 in (1, 2)
    counts = await _counts(url)
    assert (counts.queued, counts.claimed, counts.done) == (0, 0, len(urls))
    duplicates = first.stats.get("dupefilter/filtered", 0) + second.stats.get("dupefilter/filtered", 0)
    assert duplicates == len(urls)  # each start request was made by both, queued by one


async def _counts(url: str) -> Any:
    frontier = SharedFrontier(frontier_url_for(url, "pages"))
    try:
        return await frontier.counts()
    finally:
        await frontier.aclose()


async def test_a_killed_processs_claimed_requests_are_redone(tmp_path: Path,
                                                             redis_server: RedisServer) -> None:
    url = f"{redis_server.url}?namespace=t{uuid.uuid4().hex[:12]}"
    spec = {"site": [{"name": "slow", "profile": "crawldelay", "delay": 0.3, "pages": 8,
                      "tolerance": IN_FLIGHT}]}
    settings = shared_settings(url, CRAWLPACE_FRONTIER_VISIBILITY=1.0)
    async with Farm(spec) as farm:
        urls = pages(farm.site("slow"))
        runner = tmp_path / "runner.py"
        runner.write_text(RUNNER, encoding="utf-8")
        config = tmp_path / "doomed.config.json"
        config.write_text(json.dumps({"urls": urls, "settings": settings,
                                      "output": str(tmp_path / "doomed.json")}), encoding="utf-8")
        with (tmp_path / "doomed.log").open("wb") as sink:
            doomed = await asyncio.create_subprocess_exec(
                sys.executable, str(runner), str(config), stdout=sink, stderr=sink, cwd=tmp_path,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
            try:
                for _ in range(300):  # until it holds claims and has fetched a page
                    await asyncio.sleep(0.05)
                    counts = await _counts(url)
                    if counts.claimed >= 2 and farm.stats()["slow"]["ok"] >= 1:
                        break
                else:
                    pytest.fail("the first process never claimed: "
                                + (tmp_path / "doomed.log").read_text(errors="replace")[-3000:])
            finally:
                doomed.send_signal(signal.SIGKILL)
                await doomed.wait()
        before = await _counts(url)  # what the killed process had finished (acknowledged)
        survivor = await crawl(tmp_path, urls, settings, "survivor")
        report = farm.stats()["slow"]
    assert survivor.returncode == 0, survivor.log[-3000:]
    assert survivor.stats["frontier/requeued"] >= before.claimed >= 1
    counts = await _counts(url)
    assert (counts.queued, counts.claimed, counts.done) == (0, 0, len(urls))
    # The survivor's own start requests were duplicates: it fetched what the killed one had not finished,
    # its claims included.
    assert before.done < len(urls)
    fetched = {record["url"] for record in survivor.records}
    assert len(survivor.records) == len(fetched) == len(urls) - before.done
    assert survivor.stats["dupefilter/filtered"] == len(urls)
    assert report["ok"] >= len(urls)
    assert report["violations"] == 0, report["violation_kinds"]
