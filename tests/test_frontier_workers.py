"""Real ``crawlpace crawl`` worker processes on one shared frontier, under faults.

``crawlpace enqueue`` fills the frontier; workers started without a URL file
work through it, on one real redis-server (limits and frontier both), against
simulated sites on 127.0.0.1. The merged output files must hold every URL,
the sites must see one crawler's pace, and neither a worker killed with
SIGKILL nor a Redis restart may lose a URL.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from crawlpace.frontier._shared import SharedFrontier
from crawlpace.sim import Farm

from .deadlines import REACH
from .leak_guard import end_child
from .redis_server import RedisServer

pytestmark = pytest.mark.redis

SRC = str(Path(__file__).resolve().parents[1] / "src")
RATE = 10.0  # each site's limit, requests per second


def farm_spec(pages: int, *names: str) -> dict[str, Any]:
    return {"site": [{"name": name, "profile": "ratelimit", "rate": RATE, "burst": 2, "retry_after": False,
                      "pages": pages} for name in names]}


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "crawlpace.toml"
    config.write_text(f"concurrent_requests = 4\n[scope_defaults]\nconcurrency = 1\ndelay = {1.0 / RATE}\n"
                      "delay_per_slot = 0.0\njitter = false\n", encoding="utf-8")
    return config


async def cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawlpace", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": SRC})
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


_STARTED: list[asyncio.subprocess.Process] = []


@pytest.fixture(autouse=True)
async def _no_worker_outlives_its_test() -> AsyncIterator[None]:
    """Kill the workers a test started and left running (a failed assertion, a timeout elsewhere).

    One such worker once went on for an hour after its test failed, taking a core from the tests after it.
    Its pipes are read to the end too, on the test's loop: left open, held by the failure's traceback,
    they failed the session at its end with an unclosed-transport warning each.
    """
    yield
    while _STARTED:
        await end_child(_STARTED.pop())


async def start_worker(store: str, namespace: str, output: Path, config: Path,
                       visibility: float = 30.0, prefix: tuple[str, ...] = (),
                       verbose: bool = False, wait_for_urls: float = 0.0) -> asyncio.subprocess.Process:
    """A frontier worker; ``prefix`` runs it under another command (``faketime`` for a skewed clock).

    ``verbose`` logs at INFO, so a worker that does not end shows what it last did.
    """
    process = await asyncio.create_subprocess_exec(
        *prefix, sys.executable, "-m", "crawlpace", "crawl", "-o", str(output), "--redis", store,
        "--namespace", namespace, "--config", str(config), "--no-robots", "--quiet", "--json",
        *(("-v",) if verbose else ()), "--visibility", str(visibility),
        *(("--wait-for-urls", str(wait_for_urls)) if wait_for_urls else ()), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": SRC})
    _STARTED.append(process)
    return process


async def finish(process: asyncio.subprocess.Process, within: float = 90.0) -> dict[str, Any]:
    """Wait for a worker to end; it must end by itself, complete, within ``within`` seconds."""
    try:
        out, err = await asyncio.wait_for(process.communicate(), within)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(f"worker still running after {within:g}s:\n{err.decode()[-3000:]}") from None
    if process.returncode != 0:
        raise AssertionError(f"worker failed ({process.returncode}):\n{out.decode()}\n{err.decode()}")
    summary: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return summary


def merged(outputs: list[Path]) -> list[dict[str, Any]]:
    return [json.loads(line) for path in outputs if path.exists()
            for line in path.read_text(encoding="utf-8").splitlines()]


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


async def wait_for_lines(paths: Path | list[Path], count: int, within: float = REACH) -> None:
    """Return once the output files together hold ``count`` lines."""
    files = [paths] if isinstance(paths, Path) else paths
    async with asyncio.timeout(within):
        while True:  # a file has no event to wait on: poll it
            if sum(line_count(path) for path in files) >= count:
                return
            await asyncio.sleep(0.05)


def named(url: str, name: str) -> str:
    """``url`` with a client name: the worker's connections show under it in CLIENT LIST."""
    return f"{url}{'&' if '?' in url else '?'}client_name={name}"


async def connected(url: str, names: list[str], within: float = REACH) -> None:
    """Return once a client of each of ``names`` is connected to the server at ``url``.

    A worker's start-up (an interpreter, crawlpace, its drivers) took several seconds on a loaded
    machine: a test that needs every worker at work waits for their connections, not a fixed time.
    """
    import redis.asyncio as aioredis

    client = aioredis.from_url(url.partition("?")[0], decode_responses=True)
    try:
        async with asyncio.timeout(within):
            while True:  # no event to wait on: poll the server's clients
                present = {entry.get("name") for entry in await client.client_list()}
                if present.issuperset(names):
                    return
                await asyncio.sleep(0.05)
    finally:
        await client.aclose()


