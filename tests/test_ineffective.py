"""Settings that had no effect, misspelt names, and the block of limits in force at start."""

from __future__ import annotations

import logging

import pytest

from crawlpace import ConfigError, Settings, Throttler
from crawlpace._settings._effective import effective_limits
from crawlpace._settings._ineffective import crawl_delay_notes, static_notes

from .conftest import ThrottlerFactory


def test_a_scope_delay_below_what_its_per_slot_delay_allows_is_named_with_the_fix() -> None:
    # Seen with the add-on: 4 slots and delay 0.1 ran at 4.3 pages/s, not 10.
    settings = Settings.from_scrapy({"THROTTLING_SCOPES": {"127.0.0.5": {"concurrency": 4, "delay": 0.1}}})
    assert static_notes(settings) == [
        'THROTTLING_SCOPES["127.0.0.5"]: "delay": 0.1 does not set the pace: 4 slot(s) that each wait '
        'delay_per_slot 1s between sends allow at most 4 requests/s, not 10/s; add "delay_per_slot": 0.4 '
        '(or lower) to it']
    fixed = Settings.from_scrapy({"THROTTLING_SCOPES": {"127.0.0.5": {"concurrency": 4, "delay": 0.1,
                                                                      "delay_per_slot": 0.4}}})
    assert static_notes(fixed) == []


def test_gradual_slots_where_they_cannot_apply_are_named() -> None:
    assert static_notes(Settings.from_scrapy({"THROTTLING_GRADUAL_SLOTS": True})) == [
        "THROTTLING_GRADUAL_SLOTS has no effect: gradual slots apply to a scope with several slots and no "
        "delay, without rampup or AutoThrottle, and this one has one slot (1)"]
    eight = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0}
    assert static_notes(Settings.from_scrapy({**eight, "THROTTLING_GRADUAL_SLOTS": True})) == []
    paced = Settings.from_scrapy({**eight, "THROTTLING_SCOPES": {"api.example": {"gradual_slots": True,
                                                                                 "delay": 0.5}}})
    assert static_notes(paced) == [
        'THROTTLING_SCOPES["api.example"]["gradual_slots"] has no effect: gradual slots apply to a scope '
        "with several slots and no delay, without rampup or AutoThrottle, and this one has a delay (0.5s)"]


def test_download_delay_with_two_slots_per_domain_explains_the_slower_pace() -> None:
    # Seen with the add-on: DOWNLOAD_DELAY = 0.25 and 2 per domain ran at 1.9 pages/s per site.
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 0.25, "CONCURRENT_REQUESTS_PER_DOMAIN": 2})
    assert static_notes(settings) == [
        "DOWNLOAD_DELAY = 0.25 does not set the pace: 2 slot(s) per scope (CONCURRENT_REQUESTS_PER_DOMAIN) "
        "that each wait DOWNLOAD_DELAY_PER_SLOT = 1s between sends allow at most 2 requests/s, not the 4/s "
        "the delay allows; set DOWNLOAD_DELAY_PER_SLOT = 0.5 or lower"]


def test_a_concurrency_above_concurrent_requests_and_a_host_port_key_are_named() -> None:
    settings = Settings.from_scrapy({"CONCURRENT_REQUESTS": 4, "RANDOMIZE_DOWNLOAD_DELAY": False,
                                     "THROTTLING_SCOPES": {"api.example": {"concurrency": 8, "delay": 0,
                                                                           "delay_per_slot": 0},
                                                           "127.0.0.5:8080": {"delay": 1}}})
    assert static_notes(settings) == [
        'THROTTLING_SCOPES["api.example"]["concurrency"] = 8 is above CONCURRENT_REQUESTS = 4, which caps '
        "every scope at 4; raise CONCURRENT_REQUESTS to 8 or more",
        'THROTTLING_SCOPES["127.0.0.5:8080"]: scopes are host names, without scheme, port or path, so this '
        'key matches no request; write "127.0.0.5"']


