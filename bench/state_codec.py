"""What the shared rampup state's codec costs: per call, and per page of a fleet's release path.

Run it as ``python bench/state_codec.py`` (about a minute), ``--quick`` (a few seconds) or
``--json`` (the last line is one JSON object of the figures). ``--profile`` prints the
top of a cProfile of the release path instead of timing it.

A fleet shares each scope's learned policy through Redis as bytes
(``policy/state.py``). A worker reads them whenever another worker wrote since
(``load_policy``: decode, a new ``ScopePolicy``, ``restore_state``) and writes its own
lesson back after an answer (``dump_policy``: ``export_state``, compared with a new
policy's state, encoded). fleetpace1 (bench/results/fleetpace1.md) measured a fleet4
worker at 13.6 ms of CPU per page against 2.7 ms for one process, most of it there.

Two parts:

* **codec**: one realistic policy (rampup, breaker and window log on; a few hundred
  outcomes at 10/s on a fake clock with a refusal every 40, so rampup's logs are full),
  and the time per call of ``export_state``, ``dump_policy``, ``decode``,
  ``load_policy`` and ``PolicyFactory.new`` (the median of 5 batches).
* **release**: two ``RedisStore`` instances ("workers") in this one process on a private
  redis-server on 127.0.0.1, taking turns on 4 rampup scopes: acquire, release with a
  200 (a 429 every 40th). Each worker finds the other one's write at its admission, as
  a fleet of several workers on a busy site does. The figure is this process's CPU
  (``time.process_time``) per page.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawlpace._clock import AsyncioClock
from crawlpace.policy.state import decode, encode, export_state, restore_state
from crawlpace.stores import Store, open_store
from crawlpace.stores._policies import PolicyFactory, dump_policy, load_policy
from crawlpace.stores.base import Lease, Outcome

if TYPE_CHECKING:
    from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# The policy measured is the one the codec's tests round-trip: every part of the shared state in use,
# rampup's logs full (one source for both).
from tests.test_state_codec import SCOPE, learned, settings  # noqa: E402


def per_call(work: Callable[[], object], calls: int) -> float:
    """Microseconds per call of ``work``: the median of 5 batches of ``calls``."""
    times = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(calls):
            work()
        times.append((time.perf_counter() - began) / calls * 1e6)
    return statistics.median(times)


def codec_figures(outcomes: int, calls: int) -> dict[str, Any]:
    factory = PolicyFactory(settings())
    policy = learned(factory, outcomes)
    blob = dump_policy(policy, factory)
    state = export_state(policy)
    back = load_policy(blob, factory, SCOPE)
    assert export_state(back) == state, "the codec did not round-trip the policy"
    return {
        "outcomes": outcomes, "fields": len(state), "blob_bytes": len(blob),
        "export_us": per_call(lambda: export_state(policy), calls),
        "encode_us": per_call(lambda: encode(state), calls),
        "dump_us": per_call(lambda: dump_policy(policy, factory), calls),
        "decode_us": per_call(lambda: decode(blob), calls),
        "new_policy_us": per_call(lambda: factory.new(SCOPE), calls),
        "restore_us": per_call(lambda: restore_state(factory.new(SCOPE), state), calls),
        "load_us": per_call(lambda: load_policy(blob, factory, SCOPE), calls),
    }


def start_server() -> RedisServer:
    sys.path.insert(0, str(ROOT))
    from tests.redis_server import started_server

    return started_server("state_codec")


async def release_path(url: str, pages: int, scopes: int) -> dict[str, Any]:
    """Two stores taking turns on ``scopes`` rampup scopes: CPU per page of this process."""
    made = settings()
    stores: list[Store] = [open_store(f"{url}?namespace=codec", made, AsyncioClock(), random.Random(i))
                           for i in range(2)]
    ok = Outcome(status=200, latency=0.01)
    slow = Outcome(status=429, latency=0.01)
    done = 0
    loop = asyncio.get_running_loop()

    async def page(i: int) -> None:
        nonlocal done
        store = stores[i % 2]
        scope = f"s{(i // 2) % scopes}.example"
        while True:
            lease = await store.acquire(((scope, 1.0),))
            if isinstance(lease, Lease):
                break
            ready = lease.ready_at if lease.ready_at is not None else lease.poll_at
            wait = 0.001 if ready is None else ready - loop.time()
            await asyncio.sleep(min(max(wait, 0.0005), 0.5))
        await store.release(lease, slow if i % 40 == 39 else ok)
        done += 1

    try:
        for i in range(40):  # warm-up: scripts loaded, connections open
            await page(i)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(40, 40 + pages):
            await page(i)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        for store in stores:
            await store.aclose()
    return {"pages": pages, "scopes": scopes, "cpu_ms_per_page": cpu / pages * 1e3,
            "wall_ms_per_page": wall / pages * 1e3}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds")
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the release path")
    parser.add_argument("--pages", type=int, default=None, help="pages of the release path")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    calls = 40 if args.quick else 200
    pages = args.pages or (300 if args.quick else 2000)
    codec = codec_figures(400, calls)
    server = start_server()
    try:
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            release = asyncio.run(release_path(server.url, pages, 4))
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(40)
            print(out.getvalue())
        else:
            release = asyncio.run(release_path(server.url, pages, 4))
    finally:
        server.close()
    for part, figures in (("codec", codec), ("release", release)):
        for name, value in figures.items():
            shown = f"{value:10.3f}" if isinstance(value, float) else f"{value:10}"
            print(f"{part:8}{name:16} {shown}")
    if args.json:
        print(json.dumps({"codec": codec, "release": release}))


if __name__ == "__main__":
    main()