async def test_workers_share_one_queue_and_one_set_of_limits(tmp_path: Path,
                                                             redis_server: RedisServer) -> None:
    config, namespace = write_config(tmp_path), f"f{uuid.uuid4().hex[:8]}"
    async with Farm(farm_spec(24, "one", "two")) as farm:
        urls = [f"{site.url}/page/{n}" for site in farm.sites for n in range(1, 25)]
        listing = tmp_path / "urls.txt"
        listing.write_text("\n".join(urls + urls[:5]) + "\n", encoding="utf-8")
        # Every worker is up and waiting for URLs before there are any: on a loaded machine the
        # first one started did all 48 (2.4 s of work) before the others had started.
        outputs = [tmp_path / f"out{n}.jsonl" for n in range(3)]
        names = [f"{namespace}-{n}" for n in range(3)]
        workers = [await start_worker(named(redis_server.url, name), namespace, path, config,
                                      wait_for_urls=120.0) for name, path in zip(names, outputs, strict=True)]
        await connected(redis_server.url, names)
        code, out, _ = await cli("enqueue", str(listing), "--redis", redis_server.url, "--namespace",
                                 namespace, "--json")
        assert code == 0
        assert json.loads(out.strip().splitlines()[-1])["added"] == 48
        summaries = await asyncio.gather(*(finish(worker) for worker in workers))
        stats = farm.stats()
    results = merged(outputs)
    assert Counter(result["url"] for result in results) == Counter(urls)  # each exactly once
    assert {result["status"] for result in results} == {200}
    assert all(summary["complete"] for summary in summaries)
    assert sum(summary["answered"] for summary in summaries) == 48
    assert sum(1 for summary in summaries if summary["answered"]) >= 2  # the work was shared
    for report in stats.values():
        assert report["violations"] == 0
        assert report["throttled"] == 0
        assert report["peak_per_second"] <= RATE + 1
    # The fleet's view: the frontier drained, everything acknowledged as ok.
    code, out, _ = await cli("status", "--store", redis_server.url, "--namespace", namespace, "--json")
    assert code == 0
    frontier = json.loads(out.strip().splitlines()[-1])["frontier"]
    assert (frontier["queued"], frontier["claimed"], frontier["done"]) == (0, 0, 48)
    assert frontier["outcomes"] == {"ok": 48}


