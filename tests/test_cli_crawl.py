"""``crawlpace crawl`` as a real process: exit codes, --json, bad settings, and kill -9 then --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlpace.cli import main

from .deadlines import REACH

FARM = """
[[site]]
name = "one"
profile = "ratelimit"
rate = 200.0
burst = 50
pages = {pages}

[[site]]
name = "two"
profile = "crawldelay"
delay = 0.05
pages = {pages}
"""

CONFIG = """
concurrent_requests = 4
[scope_defaults]
delay = 0.05
delay_per_slot = 0.05
concurrency = 2
jitter = 0
"""


@pytest.fixture
def farm(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A ``crawlpace sim`` process serving two sites; yields the URL file and the process."""
    pages = getattr(request, "param", 40)
    spec, urls = tmp_path / "farm.toml", tmp_path / "urls.txt"
    spec.write_text(FARM.format(pages=pages), encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "crawlpace", "sim", str(spec), "--urls", str(urls), "--output",
         str(tmp_path / "sim.json"), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("serving"):
            break
    try:
        yield urls, process
    finally:
        process.kill()
        process.wait(timeout=10)


def stop_farm(process: subprocess.Popen[str]) -> dict[str, dict[str, int]]:
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=20)
    return json.loads(out.strip().splitlines()[-1])["sites"]  # type: ignore[no-any-return]


def wait_for_lines(output: Path, count: int) -> None:
    """Wait until a real crawl process has written ``count`` lines (not a wait for a throttle).

    It fails when they do not come: returning all the same (as it once did after 60 s) let a test
    kill a crawl still starting at load 30, which then had no journal for ``--resume`` to read.
    """
    deadline = time.monotonic() + REACH
    while True:
        written = output.read_bytes().count(b"\n") if output.exists() else 0
        if written >= count:
            return
        assert time.monotonic() < deadline, f"{written} lines of {count} in {output} after {REACH:g}s"
        time.sleep(0.05)


def crawl_command(urls: Path, tmp_path: Path, *extra: str) -> list[str]:
    config = tmp_path / "crawlpace.toml"
    config.write_text(CONFIG, encoding="utf-8")
    return [sys.executable, "-m", "crawlpace", "crawl", str(urls), "-o", str(tmp_path / "out.jsonl"),
            "--config", str(config), "--json", *extra]


