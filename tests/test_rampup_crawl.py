"""Rampup end to end: a crawl over real HTTP against simulated sites on loopback.

The pure rules are tested in virtual time in test_rampup.py; here the point is
that the pieces meet: the send-rate meter sees real sends, the latency comes
from real answers, and the servers' own rules (Crawl-Delay, Retry-After, an
announced budget) still win over whatever rate rampup would like.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from crawlpace import Settings, Throttler
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.sim import Farm

RAMPUP: dict[str, Any] = {
    "THROTTLING_SCOPE_DEFAULTS": {"rampup": True},
    "DOWNLOAD_DELAY": 0.5,  # rampup starts at 2 requests per second
    "CONCURRENT_REQUESTS": 32,
}


async def test_rampup_raises_the_rate_but_never_over_a_servers_own_rules(tmp_path: Path) -> None:
    spec = {"site": [
        {"name": "bucket", "profile": "ratelimit", "rate": 40.0, "burst": 5, "retry_after": False,
         "pages": 120},
        {"name": "spaced", "profile": "crawldelay", "delay": 0.15, "pages": 8},
        {"name": "strict", "profile": "retryafter", "rate": 20.0, "embargo": 1, "pages": 40},
        {"name": "budget", "profile": "headers", "limit": 10, "window": 1.0, "pages": 20},
    ]}
    output = tmp_path / "out.jsonl"
    async with Farm(spec) as farm:
        urls = [f"{site.url}/page/{n}" for site in farm.sites for n in range(1, site.app.pages + 1)]
        job = CrawlJob(Settings.from_scrapy(RAMPUP), CrawlOptions(output=output, trust_env=False,
                                                                   retries=10))
        summary = await job.run(urls)
        report = farm.stats()
    results = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert Counter(result["url"] for result in results) == Counter(urls)
    assert {result["status"] for result in results} == {200}
    assert summary.complete
    for name, site in report.items():
        assert site["violations"] == 0, (name, site["violation_kinds"])
    # The bucket was sent to well above the starting 2/s ...
    assert report["bucket"]["peak_per_second"] >= 8
    # ... while the Crawl-Delay site kept one request at a time (and its spacing: no violation).
    assert report["spaced"]["peak_inflight"] == 1
    assert report["spaced"]["requests"] == 8 + 1
    # The announced budget is paced, not run into.
    assert report["budget"]["throttled"] == 0


async def test_stats_show_what_rampup_decided() -> None:
    spec = {"site": [{"name": "bucket", "profile": "ratelimit", "rate": 30.0, "burst": 2,
                      "retry_after": False, "pages": 100}]}
    async with Farm(spec) as farm, httpx.AsyncClient(trust_env=False) as client:
        site = farm.sites[0]
        host = site.url.split("//", 1)[1].split(":", 1)[0]
        async with Throttler(Settings.from_scrapy(RAMPUP)) as throttler:
            for n in range(1, 31):
                url = f"{site.url}/page/{n}"
                async with throttler.slot(url) as permit:
                    permit.feedback(await client.get(url))
            stats = (await throttler.stats())[host]
    assert stats.rampup is not None
    assert stats.rampup.rate > 2.0  # above the starting rate
    assert stats.rampup.target == (1.0, 1.0)
    assert stats.concurrency >= 1
    assert stats.as_dict()["rampup"]["phase"] in {"start", "steady"}
    assert "rampup=" in repr(stats)
