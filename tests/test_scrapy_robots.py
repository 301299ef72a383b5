"""The add-on's part of RFC 9309: the Crawl-Delay a robots.txt answer sets, keeps or clears."""

from __future__ import annotations

import logging

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse, Response

from crawlpace.testing import MockClock

from .test_scrapy_engine import FakeEngine, clock

__all__ = ["clock"]


async def crawl_delay_of(engine: FakeEngine, scope: str) -> float | None:
    snapshot = await engine.throttler.scope_stats(scope)
    return None if snapshot is None else snapshot.crawl_delay


async def answer(engine: FakeEngine, response: Response) -> None:
    robots = response.request
    assert robots is not None
    await engine.middleware.process_request(robots)
    await engine.middleware.process_response(robots, response)


def robots_request() -> Request:
    return Request("https://site.example/robots.txt", meta={"dont_obey_robotstxt": True})


async def test_each_robots_answer_sets_keeps_or_clears_the_crawl_delay(
        clock: MockClock, caplog: pytest.LogCaptureFixture) -> None:
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.1, "DOWNLOAD_DELAY_PER_SLOT": 0.1, "ROBOTSTXT_OBEY": True},
                        clock, latency=0.01)
    first = robots_request()
    await answer(engine, HtmlResponse(first.url, body=b"User-agent: *\nCrawl-delay: 2\n", request=first))
    assert await crawl_delay_of(engine, "site.example") == 2.0
    assert engine.stats.get("throttling/crawl_delay/site.example") == 2.0
    caplog.set_level(logging.WARNING)
    for code in (503, 429):  # unreachable: the Crawl-Delay in force stays
        down = robots_request()
        await answer(engine, Response(down.url, status=code, body=b"busy", request=down))
        assert await crawl_delay_of(engine, "site.example") == 2.0
    assert "answered 503: the Crawl-Delay in force (if any) is kept" in caplog.text
    again = robots_request()
    await answer(engine, HtmlResponse(again.url, body=b"User-agent: *\nDisallow: /x\n", request=again))
    assert await crawl_delay_of(engine, "site.example") is None  # removed from the file: cleared
    third = robots_request()
    await answer(engine, HtmlResponse(third.url, body=b"User-agent: *\nCrawl-delay: 1\n", request=third))
    assert await crawl_delay_of(engine, "site.example") == 1.0
    gone = robots_request()
    await answer(engine, Response(gone.url, status=404, request=gone))  # no file: no Crawl-Delay
    assert await crawl_delay_of(engine, "site.example") is None
    await engine.run()
