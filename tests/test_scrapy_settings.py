"""The add-on reads seed 001's settings from Scrapy's, rejects bad ones as the core does, rewires Scrapy."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import scrapy
from scrapy.settings import Settings as ScrapySettings

import crawlpace
import crawlpace.scrapy
from crawlpace import ConfigError, Settings
from crawlpace.scrapy import (
    Addon,
    ThrottlingExtension,
    ThrottlingManager,
    ThrottlingMiddleware,
    ThrottlingScheduler,
)
from crawlpace.scrapy._compat import MIN_SCRAPY, SCRAPY_VERSION, default_backoff_exceptions, version_tuple
from crawlpace.scrapy._managers import RequestScopesManager
from crawlpace.scrapy._settings import AddonConfig, read_config, scrapy_values
from crawlpace.stores.memory import MemoryStore


def config_of(values: dict[str, Any], priority: str = "project", **kwargs: Any) -> AddonConfig:
    settings = ScrapySettings()
    settings.setdict(values, priority=priority)
    return read_config(settings, lambda cls: cls(), **kwargs)


def problems_of(values: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        config_of(values)
    return caught.value.problems


def core_problems(values: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        Settings.from_scrapy(values)
    return caught.value.problems


def addon_settings(values: dict[str, Any]) -> ScrapySettings:
    settings = ScrapySettings()
    settings.setdict(values, priority="project")
    Addon().update_settings(settings)
    return settings


# --- reading --------------------------------------------------------------------------------------


def test_scrapys_own_defaults_do_not_count() -> None:
    """Unset, a scope has seed 001's one slot and one second, not Scrapy's 8 slots and no delay."""
    config = config_of({})
    defaults = config.settings.scope_defaults
    assert (defaults.concurrency, defaults.delay, defaults.delay_per_slot) == (1, 1.0, 1.0)
    assert (defaults.jitter.low, defaults.jitter.high) == (-0.5, 0.5)
    assert config.settings.concurrent_requests == 16
    assert not config.settings.autothrottle.enabled
    assert isinstance(config.store, MemoryStore)
    assert config.use_scheduler
    assert not config.debug


def test_every_seed_setting_is_read() -> None:
    config = config_of({
        "CONCURRENT_REQUESTS": 32, "CONCURRENT_REQUESTS_PER_DOMAIN": 4, "DOWNLOAD_DELAY": 0.25,
        "DOWNLOAD_DELAY_PER_SLOT": 0.5, "RANDOMIZE_DOWNLOAD_DELAY": [-0.1, 0.3], "THROTTLING_WINDOW": 30.0,
        "THROTTLING_SCOPES": {"api.example": {"concurrency": 8, "delay": 0.1, "quota": 50.0,
                                              "backoff": {"http_codes": [429], "max_delay": 30.0}}},
        "BACKOFF_HTTP_CODES": [429, 503], "BACKOFF_DELAY_FACTOR": 3.0, "BACKOFF_MIN_DELAY": 2.0,
        "BACKOFF_MAX_DELAY": 120.0, "BACKOFF_JITTER": 0.2, "BACKOFF_WINDOW": 30.0,
        "BACKOFF_EXCEPTIONS": ["builtins.TimeoutError"], "RAMPUP_BACKOFF_TARGET": [1, 3],
        "THROTTLING_ROBOTSTXT_OBEY": False, "THROTTLING_ROBOTSTXT_MAX_DELAY": 10.0,
        "REDIRECT_MAX_DELAY": 5.0, "DELAYED_REQUESTS_WARN_THRESHOLD": 50, "AUTOTHROTTLE_ENABLED": True,
        "AUTOTHROTTLE_START_DELAY": 2.0, "AUTOTHROTTLE_MAX_DELAY": 20.0,
        "AUTOTHROTTLE_TARGET_CONCURRENCY": 2.0, "ROBOTSTXT_OBEY": True,
    })
    settings = config.settings
    defaults = settings.scope_defaults
    assert settings.concurrent_requests == 32
    assert (defaults.concurrency, defaults.delay) == (4, 0.25)
    assert (defaults.delay_per_slot, defaults.window) == (0.5, 30.0)
    assert (defaults.jitter.low, defaults.jitter.high) == (-0.1, 0.3)
    backoff = defaults.backoff
    assert backoff.http_codes == frozenset({429, 503})
    assert (backoff.delay_factor, backoff.min_delay) == (3.0, 2.0)
    assert (backoff.max_delay, backoff.window) == (120.0, 30.0)
    assert (backoff.jitter.low, backoff.jitter.high) == (-0.2, 0.2)
    assert backoff.exceptions == ("builtins.TimeoutError",)
    api = settings.scope_config("api.example")
    assert (api.concurrency, api.delay, api.quota, api.window) == (8, 0.1, 50.0, 30.0)
    assert api.backoff.http_codes == frozenset({429})
    assert (api.backoff.max_delay, api.backoff.min_delay) == (30.0, 2.0)  # merged over the globals
    assert settings.rampup_backoff_target == (1.0, 3.0)
    assert (settings.robotstxt_obey, settings.robotstxt_max_delay) == (False, 10.0)
    assert not config.robots  # THROTTLING_ROBOTSTXT_OBEY off
    assert (settings.redirect_max_delay, settings.delayed_requests_warn_threshold) == (5.0, 50)
    at = settings.autothrottle
    assert (at.enabled, at.start_delay, at.max_delay, at.target_concurrency) == (True, 2.0, 20.0, 2.0)


def test_scrapy_219_jitter_name_stands_in() -> None:
    config = config_of({"DOWNLOAD_DELAY_JITTER": 0.2})
    jitter = config.settings.scope_defaults.jitter
    assert (jitter.low, jitter.high) == (-0.2, 0.2)


def test_backoff_exceptions_default_to_scrapys_download_failures() -> None:
    paths = default_backoff_exceptions()
    assert "twisted.internet.error.TimeoutError" in paths
    assert "twisted.web.client.ResponseFailed" in paths
    assert "builtins.TimeoutError" in paths
    if SCRAPY_VERSION >= (2, 19):
        assert "scrapy.exceptions.DownloadTimeoutError" in paths
    assert scrapy_values(ScrapySettings())["BACKOFF_EXCEPTIONS"] == paths


def test_the_deprecated_spider_attributes_are_read() -> None:
    class Spider:
        download_delay = 3.0
        max_concurrent_requests = 2

    config = config_of({}, spider=Spider)
    defaults = config.settings.scope_defaults
    assert (defaults.delay, defaults.concurrency) == (3.0, 2)
    spider_wins = config_of({"DOWNLOAD_DELAY": 0.5}, priority="spider", spider=Spider)
    assert spider_wins.settings.scope_defaults.delay == 0.5


def test_debug_turns_on_with_either_name() -> None:
    assert config_of({"THROTTLING_DEBUG": True}).debug
    autothrottle = config_of({"AUTOTHROTTLE_DEBUG": True})
    assert autothrottle.debug
    assert not autothrottle.settings.autothrottle.debug  # one line per adjustment, the add-on's
    assert config_of({"THROTTLING_DEBUG": "true"}).debug  # as -s THROTTLING_DEBUG=true gives it


def test_command_line_values_given_as_text_are_read() -> None:
    # scrapy crawl -s NAME=VALUE hands every value over as a string; Scrapy's getters decode them,
    # and so must the add-on (it used to refuse '1', 'False' and JSON tables alike).
    config = config_of({"CONCURRENT_REQUESTS": "16", "CONCURRENT_REQUESTS_PER_DOMAIN": "2",
                        "DOWNLOAD_DELAY": "0.5", "DOWNLOAD_DELAY_PER_SLOT": "0.5",
                        "AUTOTHROTTLE_ENABLED": "False", "RAMPUP_BACKOFF_TARGET": "[1, 3]",
                        "THROTTLING_SCOPE_DEFAULTS": '{"rampup": true}',
                        "THROTTLING_SCOPES": '{"a.example": {"delay": 2}}'}, priority="cmdline")
    core = config.settings
    defaults = core.scope_defaults
    assert (core.concurrent_requests, defaults.concurrency, defaults.delay, defaults.delay_per_slot) == \
        (16, 2, 0.5, 0.5)
    assert defaults.rampup
    assert not core.autothrottle.enabled
    assert core.rampup_backoff_target == (1.0, 3.0)
    assert core.scopes["a.example"].delay == 2.0
    assert config_of({"AUTOTHROTTLE_ENABLED": "True"}, priority="cmdline").settings.autothrottle.enabled
    # Text that is not JSON stays text, and the core's message names it as before.
    assert problems_of({"DOWNLOAD_DELAY": "soon"}) == [
        "DOWNLOAD_DELAY: expected a number of seconds, got 'soon' (str); use a number such as 1.0"]


# --- the throttling manager --------------------------------------------------------------------


class PlainManager:
    def get_request_scopes(self, request: Any) -> str:
        return "plain"


class AsyncManager(ThrottlingManager):
    created_with: Any = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> AsyncManager:
        manager = cls()
        manager.created_with = crawler
        return manager


def test_the_manager_may_be_a_class_an_instance_or_a_path() -> None:
    by_class = config_of({"THROTTLING_MANAGER": PlainManager}).manager
    assert isinstance(by_class, RequestScopesManager)
    assert isinstance(by_class.inner, PlainManager)
    instance = AsyncManager()
    assert config_of({"THROTTLING_MANAGER": instance}).manager is instance
    by_path = config_of({"THROTTLING_MANAGER": f"{__name__}.AsyncManager"}).manager
    assert type(by_path) is AsyncManager
    assert type(config_of({}).manager) is ThrottlingManager


def test_a_manager_class_is_built_like_a_scrapy_component() -> None:
    from scrapy.utils.misc import build_from_crawler

    settings = ScrapySettings({"THROTTLING_MANAGER": AsyncManager})
    sentinel: Any = object()  # stands for the crawler
    manager = read_config(settings, lambda cls: build_from_crawler(cls, sentinel)).manager
    assert isinstance(manager, AsyncManager)
    assert manager.created_with is sentinel


def test_a_bad_manager_is_named() -> None:
    assert problems_of({"THROTTLING_MANAGER": "nowhere.Manager"})[0].startswith(
        "THROTTLING_MANAGER: cannot import 'nowhere.Manager'")
    [problem] = problems_of({"THROTTLING_MANAGER": object()})
    assert "has no get_scopes(request) method" in problem


# --- invalid values: the core's messages, all at once ---------------------------------------------


@pytest.mark.parametrize("values", [
    {"THROTTLING_SCOPES": {"api.example": {"concurency": 2}}},
    {"THROTTLING_SCOPE": {}},
    {"DOWNLOAD_DELAY": -1},
    {"CONCURRENT_REQUESTS_PER_DOMAIN": 0},
    {"BACKOFF_MIN_DELAY": 10.0, "BACKOFF_MAX_DELAY": 5.0},
    {"RANDOMIZE_DOWNLOAD_DELAY": [0.5, 0.1]},
    {"RAMPUP_BACKOFF_TARGET": "often"},
    {"AUTOTHROTTLE_TARGET_CONCURRENCY": 0},
    {"THROTTLING_ROBOTSTXT_MAX_DELAY": float("nan")},
])
def test_invalid_values_give_the_cores_messages(values: dict[str, Any]) -> None:
    assert problems_of(values) == core_problems(values)


def test_the_cores_message_names_the_key_and_the_fix() -> None:
    [problem] = problems_of({"THROTTLING_SCOPES": {"api.example": {"concurency": 2}}})
    assert problem.startswith('THROTTLING_SCOPES["api.example"]: unknown key "concurency"; '
                              'did you mean "concurrency"?')


def test_every_problem_is_reported_at_once() -> None:
    problems = problems_of({"DOWNLOAD_DELAY": -1, "BACKOFF_EXCEPTIONS": ["nowhere.Error"],
                            "CRAWLPACE_STORE": "ftp://x", "THROTTLING_MANAGER": "nowhere.M",
                            "CRAWLPACE_STATS_SCOPES": -3})
    assert len(problems) == 4
    assert problems[0].startswith("DOWNLOAD_DELAY: -1 is negative")
    assert any(problem.startswith("THROTTLING_MANAGER: cannot import") for problem in problems)
    assert any(problem.startswith("CRAWLPACE_STATS_SCOPES:") for problem in problems)
    assert any(problem.startswith("CRAWLPACE_STORE: 'ftp://x'") for problem in problems)
    problems = problems_of({"BACKOFF_EXCEPTIONS": ["nowhere.Error"]})
    assert problems[0].startswith("BACKOFF_EXCEPTIONS: cannot import 'nowhere.Error'")


def test_the_store_url_is_checked() -> None:
    [problem] = problems_of({"CRAWLPACE_STORE": "ftp://example.com/"})
    assert problem.startswith("CRAWLPACE_STORE: 'ftp://example.com/' has the unknown scheme 'ftp'")
    [problem] = problems_of({"CRAWLPACE_STORE": "redis://127.0.0.1:1/0?lease=soon"})
    assert problem.startswith("CRAWLPACE_STORE: store 'redis://127.0.0.1:1/0?lease=soon': lease='soon'")
    # Quotas are shared through Redis as well: a quota scope with a Redis store is accepted.
    assert config_of({"CRAWLPACE_STORE": "redis://127.0.0.1:1/0",
                      "THROTTLING_SCOPES": {"cost": {"quota": 10.0}}}).store.shared
    assert config_of({"CRAWLPACE_STORE": "redis://127.0.0.1:1/0"}).store.shared


def test_another_reactor_is_refused() -> None:
    [problem] = problems_of({"TWISTED_REACTOR": "twisted.internet.epollreactor.EPollReactor"})
    assert problem.startswith("TWISTED_REACTOR: crawlpace.scrapy needs the asyncio reactor")


def test_a_scheduler_of_ones_own_needs_a_decision() -> None:
    [problem] = problems_of({"SCHEDULER": "scrapy_redis.scheduler.Scheduler"})
    assert problem.startswith("SCHEDULER: 'scrapy_redis.scheduler.Scheduler' is set")
    assert "CRAWLPACE_SCHEDULER = False to keep it" in problem
    kept = config_of({"SCHEDULER": "scrapy_redis.scheduler.Scheduler", "CRAWLPACE_SCHEDULER": False})
    assert not kept.use_scheduler
    assert config_of({"SCHEDULER": "x.Y", "CRAWLPACE_SCHEDULER": True}).use_scheduler
    [problem] = problems_of({"JOBDIR": "/tmp/job"})
    assert problem.startswith("JOBDIR: the crawlpace scheduler keeps requests in memory")
    assert not config_of({"JOBDIR": "/tmp/job", "CRAWLPACE_SCHEDULER": False}).use_scheduler


# --- what the add-on does to Scrapy's settings -----------------------------------------------------


def test_the_addon_rewires_scrapy_and_neutralises_its_throttling() -> None:
    settings = addon_settings({"CONCURRENT_REQUESTS": 24, "DOWNLOAD_DELAY": 2.0,
                               "DOWNLOAD_DELAY_PER_SLOT": 2.0, "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
                               "AUTOTHROTTLE_ENABLED": True,
                               "DOWNLOAD_SLOTS": {"a.example": {"delay": 5}},
                               "RANDOMIZE_DOWNLOAD_DELAY": False})
    assert settings["SCHEDULER"] == "crawlpace.scrapy.ThrottlingScheduler"
    assert settings.getdict("DOWNLOADER_MIDDLEWARES")[ThrottlingMiddleware] == 950
    assert ThrottlingExtension in settings.getdict("EXTENSIONS")
    assert settings.getfloat("DOWNLOAD_DELAY") == 0.0
    assert settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN") == 24
    assert not settings.getbool("AUTOTHROTTLE_ENABLED")
    assert settings.getdict("DOWNLOAD_SLOTS") == {}
    assert "RANDOMIZE_DOWNLOAD_DELAY" not in settings  # read by crawlpace; Scrapy 2.19 would warn
    assert settings.getint("CONCURRENT_REQUESTS") == 24


def test_the_addon_keeps_scrapys_scheduler_when_told() -> None:
    settings = addon_settings({"CRAWLPACE_SCHEDULER": False})
    assert settings["SCHEDULER"] == "scrapy.core.scheduler.Scheduler"
    assert ThrottlingMiddleware in settings.getdict("DOWNLOADER_MIDDLEWARES")


def test_the_addon_stops_on_invalid_settings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="crawlpace.scrapy"), pytest.raises(ConfigError):
        addon_settings({"DOWNLOAD_DELAY": "slow"})
    assert "invalid settings, the crawl cannot start" in caplog.text
    assert "DOWNLOAD_DELAY: expected a number of seconds, got 'slow' (str)" in caplog.text


SPIDER = """
import scrapy


