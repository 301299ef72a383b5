"""What stops a Scrapy crawl at start-up: a slip in a setting's name, a store that does not answer.

Both end ``scrapy crawl`` before the first request, with one clear message
and a non-zero exit status, and no traceback.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scrapy.settings import Settings as ScrapySettings
from scrapy.settings import default_settings

import crawlpace
from crawlpace import ConfigError
from crawlpace._exceptions import StoreUnreachable
from crawlpace.scrapy import Addon
from crawlpace.scrapy._compat import SCRAPY_VERSION
from crawlpace.scrapy._settings import read_config
from crawlpace.scrapy._store_check import check_store

from .redis_server import RedisServer, free_port, redis_binary


def problems_of(values: dict[str, Any], priority: str = "project") -> list[str]:
    settings = ScrapySettings()
    settings.setdict(values, priority=priority)
    with pytest.raises(ConfigError) as caught:
        read_config(settings, lambda cls: cls())
    return caught.value.problems


def run_addon(values: dict[str, Any]) -> None:
    settings = ScrapySettings()
    settings.setdict(values, priority="project")
    Addon().update_settings(settings)


# --- names ------------------------------------------------------------------------------------------


def test_near_misses_of_scrapy_names_the_addon_reads_are_errors() -> None:
    """Before, only names the add-on knew reached the core's checks: these four ran with the defaults."""
    problems = problems_of({"CONCURRENT_REQUEST_PER_DOMAIN": 4, "DOWNLOAD_DELAY_PERSLOT": 0.25,
                            "DOWNLOAD_DELAYS": 1, "BACKOF_MAX_DELAY": 60})
    assert sorted(problems) == sorted([
        'CONCURRENT_REQUEST_PER_DOMAIN: not a setting crawlpace reads, and so without effect; did you mean '
        '"CONCURRENT_REQUESTS_PER_DOMAIN"? see docs/settings.md',
        'DOWNLOAD_DELAY_PERSLOT: not a setting crawlpace reads, and so without effect; did you mean '
        '"DOWNLOAD_DELAY_PER_SLOT"? see docs/settings.md',
        'DOWNLOAD_DELAYS: not a setting crawlpace reads, and so without effect; did you mean '
        '"DOWNLOAD_DELAY"? see docs/settings.md',
        'BACKOF_MAX_DELAY: not a setting crawlpace reads, and so without effect; did you mean '
        '"BACKOFF_MAX_DELAY"? see docs/settings.md',
    ])


def test_the_same_names_are_refused_by_the_python_api() -> None:
    """One did-you-mean for both: the add-on's messages are the core's, word for word."""
    with pytest.raises(ConfigError) as caught:
        crawlpace.Settings.from_scrapy({"DOWNLOAD_DELAYS": 1})
    assert caught.value.problems == problems_of({"DOWNLOAD_DELAYS": 1})


def test_slips_in_the_addons_own_names_are_errors_said_once() -> None:
    problems = problems_of({"CRAWLPACE_STORES": "redis://127.0.0.1:6379/0", "THROTTLING_DEBUGG": True,
                            "CRAWLPACE_SCHEDULR": False})
    assert sorted(problems) == sorted([
        'CRAWLPACE_STORES: unknown crawlpace.scrapy setting; did you mean "CRAWLPACE_STORE"? see '
        'docs/settings.md for the full list',
        'CRAWLPACE_SCHEDULR: unknown crawlpace.scrapy setting; did you mean "CRAWLPACE_SCHEDULER"? see '
        'docs/settings.md for the full list',
        'THROTTLING_DEBUGG: not a setting crawlpace reads, and so without effect; did you mean '
        '"THROTTLING_DEBUG"? see docs/settings.md',
    ])


