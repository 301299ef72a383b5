"""Per-request cost of crawlpace's client wrappers, each next to the bare client it wraps.

Run it as ``python bench/clients.py`` (``--quick`` for a run under a minute,
``--json`` for a machine-readable last line).

One local site (crawlpace's simulator, on 127.0.0.2, in a thread of its own)
answers every request at once with a small page. Each contender sends ``N``
sequential GETs to it over one kept-alive connection, with settings that never
hold a request back (no delay, no jitter), so what the wrapper adds is the
cost of asking for a permit, feeding the response back and releasing: the
fixed price of throttling one request. Contenders take turns for ``R`` rounds
(starting contender rotated), and the median time per request is reported,
with the ratio to the bare client.

A second measure sends to ``httpx.MockTransport`` (in-process, no socket) with
the bare httpx clients and the throttled ones, and reports what the wrapper
adds per request: the same price without the loopback's noise.

Pairs: requests.Session vs ``crawlpace.requests.throttled_session``;
httpx.Client vs ``crawlpace.http.throttled_sync_client`` (both blocking, on a
``SyncThrottler`` whose loop runs in another thread); aiohttp.ClientSession vs
``crawlpace.aiohttp.throttled_session``; httpx.AsyncClient vs
``crawlpace.http.throttled_client`` (both on the caller's event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import httpx
import requests

from crawlpace.aiohttp import throttled_session as aiohttp_session
from crawlpace.http import throttled_client, throttled_sync_client
from crawlpace.requests import throttled_session as requests_session
from crawlpace.sim import SimServer
from crawlpace.sim._asgi import Receive, Scope, Send, respond

HOST = "127.0.0.2"
OPEN: dict[str, Any] = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                        "RANDOMIZE_DOWNLOAD_DELAY": False, "CONCURRENT_REQUESTS_PER_DOMAIN": 8}
PAGE = b"<html><body>" + b"x" * 2000 + b"</body></html>"


async def site(scope: Scope, receive: Receive, send: Send) -> None:
    if scope.get("type") == "http":
        await respond(send, 200, PAGE, content_type="text/html")


@contextmanager
def serving() -> Iterator[str]:
    """Serve the site from a daemon thread; yield its base URL."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def run() -> None:
        box["stop"] = asyncio.Event()
        async with SimServer(site, HOST) as server:
            box["url"] = server.url
            ready.set()
            await box["stop"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield str(box["url"])
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(10)
        loop.close()


Runner = Callable[[str, int], float]


def time_sync(make: Callable[[], Any]) -> Runner:
    def run(url: str, n: int) -> float:
        with make() as client:
            client.get(f"{url}/warm").raise_for_status()
            started = time.perf_counter()
            for i in range(n):
                client.get(f"{url}/p/{i}").raise_for_status()
            return (time.perf_counter() - started) / n
    return run


def time_aiohttp(make: Callable[[], aiohttp.ClientSession]) -> Runner:
    async def body(url: str, n: int) -> float:
        async with make() as session:
            async with session.get(f"{url}/warm") as response:
                await response.read()
            started = time.perf_counter()
            for i in range(n):
                async with session.get(f"{url}/p/{i}") as response:
                    await response.read()
                    assert response.status == 200
            return (time.perf_counter() - started) / n
    return lambda url, n: asyncio.run(body(url, n))


def time_httpx_async(make: Callable[[], httpx.AsyncClient]) -> Runner:
    async def body(url: str, n: int) -> float:
        async with make() as client:
            (await client.get(f"{url}/warm")).raise_for_status()
            started = time.perf_counter()
            for i in range(n):
                (await client.get(f"{url}/p/{i}")).raise_for_status()
            return (time.perf_counter() - started) / n
    return lambda url, n: asyncio.run(body(url, n))


PAIRS: dict[str, tuple[Runner, Runner]] = {
    "requests": (time_sync(requests.Session), time_sync(lambda: requests_session(OPEN))),
    "httpx.Client": (time_sync(lambda: httpx.Client(trust_env=False)),
                     time_sync(lambda: throttled_sync_client(OPEN, trust_env=False))),
    "aiohttp": (time_aiohttp(aiohttp.ClientSession), time_aiohttp(lambda: aiohttp_session(OPEN))),
    "httpx.AsyncClient": (time_httpx_async(lambda: httpx.AsyncClient(trust_env=False)),
                          time_httpx_async(lambda: throttled_client(OPEN, trust_env=False))),
}


def facade_cost(n: int) -> dict[str, float]:
    """Microseconds per acquire+release with no HTTP: the async throttler, and the blocking facade."""
    from crawlpace import SyncThrottler, Throttler

    async def async_pairs() -> float:
        async with Throttler(OPEN) as throttler:
            started = time.perf_counter()
            for _ in range(n):
                async with throttler.slot(f"http://{HOST}/x") as permit:
                    permit.feedback(status=200)
            return (time.perf_counter() - started) / n

    with SyncThrottler(OPEN) as facade:
        started = time.perf_counter()
        for _ in range(n):
            with facade.slot(f"http://{HOST}/x") as permit:
                permit.feedback(status=200)
        sync_slot = (time.perf_counter() - started) / n
        started = time.perf_counter()
        for _ in range(n):
            facade.acquire(f"http://{HOST}/x")._report(None, latency=0.001)
        sync_adapter = (time.perf_counter() - started) / n
    return {"throttler_slot_us": asyncio.run(async_pairs()) * 1e6, "sync_slot_us": sync_slot * 1e6,
            "sync_adapter_path_us": sync_adapter * 1e6}


def _ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=PAGE)


