"""``crawlpace crawl --resume`` of one process killed with SIGKILL three times: nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from .test_cli_crawl import crawl_command, farm, stop_farm, wait_for_lines

__all__ = ["farm"]

INFLIGHT = 4  # concurrent_requests of test_cli_crawl's CONFIG: at most this many are lost per kill


@pytest.mark.parametrize("farm", [120], indirect=True)
def test_three_kills_during_resume_lose_nothing(farm: tuple[Path, subprocess.Popen[str]],
                                                tmp_path: Path) -> None:
    urls, server = farm
    wanted = urls.read_text().split()
    output = tmp_path / "out.jsonl"
    kills = 0
    for stage, lines in enumerate((len(wanted) // 4, len(wanted) // 2, 3 * len(wanted) // 4)):
        args = ("--quiet",) if stage == 0 else ("--quiet", "--resume")
        log = tmp_path / f"stage{stage}.log"
        with log.open("wb") as sink:
            crawler = subprocess.Popen(crawl_command(urls, tmp_path, *args), stdout=sink, stderr=sink)
        try:
            wait_for_lines(output, lines)
            os.kill(crawler.pid, signal.SIGKILL)
            crawler.wait(timeout=10)
        finally:
            crawler.kill()
        assert crawler.returncode == -signal.SIGKILL, \
            f"the crawl ended before kill {stage + 1}:\n{log.read_text(errors='replace')[-3000:]}"
        kills += 1
    done = subprocess.run(crawl_command(urls, tmp_path, "--resume"), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["complete"]
    counts = Counter(json.loads(line)["url"] for line in output.read_text().splitlines())
    assert counts == Counter(wanted)  # every URL, each exactly once in the output
    sites = stop_farm(server)
    robots = 2 * (kills + 1)  # each run reads both robots.txt files again
    pages_fetched = sum(site["requests"] for site in sites.values()) - robots
    assert len(wanted) <= pages_fetched <= len(wanted) + kills * INFLIGHT  # repeats: what was in flight


FAST_FARM = """
[[site]]
name = "fast"
profile = "ratelimit"
rate = 2000.0
burst = 500
pages = 600
"""

FAST_CONFIG = """
concurrent_requests = 8
[scope_defaults]
delay = 0
delay_per_slot = 0
concurrency = 8
jitter = 0
"""


def test_a_kill_re_sends_only_what_was_in_flight(tmp_path: Path) -> None:
    """A fast crawl killed with SIGKILL: its resume re-sends at most CONCURRENT_REQUESTS pages.

    Lines once waited up to 0.1 s for their batch; a kill lost them, and their pages were sent again
    (11-14 per kill with 8 in flight). Now a batch is written at the end of its loop turn.
    """
    spec, urls = tmp_path / "farm.toml", tmp_path / "urls.txt"
    spec.write_text(FAST_FARM, encoding="utf-8")
    server = subprocess.Popen(
        [sys.executable, "-m", "crawlpace", "sim", str(spec), "--urls", str(urls), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("serving"):
                break
        config = tmp_path / "fast.toml"
        config.write_text(FAST_CONFIG, encoding="utf-8")
        command = [sys.executable, "-m", "crawlpace", "crawl", str(urls), "-o", str(tmp_path / "out.jsonl"),
                   "--config", str(config), "--json", "--quiet"]
        crawler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_lines(tmp_path / "out.jsonl", 200)
            os.kill(crawler.pid, signal.SIGKILL)
            crawler.wait(timeout=10)
        finally:
            crawler.kill()
        assert crawler.returncode == -signal.SIGKILL, "the crawl ended before the kill"
        done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        sites = stop_farm(server)
    wanted = urls.read_text().split()
    counts = Counter(json.loads(line)["url"] for line in (tmp_path / "out.jsonl").read_text().splitlines())
    assert counts == Counter(wanted)
    re_sent = sites["fast"]["requests"] - 2 - len(wanted)  # robots.txt once per run
    assert 0 <= re_sent <= 8, re_sent