def test_scrapys_own_settings_and_other_extensions_settings_are_not_flagged() -> None:
    """Every setting this Scrapy defines, set explicitly, plus a few of other extensions: no problem."""
    own = {name: getattr(default_settings, name) for name in dir(default_settings) if name.isupper()}
    own.pop("TWISTED_REACTOR")  # the add-on checks it: the asyncio reactor is required
    own.pop("JOBDIR", None)
    own.pop("SCHEDULER")
    for name in ("DOWNLOAD_DELAY", "CONCURRENT_REQUESTS_PER_DOMAIN", "RANDOMIZE_DOWNLOAD_DELAY"):
        own.pop(name)  # read by the add-on, with seed 001's meanings; checked elsewhere
    others = {"SCRAPEOPS_API_KEY": "k", "ROTATING_PROXY_BACKOFF_BASE": 300, "ZYTE_API_KEY": "k",
              "SCHEDULER_QUEUE_KEY": "%(spider)s:requests", "REDIS_URL": "redis://x", "PLAYWRIGHT_DELAY": 2,
              "DOWNLOAD_DELAY_JITTER": 0.2}
    settings = ScrapySettings()
    settings.setdict({**own, **others}, priority="project")
    config = read_config(settings, lambda cls: cls())
    assert config.settings.scope_defaults.delay == 1.0


def test_a_lower_case_name_is_caught() -> None:
    assert problems_of({"download_delay": 2}, priority="spider") == [
        'download_delay: setting names are upper case; did you mean "DOWNLOAD_DELAY"?']


PROJECT_SETTINGS = """
BOT_NAME = "shop"
SPIDER_MODULES = ["shop.spiders"]
ADDONS = {"crawlpace.scrapy.Addon": 100}
TELNETCONSOLE_ENABLED = False
CONCURRENT_REQUEST_PER_DOMAIN = 4
DOWNLOAD_DELAY_PERSLOT = 0.25
"""

PROJECT_SPIDER = """
import scrapy


class Pages(scrapy.Spider):
    name = "pages"
    start_urls = ["http://127.0.0.1:9/"]
    custom_settings = {"BACKOF_MAX_DELAY": 60}

    def parse(self, response):
        pass
"""


def scrapy_project(tmp_path: Path) -> Path:
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = shop.settings\n", encoding="utf-8")
    package = tmp_path / "shop"
    (package / "spiders").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "spiders" / "__init__.py").write_text("", encoding="utf-8")
    (package / "settings.py").write_text(PROJECT_SETTINGS, encoding="utf-8")
    (package / "spiders" / "pages.py").write_text(PROJECT_SPIDER, encoding="utf-8")
    return tmp_path


