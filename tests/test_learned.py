"""Warm start: learned records, how far they are trusted, where they are kept, a crawl started warm."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from crawlpace import Settings, Throttler
from crawlpace._exceptions import ConfigError
from crawlpace._throttle._learned import (
    FRESH_TRUST,
    HALF_LIFE,
    LearnedFile,
    LearnedRedis,
    LearnedScope,
    WarmStart,
    open_learned,
)
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.sim import Farm
from crawlpace.testing import MockClock

from .test_crawl import lines, pages

NOW = 1_800_000_000.0
RAMPUP = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "DOWNLOAD_DELAY": 1.0})


def warm(record: LearnedScope, scope: str = "example.com") -> WarmStart:
    return WarmStart({scope: record}, NOW)


# -- trust ---------------------------------------------------------------------------------------


def test_fresh_knowledge_starts_near_the_learned_rate_and_older_lower() -> None:
    config = RAMPUP.scope_defaults
    fresh = warm(LearnedScope(rate=20.0, learned_at=NOW))
    assert fresh.config_for("example.com", config).delay == pytest.approx(1 / 14.0)
    day_old = warm(LearnedScope(rate=20.0, learned_at=NOW - HALF_LIFE))
    assert day_old.config_for("example.com", config).delay == pytest.approx(1 / 7.0)
    # A week on, 0.7 / 128 of 20/s is below the cold start of 1/s: the record is ignored.
    stale = warm(LearnedScope(rate=20.0, learned_at=NOW - 7 * HALF_LIFE))
    assert stale.config_for("example.com", config) == config
    # Other scopes, and scopes without rampup, are left alone.
    assert fresh.config_for("other.example", config) == config
    plain = dataclasses.replace(config, rampup=False)
    assert fresh.config_for("example.com", plain) == plain


def test_the_refused_rate_caps_the_start() -> None:
    record = LearnedScope(rate=30.0, refused_rate=12.0, learned_at=NOW)
    assert warm(record).config_for("example.com", RAMPUP.scope_defaults).delay == pytest.approx(1 / 8.4)


def test_autothrottle_starts_near_its_learned_delay() -> None:
    settings = Settings.from_scrapy({"AUTOTHROTTLE_ENABLED": True, "DOWNLOAD_DELAY": 0.1})
    record = LearnedScope(delay=0.4, learned_at=NOW)
    tuned = warm(record).autothrottle_for("example.com", settings.scope_defaults, settings.autothrottle)
    assert tuned.start_delay == pytest.approx(0.4 / 0.7)  # near the learned delay when fresh, not 5 s
    slow = LearnedScope(delay=10.0, learned_at=NOW)
    same = warm(slow).autothrottle_for("example.com", settings.scope_defaults, settings.autothrottle)
    assert same is settings.autothrottle  # never slower than a cold start


async def test_a_warm_scope_sends_at_its_head_start_from_the_first_request(clock: MockClock) -> None:
    record = LearnedScope(rate=4.0 / FRESH_TRUST, learned_at=time.time())
    exact = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "DOWNLOAD_DELAY": 1.0,
                                  "RANDOMIZE_DOWNLOAD_DELAY": False, "BACKOFF_JITTER": False})
    settings = dataclasses.replace(exact, warm_start=WarmStart({"example.com": record}, time.time()))
    sends = []
    async with Throttler(settings, clock=clock) as throttler:
        for _ in range(3):
            async with throttler.slot("https://example.com/") as permit:
                sends.append(permit.granted_at)
                permit.feedback(status=200, latency=0.01)
    # 4/s (70 % of 5.7) from the start instead of the cold 1/s, and rampup's doubling from there.
    assert sends[:2] == pytest.approx([0.0, 0.25])
    assert 0.15 < sends[2] - sends[1] < 0.25


# -- where records live --------------------------------------------------------------------------


def test_the_sqlite_file_keeps_records_and_skips_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / "learned.sqlite"
    sink = LearnedFile(path)
    record = LearnedScope(rate=5.0, refused_rate=6.0, latency=0.05, delay=0.2, learned_at=NOW)
    sink.save({"a.example": record})
    sink._db.execute("INSERT INTO learned VALUES ('bad.example', '{\"rate\": -1}')")
    sink._db.execute("INSERT INTO learned VALUES ('junk.example', 'not json')")
    sink._db.commit()
    sink.close()
    again = open_learned(str(path))
    assert again.load() == {"a.example": record}
    again.close()


def test_redis_keeps_records_in_the_namespace_with_a_ttl(redis_url: str) -> None:
    sink = LearnedRedis(redis_url, ttl=600)
    record = LearnedScope(rate=5.0, learned_at=NOW)
    sink.save({"a.example": record, "b.example": dataclasses.replace(record, rate=7.0)})
    client = redis.Redis.from_url(redis_url.split("?", 1)[0])
    key = f"{sink.namespace}:learned:a.example"
    assert 0 < client.ttl(key) <= 600
    client.close()
    other = LearnedRedis(redis_url)  # the next job of the fleet
    assert other.load() == {"a.example": record, "b.example": dataclasses.replace(record, rate=7.0)}
    other.close()
    sink.close()


def test_redis_records_of_a_namespace_with_glob_characters_stay_its_own(redis_url: str) -> None:
    """As a SCAN pattern, "j[1]:learned:*" would also match the records of job "j1"."""
    server = redis_url.split("?", 1)[0]
    tag = redis_url.rsplit("=", 1)[1]
    record = LearnedScope(rate=5.0, learned_at=NOW)
    mine, lookalike = LearnedRedis(f"{server}?namespace={tag}[1]"), LearnedRedis(f"{server}?namespace={tag}1")
    try:
        lookalike.save({"their.example": record})
        mine.save({"my.example": record})
        assert mine.load() == {"my.example": record}
        assert lookalike.load() == {"their.example": record}
    finally:
        mine.close()
        lookalike.close()


def test_a_bad_learned_setting_is_named() -> None:
    with pytest.raises(ConfigError, match="learned: expected a SQLite file path"):
        Settings.from_dict({"learned": 3})
    assert Settings.from_scrapy({"CRAWLPACE_LEARNED": "x.sqlite"}).learned == "x.sqlite"


# -- two crawls of one site -----------------------------------------------------------------------


async def crawl(tmp_path: Path, farm: Farm, name: str, learned: Path) -> tuple[float, dict[str, Any]]:
    output = tmp_path / f"{name}.jsonl"
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "DOWNLOAD_DELAY": 0.5,
                                     "RANDOMIZE_DOWNLOAD_DELAY": False, "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
                                     "BACKOFF_JITTER": False, "CRAWLPACE_LEARNED": str(learned)})
    job = CrawlJob(settings, CrawlOptions(output=output, trust_env=False, robots=False, retries=10))
    started = time.monotonic()
    summary = await job.run(pages(farm))
    assert summary.complete
    assert {line["status"] for line in lines(output)} == {200}
    return time.monotonic() - started, farm.stats(timeline=True)["bucket"]


async def test_a_second_crawl_starts_where_the_first_left_off(tmp_path: Path) -> None:
    learned = tmp_path / "learned.sqlite"
    spec = {"site": [{"name": "bucket", "profile": "ratelimit", "rate": 20.0, "burst": 2, "pages": 40}]}
    async with Farm(spec) as farm:
        cold_seconds, cold = await crawl(tmp_path, farm, "cold", learned)
    records = LearnedFile(learned).load()
    host = next(iter(records))
    rate = records[host].rate
    assert rate is not None
    assert rate > 4.0  # well above the cold start of 2/s
    async with Farm(spec) as farm:
        warm_seconds, warm = await crawl(tmp_path, farm, "warm", learned)
    # The sends of each crawl's first two seconds (from its first request; 10 cold, 20 warm idle),
    # not the crawls' lengths: those (4.8 s and 3.3 s idle) swap on a loaded machine (7.1 s warm
    # against 5.4 s cold once, at load 25), a start's pace does not.
    early = [sum(crawled["timeline"]["requests"][:2]) for crawled in (cold, warm)]
    print(f"cold {cold_seconds:.2f}s, warm {warm_seconds:.2f}s; first two seconds: {early} sends")
    assert early[1] > early[0]


def test_the_scrapy_addon_reads_crawlpace_learned(tmp_path: Path) -> None:
    from scrapy.settings import Settings as ScrapySettings

    from crawlpace.scrapy._settings import read_config

    path = tmp_path / "learned.sqlite"
    sink = LearnedFile(path)
    sink.save({"shop.example": LearnedScope(rate=10.0, learned_at=time.time())})
    sink.close()
    settings = ScrapySettings()
    settings.setdict({"CRAWLPACE_LEARNED": str(path), "THROTTLING_SCOPE_DEFAULTS": {"rampup": True}},
                     priority="project")
    config = read_config(settings, lambda cls: cls())
    assert config.learner is not None
    assert set(config.settings.warm_start.records) == {"shop.example"}
    assert config.settings.learned == str(path)
    config.learner.sink.close()
    bad = ScrapySettings()
    bad.setdict({"CRAWLPACE_LEARNED": str(tmp_path / "no" / "such" / "dir.sqlite")}, priority="project")
    with pytest.raises(ConfigError, match="CRAWLPACE_LEARNED: cannot open"):
        read_config(bad, lambda cls: cls())