def test_a_complete_crawl_exits_0_with_a_json_summary(
        farm: tuple[Path, subprocess.Popen[str]], tmp_path: Path) -> None:
    urls, server = farm
    done = subprocess.run(crawl_command(urls, tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert (summary["urls"], summary["answered"], summary["complete"]) == (80, 80, True)
    assert "complete: 80/80 URLs answered" in done.stdout
    results = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(result["url"] for result in results) == sorted(urls.read_text().split())
    sites = stop_farm(server)
    assert sites["two"]["violations"] == 0


@pytest.mark.parametrize("farm", [120], indirect=True)
def test_kill_9_then_resume_loses_no_url(farm: tuple[Path, subprocess.Popen[str]], tmp_path: Path) -> None:
    urls, server = farm
    output = tmp_path / "out.jsonl"
    crawler = subprocess.Popen(crawl_command(urls, tmp_path, "--quiet"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_for_lines(output, 60)  # a quarter of the 240 URLs; the rest takes seconds more
        os.kill(crawler.pid, signal.SIGKILL)
        crawler.wait(timeout=10)
    finally:
        crawler.kill()
    assert crawler.returncode == -signal.SIGKILL
    before = output.read_bytes().count(b"\n")
    assert 60 <= before < 240
    resumed = subprocess.run(crawl_command(urls, tmp_path, "--resume"), capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["complete"]
    assert summary["resumed_from"] >= before - 4  # a line or so may be cut; nothing answered is lost
    counts = Counter(json.loads(line)["url"] for line in output.read_text().splitlines())
    assert counts == Counter(urls.read_text().split())  # every URL exactly once
    sites = stop_farm(server)
    pages_fetched = sum(site["requests"] for site in sites.values()) - 4  # robots.txt, twice per site
    assert pages_fetched <= 240 + 4 * 2  # at most the requests in flight at the kill were repeated


def test_existing_state_needs_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("not a url\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    assert main(["crawl", str(urls), "-o", str(output), "--json"]) == 0  # a bad URL is a final answer
    result = json.loads(output.read_text().splitlines()[0])
    assert (result["outcome"], result["scope"]) == ("failed", "")
    assert main(["crawl", str(urls), "-o", str(output)]) == 3
    assert "--resume" in capsys.readouterr().err


def test_invalid_overrides_name_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.2:9/\n", encoding="utf-8")
    assert main(["crawl", str(urls), "-o", str(tmp_path / "o.jsonl"), "--delay", "-1"]) == 3
    assert "--delay" in capsys.readouterr().err
    assert main(["crawl", str(urls), "-o", str(tmp_path / "o.jsonl"), "--per-host", "0"]) == 3
    assert "--per-host" in capsys.readouterr().err
    assert main(["crawl", str(urls), "-o", str(tmp_path / "o.jsonl"), "--retries", "-2"]) == 3
    assert "retries" in capsys.readouterr().err


@pytest.mark.parametrize("farm", [80], indirect=True)
def test_ctrl_c_stops_cleanly_and_resume_finishes(
        farm: tuple[Path, subprocess.Popen[str]], tmp_path: Path) -> None:
    urls, server = farm
    output = tmp_path / "out.jsonl"
    crawler = subprocess.Popen(crawl_command(urls, tmp_path, "--quiet"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lines(output, 40)
        crawler.send_signal(signal.SIGINT)
        out, err = crawler.communicate(timeout=30)
    finally:
        crawler.kill()
    assert crawler.returncode == 130, err
    assert "run again with --resume" in err
    stopped = json.loads(out.strip().splitlines()[-1])
    assert stopped["interrupted"]
    assert not stopped["complete"]
    assert output.read_bytes().endswith(b"\n")  # closed cleanly: no partial line
    # Fetches cut short by the stop are left for the resume, not written down as failures.
    assert {json.loads(line)["outcome"] for line in output.read_text().splitlines()} == {"ok"}
    resumed = subprocess.run(crawl_command(urls, tmp_path, "--resume"), capture_output=True, text=True,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    counts = Counter(json.loads(line)["url"] for line in output.read_text().splitlines())
    assert counts == Counter(urls.read_text().split())
    stop_farm(server)


def test_a_missing_url_file_leaves_nothing_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "out.jsonl"
    assert main(["crawl", str(tmp_path / "nosuch.txt"), "-o", str(output)]) == 3
    assert "no URL file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_resume_refuses_another_crawls_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("not a url\n", encoding="utf-8")
    state = tmp_path / "shared.state"
    assert main(["crawl", str(urls), "-o", str(tmp_path / "a.jsonl"), "--state", str(state)]) == 0
    assert main(["crawl", str(urls), "-o", str(tmp_path / "b.jsonl"), "--state", str(state), "--resume"]) == 3
    assert "this journal belongs to the crawl writing" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "rampup", "delay", "per_host"), [
    ([], True, 1.0, 1),  # no throttling option: adaptive, from the polite default
    (["--delay", "0.5"], False, 0.5, 1),
    (["--per-host", "3"], False, 1.0, 3),
    (["--per-host", "3", "--rampup"], True, 1.0, 3),
])
def test_crawl_is_adaptive_unless_a_throttling_option_fixes_the_limits(
        flags: list[str], rampup: bool, delay: float, per_host: int) -> None:
    from crawlpace.cli import _parser
    from crawlpace.cli.crawl import build_settings

    settings = build_settings(_parser().parse_args(["crawl", "urls.txt", "-o", "out.jsonl", *flags]))
    defaults = settings.scope_defaults
    assert (defaults.rampup, defaults.delay, defaults.concurrency) == (rampup, delay, per_host)
    # Adaptive: each host's slots are rampup's; the crawl-wide cap does not hold hosts back.
    assert settings.concurrent_requests == (256 if rampup else 16)


def test_a_config_file_fixes_the_limits(tmp_path: Path) -> None:
    from crawlpace.cli import _parser
    from crawlpace.cli.crawl import build_settings

    config = tmp_path / "crawlpace.toml"
    config.write_text(CONFIG, encoding="utf-8")
    args = ["crawl", "urls.txt", "-o", "out.jsonl", "--config", str(config)]
    assert not build_settings(_parser().parse_args(args)).scope_defaults.rampup
    assert build_settings(_parser().parse_args([*args, "--rampup"])).scope_defaults.rampup