def scrapy_crawl(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(crawlpace.__file__).resolve().parents[1])
    return subprocess.run([sys.executable, "-m", "scrapy.cmdline", "crawl", "pages", *args],
                          capture_output=True, text=True, timeout=60, cwd=project,
                          env={**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{project}"})


@pytest.mark.skipif(SCRAPY_VERSION < (2, 19), reason="older Scrapy exits with 0 after a failed start")
def test_slips_in_settings_py_s_and_custom_settings_stop_scrapy_crawl(tmp_path: Path) -> None:
    run = scrapy_crawl(scrapy_project(tmp_path), "-s", "DOWNLOAD_DELAYS=1")
    err = run.stderr
    assert run.returncode != 0, err
    assert "invalid settings, the crawl cannot start" in err
    for wrong, right in (("CONCURRENT_REQUEST_PER_DOMAIN", "CONCURRENT_REQUESTS_PER_DOMAIN"),
                         ("DOWNLOAD_DELAY_PERSLOT", "DOWNLOAD_DELAY_PER_SLOT"),
                         ("DOWNLOAD_DELAYS", "DOWNLOAD_DELAY"), ("BACKOF_MAX_DELAY", "BACKOFF_MAX_DELAY")):
        said = f'{wrong}: not a setting crawlpace reads, and so without effect; did you mean "{right}"?'
        assert said in err
    assert "Traceback" not in err, err
    assert "Spider opened" not in err


# --- the store ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def password_server() -> Iterator[RedisServer]:
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH")
    server = RedisServer(binary, extra=("--requirepass", "s3cret-pw"))
    try:
        server.start()
        yield server
    finally:
        server.close()


def unreachable_message(url: str) -> str:
    with pytest.raises(StoreUnreachable) as caught:
        run_addon({"CRAWLPACE_STORE": url})
    assert caught.value.__cause__ is None
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_closed_port_stops_the_crawl_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    with caplog.at_level(logging.ERROR, logger="crawlpace.scrapy"):
        message = unreachable_message(f"redis://127.0.0.1:{port}/0")
    assert message.startswith(f"CRAWLPACE_STORE: store redis://127.0.0.1:{port}/0: cannot be reached: ")
    assert message.endswith("check that the server runs and that the URL's host and port are right")
    assert [record.getMessage() for record in caplog.records] == [
        f"crawlpace.scrapy: {message}; the crawl cannot start"]


def test_a_missing_or_wrong_password_is_said_plainly(password_server: RedisServer) -> None:
    missing = unreachable_message(password_server.url)
    assert "check the user name and password in the URL" in missing
    wrong = unreachable_message(password_server.url.replace("redis://", "redis://:wrong-pw@"))
    assert "check the user name and password in the URL" in wrong
    assert "wrong-pw" not in wrong
    run_addon({"CRAWLPACE_STORE": password_server.url.replace("redis://", "redis://:s3cret-pw@")})


def test_tls_spoken_to_a_plain_port_is_said_plainly(redis_server: RedisServer) -> None:
    """A plain port never answers the TLS handshake: the check's wait runs out, and says why."""
    settings = ScrapySettings()
    settings.setdict({"CRAWLPACE_STORE": redis_server.url.replace("redis://", "rediss://")},
                     priority="project")
    config = read_config(settings, lambda cls: cls())
    with pytest.raises(StoreUnreachable) as caught:
        check_store(config, within=0.5)
    message = str(caught.value)
    assert message.startswith("CRAWLPACE_STORE: store rediss://127.0.0.1:")
    assert message.endswith("a rediss:// URL speaks TLS: make sure the port is a TLS port, or use redis://")


def test_the_memory_fallback_lets_the_crawl_start(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crawlpace.scrapy"):
        run_addon({"CRAWLPACE_STORE": f"redis://127.0.0.1:{free_port()}/0?fallback=memory"})
    assert "the crawl starts on the memory fallback (fallback=memory in CRAWLPACE_STORE)" in caplog.text


@pytest.mark.skipif(SCRAPY_VERSION < (2, 19), reason="older Scrapy exits with 0 after a failed start")
def test_an_unreachable_store_ends_scrapy_crawl_with_one_line_and_a_failure_status(tmp_path: Path) -> None:
    project = scrapy_project(tmp_path)
    (project / "shop" / "settings.py").write_text(
        PROJECT_SETTINGS.replace("CONCURRENT_REQUEST_PER_DOMAIN", "CONCURRENT_REQUESTS_PER_DOMAIN")
        .replace("DOWNLOAD_DELAY_PERSLOT", "DOWNLOAD_DELAY_PER_SLOT"), encoding="utf-8")
    (project / "shop" / "spiders" / "pages.py").write_text(
        PROJECT_SPIDER.replace("BACKOF_MAX_DELAY", "BACKOFF_MAX_DELAY"), encoding="utf-8")
    run = scrapy_crawl(project, "-s", f"CRAWLPACE_STORE=redis://127.0.0.1:{free_port()}/0")
    err = run.stderr
    assert run.returncode != 0, err
    assert err.count("cannot be reached") == 1, err
    assert "the crawl cannot start" in err
    assert "Traceback" not in err, err
    assert "could not publish" not in err


def test_an_unreachable_shared_queue_stops_the_crawl_too() -> None:
    """The shared queue has no fallback: a fleet process without it would wait forever."""
    port = free_port()
    message = unreachable_message_of({"SCHEDULER": "crawlpace.scrapy.SharedScheduler",
                                      "CRAWLPACE_FRONTIER": f"redis://127.0.0.1:{port}/0"})
    assert message.startswith(f"CRAWLPACE_FRONTIER: store redis://127.0.0.1:{port}/0: cannot be reached: ")


def unreachable_message_of(values: dict[str, Any]) -> str:
    with pytest.raises(StoreUnreachable) as caught:
        run_addon(values)
    return str(caught.value)


def test_the_add_on_on_the_memory_store_imports_no_redis_client_and_no_frontier() -> None:
    """Every module imported is walked by each full pass of the garbage collector, for the whole crawl.

    The Redis client and the shared frontier (about 100 modules and 12,000 objects) come only
    with a Redis store or the ``SharedScheduler``, which is still importable by its path.
    """
    probe = ("import sys\n"
             "import crawlpace.scrapy\n"
             "from crawlpace.scrapy._addon import Addon\n"
             "print(sorted(name for name in ('redis', 'crawlpace.frontier', 'crawlpace.stores.redis')"
             " if name in sys.modules))\n"
             "from scrapy.utils.misc import load_object\n"
             "print(load_object('crawlpace.scrapy.SharedScheduler').__name__)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "SharedScheduler"]
