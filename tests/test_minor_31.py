"""Issue 31, item 8: unusable Crawl-delays are logged, URLs no resume could mend are failed, and a host
configured faster than the defaults gets its own pace from the shared frontier."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from crawlpace import ScopeError, Settings
from crawlpace._robotstxt._robots import crawl_delay
from crawlpace._scoping._fetchable import fetchable_scope
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.frontier._claims import claim_per_scope, claim_spacing


@pytest.mark.parametrize("value", ["inf", "1e309", "nan", "-1", "-inf", "soon"])
def test_an_unusable_crawl_delay_is_ignored_with_a_warning(value: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crawlpace._robotstxt._robots"):
        assert crawl_delay(f"User-agent: *\nCrawl-delay: {value}\nDisallow: /x\n", "crawlpace") is None
    assert f"Crawl-Delay {value!r} is not a usable number" in caplog.text


def test_a_usable_crawl_delay_is_read_without_a_word(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crawlpace._robotstxt._robots"):
        assert crawl_delay("User-agent: *\nCrawl-delay: 2.5\n", "crawlpace") == 2.5
    assert caplog.text == ""


BROKEN = ["http://127.0.0.1:99999/x", "http://127.0.0.1:0/x", "http://999.1.1.1/x", "http://1.2.3.4.5/x",
          "http://12345678901/x", "http://0x7f.1/x", "http://127.0.0.1./x"]


@pytest.mark.parametrize("url", BROKEN)
def test_invalid_ports_and_numeric_hosts_are_refused_up_front(url: str) -> None:
    with pytest.raises(ScopeError):
        fetchable_scope(url)


def test_valid_addresses_still_pass() -> None:
    for url in ("http://127.0.0.1:8080/x", "http://192.0.2.1/", "http://[::1]:9/", "http://a.example:65535/",
                "http://host1.example/", "http://v2.a.example./"):
        assert fetchable_scope(url)


async def test_such_urls_end_failed_and_a_resume_leaves_them(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    job = CrawlJob(Settings(), CrawlOptions(output=output, trust_env=False))
    summary = await asyncio.wait_for(job.run(BROKEN), 20)
    results = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert {result["outcome"] for result in results} == {"failed"}
    assert summary.complete
    assert summary.requests == 0


def test_the_frontier_spaces_and_caps_claims_by_the_fastest_configured_scope() -> None:
    fast = {"concurrency": 4, "delay": 0.0, "delay_per_slot": 0.0}
    slow = {"concurrency": 1, "delay": 1.0}
    settings = Settings.from_dict({"concurrent_requests": 8, "scope_defaults": slow,
                                   "scopes": {"127.0.0.9": fast}})
    # Was 1.0: one URL a second for the 4-slot host, whatever its limits.
    assert claim_spacing(settings) == 0.0
    assert claim_per_scope(settings) == 6  # its 4 slots, plus two