class Pages(scrapy.Spider):
    name = "pages"
    start_urls = ["http://127.0.0.1:9/"]
    custom_settings = {"ADDONS": {"crawlpace.scrapy.Addon": 100}, "TELNETCONSOLE_ENABLED": False}

    def parse(self, response):
        pass
"""


def test_a_settings_error_in_a_scrapy_command_is_said_once_without_a_traceback(tmp_path: Path) -> None:
    spider = tmp_path / "spider.py"
    spider.write_text(SPIDER, encoding="utf-8")
    src = str(Path(crawlpace.__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, "-m", "scrapy.cmdline", "runspider", str(spider), "-s",
                          "DOWNLOAD_DELAY=slow"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": src})
    err = run.stderr
    assert "invalid settings, the crawl cannot start:\nDOWNLOAD_DELAY: expected a number of seconds, " in err
    assert "Task exception was never retrieved" not in err
    # Scrapy's asyncio process (2.14 and later) reports the failure only through logging, which the add-on
    # keeps to its own line. Under Twisted's CrawlerProcess (Scrapy 2.13), Twisted itself prints the
    # unhandled Deferred once more, straight to stderr (not through logging): one traceback, not two.
    tracebacks = 0 if "Using AsyncCrawlerProcess" in err else 1
    assert err.count("Traceback") == tracebacks, err
    assert err.count("crawlpace._exceptions.ConfigError: ") == tracebacks, err


def test_inert_scrapy_settings_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crawlpace.scrapy"):
        addon_settings({"DOWNLOAD_SLOTS": {"a.example": {"concurrency": 2, "delay": 0.5}},
                        "CONCURRENT_REQUESTS_PER_IP": 4, "DOWNLOAD_DELAY": 0.25,
                        "THROTTLING_MANAGER": "crawlpace.ThrottlingManager"})
    text = caplog.text
    assert "DOWNLOAD_SLOTS has no effect under crawlpace.scrapy" in text
    assert "THROTTLING_SCOPES = {'a.example': {'concurrency': 2, 'delay': 0.5}}" in text
    assert "CONCURRENT_REQUESTS_PER_IP has no effect beside THROTTLING_MANAGER" in text
    assert "DOWNLOAD_DELAY" not in text  # the throttler says it, once (tests/test_ineffective.py)


def test_concurrent_requests_per_ip_scopes_by_server_address(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="crawlpace.scrapy"):
        config = config_of({"CONCURRENT_REQUESTS_PER_IP": 3, "CONCURRENT_REQUESTS_PER_DOMAIN": 8})
    assert isinstance(config.manager, crawlpace.IpScopes)
    assert config.settings.scope_defaults.concurrency == 3
    assert "Scrapy deprecated this setting" in caplog.text
    assert "has no effect" not in caplog.text
    plain = config_of({"CONCURRENT_REQUESTS_PER_DOMAIN": 8})
    assert type(plain.manager) is crawlpace.ThrottlingManager
    assert plain.settings.scope_defaults.concurrency == 8


# --- the package ---------------------------------------------------------------------------------------


def test_the_public_names() -> None:
    modules = {"annotations"}
    public = {name for name, value in vars(crawlpace.scrapy).items()
              if not name.startswith("_") and name not in modules and not isinstance(value, type(crawlpace))}
    lazy = {"SharedScheduler"}  # imported when first asked for: it brings the Redis client
    assert set(crawlpace.scrapy.__all__) == public | lazy
    from crawlpace.scrapy._shared import SharedScheduler

    assert crawlpace.scrapy.SharedScheduler is SharedScheduler
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = crawlpace.scrapy.Nothing
    assert crawlpace.scrapy.Addon is Addon
    assert crawlpace.scrapy.ThrottlingScheduler is ThrottlingScheduler


def test_the_running_scrapy_is_supported() -> None:
    assert version_tuple("2.13.4") == (2, 13, 4)
    assert version_tuple("2.19.0rc1") == (2, 19, 0)
    assert SCRAPY_VERSION[:2] >= MIN_SCRAPY
    assert version_tuple(scrapy.__version__) == SCRAPY_VERSION


class SlowScopeManager(crawlpace.ThrottlingScopeManager):
    """A scope manager class given as a class, not as a path."""


def test_scope_managers_may_be_given_as_classes() -> None:
    path = f"{__name__}.SlowScopeManager"
    config = config_of({"THROTTLING_SCOPE_MANAGER": SlowScopeManager,
                        "THROTTLING_SCOPES": {"api.example": {"manager": SlowScopeManager}}})
    assert config.settings.scope_defaults.manager == path
    assert config.settings.scope_config("api.example").manager == path
    [problem] = problems_of({"THROTTLING_SCOPE_MANAGER": "nowhere.Manager"})
    assert problem.startswith("THROTTLING_SCOPE_MANAGER: cannot import 'nowhere.Manager'")
