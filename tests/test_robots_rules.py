"""robots.txt rules for the crawl: parsing, broken input, and the per-origin cache."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from crawlpace._robots import MAX_ROBOTS_BYTES, RobotsRules
from crawlpace.frontier import RobotsCache

from .test_crawl import crawl


def test_rules_select_the_group_of_the_user_agent() -> None:
    body = (b"User-agent: crawlpace\nDisallow: /slow\nCrawl-delay: 3\n\n"
            b"User-agent: *\nDisallow: /\n")
    ours = RobotsRules.parse(body, "crawlpace/0.3")
    assert ours.allowed("http://a/page")
    assert not ours.allowed("http://a/slow/1")
    assert ours.crawl_delay == 3.0
    theirs = RobotsRules.parse(body, "otherbot")
    assert not theirs.allowed("http://a/page")
    assert theirs.crawl_delay is None


def test_a_huge_file_allows_everything_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    rules = RobotsRules.parse(b"User-agent: *\nDisallow: /\n" + b"#" * MAX_ROBOTS_BYTES, "bot")
    assert rules.allowed("http://a/anything")
    assert rules.note == "too large"
    assert "larger than" in caplog.text


def test_garbage_allows_everything() -> None:
    rules = RobotsRules.parse(b"\xff\xfe\x00<html>not robots</html>\nDisallow", "bot")
    assert rules.allowed("http://a/x")
    assert rules.crawl_delay is None


def test_the_cache_expires_rules_and_stand_ins() -> None:
    cache = RobotsCache("bot", ttl=100.0, retry_ttl=10.0)
    assert cache.state("http://a", 0.0) == "unknown"
    cache.start("http://a", 0.0)
    assert cache.state("http://a", 5.0) == "pending"
    assert cache.allowed("http://a", "http://a/x")  # nothing known yet: not a refusal
    cache.learn("http://a", RobotsRules.parse(b"User-agent: *\nDisallow: /x\n", "bot"), 5.0)
    assert cache.state("http://a", 104.0) == "known"
    assert not cache.allowed("http://a", "http://a/x")
    assert cache.state("http://a", 105.0) == "unknown"
    cache.failed("http://b", 0.0)
    assert cache.state("http://b", 9.0) == "known"
    assert cache.allowed("http://b", "http://b/anything")
    assert cache.state("http://b", 10.0) == "unknown"


async def test_a_failing_robots_txt_is_retried_then_treated_as_absent(tmp_path: Path) -> None:
    from crawlpace.sim import SimServer

    robots_asks = 0

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal robots_asks
        status = 200
        if scope["path"] == "/robots.txt":
            robots_asks += 1
            status = 503 if robots_asks <= 2 else 200
        body = b"User-agent: *\nDisallow: /private\n" if scope["path"] == "/robots.txt" else b"page"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async with SimServer(app, "127.0.0.2") as server:
        summary, results = await crawl(tmp_path, [f"{server.url}/private/1", f"{server.url}/open"],
                                       {"BACKOFF_MIN_DELAY": 0.01, "BACKOFF_MAX_DELAY": 0.05})
    assert robots_asks == 3  # two 503s, then the file: robots_retries = 2
    assert {result["url"].rsplit("/", 1)[1]: result["outcome"] for result in results} == {
        "1": "disallowed", "open": "ok"}
    assert summary.complete
