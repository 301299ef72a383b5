"""The names of Scrapy's throttling draft (scrapy/scrapy#6931), and what the add-on reports.

The draft's later state adds the ``dont_throttle`` and ``delay`` request
meta keys and the settings ``THROTTLING_SCOPE_CONCURRENCY``,
``THROTTLER_DEBUG`` and ``THROTTLING_SCOPE_LIMIT``; the add-on takes them
with the same names. Driven by the fake engine on a fake clock.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from scrapy import Request
from scrapy.settings import Settings as ScrapySettings

from crawlpace import Settings
from crawlpace._settings._effective import effective_limits
from crawlpace.scrapy._runtime import Runtime
from crawlpace.scrapy._settings import read_config
from crawlpace.testing import MockClock

from .test_scrapy_engine import EXACT, FakeEngine


@pytest.fixture
def clock() -> MockClock:
    return MockClock(autojump=True)


def config_of(values: dict[str, Any]) -> Any:
    settings = ScrapySettings()
    settings.setdict({**EXACT, **values}, priority="project")
    return read_config(settings, lambda cls: cls())


# --- dont_throttle and delay ---------------------------------------------------------------------------


async def test_a_dont_throttle_request_goes_at_once_and_counts_for_nothing(clock: MockClock) -> None:
    engine = FakeEngine({"DOWNLOAD_DELAY": 1.0, "DOWNLOAD_DELAY_PER_SLOT": 1.0}, clock, latency=0.1)
    await engine.run([Request("https://a.example/1"), Request("https://a.example/2"),
                      Request("https://a.example/login", meta={"dont_throttle": True}),
                      Request("https://a.example/3")])
    at = {send.url.rsplit("/", 1)[1]: round(send.at, 6) for send in engine.sends}
    assert at["login"] == 0.0  # not behind the two queued before it
    assert [at["1"], at["2"], at["3"]] == [0.0, 1.0, 2.0]  # and it took no turn of theirs
    login = next(send for send in engine.sends if send.url.endswith("login"))
    assert login.scopes == ()  # sent under no scope
    assert engine.stats.get("throttling/dont_throttle") == 1
    assert engine.stats.get("throttling/permits") == 3


async def test_the_delay_meta_key_holds_a_request_once(clock: MockClock) -> None:
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.5, "DOWNLOAD_DELAY_PER_SLOT": 0.5}, clock, latency=0.1)
    slow = Request("https://a.example/slow", meta={"delay": 3.0})
    await engine.run([slow, Request("https://a.example/1"), Request("https://a.example/2")], close=False)
    at = {send.url.rsplit("/", 1)[1]: round(send.at, 6) for send in engine.sends}
    assert (at["1"], at["2"]) == (0.0, 0.5)  # the others do not wait for it
    assert at["slow"] == 3.0
    # A retry copies meta: the delay is not served again.
    engine.sends.clear()
    start = clock.now()
    await engine.run([slow.replace(dont_filter=True)])
    assert round(engine.sends[0].at - start, 6) <= 0.5


async def test_the_delay_meta_key_without_the_scheduler(clock: MockClock) -> None:
    engine = FakeEngine({"CRAWLPACE_SCHEDULER": False}, clock, latency=0.1)
    await engine.middleware.process_request(Request("https://b.example/", meta={"delay": 2.0}))
    assert clock.now() == 2.0


def test_the_drafts_setting_names() -> None:
    config = config_of({"THROTTLING_SCOPE_CONCURRENCY": 3, "THROTTLER_DEBUG": True})
    assert config.settings.scope_defaults.concurrency == 3
    assert config.debug
    # The seed's name wins when both are given.
    both = config_of({"THROTTLING_SCOPE_CONCURRENCY": 3, "CONCURRENT_REQUESTS_PER_DOMAIN": 5})
    assert both.settings.scope_defaults.concurrency == 5


def test_the_drafts_scope_limit_is_said_to_have_no_effect(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="crawlpace.scrapy"):
        config_of({"THROTTLING_SCOPE_LIMIT": 1000})
    assert "THROTTLING_SCOPE_LIMIT (from Scrapy's throttling draft) has no effect" in caplog.text


# --- what is in force, what happened ----------------------------------------------------------------


def test_a_catch_all_scope_is_shown_as_what_every_other_scope_gets() -> None:
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 0.5,
                                     "THROTTLING_SCOPES": {"*": {"rampup": True}, "a.example": {"delay": 2}}})
    lines = effective_limits(settings).splitlines()
    assert lines[1].startswith('  every other scope ("*"): ')
    assert "rampup on" in lines[1]
    assert lines[2].startswith("  a.example: ")
    assert len(lines) == 3  # no line for defaults that no scope runs under
    plain = effective_limits(Settings.from_scrapy({"DOWNLOAD_DELAY": 0.5})).splitlines()
    assert plain[1].startswith("  every other scope: concurrency 1, delay 0.5s")


async def test_a_crawl_delay_handed_over_twice_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    """Scrapy 2.18+ gives the add-on each robots.txt twice: its raw response, then its parser's signal."""
    config = config_of({"ROBOTSTXT_OBEY": True, "THROTTLING_SCOPES": {"a.example": {"delay": 0.1}}})
    runtime = Runtime(config, stats=None, wake=lambda: None)
    with caplog.at_level(logging.WARNING):
        await runtime.crawl_delays.apply(("a.example",), 2.0)
        await runtime.crawl_delays.apply(("a.example",), 2.0)
        await runtime.crawl_delays.apply(("a.example",), 3.0)  # a new value is applied (and said)
    assert caplog.text.count("robots.txt asks for Crawl-Delay 2s") == 1
    assert caplog.text.count("robots.txt asks for Crawl-Delay 3s") == 1
    await runtime.aclose()
