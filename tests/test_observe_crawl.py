"""Watching real crawls of simulated sites: alerts on give-up, the joined run report, the CLI flags."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawlpace import Settings
from crawlpace.cli import EXIT_SERVE, main
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.observe import Monitor, MonitorOptions
from crawlpace.observe._report import join_sites, render_report
from crawlpace.sim import Farm

from .test_crawl import FAST, pages


async def test_a_given_up_site_runs_the_alert_command_and_the_report_joins_both_sides(tmp_path: Path) -> None:
    spec = {"site": [
        {"name": "dead", "profile": "dead", "pages": 30},
        {"name": "alive", "profile": "ratelimit", "rate": 1000.0, "burst": 100, "pages": 30},
    ]}
    alerts = tmp_path / "alerts.txt"
    command = f'echo "$CRAWLPACE_EVENT $CRAWLPACE_SCOPE $CRAWLPACE_REASON" >> {alerts}'
    settings = Settings.from_scrapy({**FAST, "BREAKER_MIN_REQUESTS": 4, "BREAKER_PAUSE": 0.2,
                                     "BREAKER_GIVE_UP_AFTER": 3})
    async with Farm(spec) as farm:
        # No robots.txt: a dead robots.txt would forbid the site (RFC 9309) before the breaker could act.
        job = CrawlJob(settings, CrawlOptions(output=tmp_path / "out.jsonl", trust_env=False, retries=2,
                                              robots=False))
        monitor = Monitor(job.throttler, MonitorOptions(on_give_up=command, interval=0.05))
        await monitor.start()
        try:
            await job.run(pages(farm))
        finally:
            await monitor.aclose()
        sites = farm.stats()
    events = alerts.read_text().splitlines()
    assert "give_up 127.0.0.2 the circuit breaker gave it up after repeated failures" in events
    assert any(line.startswith("breaker_open 127.0.0.2 ") for line in events)
    assert not any("127.0.0.3" in line for line in events)
    page = render_report(monitor.sampler, settings, sites=join_sites(sites), title="test run",
                         hosts=job.summary.scopes)
    rows = {cells[0]: cells for cells in (re.findall(r"<td>(.*?)</td>", row)
                                           for row in re.findall(r"<tr[^>]*>(.*?)</tr>", page)) if cells}
    # The site by the simulator's name, its host beneath, on the row of the crawler's figures.
    alive = rows['alive<span class="key">127.0.0.3</span>']
    dead = rows['dead<span class="key">127.0.0.2</span>']
    assert alive[3] == "30"  # 30 pages answered 200 as the crawler counted them...
    assert int(alive[13]) == sites["alive"]["requests"]  # ...beside what the site saw
    assert float(alive[7]) > 0  # sends/s while it was busy, not over the whole run
    assert float(alive[8]) >= float(alive[7])  # its busiest 5 s: at least the busy average
    assert (alive[1], alive[12]) == ("ok", "30 ok")
    assert dead[1] == "given up"  # what happened, said in words, and how its URLs ended
    assert dead[12].endswith("gave_up"), dead[12]
    assert '<tr class="attention"><td>dead<span class="key">127.0.0.2</span></td>' in page
    assert "<svg" in page
    assert "every other scope: concurrency 2" in page


def test_crawl_writes_a_report_and_a_busy_metrics_port_is_one_line_and_exit_5(tmp_path: Path) -> None:
    import socket

    spec = tmp_path / "farm.toml"
    spec.write_text('[[site]]\nname = "one"\nprofile = "ratelimit"\nrate = 200.0\nburst = 50\npages = 10\n')
    urls = tmp_path / "urls.txt"
    sim = subprocess.Popen([sys.executable, "-m", "crawlpace", "sim", str(spec), "--urls", str(urls)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert sim.stdout is not None
        stats_url = ""
        for line in sim.stdout:
            if line.startswith("live figures:"):
                stats_url = line.split()[2]
            if line.startswith("serving"):
                break
        assert stats_url.endswith("/stats")
        report = tmp_path / "run.html"
        done = subprocess.run([sys.executable, "-m", "crawlpace", "crawl", str(urls), "-o",
                               str(tmp_path / "out.jsonl"), "--delay", "0.01", "--report", str(report),
                               "--report-sites", stats_url, "--json"], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[-1])["answered"] == 10
        page = report.read_text()
        row = next(row for row in page.split("<tr") if '<span class="key">127.0.0.2</span>' in row)
        assert '<td>one<span class="key">' in row  # the simulator's name, on the crawler's row for its host
        assert "<td>11</td>" in row  # the site saw 10 pages and robots.txt
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            done = subprocess.run([sys.executable, "-m", "crawlpace", "crawl", str(urls), "-o",
                                   str(tmp_path / "again.jsonl"), "--metrics-port", str(port)],
                                  capture_output=True, text=True, timeout=60)
        assert done.returncode == EXIT_SERVE
        assert done.stderr.strip().splitlines() == [
            f"crawlpace crawl: --metrics-port: cannot listen on 127.0.0.1:{port} (address already in use); "
            "choose another port or address"]
    finally:
        sim.kill()
        sim.communicate(timeout=10)


def test_a_dashboard_off_loopback_without_a_token_is_one_line_and_exit_5(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.2:9/\n", encoding="utf-8")
    code = main(["crawl", str(urls), "-o", str(tmp_path / "out.jsonl"), "--dashboard", "0",
                 "--dashboard-host", "0.0.0.0"])
    assert code == EXIT_SERVE
    assert capsys.readouterr().err.strip().splitlines() == [
        "crawlpace crawl: --dashboard: binding to 0.0.0.0 lets anyone on the network read the crawl's "
        "state; give a token (--token or CRAWLPACE_DASHBOARD_TOKEN) or bind to 127.0.0.1"]
    assert not (tmp_path / "out.jsonl.state").exists()


def test_check_prints_what_will_have_no_effect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[scopes."127.0.0.5"]\nconcurrency = 4\ndelay = 0.1\n', encoding="utf-8")
    assert main(["check", str(config)]) == 0
    out = capsys.readouterr().out
    assert 'note: THROTTLING_SCOPES["127.0.0.5"]: "delay": 0.1 does not set the pace' in out


def test_crawl_serves_metrics_while_it_runs(tmp_path: Path) -> None:
    import urllib.request

    spec = tmp_path / "farm.toml"
    spec.write_text('[[site]]\nname = "one"\nprofile = "ratelimit"\nrate = 200.0\nburst = 50\npages = 15\n')
    urls = tmp_path / "urls.txt"
    sim = subprocess.Popen([sys.executable, "-m", "crawlpace", "sim", str(spec), "--urls", str(urls)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    crawl = None
    try:
        assert sim.stdout is not None
        names = ""
        for line in sim.stdout:
            if line.startswith("live figures:"):
                names = line.split()[-1]  # the farm's list of sites: http://127.0.0.1:PORT/sites
            if line.startswith("serving"):
                break
        assert names.endswith("/sites"), names
        crawl = subprocess.Popen([sys.executable, "-m", "crawlpace", "crawl", str(urls), "-o",
                                  str(tmp_path / "out.jsonl"), "--delay", "0.2", "--metrics-port", "0",
                                  "--quiet", "--sites", names],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert crawl.stderr is not None
        first = crawl.stderr.readline()
        assert first.startswith("--metrics-port: http://127.0.0.1:"), first
        url = first.split()[1] + "metrics"
        body = ""
        for _ in range(100):  # a live crawl: wait for its answers and a sample, not for a throttle
            body = urllib.request.urlopen(url, timeout=5).read().decode()
            if 'crawlpace_delay_seconds{scope="127.0.0.2"}' in body:
                break
            time.sleep(0.1)
        assert 'crawlpace_requests_total{outcome="ok",scope="127.0.0.2"}' in body
        assert 'crawlpace_delay_seconds{scope="127.0.0.2"} 0.2' in body
        # The site's name, for dashboards to join on (the scope alone is an address).
        assert 'crawlpace_scope_info{scope="127.0.0.2",site="one"} 1.0' in body
        # A scraper that watched the run reads the final figures: the crawl waits for its next
        # scrape (--linger) before it exits, so the last pages are not lost between two scrapes.
        final = body
        while crawl.poll() is None:
            try:
                final = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                break
            time.sleep(0.2)
        assert crawl.wait(timeout=60) == 0
        assert 'crawlpace_urls_total{outcome="ok"} 15.0' in final, final[-2000:]
        assert "crawlpace_urls_queued 0.0" in final
    finally:
        for process in (crawl, sim):
            if process is not None:
                process.kill()
                process.communicate(timeout=10)
