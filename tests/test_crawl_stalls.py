"""A crawl always ends: URLs that leave without a fetch never stall it or crash it (issue 31, items 1 and 2).

Some URLs end without a request of their own: every page of a site whose
robots.txt cannot be fetched, the pages robots.txt forbids, URLs the crawl
cannot fetch at all (``ftp://``). A crawl of more such URLs than it holds in
memory once spun at full CPU (nothing queued, nothing in flight, and only a
finished fetch asked the journal for more); 256 refused URLs, a result batch,
were written before the output file was open and ended in an AssertionError.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawlpace import Settings
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.crawl._fetch import Page
from crawlpace.sim._asgi import Receive, Scope, Send, respond

from .sim_thread import serve_in_thread

QUICK: dict[str, Any] = {
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "DOWNLOAD_DELAY": 0.0,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "BACKOFF_MIN_DELAY": 0.01,
    "BACKOFF_MAX_DELAY": 0.02,
    "BACKOFF_JITTER": False,
}


def free_port() -> int:
    """A loopback port nothing listens on (found free, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def site(scope: Scope, receive: Receive, send: Send) -> None:
    """A live site whose robots.txt forbids /private/."""
    if scope.get("type") != "http":
        return
    if scope["path"] == "/robots.txt":
        await respond(send, 200, b"User-agent: *\nDisallow: /private/\n")
    else:
        await respond(send, 200, b"page")


@pytest.fixture(scope="module")
def live() -> Iterator[str]:
    with serve_in_thread(site, "127.0.0.5") as url:
        yield url


def crawl(tmp_path: Path, urls: list[str], *, resume: bool = False, fresh: bool = True,
          **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Crawl ``urls`` in a loop of its own; a crawl that does not end within 30 s fails the test."""
    output = tmp_path / "out.jsonl"
    if fresh and not resume:
        for path in (output, *tmp_path.glob("out.jsonl.state*")):
            path.unlink(missing_ok=True)
    job = CrawlJob(Settings.from_scrapy(QUICK), CrawlOptions(output=output, trust_env=False, resume=resume,
                                                              **options))
    summary = asyncio.run(asyncio.wait_for(job.run(urls), 30))
    return summary, [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]


def test_more_urls_than_memory_on_sites_whose_robots_txt_fails_end(tmp_path: Path) -> None:
    port = free_port()
    urls = [f"http://127.0.0.{2 + n % 3}:{port}/x/{n}" for n in range(180)]
    summary, results = crawl(tmp_path, urls, max_in_memory=100)
    assert sorted(result["url"] for result in results) == sorted(urls)
    assert set(Counter(result["outcome"] for result in results)) <= {"exhausted", "gave_up"}
    assert not summary.complete  # not final: a resume asks robots.txt again


def test_256_refused_urls_are_written_and_a_resume_runs(tmp_path: Path) -> None:
    urls = [f"ftp://127.0.0.1/x/{n}" for n in range(256)]
    summary, results = crawl(tmp_path, urls)
    assert Counter(result["outcome"] for result in results) == {"failed": 256}
    assert summary.complete
    resumed, results = crawl(tmp_path, urls, resume=True)
    assert resumed.complete
    assert len(results) == 256


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(refused=st.integers(0, 30), forbidden=st.integers(0, 12), dead=st.integers(0, 30),
       alive=st.integers(0, 12), memory=st.integers(1, 25), seed=st.randoms(use_true_random=False))
def test_any_mix_of_urls_ends_with_one_line_each(tmp_path: Path, live: str, refused: int, forbidden: int,
                                                 dead: int, alive: int, memory: int, seed: Any) -> None:
    port = free_port()
    urls = ([f"ftp://127.0.0.1/r/{n}" for n in range(refused)]
            + [f"{live}/private/{n}" for n in range(forbidden)]
            + [f"http://127.0.0.{2 + n % 2}:{port}/d/{n}" for n in range(dead)]
            + [f"{live}/page/{n}" for n in range(alive)])
    seed.shuffle(urls)
    _, results = crawl(tmp_path, urls, max_in_memory=memory)
    assert sorted(result["url"] for result in results) == sorted(urls)
    outcomes = Counter(result["outcome"] for result in results)
    assert outcomes["ok"] == alive
    assert outcomes["disallowed"] == forbidden
    assert outcomes["failed"] == refused


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(count=st.integers(250, 520), memory=st.sampled_from([1, 100, 255, 256, 257, 100_000]))
def test_refused_urls_around_the_batch_size_are_all_written(tmp_path: Path, count: int, memory: int) -> None:
    urls = [f"ftp://127.0.0.1/x/{n}" for n in range(count)]
    summary, results = crawl(tmp_path, urls, max_in_memory=memory)
    assert len(results) == count
    assert summary.complete
    _, again = crawl(tmp_path, urls, resume=True, max_in_memory=memory)
    assert len(again) == count


async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer the headers at once, then the body a byte every 0.3 s (each read well within --timeout)."""
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.3)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def test_a_server_that_trickles_its_answer_cannot_hold_the_crawl(tmp_path: Path) -> None:
    server = await asyncio.start_server(trickle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    output = tmp_path / "out.jsonl"
    job = CrawlJob(Settings.from_scrapy(QUICK), CrawlOptions(
        output=output, trust_env=False, robots=False, retries=1, timeout=2.0, deadline=1.0))
    try:
        async with server:
            summary = await asyncio.wait_for(job.run([f"http://127.0.0.1:{port}/slow"]), 20)
    finally:
        server.close()
    [result] = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert result["outcome"] == "exhausted"  # a timeout is a backoff answer: retried once, then given up
    assert result["attempts"] == 2
    assert "deadline" in result["error"]
    assert summary.requests == 2


def test_the_deadline_is_checked() -> None:
    with pytest.raises(Exception, match="deadline"):
        CrawlOptions(output=Path("out.jsonl"), deadline=0)


@pytest.mark.parametrize("count", [10, 20, 11])
def test_a_host_whose_last_batch_is_exactly_full_ends_complete_without_a_false_alarm(
        tmp_path: Path, count: int, caplog: pytest.LogCaptureFixture) -> None:
    # With room for 10, the journal hands the host over 10 at a time and looks once more after a
    # full batch; when that look finds nothing left, the source is exhausted though nothing was
    # queued. The job once took that for a stall and stopped (found by bench/fuzz.py).
    port = free_port()
    urls = [f"http://127.0.0.2:{port}/d/{n}" for n in range(count)]
    summary, results = crawl(tmp_path, urls, max_in_memory=10)
    assert sorted(result["url"] for result in results) == sorted(urls)
    assert not summary.interrupted
    assert "nothing to wait for" not in caplog.text


class InstantFetcher:
    """Every page answered at once, without a network."""

    async def get(self, url: str, limit: int) -> Page:
        return Page(200, {}, b"page", 0.001)

    async def aclose(self) -> None:
        return None


async def test_a_cancelled_crawl_leaves_no_take_behind(tmp_path: Path) -> None:
    # bench/crawl_faults.py cuts crawls with a timeout; each cut left a Scheduler.take() waiting,
    # which later failed on the closed throttler ("Task exception was never retrieved").
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 30.0, "RANDOMIZE_DOWNLOAD_DELAY": False})
    job = CrawlJob(settings, CrawlOptions(output=tmp_path / "out.jsonl", robots=False, trust_env=False),
                   fetcher=InstantFetcher())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(job.run([f"http://127.0.0.2:9/page/{n}" for n in range(2)]), 0.3)
    await asyncio.sleep(0)
    left = [task for task in asyncio.all_tasks() if "Scheduler.take" in repr(task) and not task.done()]
    assert left == []
