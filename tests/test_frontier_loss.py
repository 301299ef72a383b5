"""A shared frontier that vanished is said out loud (issue 31, item 4).

A Redis restarted without persistence comes back empty: the URLs queued in
it are gone. Workers once logged "nothing is lost" and exited 0, complete.
Now they notice (the frontier's URL ids only grow, and the last one fell),
say how many URLs went, and exit non-zero.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlpace.sim import Farm

from .redis_server import RedisServer, redis_binary
from .test_frontier_workers import (
    _no_worker_outlives_its_test,  # noqa: F401  (autouse: kills leftovers)
    cli,
    farm_spec,
    merged,
    start_worker,
    wait_for_lines,
    write_config,
)

pytestmark = pytest.mark.redis


@pytest.fixture
def volatile_server() -> Iterator[RedisServer]:
    """A redis-server of this test alone, without persistence: a restart empties it."""
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH")
    server = RedisServer(binary)
    try:
        server.start()
        yield server
    finally:
        server.close()


async def test_a_worker_says_how_many_urls_a_restarted_empty_redis_lost(
        tmp_path: Path, volatile_server: RedisServer) -> None:
    config, namespace = write_config(tmp_path), "volatile"
    async with Farm(farm_spec(60, "only")) as farm:
        urls = [f"{farm.sites[0].url}/page/{n}" for n in range(1, 61)]
        listing = tmp_path / "urls.txt"
        listing.write_text("\n".join(urls) + "\n", encoding="utf-8")
        assert (await cli("enqueue", str(listing), "--redis", volatile_server.url, "--namespace",
                          namespace))[0] == 0
        output = tmp_path / "out.jsonl"
        worker = await start_worker(volatile_server.url, namespace, output, config)
        await wait_for_lines(output, 4)
        volatile_server.stop()
        await asyncio.sleep(0.5)
        volatile_server.start()  # empty: no persistence
        out, err = await asyncio.wait_for(worker.communicate(), 60)
    summary = json.loads(out.decode().strip().splitlines()[-1])
    answered = len(merged([output]))
    assert worker.returncode == 1, err.decode()
    assert not summary["complete"]
    # What was neither answered here nor held here when the server went: a little under 60.
    assert 30 <= summary["lost"] <= 60 - answered, (summary, answered)
    assert "lost its data" in err.decode()
    assert "nothing is lost" not in err.decode()
