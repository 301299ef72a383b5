"""Three kinds of clients in three processes, one budget in Redis.

A requests session, an httpx.Client and an aiohttp session, each in a process
of its own and each sending from two threads (or two tasks), share one host's
delay through a real redis-server: the site sees them paced as one client.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from .redis_server import RedisServer
from .sim_thread import Recorder, serve_in_thread

pytestmark = pytest.mark.redis

HOST = "127.0.0.2"
DELAY = 0.25  # long enough that one arrival lagging on a loaded machine cannot halve a gap
PER_PROCESS = 4


def settings() -> dict[str, Any]:
    return {"DOWNLOAD_DELAY": DELAY, "DOWNLOAD_DELAY_PER_SLOT": 0.0, "RANDOMIZE_DOWNLOAD_DELAY": False}


def _fetch(kind: str, url: str, store: str) -> list[int]:
    paths = [f"{url}/{kind}/{n}" for n in range(PER_PROCESS)]
    if kind == "requests":
        from crawlpace.requests import throttled_session

        with throttled_session(settings(), store=store) as session, ThreadPoolExecutor(2) as pool:
            return list(pool.map(lambda path: session.get(path, timeout=10).status_code, paths))
    if kind == "httpx":
        from crawlpace.http import throttled_sync_client

        with throttled_sync_client(settings(), store=store, trust_env=False, timeout=10) as client, \
                ThreadPoolExecutor(2) as pool:
            return list(pool.map(lambda path: client.get(path).status_code, paths))

    async def run() -> list[int]:
        from crawlpace.aiohttp import throttled_session as aiohttp_session

        async with aiohttp_session(settings(), store=store) as session:
            async def get(path: str) -> int:
                async with session.get(path) as response:
                    return response.status

            return list(await asyncio.gather(*(get(path) for path in paths)))

    return asyncio.run(run())


def test_requests_httpx_and_aiohttp_processes_share_one_delay(redis_server: RedisServer) -> None:
    store = f"{redis_server.url}?namespace=t{uuid.uuid4().hex[:12]}"
    app = Recorder()
    kinds = ["requests", "httpx", "aiohttp"]
    with serve_in_thread(app, HOST) as url, multiprocessing.get_context("spawn").Pool(3) as pool:
        results = pool.starmap(_fetch, [(kind, url, store) for kind in kinds])
    assert results == [[200] * PER_PROCESS] * 3
    assert {path.split("/")[1] for path in app.paths} == set(kinds)
    app.assert_paced(DELAY)
