"""A message where a traceback used to be (issue 31, item 6): full Redis, full disk, bad files and paths."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis

from crawlpace import Settings
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.crawl._results import Result, ResultWriter
from crawlpace.stores.redis._keys import frontier_prefix

from .deadlines import CHILD
from .redis_server import RedisServer, redis_binary

SRC = str(Path(__file__).resolve().parents[1] / "src")


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawlpace", *args], capture_output=True, text=True,
                          timeout=CHILD,
                          env={**os.environ, "PYTHONPATH": SRC}, cwd=cwd)


@pytest.fixture
def small_server() -> Iterator[RedisServer]:
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH")
    server = RedisServer(binary, extra=("--maxmemory", "3mb", "--maxmemory-policy", "noeviction"))
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.mark.redis
def test_enqueue_into_a_full_redis_says_how_many_got_in(tmp_path: Path, small_server: RedisServer) -> None:
    listing = tmp_path / "urls.txt"
    listing.write_text("".join(f"http://127.0.0.{n % 200 + 1}:8080/{'x' * 120}/{n}\n" for n in range(30_000)),
                       encoding="utf-8")
    done = cli("enqueue", str(listing), "--redis", small_server.url, "--namespace", "full", "--json")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "is full" in done.stderr, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    stored = redis.Redis.from_url(small_server.url).hlen(frontier_prefix("full") + "url")
    assert 0 < figures["added"] == stored < 30_000
    assert f"{stored} URLs were queued before it stopped" in done.stderr


def test_bad_paths_and_files_are_messages_with_exit_3(tmp_path: Path) -> None:
    (tmp_path / "urls.txt").write_text("ftp://127.0.0.1/a\n", encoding="utf-8")
    (tmp_path / "bad.toml").write_bytes(b"concurrent_requests = 4\n# caf\xe9\n")
    runs = [("crawl", "urls.txt", "-o", ""), ("crawl", "urls.txt", "-o", "."),
            ("crawl", "urls.txt", "-o", "out.jsonl", "--config", "bad.toml"), ("check", "bad.toml"),
            ("purge", "--store", "redis://127.0.0.1:1/0?namspace=x", "--namespace", "j"),
            ("purge", "--store", "redis:/127.0.0.1:1/0", "--namespace", "j"),
            ("status", "--store", "unix:////[")]  # read once, not again once rebuilt (found by the fuzz run)
    with ThreadPoolExecutor(len(runs)) as pool:  # processes of their own: run side by side
        finished = list(pool.map(lambda args: cli(*args, cwd=tmp_path), runs))
    for args, done in zip(runs, finished, strict=True):
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
    assert "line 2 is not UTF-8" in cli("check", "bad.toml", cwd=tmp_path).stderr


async def test_a_full_disk_stops_the_crawl_with_a_message_and_a_resume_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    urls = [f"ftp://127.0.0.1/x/{n}" for n in range(600)]
    output = tmp_path / "out.jsonl"
    real = ResultWriter.write_many
    calls = Counter[str]()

    def full_after_one(self: ResultWriter, results: list[Result]) -> None:
        calls["write"] += 1
        if calls["write"] > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, results)

    monkeypatch.setattr(ResultWriter, "write_many", full_after_one)
    options = CrawlOptions(output=output, trust_env=False, max_in_memory=100)
    job = CrawlJob(Settings.from_scrapy({}), options)
    summary = await asyncio.wait_for(job.run(urls), 20)  # no exception: a message, and a stop
    assert job.write_error is not None
    assert job.write_error.errno == errno.ENOSPC
    assert summary.interrupted
    assert not summary.complete
    assert "No space left on device" in caplog.text
    assert "--resume" in caplog.text
    written = len(output.read_text(encoding="utf-8").splitlines())
    assert 0 < written < 600
    monkeypatch.setattr(ResultWriter, "write_many", real)
    resumed = await CrawlJob(Settings.from_scrapy({}), CrawlOptions(
        output=output, trust_env=False, max_in_memory=100, resume=True)).run(urls)
    assert resumed.complete
    lines = [json.loads(line)["url"] for line in output.read_text(encoding="utf-8").splitlines()]
    assert Counter(lines) == Counter(urls)
