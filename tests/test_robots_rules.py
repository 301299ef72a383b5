"""robots.txt rules for the crawl: parsing, broken input, and the per-origin cache."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from crawlpace._robotstxt._robots import MAX_ROBOTS_BYTES, RobotsRules, crawl_delay, robots_verdict
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


def test_a_huge_file_is_read_up_to_the_cap(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    head = b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n"
    filler = b"# padding\n" * (MAX_ROBOTS_BYTES // 10)
    rules = RobotsRules.parse(head + filler + b"Disallow: /late\n", "bot")
    assert not rules.allowed("http://a/private/1")  # the rules inside the first 500 KiB hold
    assert rules.allowed("http://a/late/1")  # the line past the cap is not read
    assert rules.crawl_delay == 2.0
    assert rules.note == "truncated"
    assert "only its first 512000 bytes are read" in caplog.text


def test_a_line_cut_by_the_cap_is_dropped_whole() -> None:
    body = b"User-agent: *\n" + b"#" * (MAX_ROBOTS_BYTES - 14 - 5) + b"\nDisallow: /priv"
    assert len(body) > MAX_ROBOTS_BYTES
    rules = RobotsRules.parse(body, "bot")
    assert rules.allowed("http://a/p")  # "Disallow: /" (cut from "/priv") must not forbid everything
    assert crawl_delay(b"User-agent: *\nCrawl-delay: 4\n" + b"#" * MAX_ROBOTS_BYTES, "bot") == 4.0


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
    cache.failed("http://b", 0.0)  # never fetched: everything is forbidden, for retry_ttl
    assert cache.state("http://b", 9.0) == "known"
    assert not cache.allowed("http://b", "http://b/anything")
    assert cache.refusal("http://b")[0] is False  # not for good
    assert cache.state("http://b", 10.0) == "unknown"


def test_an_outage_keeps_the_last_copy_and_backs_off() -> None:
    cache = RobotsCache("bot", ttl=1000.0, retry_ttl=10.0)
    cache.start("http://a", 0.0)
    first = cache.settle("http://a", 200, b"User-agent: *\nDisallow: /x\nCrawl-delay: 3\n", 0.0)
    assert first.crawl_delay_changed
    assert first.rules.crawl_delay == 3.0
    cache.start("http://a", 1000.0)  # expired: fetched again, and the site is down
    down = cache.settle("http://a", 503, b"<html>busy</html>", 1000.0)
    assert not down.crawl_delay_changed  # the copy from before, Crawl-delay and all, stays in force
    assert cache.allowed("http://a", "http://a/y")
    assert not cache.allowed("http://a", "http://a/x")
    expiries: list[float] = []
    for _ in range(3):
        now = 1010.0 + sum(expiries)  # the 503 was the first failure: 10 s
        assert cache.state("http://a", now) == "unknown"
        cache.start("http://a", now)
        cache.settle("http://a", None, b"", now, why="ConnectError")
        at = now
        while cache.state("http://a", at) == "known":
            at += 1.0
        expiries.append(at - now)
    assert expiries == [20.0, 40.0, 80.0]  # 10 s doubled for each failure in a row
    back = cache.settle("http://a", 200, b"User-agent: *\nDisallow: /z\n", 2000.0)
    assert back.crawl_delay_changed
    assert back.rules.crawl_delay is None
    assert cache.state("http://a", 2000.0 + 999.0) == "known"


@pytest.mark.parametrize(("status", "verdict"), [
    (200, "rules"), (204, "rules"), (301, "allow_all"), (399, "allow_all"), (401, "allow_all"),
    (403, "allow_all"), (404, "allow_all"), (410, "allow_all"), (429, "unreachable"), (500, "unreachable"),
    (503, "unreachable"), (599, "unreachable"), (100, "unreachable"), (None, "unreachable")])
def test_the_status_table_of_rfc_9309(status: int | None, verdict: str) -> None:
    assert robots_verdict(status) == verdict


async def test_a_failing_robots_txt_is_retried_then_obeyed(tmp_path: Path) -> None:
    from crawlpace.sim import SimServer

    robots_asks = 0

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal robots_asks
        status = 200
        if scope["path"] == "/robots.txt":
            robots_asks += 1
            status = 503 if robots_asks <= 1 else 200
        body = b"User-agent: *\nDisallow: /private\n" if scope["path"] == "/robots.txt" else b"page"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async with SimServer(app, "127.0.0.2") as server:
        summary, results = await crawl(tmp_path, [f"{server.url}/private/1", f"{server.url}/open"],
                                       {"BACKOFF_MIN_DELAY": 0.01, "BACKOFF_MAX_DELAY": 0.05})
    assert robots_asks == 2  # a 503, then the file: robots_retries = 1
    assert {result["url"].rsplit("/", 1)[1]: result["outcome"] for result in results} == {
        "1": "disallowed", "open": "ok"}
    assert summary.complete
