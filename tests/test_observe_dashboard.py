"""The live dashboard in a real headless Chromium: what the page shows, the token, the fleet view."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from crawlpace import Throttler
from crawlpace.frontier._shared import RobotsCopy, SharedFrontier
from crawlpace.observe import Monitor, MonitorOptions

from .browser import dump_dom
from .redis_server import RedisServer, free_port

FAST = {"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0, "RANDOMIZE_DOWNLOAD_DELAY": False}


def cells(dom: str, scope: str) -> dict[str, str]:
    """The cells of the row of ``scope``, by their class (the first word of it)."""
    row = re.search(rf'<tr data-scope="{re.escape(scope)}"[^>]*>(.*?)</tr>', dom, re.S)
    assert row is not None, dom[-3000:]
    return {cls.split()[0]: text for cls, text in
            re.findall(r'<td class="([^"]*)">([^<]*)(?:<svg.*?</svg>)?</td>', row.group(1), re.S)}


async def test_the_page_shows_each_scope_its_pushbacks_and_backoff() -> None:
    async with Throttler({**FAST, "BACKOFF_MIN_DELAY": 0.01, "BACKOFF_MAX_DELAY": 0.02}) as throttler:
        monitor = Monitor(throttler, MonitorOptions(dashboard_port=0, interval=0.05),
                          site_names={"busy.example": "the busy shop"})
        await monitor.start()
        try:
            for index in range(12):
                async with throttler.slot("https://busy.example/") as permit:
                    permit.feedback(status=429 if index == 11 else 200)
            for _ in range(3):
                async with throttler.slot("https://quiet.example/") as permit:
                    permit.feedback(status=200)
            await monitor.sampler.sample()
            assert monitor.dashboard is not None
            dom = await asyncio.to_thread(dump_dom, monitor.dashboard.url)
        finally:
            await monitor.aclose()
    busy, quiet = cells(dom, "busy.example"), cells(dom, "quiet.example")
    assert busy["sends"] == "12"
    assert busy["pushbacks"] == "1"
    assert busy["backoff"] == "1"
    assert busy["breaker"] == "closed"
    assert busy["state"] == "backing off"  # highlighted: the row is marked for attention
    assert re.search(r'<tr data-scope="busy.example" [^>]*class="attention">', dom)
    assert quiet["state"] == "ok"
    assert quiet["sends"] == "3"
    assert quiet["pushbacks"] == "0"
    assert dom.index('data-scope="busy.example"') < dom.index('data-scope="quiet.example"')  # busiest first
    assert '<polyline class="rate"' in dom  # the rate was drawn
    assert "2 scopes shown of 2 · 15 sends · 1 pushbacks" in dom
    assert "this process" in dom
    # A site whose name is known is shown by it, its scope key beside it; the others by their key.
    assert re.search(r'<tr data-scope="busy.example" data-site="the busy shop"[^>]*><td class="scope">'
                     r'the busy shop<span class="key">busy.example</span></td>', dom), dom[-3000:]
    assert '<td class="scope">quiet.example</td>' in dom


async def test_a_token_is_asked_for_and_accepted() -> None:
    async with Throttler(FAST) as throttler:
        monitor = Monitor(throttler, MonitorOptions(dashboard_port=0, token="s3cret", interval=0.05))
        await monitor.start()
        try:
            async with throttler.slot("https://a.example/") as permit:
                permit.feedback(status=200)
            assert monitor.dashboard is not None
            url = monitor.dashboard.url
            assert url.endswith("/?token=s3cret")
            refused = await asyncio.to_thread(dump_dom, url.split("?")[0])
            shown = await asyncio.to_thread(dump_dom, url)
        finally:
            await monitor.aclose()
    assert "a token is needed" in refused
    assert 'data-scope="a.example"' not in refused
    assert cells(shown, "a.example")["sends"] == "1"


async def _two_workers(url: str) -> None:
    """Two throttlers sharing the store, as two workers of a fleet would."""
    workers = [Throttler(FAST, store=url), Throttler(FAST, store=url)]
    try:
        for index, throttler in enumerate(workers):
            for _ in range(3 + index):
                async with throttler.slot("https://shared.example/") as permit:
                    permit.feedback(status=200)
        async with workers[0].slot("https://other.example/") as permit:
            permit.feedback(status=503)
        # The fleet's copies of two robots.txt: one fetched, one that answered 503 (RFC 9309: the site
        # is forbidden until it can be fetched).
        frontier = SharedFrontier(url, worker="one")
        try:
            await frontier.store_robots("https://shared.example", RobotsCopy(200, b"User-agent: *"), keep=60)
            await frontier.store_robots("https://other.example", RobotsCopy(503, b""), keep=60)
        finally:
            await frontier.aclose()
    finally:
        for throttler in workers:
            await throttler.aclose()


@pytest.mark.redis
def test_crawlpace_dashboard_shows_a_fleet_from_the_shared_store(redis_server: RedisServer,
                                                                  tmp_path: Path) -> None:
    url = f"{redis_server.url}?namespace=dash{os.getpid()}"
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(f"http://127.0.0.9:9/page/{n}\n" for n in range(7)), encoding="utf-8")
    enqueue = subprocess.run([sys.executable, "-m", "crawlpace", "enqueue", str(urls), "--store", url],
                             capture_output=True, text=True, timeout=60)
    assert enqueue.returncode == 0, enqueue.stderr
    asyncio.run(_two_workers(url))
    port = free_port()
    names = tmp_path / "names.json"
    names.write_text('{"shared.example": "the shared shop"}', encoding="utf-8")
    server = subprocess.Popen([sys.executable, "-m", "crawlpace", "dashboard", "--store", url, "--port",
                               str(port), "--sites", str(names)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith(f"crawlpace dashboard: http://127.0.0.1:{port}/"), line
        dom = dump_dom(f"http://127.0.0.1:{port}/")
        metrics = ""
        for _ in range(50):  # the frontier's figures arrive with the first background read
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            if "crawlpace_frontier_urls" in metrics:
                break
            time.sleep(0.1)
    finally:
        server.terminate()
        _out, err = server.communicate(timeout=20)
    assert server.returncode == 0, err
    assert cells(dom, "shared.example")["sends"] == "7"  # both workers' sends, from the store
    assert cells(dom, "other.example")["errors"] == "0"
    assert cells(dom, "other.example")["state"] == "forbidden by robots.txt"  # the fleet's copy says so
    assert cells(dom, "shared.example")["state"] == "ok"
    assert "fleet view of redis://" in dom
    assert "frontier: 7 queued, 0 claimed, 0 done of 7" in dom
    assert "pushbacks: see each worker's metrics" in dom  # not a false 0: the store keeps no status counts
    # The fleet's /metrics: the scopes it shows are counted, in flight is the fleet's own series,
    # and the frontier's depth is there.
    assert "crawlpace_scopes_tracked 2.0" in metrics
    assert 'crawlpace_fleet_inflight{scope="shared.example"} 0.0' in metrics
    assert "crawlpace_inflight{" not in metrics
    assert 'crawlpace_frontier_urls{state="queued"} 7.0' in metrics
    # The fleet's sites by name where known: on the page and for Grafana to join on.
    assert 'data-site="the shared shop"' in dom
    assert 'crawlpace_scope_info{scope="shared.example",site="the shared shop"} 1.0' in metrics
    assert 'crawlpace_scope_info{scope="other.example",site="other.example"} 1.0' in metrics
