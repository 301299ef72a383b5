"""Many crawl processes, one set of limits: workers sharing a real redis-server.

Each worker is a real ``crawlpace crawl`` process, with its own share of the
URLs or taking them from the shared frontier; they share the Redis store, so
the simulated site sees their sum. It must see one crawler's pace.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crawlpace.frontier._shared import SharedFrontier
from crawlpace.sim import Farm

from .redis_server import RedisServer

pytestmark = pytest.mark.redis

RATE = 10.0  # the site's limit, requests per second
WORKERS = 8
PAGES = 40  # four seconds at the rate: enough for the busiest-second check


SRC = str(Path(__file__).resolve().parents[1] / "src")


async def crawl(urls: Path | None, output: Path, store: str, namespace: str, config: Path) -> int:
    """One worker: its own URL list, or (``urls`` None) the shared frontier."""
    env = {**os.environ, "PYTHONPATH": SRC}
    listing = [] if urls is None else [str(urls)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawlpace", "crawl", *listing, "-o", str(output), "--store", store,
        "--namespace", namespace, "--config", str(config), "--no-robots", "--quiet", "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await process.communicate()
    assert process.returncode is not None
    if process.returncode != 0:
        raise AssertionError(f"worker failed ({process.returncode}):\n{out.decode()}\n{err.decode()}")
    summary = json.loads(out.decode().strip().splitlines()[-1])
    assert summary["complete"]
    return process.returncode


@pytest.mark.parametrize("urls_from", ["lists", "frontier"])
async def test_eight_workers_keep_one_sites_limit(tmp_path: Path, redis_server: RedisServer,
                                                  urls_from: str) -> None:
    # Delay 1/R for the scope, no jitter: together the workers may send R per second.
    config = tmp_path / "crawlpace.toml"
    config.write_text(f"[scope_defaults]\nconcurrency = 1\ndelay = {1.0 / RATE}\ndelay_per_slot = 0.0\n"
                      "jitter = false\n", encoding="utf-8")
    spec = {"site": [{"name": "limited", "profile": "ratelimit", "rate": RATE, "burst": 2,
                      "retry_after": False, "pages": PAGES}]}
    namespace = f"fleet{uuid.uuid4().hex[:8]}"
    async with Farm(spec) as farm:
        site = farm.sites[0]
        urls = [f"{site.url}/page/{n}" for n in range(1, PAGES + 1)]
        lists: list[Path | None] = []
        if urls_from == "frontier":  # one queue, filled once, worked through by all
            frontier = SharedFrontier(f"{redis_server.url}?namespace={namespace}")
            try:
                assert (await frontier.enqueue(urls)).added == PAGES
            finally:
                await frontier.aclose()
            lists = [None] * WORKERS
        for worker in range(WORKERS if urls_from == "lists" else 0):  # or a share of the list each
            path = tmp_path / f"urls{worker}.txt"
            path.write_text("\n".join(urls[worker::WORKERS]) + "\n", encoding="utf-8")
            lists.append(path)
        outputs = [tmp_path / f"out{worker}.jsonl" for worker in range(WORKERS)]
        await asyncio.gather(*(crawl(lists[w], outputs[w], redis_server.url, namespace, config)
                               for w in range(WORKERS)))
        report = farm.stats()["limited"]
    results = [json.loads(line) for path in outputs for line in path.read_text(encoding="utf-8").splitlines()]
    # Every URL exactly once in the merged output, each a 200.
    assert Counter(result["url"] for result in results) == Counter(urls)
    assert {result["status"] for result in results} == {200}
    assert report["violations"] == 0
    assert report["throttled"] == 0  # not one 429: the bucket was never overrun
    assert report["peak_per_second"] <= RATE + 1
    # And the workers did share: alone, each would have sent its 5 pages at once.
    assert report["requests"] == PAGES


#: The adaptive fleet's farm: a token bucket (limit 6 a second) and a Crawl-delay of 0.25 s (4 a second).
ADAPTIVE_SITES: list[dict[str, Any]] = [
    {"name": "bucket", "profile": "ratelimit", "rate": 6.0, "burst": 1, "pages": 18},
    {"name": "polite", "profile": "crawldelay", "delay": 0.25, "pages": 10}]
ADAPTIVE_LIMITS = {"bucket": 6.0, "polite": 4.0}


async def adaptive_worker(output: Path, store: str, namespace: str) -> None:
    """One ``crawlpace crawl --redis`` worker as a user starts it: adaptive, robots.txt obeyed."""
    env = {**os.environ, "PYTHONPATH": SRC}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawlpace", "crawl", "-o", str(output), "--redis", store, "--namespace",
        namespace, "--quiet", "--json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env)
    out, err = await process.communicate()
    if process.returncode != 0:
        raise AssertionError(f"worker failed ({process.returncode}):\n{out.decode()}\n{err.decode()}")


async def test_an_adaptive_fleet_keeps_each_sites_limit(tmp_path: Path, redis_server: RedisServer) -> None:
    # Four workers learn every site's rate together from the shared store (rampup by default);
    # the sites count what arrives, whichever worker sent it: the fleet's busiest second stays
    # within each site's limit + 1, as one process's does.
    namespace = f"adaptive{uuid.uuid4().hex[:8]}"
    async with Farm({"site": ADAPTIVE_SITES}) as farm:
        urls = [f"{site.url}/page/{n}" for site, spec in zip(farm.sites, ADAPTIVE_SITES, strict=True)
                for n in range(1, int(spec["pages"]) + 1)]
        frontier = SharedFrontier(f"{redis_server.url}?namespace={namespace}")
        try:
            assert (await frontier.enqueue(urls)).added == len(urls)
        finally:
            await frontier.aclose()
        outputs = [tmp_path / f"out{worker}.jsonl" for worker in range(4)]
        await asyncio.gather(*(adaptive_worker(out, redis_server.url, namespace) for out in outputs))
        stats = farm.stats()
    results = [json.loads(line) for path in outputs for line in path.read_text(encoding="utf-8").splitlines()]
    assert Counter(result["url"] for result in results if result.get("status") == 200) == Counter(urls)
    for name, limit in ADAPTIVE_LIMITS.items():
        assert stats[name]["violations"] == 0, (name, stats[name])
        assert stats[name]["peak_per_second"] <= limit + 1, (name, stats[name])