def mock_cost(n: int, rounds: int) -> dict[str, float]:
    """Microseconds each httpx wrapper adds per request over ``httpx.MockTransport`` (no network).

    The wrapper's own price without a socket's noise: the bare client and the
    throttled one both send to an in-process transport, taking turns for
    ``rounds`` rounds; the fastest round of each is kept (the least disturbed
    by other work on the machine).
    """

    async def async_run(make: Callable[[], httpx.AsyncClient]) -> float:
        async with make() as client:
            for _ in range(50):
                await client.get("http://mock.test/")
            started = time.perf_counter()
            for _ in range(n):
                await client.get("http://mock.test/")
            return (time.perf_counter() - started) / n

    def sync_run(make: Callable[[], httpx.Client]) -> float:
        with make() as client:
            for _ in range(50):
                client.get("http://mock.test/")
            started = time.perf_counter()
            for _ in range(n):
                client.get("http://mock.test/")
            return (time.perf_counter() - started) / n

    mock = httpx.MockTransport(_ok)
    runs: dict[str, list[float]] = {name: [] for name in ("async_bare", "async_wrapped", "sync_bare",
                                                           "sync_wrapped")}
    for _ in range(rounds):
        runs["async_bare"].append(asyncio.run(async_run(lambda: httpx.AsyncClient(transport=mock))))
        runs["async_wrapped"].append(asyncio.run(async_run(lambda: throttled_client(OPEN, transport=mock))))
        runs["sync_bare"].append(sync_run(lambda: httpx.Client(transport=mock)))
        runs["sync_wrapped"].append(sync_run(lambda: throttled_sync_client(OPEN, transport=mock)))
    best = {name: min(values) * 1e6 for name, values in runs.items()}
    return {"mock_async_added_us": best["async_wrapped"] - best["async_bare"],
            "mock_sync_added_us": best["sync_wrapped"] - best["sync_bare"],
            "mock_async_bare_us": best["async_bare"], "mock_sync_bare_us": best["sync_bare"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer requests and rounds (< 1 min)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args(argv)
    n, rounds = (200, 3) if args.quick else (1000, 5)
    contenders = [(f"{name} {kind}", runner) for name, (bare, wrapped) in PAIRS.items()
                  for kind, runner in (("bare", bare), ("crawlpace", wrapped))]
    samples: dict[str, list[float]] = {label: [] for label, _ in contenders}
    with serving() as url:
        for round_index in range(rounds):
            shift = round_index % len(contenders)
            for label, runner in contenders[shift:] + contenders[:shift]:
                samples[label].append(runner(url, n))
    median = {label: statistics.median(values) for label, values in samples.items()}
    print(f"# {dt.date.today()}  {platform.python_version()}  {os.cpu_count()} cpus  "
          f"n={n} rounds={rounds}")
    print(f"{'client':<20}{'bare us/req':>13}{'crawlpace us/req':>18}{'added us':>10}{'ratio':>8}")
    figures: dict[str, dict[str, float]] = {}
    for name in PAIRS:
        bare, wrapped = median[f"{name} bare"], median[f"{name} crawlpace"]
        figures[name] = {"bare_us": bare * 1e6, "crawlpace_us": wrapped * 1e6,
                         "added_us": (wrapped - bare) * 1e6, "ratio": wrapped / bare}
        print(f"{name:<20}{bare * 1e6:>13.0f}{wrapped * 1e6:>18.0f}{(wrapped - bare) * 1e6:>10.0f}"
              f"{wrapped / bare:>8.2f}")
    facade = facade_cost(20 * n)
    print(f"no HTTP, per acquire+release: Throttler.slot {facade['throttler_slot_us']:.1f} us, "
          f"SyncThrottler.slot {facade['sync_slot_us']:.1f} us (3 trips to its loop thread), "
          f"the sync adapters' path {facade['sync_adapter_path_us']:.1f} us (2 trips)")
    facade.update(mock_cost(5 * n, rounds))
    print(f"no network (httpx.MockTransport), added per request: throttled_client "
          f"{facade['mock_async_added_us']:.1f} us over {facade['mock_async_bare_us']:.1f}, "
          f"throttled_sync_client {facade['mock_sync_added_us']:.1f} us over "
          f"{facade['mock_sync_bare_us']:.1f}")
    if args.json:
        print(json.dumps({"n": n, "rounds": rounds, "python": sys.version.split()[0], "clients": figures,
                          "facade": facade}))


if __name__ == "__main__":
    main()
