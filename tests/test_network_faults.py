"""Real crawl workers reach Redis through a loopback proxy that injects network faults: latency,
dropped connections, half-open connections and a 10 s partition. The sites' limits must hold, no URL
may be lost, no slot or claim may leak, and the crawl must pick up again within seconds of each fault."""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from crawlpace import Settings
from crawlpace._clock import AsyncioClock
from crawlpace.frontier._shared import SharedFrontier
from crawlpace.sim import Farm
from crawlpace.stores import open_store

from .fault_proxy import FaultProxy
from .redis_server import RedisServer
from .test_frontier_workers import (
    RATE,
    _no_worker_outlives_its_test,  # noqa: F401  (autouse: kills leftovers)
    connected,
    farm_spec,
    finish,
    merged,
    named,
    start_worker,
    write_config,
)

pytestmark = pytest.mark.redis

PAGES = 60  # per site: at RATE (10/s) the crawl lasts about as long as the fault schedule


async def faults(proxy: FaultProxy, log: list[tuple[str, float]]) -> None:
    """The schedule: latency, drops, half-open connections, then a 10 s partition."""
    await asyncio.sleep(1.0)
    proxy.latency = 0.1
    await asyncio.sleep(2.0)
    proxy.latency = 0.0
    for _ in range(2):
        proxy.drop()
        await asyncio.sleep(0.5)
    proxy.freeze(new=False)  # the open connections go silent; new ones flow
    await asyncio.sleep(6.0)  # past the 5 s socket timeout
    proxy.thaw()
    log.append(("half-open ended", time.time()))
    await asyncio.sleep(0.5)
    proxy.freeze(new=True)  # a partition: nothing gets through
    log.append(("partition", time.time()))
    await asyncio.sleep(10.0)
    proxy.thaw()
    log.append(("partition ended", time.time()))


async def test_workers_ride_out_network_faults(tmp_path: Path, redis_server: RedisServer) -> None:
    config, namespace = write_config(tmp_path), f"n{uuid.uuid4().hex[:8]}"
    proxy = FaultProxy(redis_server.port)
    await proxy.start()
    through = f"redis://127.0.0.1:{proxy.port}/0?lease=5"
    log: list[tuple[str, float]] = []
    async with Farm(farm_spec(PAGES, "one", "two")) as farm:
        urls = [f"{site.url}/page/{n}" for site in farm.sites for n in range(1, PAGES + 1)]
        frontier = SharedFrontier(f"{redis_server.url}?namespace={namespace}")
        try:
            assert (await frontier.enqueue(urls)).added == len(urls)
            outputs = [tmp_path / f"out{n}.jsonl" for n in range(3)]
            # Logged at INFO: this test has failed twice in full runs (stops 27 and 28) with a worker
            # still running after 150 s and nothing to show why; alone, it passed 14 runs of 14.
            names = [f"{namespace}-{n}" for n in range(3)]
            workers = [await start_worker(named(through, name), namespace, path, config, verbose=True)
                       for name, path in zip(names, outputs, strict=True)]
            # The faults are for running workers: on a loaded machine a worker could still be starting
            # when they began, and its start-up check would meet the partition.
            await connected(redis_server.url, names)
            schedule = asyncio.ensure_future(faults(proxy, log))
            try:
                summaries = await asyncio.gather(*(finish(worker, within=150.0) for worker in workers))
            finally:
                schedule.cancel()
                await asyncio.gather(schedule, return_exceptions=True)
            counts = await frontier.counts()
        finally:
            await frontier.aclose()
            await proxy.close()
        stats = farm.stats()
    results = merged(outputs)
    seen = Counter(result["url"] for result in results)
    assert set(seen) == set(urls)  # no URL lost
    assert (counts.queued, counts.claimed, counts.done) == (0, 0, len(urls))  # no claim leaked
    assert all(summary["complete"] for summary in summaries)
    for name, report in stats.items():
        assert report["peak_per_second"] <= RATE + 1, (name, report)  # the limits held through it all
        assert report["throttled"] == 0, (name, report)
    store = open_store(f"{redis_server.url}?namespace={namespace}", Settings(), AsyncioClock(),
                       random.Random(0))
    try:
        for site in ("127.0.0.2", "127.0.0.3"):
            snap = await store.snapshot(site)
            assert snap is not None
            assert snap.inflight == 0, (site, snap)  # no slot leaked
    finally:
        await store.aclose()
    assert proxy.connections > len(workers)  # the faults did make the workers connect again
    recovery = None
    if len(log) == 3:  # the crawl outlasted the schedule: it must pick up soon after the partition
        ended = log[2][1]
        after = sorted(result["time"] for result in results if result["time"] >= ended)
        assert after, "nothing was answered after the partition"
        recovery = after[0] - ended
        assert recovery < 10.0, f"first answer {recovery:.1f}s after the partition"
    print(json.dumps({"events": log, "connections": proxy.connections, "recovery": recovery,
                      "peaks": {name: report["peak_per_second"] for name, report in stats.items()}}))