async def test_keys_that_matched_no_request_are_listed_at_close_with_a_did_you_mean(
        make_throttler: ThrottlerFactory, caplog: pytest.LogCaptureFixture) -> None:
    throttler = make_throttler({"THROTTLING_SCOPES": {"www.exmaple.com": {"delay": 0.5},
                                                      "*.example.org": {"concurrency": 2},
                                                      "used.example": {"delay": 0.5}}})
    for url in ("https://www.example.com/", "https://used.example/", "https://a.example.org/"):
        async with throttler.slot(url) as permit:
            permit.feedback(status=200)
    with caplog.at_level(logging.WARNING, logger="crawlpace._throttle._throttler"):
        await throttler.aclose()
    lines = [r.getMessage() for r in caplog.records if "had no effect" in r.getMessage()]
    assert lines == ['setting had no effect: THROTTLING_SCOPES["www.exmaple.com"] matched no request; '
                     "did you mean 'www.example.com'?"]


async def test_a_crawl_delay_that_replaced_the_delay_is_named(make_throttler: ThrottlerFactory,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 0.5, "DOWNLOAD_DELAY_PER_SLOT": 0.5})
    assert crawl_delay_notes(settings, {"slow.example": 5.0, "fast.example": 0.1}) == [
        "DOWNLOAD_DELAY = 0.5 had no effect on 1 scope(s) (slow.example): their robots.txt Crawl-Delay set a "
        "longer pace; list a scope in THROTTLING_SCOPES with its own delay to override it, or set "
        "THROTTLING_ROBOTSTXT_OBEY = False"]
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.5, "DOWNLOAD_DELAY_PER_SLOT": 0.5})
    await throttler.set_crawl_delay("slow.example", 5.0)
    with caplog.at_level(logging.WARNING, logger="crawlpace._throttle._throttler"):
        await throttler.aclose()
    assert "had no effect on 1 scope(s) (slow.example)" in caplog.text


@pytest.mark.parametrize(("name", "message"), [
    ("CONCURRENT_REQUEST_PER_DOMAIN", 'CONCURRENT_REQUEST_PER_DOMAIN: not a setting crawlpace reads, and so '
     'without effect; did you mean "CONCURRENT_REQUESTS_PER_DOMAIN"? see docs/settings.md'),
    ("DOWNLOAD_DELAYS", 'DOWNLOAD_DELAYS: not a setting crawlpace reads, and so without effect; did you mean '
     '"DOWNLOAD_DELAY"? see docs/settings.md'),
    ("download_delay", 'download_delay: setting names are upper case; did you mean "DOWNLOAD_DELAY"?'),
    ("RAMPUP_ENABLED", 'RAMPUP_ENABLED: unknown crawlpace setting; did you mean THROTTLING_SCOPE_DEFAULTS = '
     '{"rampup": True} (every scope), or the key "rampup" in THROTTLING_SCOPES for some? see '
     "docs/settings.md for the full list"),
])
def test_near_miss_names_are_errors_in_the_python_api(name: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Throttler({name: 1})
    assert info.value.problems == [message]


def test_scrapys_own_settings_are_not_taken_for_slips() -> None:
    Settings.from_scrapy({"DOWNLOAD_TIMEOUT": 10, "DOWNLOAD_DELAY_JITTER": 1, "REFERER_ENABLED": True,
                          "CONCURRENT_ITEMS": 100, "DOWNLOAD_MAXSIZE": 1})


def test_the_start_block_says_what_each_scope_gets(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings.from_scrapy({"CONCURRENT_REQUESTS": 8, "DOWNLOAD_DELAY": 0.25,
                                     "THROTTLING_SCOPES": {"api.example": {"concurrency": 16, "rampup": True,
                                                                           "quota": 100}}})
    assert effective_limits(settings, "memory://") == (
        "crawlpace limits in force (store memory://, 8 requests in flight at most over all scopes, "
        "robots.txt obeyed):\n"
        "  every other scope: concurrency 1, delay 0.25s, per-slot delay 1s, at most 1 requests/s\n"
        "  api.example: concurrency 8 (CONCURRENT_REQUESTS caps 16), delay 0.25s, per-slot delay 1s, at most "
        "4 requests/s, rampup on (up to 8 slots, 0.001s apart), quota 100 per 60s")
    with caplog.at_level(logging.INFO, logger="crawlpace._throttle._throttler"):
        Throttler(settings)
    assert "crawlpace limits in force (store memory://" in caplog.text


def test_with_one_slot_a_shorter_delay_does_nothing_at_all() -> None:
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 0.5, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    [note] = static_notes(settings)
    assert note.startswith("DOWNLOAD_DELAY = 0.5 has no effect: 1 slot(s) per scope"), note