async def held_by(store: str, namespace: str, pid: int, within: float = REACH) -> None:
    """Return once the worker with process id ``pid`` holds a claim in the frontier."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(store.partition("?")[0], decode_responses=True)
    owners = f"cp:{namespace}:frontier:{{{namespace}}}:owner"
    try:
        async with asyncio.timeout(within):
            while True:  # no event to wait on: poll the owners of the claims
                if any(f"-{pid}-" in owner for owner in await client.hvals(owners)):
                    return
                await asyncio.sleep(0.01)
    finally:
        await client.aclose()


async def test_a_killed_workers_urls_are_redone_and_nothing_is_lost(tmp_path: Path,
                                                                   redis_server: RedisServer) -> None:
    config, namespace = write_config(tmp_path), f"k{uuid.uuid4().hex[:8]}"
    store = f"{redis_server.url}?lease=1"  # the killed worker's slots come back within a second
    # Slow sites: each answer takes 0.3-0.4 s, so the victim has requests in flight when it dies.
    spec = {"site": [{"name": name, "profile": "slow", "low": 0.3, "high": 0.4, "limit": 4, "pages": 12}
                     for name in ("s1", "s2", "s3")]}
    async with Farm(spec) as farm:
        urls = [f"{site.url}/page/{n}" for site in farm.sites for n in range(1, 13)]
        frontier = SharedFrontier(f"{store}&namespace={namespace}")
        try:
            assert (await frontier.enqueue(urls)).added == len(urls)
            outputs = [tmp_path / f"out{n}.jsonl" for n in range(3)]
            victim = await start_worker(store, namespace, outputs[0], config, visibility=1.5)
            await wait_for_lines(outputs[0], 3)  # the victim is working
            others = [await start_worker(store, namespace, path, config, visibility=1.5)
                      for path in outputs[1:]]
            await asyncio.sleep(0.3)
            await held_by(redis_server.url, namespace, victim.pid)
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            summaries = await asyncio.gather(*(finish(worker) for worker in others))
            counts = await frontier.counts()
        finally:
            await frontier.aclose()
        stats = farm.stats()
    results = merged(outputs)
    seen = Counter(result["url"] for result in results)
    assert set(seen) == set(urls)  # nothing lost
    # At least once: only URLs the victim held when it died can appear twice.
    assert sum(seen.values()) - len(urls) <= 2 * 4
    assert counts.requeued >= 1  # the victim held URLs, and they came back
    assert (counts.queued, counts.claimed, counts.done) == (0, 0, len(urls))
    assert all(summary["complete"] for summary in summaries)
    assert {result["status"] for result in results} == {200}
    assert all(report["violations"] == 0 for report in stats.values())


async def test_workers_pause_through_a_redis_restart_and_lose_nothing(
        tmp_path: Path, persistent_server: RedisServer) -> None:
    config, namespace = write_config(tmp_path), "restart"
    async with Farm(farm_spec(40, "only")) as farm:
        urls = [f"{farm.sites[0].url}/page/{n}" for n in range(1, 41)]
        listing = tmp_path / "urls.txt"
        listing.write_text("\n".join(urls) + "\n", encoding="utf-8")
        assert (await cli("enqueue", str(listing), "--redis", persistent_server.url, "--namespace",
                          namespace))[0] == 0
        outputs = [tmp_path / f"out{n}.jsonl" for n in range(2)]
        # The default lease (30 s): a release that failed while the server was away is sent again
        # when it is back, so no slot stays held until its lease runs out.
        names = [f"{namespace}-{n}" for n in range(2)]
        workers = [await start_worker(named(persistent_server.url, name), namespace, path, config)
                   for name, path in zip(names, outputs, strict=True)]
        # Both workers have reached the server (a loaded machine once stopped it before the second
        # had started, which then failed its start-up check), and the crawl is under way.
        await connected(persistent_server.url, names)
        await wait_for_lines(outputs, 4)
        persistent_server.stop()
        during = len(merged(outputs))
        await asyncio.sleep(1.5)
        # Fetches already admitted may end while the server is away; no new one starts.
        assert len(merged(outputs)) <= during + 2 * 4
        persistent_server.start()
        restarted = asyncio.get_running_loop().time()
        summaries = await asyncio.gather(*(finish(worker) for worker in workers))
        after = asyncio.get_running_loop().time() - restarted
        report = farm.stats()["only"]
    results = merged(outputs)
    assert Counter(result["url"] for result in results) == Counter(urls)  # each exactly once
    assert after < 15.0  # the rest of the crawl, not a 30 s lease held by a lost release
    assert all(summary["complete"] for summary in summaries)
    assert report["violations"] == 0
    assert report["throttled"] == 0
    assert report["peak_per_second"] <= RATE + 1  # no burst when the server came back


async def test_a_stopped_worker_hands_its_urls_back_at_once(tmp_path: Path,
                                                            redis_server: RedisServer) -> None:
    config, namespace = write_config(tmp_path), f"s{uuid.uuid4().hex[:8]}"
    spec = {"site": [{"name": name, "profile": "slow", "low": 0.3, "high": 0.4, "limit": 4, "pages": 6}
                     for name in ("s1", "s2")]}
    async with Farm(spec) as farm:
        urls = [f"{site.url}/page/{n}" for site in farm.sites for n in range(1, 7)]
        frontier = SharedFrontier(f"{redis_server.url}?namespace={namespace}")
        try:
            await frontier.enqueue(urls)
            output = tmp_path / "out.jsonl"
            worker = await start_worker(redis_server.url, namespace, output, config)
            await held_by(redis_server.url, namespace, worker.pid)
            worker.send_signal(signal.SIGTERM)
            _, err = await worker.communicate()
            counts = await frontier.counts()
        finally:
            await frontier.aclose()
    assert worker.returncode == 130
    assert "went back to the shared frontier" in err.decode()
    answered = line_count(output)
    # Nothing is left claimed: what was not answered is queued again, ready for the next worker.
    assert counts.claimed == 0
    assert counts.returned >= 1
    assert counts.queued == len(urls) - answered
    assert counts.done == answered


@pytest.mark.skipif(shutil.which("faketime") is None, reason="no faketime (scripts/test installs it)")
async def test_a_worker_whose_clock_is_30s_ahead_keeps_the_fleets_pace(tmp_path: Path,
                                                                       redis_server: RedisServer) -> None:
    config, namespace = write_config(tmp_path), f"c{uuid.uuid4().hex[:8]}"
    async with Farm(farm_spec(40, "only")) as farm:
        urls = [f"{farm.sites[0].url}/page/{n}" for n in range(1, 41)]
        frontier = SharedFrontier(f"{redis_server.url}?namespace={namespace}")
        try:
            assert (await frontier.enqueue(urls)).added == len(urls)
        finally:
            await frontier.aclose()
        outputs = [tmp_path / f"out{n}.jsonl" for n in range(2)]
        started = time.time()
        ahead = await start_worker(redis_server.url, namespace, outputs[0], config,
                                   prefix=("faketime", "-f", "+30s"))
        on_time = await start_worker(redis_server.url, namespace, outputs[1], config)
        summaries = await asyncio.gather(finish(ahead), finish(on_time))
        report = farm.stats()["only"]
    results = merged(outputs)
    assert Counter(result["url"] for result in results) == Counter(urls)
    assert all(summary["answered"] for summary in summaries)  # both took part
    # The clock 30 s ahead shows in what that worker writes, not in the pace the site sees.
    written = [json.loads(line)["time"] for line in outputs[0].read_text(encoding="utf-8").splitlines()]
    assert min(written) >= started + 29.0
    assert report["violations"] == 0
    assert report["throttled"] == 0
    assert report["peak_per_second"] <= RATE + 1
