"""The add-on's watching: a metrics port, the alert command and signal, public stats keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crawlpace import ConfigError
from crawlpace.sim import Farm

from .test_scrapy_crawl import FAST, crawl, pages
from .test_scrapy_settings import addon_settings


async def test_a_given_up_site_runs_the_alert_and_stats_keys_are_public(tmp_path: Path) -> None:
    spec = {"site": [{"name": "dead", "profile": "dead", "pages": 10},
                     {"name": "alive", "profile": "ratelimit", "rate": 500.0, "burst": 50, "pages": 5}]}
    alerts = tmp_path / "alerts.txt"
    settings = {**FAST, "CRAWLPACE_METRICS_PORT": 0, "THROTTLING_SCOPES": {"unused.example": {"delay": 0.02}},
                "CRAWLPACE_ON_GIVE_UP": f'echo "$CRAWLPACE_EVENT $CRAWLPACE_SCOPE" >> {alerts}'}
    async with Farm(spec) as farm:
        result = await crawl(tmp_path, [*pages(farm.site("dead")), *pages(farm.site("alive"))], settings)
    assert result.returncode == 0, result.log[-3000:]
    assert re.search(r"crawlpace metrics at http://127\.0\.0\.1:\d+/metrics", result.log)
    events = alerts.read_text().splitlines()
    assert "give_up 127.0.0.2" in events
    assert "breaker_open 127.0.0.2" in events
    stats = result.stats
    assert stats["downloader/exception_type_count/crawlpace.scrapy.RequestRefused"] >= 1
    assert not any("_middleware" in key for key in stats)
    assert stats["throttling/scope/127.0.0.3/delay_per_slot"] == 0.02
    assert "Error caught on signal handler" not in result.log
    # The add-on's throttler names, at close, the key that matched no request.
    assert 'setting had no effect: THROTTLING_SCOPES["unused.example"] matched no request' in result.log


@pytest.mark.parametrize(("values", "message"), [
    ({"CRAWLPACE_METRICS_PORT": "nine"},
     "CRAWLPACE_METRICS_PORT: 'nine' is not a port; use a number from 1 to 65535"),
    ({"CRAWLPACE_METRICS_PORT": 70000},
     "CRAWLPACE_METRICS_PORT: 70000 is not a port; use a number from 1 to 65535"),
    ({"CRAWLPACE_ON_GIVE_UP": ["mail", "me"]},
     "CRAWLPACE_ON_GIVE_UP: expected a shell command line, got ['mail', 'me']"),
])
def test_bad_watch_settings_stop_the_crawl_at_start(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        addon_settings(values)
    assert info.value.problems == [message]
