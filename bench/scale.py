"""How crawlpace holds up with many scopes: bytes per idle scope, dispatch cost from 1 k to 1 M scopes,
flat memory over a stream of hosts, and a shared frontier of millions of URLs.

Run it as ``python bench/scale.py`` (half an hour and about 3.5 GB of Redis memory for the
10 M-URL frontier), ``--quick`` for a run under a minute (smaller counts, named in the
output), ``--json`` for a machine-readable last line. It measures; it does not judge: the
exit status is 0 whatever the figures, and the goals that are missed are listed at the end.

What it measures, each store side by side in one run (``memory`` in this process, ``redis``
on a private redis-server started on a free port of 127.0.0.1 without persistence):

1. **Flat memory over a stream of hosts** (first, while the process is small: memory the
   allocator took for a later part would hide growth). One worker admits one request to
   each of ``H`` distinct hosts (1 M; 100 k with ``--quick``, and a tenth of that for
   ``redis``, whose admissions are round trips; the Redis worker has a policy cache of
   2 000 scopes, so the stream passes it many times), its clock moving one second per 100
   hosts; the process's resident memory (``/proc/self/statm``) is sampled after each
   tenth, and the figure is the last sample over the one at 20 % (goal: at most 1.1).
2. **Bytes per idle scope.** ``N`` scopes (100 k; 10 k with ``--quick``) each admit one
   request and get its response back (status 200), then the clock passes every delay and
   the breaker's window. ``memory``: the growth of ``tracemalloc``'s traced memory over
   those scopes, divided by ``N``, before the store's sweep forgets them (what a scope
   costs while it is kept) and after :meth:`MemoryStore.evict_idle`. ``redis``: the
   growth of ``INFO memory`` ``used_memory`` divided by ``N`` (the server side), and the
   worker's own memory per scope seen (its policy cache, by ``tracemalloc``).
3. **Dispatch cost ratio.** With ``K`` scopes already held (1 k, 10 k, 100 k, 1 M; up to
   100 k with ``--quick``, which the JSON's ``dispatch_ratio_over`` names), the cost of one
   admission (acquire + release) of a scope not seen before. Each K has a store of its own
   and the stores take turns, block by block, so that a change of the machine's load hits
   every K alike; the ratio (goal: at most 1.5) is the median over the rounds of the largest
   K's block over the 1 k block of the same round. ``memory`` also gives the figure with its
   periodic sweep's share added (``memory_amortised``) and the garbage collector's time per
   admission with a store alone; ``redis`` counts the server's time in scripts (``INFO
   commandstats``: what would grow with K), one database per K, and the wall time beside it.
   ``bench/_scale_dispatch.py`` says how and why.
4. **Shared frontier.** ``U`` URLs (10 M; 20 k with ``--quick``) over ``U / 100`` hosts
   are enqueued (500 per call) and then claimed (100 per claim, no spacing) and
   acknowledged; the enqueue and claim rates and ``used_memory`` per queued URL.

Times are wall-clock on a shared machine; the ratios matter more than the rates.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import os
import platform
import random
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.redis_server import RedisServer, redis_binary  # noqa: E402

from crawlpace import Settings  # noqa: E402
from crawlpace.frontier._shared import SharedFrontier  # noqa: E402
from crawlpace.stores import Lease, MemoryStore, Outcome, Store  # noqa: E402
from crawlpace.stores.redis import RedisStore  # noqa: E402
from crawlpace.testing import MockClock  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _scale_dispatch import dispatch_memory, dispatch_redis, gc_share  # noqa: E402

OK = Outcome(status=200, latency=0.05)
PAGE = os.sysconf("SC_PAGE_SIZE")
# The Redis worker's policy cache in the stream: small, so that the stream passes it many times.
STREAM_CACHE = 2_000


def settings(delay: float = 0.25) -> Settings:
    return Settings.from_scrapy({"DOWNLOAD_DELAY": delay, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                                 "RANDOMIZE_DOWNLOAD_DELAY": False, "CONCURRENT_REQUESTS_PER_DOMAIN": 2})


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


async def admit(store: Store, name: str) -> None:
    lease = await store.acquire(((name, 1.0),))
    if not isinstance(lease, Lease):
        raise RuntimeError(f"scope {name} refused: {lease}")
    await store.release(lease, OK)


async def admit_all(store: Store, names: list[str], tasks: int = 32) -> None:
    async def run(part: list[str]) -> None:
        for name in part:
            await admit(store, name)

    await asyncio.gather(*(run(names[i::tasks]) for i in range(tasks)))


def redis_store(url: str, namespace: str, clock: MockClock, delay: float = 0.25) -> RedisStore:
    return RedisStore(f"{url}?namespace={namespace}&time=local", settings(delay), clock, random.Random(1))


# -- 1. bytes per idle scope --------------------------------------------------------------


async def idle_memory(n: int) -> dict[str, float]:
    clock = MockClock()
    store = MemoryStore(settings(), clock, random.Random(1))
    names = [f"host-{i}.example" for i in range(n)]
    await admit(store, "warm.example")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for name in names:
        # Admitted and answered; the per-slot delay and the scope's delay run out later.
        store.release_nowait(store.acquire_nowait(((name, 1.0),)), OK)  # type: ignore[arg-type]
    clock.advance(120.0)  # past every delay and the breaker's 60 s window
    held = (tracemalloc.get_traced_memory()[0] - before) / n
    kept = len(store)
    store.evict_idle()
    gc.collect()
    after = (tracemalloc.get_traced_memory()[0] - before) / n
    tracemalloc.stop()
    return {"held": round(held, 1), "after_sweep": round(after, 1), "kept_before_sweep": kept}


async def idle_redis(url: str, client: redis.Redis, n: int) -> dict[str, float]:
    clock = MockClock()
    store = redis_store(url, "idle", clock)
    await admit(store, "warm.example")
    names = [f"host-{i}.example" for i in range(n)]
    gc.collect()
    before = used_memory(client)
    tracemalloc.start()
    local = tracemalloc.get_traced_memory()[0]
    await admit_all(store, names)
    clock.advance(10.0)
    process = (tracemalloc.get_traced_memory()[0] - local) / n
    tracemalloc.stop()
    server = (used_memory(client) - before) / n
    keys_per_scope = client.dbsize() / (n + 1)
    await store.aclose()
    client.flushdb()
    return {"server": round(server, 1), "process": round(process, 1),
            "keys_per_scope": round(keys_per_scope, 2)}


# -- 3. memory over a stream of hosts -------------------------------------------------------


async def stream(store: Store, clock: MockClock, hosts: int, tasks: int) -> dict[str, Any]:
    """Admit one request to each of ``hosts`` new hosts, a tenth at a time; RSS after each tenth.

    The names are made 100 at a time: a list of a tenth of them (100 k strings
    at 1 M hosts) would be the bench's own memory, freed and made again, and
    its churn showed in the samples as a saw-tooth. Beside the RSS, the blocks
    Python's allocator holds (``sys.getallocatedblocks``): live objects, which
    a growing store would show even where the RSS did not.
    """
    samples: list[int] = []
    blocks: list[int] = []
    tenth = max(1, hosts // 10)
    for start in range(0, tenth * 10, tenth):
        for part in range(start, start + tenth, 100):
            names = [f"h{i}.stream.example" for i in range(part, min(part + 100, start + tenth))]
            await admit_all(store, names, tasks=min(tasks, 100))
            clock.advance(1.0)  # 100 hosts a second
        gc.collect()
        samples.append(rss())
        blocks.append(sys.getallocatedblocks())
    await store.aclose()
    base = samples[1] if len(samples) > 1 else samples[0]
    return {"hosts": tenth * 10, "rss_mb": [round(s / 2**20, 1) for s in samples],
            "growth_after_20pct": round(samples[-1] / base, 3), "python_blocks": blocks,
            "blocks_growth_after_20pct": round(blocks[-1] / (blocks[1] if len(blocks) > 1 else blocks[0]), 3)}


# -- 4. shared frontier -----------------------------------------------------------------------


async def frontier(url: str, client: redis.Redis, urls: int) -> dict[str, float]:
    front = SharedFrontier(f"{url}?namespace=front", worker="bench")
    hosts = max(1, urls // 100)
    before = used_memory(client)
    began = time.perf_counter()
    batch = 50_000
    for start in range(0, urls, batch):
        end = min(urls, start + batch)
        await front.enqueue(f"https://h{i % hosts}.example/p/{i}" for i in range(start, end))
    enqueue_s = time.perf_counter() - began
    per_url = (used_memory(client) - before) / urls
    claimed = 0
    began = time.perf_counter()
    claim_limit = min(urls, 200_000)  # claiming every URL of 10 M would take long: a sample
    while claimed < claim_limit:
        claim = await front.claim(100, spacing=0.0)
        if not claim.urls:
            break
        claimed += len(claim.urls)
        await front.ack([u.id for u in claim.urls], "200")
    claim_s = time.perf_counter() - began
    await front.aclose()
    client.flushdb()
    return {"urls": urls, "hosts": hosts, "enqueue_per_s": round(urls / enqueue_s),
            "claim_ack_per_s": round(claimed / claim_s) if claim_s else 0.0, "claimed": claimed,
            "redis_bytes_per_url": round(per_url, 1)}


# -- the run ---------------------------------------------------------------------------------


async def run(args: argparse.Namespace, url: str, client: redis.Redis) -> dict[str, Any]:
    quick = args.quick
    n = args.scopes or (10_000 if quick else 100_000)
    sizes = [1_000, 10_000, 100_000] if quick else [1_000, 10_000, 100_000, 1_000_000]
    # Interleaved rounds (bench/_scale_dispatch.py): rounds and admissions per block, memory and redis.
    d_rounds, d_block = (20, 2_000) if quick else (40, 2_000)
    r_rounds, r_block = (12, 100) if quick else (30, 200)
    hosts = args.hosts or (100_000 if quick else 1_000_000)
    urls = args.urls or (20_000 if quick else 10_000_000)
    parts = set(args.parts.split(","))
    out: dict[str, Any] = {"counts": {"idle_scopes": n, "dispatch_sizes": sizes,
                                      "dispatch_ratio_over": f"{sizes[-1]}/{sizes[0]}",
                                      "dispatch_rounds": {"memory": [d_rounds, d_block],
                                                          "redis": [r_rounds, r_block]},
                                      "stream_hosts": hosts, "frontier_urls": urls}}
    if "stream" in parts:
        print(f"1. resident memory while {hosts:,} distinct hosts stream through one worker")
        mem_clock, red_clock = MockClock(), MockClock()
        cached = RedisStore(f"{url}?namespace=stream&time=local&policy_cache={STREAM_CACHE}", settings(),
                            red_clock, random.Random(1))
        local = MemoryStore(settings(), mem_clock, random.Random(1))
        streams = {"memory": await stream(local, mem_clock, hosts, 1),
                   "redis": await stream(cached, red_clock, hosts // 10 if quick else hosts, 32)}
        client.flushdb()
        for store, figures in streams.items():
            print(f"   {store}: RSS MB per tenth {figures['rss_mb']}, "
                  f"last / 20 %: {figures['growth_after_20pct']}; Python's allocated blocks, last / 20 %: "
                  f"{figures['blocks_growth_after_20pct']}")
        out["stream"] = streams
    if "idle" in parts:
        print(f"2. bytes per idle scope over {n:,} scopes")
        mem = await idle_memory(n)
        red = await idle_redis(url, client, n)
        out["bytes_per_idle_scope"] = {"memory": mem["held"], "memory_after_sweep": mem["after_sweep"],
                                       "redis": red["server"], "redis_process": red["process"],
                                       "redis_keys_per_scope": red["keys_per_scope"]}
        print(f"   memory store: {mem['held']:.0f} B while kept, {mem['after_sweep']:.0f} B after its sweep")
        print(f"   redis store:  {red['server']:.0f} B in the server ({red['keys_per_scope']:.2f} keys per "
              f"scope), {red['process']:.0f} B in the worker (bounded policy cache)")
    if "dispatch" in parts:
        print(f"3. dispatch cost, µs per admission of a new scope with K scopes held: {d_rounds} interleaved "
              f"rounds of {d_block:,} admissions per K (memory), {r_rounds} of {r_block} (redis); medians, "
              "ratios per round")
        in_process = dispatch_memory(sizes, d_rounds, d_block)
        on_redis = await dispatch_redis(url, sizes, r_rounds, r_block)
        shares: dict[str, dict[str, float]] = gc_share([sizes[0], sizes[-1]], 50_000 if quick else 400_000)
        costs: dict[str, dict[str, float]] = {
            "memory": in_process["us"], "memory_amortised": in_process["amortised_us"],
            "redis": on_redis["us"], "redis_wall": on_redis["wall_us"]}
        print("   " + "K".ljust(10) + "".join(store.rjust(18) for store in costs))
        for size in sizes:
            shown = "".join(f"{cost[str(size)]:18.2f}" for cost in costs.values())
            print("   " + f"{size:,}".ljust(10) + shown)
        ratios = {"memory": in_process["ratio"], "memory_amortised": in_process["amortised_ratio"],
                  "redis": on_redis["ratio"], "redis_wall": on_redis["wall_ratio"]}
        print(f"   ratio {sizes[-1]:,} / {sizes[0]:,} (median of the rounds' ratios): "
              + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
              + f"; quartiles memory {in_process['ratio_q1_q3']}, redis {on_redis['ratio_q1_q3']}")
        print("   sweep, µs per scope scanned: " + ", ".join(
            f"{int(k):,} {v:.3f}" for k, v in in_process["sweep_us_per_scope"].items()))
        print("   the garbage collector, a store alone: " + "; ".join(
            f"{int(k):,} scopes: {v['us_per_admission']:.3f} µs per admission ({v['full_collections']} full "
            f"collections), one full collection {v['one_full_collection_ms']:.0f} ms"
            for k, v in shares.items()))
        out["dispatch_us"] = costs
        out["dispatch_cost_ratio"] = ratios
        out["dispatch_detail"] = {"memory_ratio_q1_q3": in_process["ratio_q1_q3"],
                                  "redis_ratio_q1_q3": on_redis["ratio_q1_q3"],
                                  "sweep_us_per_scope": in_process["sweep_us_per_scope"],
                                  "gc_full_collection": shares}
    if "frontier" in parts:
        print(f"4. shared frontier of {urls:,} URLs")
        front = await frontier(url, client, urls)
        print(f"   enqueue {front['enqueue_per_s']:,} URLs/s, claim+ack {front['claim_ack_per_s']:,} URLs/s "
              f"(over {front['claimed']:,}), {front['redis_bytes_per_url']:.0f} B of Redis per queued URL")
        out["frontier"] = front
    return out


def goals(out: dict[str, Any]) -> dict[str, bool]:
    verdict: dict[str, bool] = {}
    if "bytes_per_idle_scope" in out:
        idle = out["bytes_per_idle_scope"]
        verdict["memory_idle_scope_le_300B"] = idle["memory"] <= 300
        verdict["redis_idle_scope_le_300B"] = idle["redis"] <= 300
    if "dispatch_cost_ratio" in out:
        verdict["memory_dispatch_ratio_le_1.5"] = out["dispatch_cost_ratio"]["memory"] <= 1.5
        verdict["redis_dispatch_ratio_le_1.5"] = out["dispatch_cost_ratio"]["redis"] <= 1.5
    if "stream" in out:
        verdict["memory_rss_flat"] = out["stream"]["memory"]["growth_after_20pct"] <= 1.1
        verdict["redis_rss_flat"] = out["stream"]["redis"]["growth_after_20pct"] <= 1.1
    return verdict


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts: a run under a minute")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--scopes", type=int, default=0, help="idle scopes measured (N)")
    parser.add_argument("--hosts", type=int, default=0, help="hosts streamed through one worker (H)")
    parser.add_argument("--urls", type=int, default=0, help="URLs in the shared frontier (U)")
    parser.add_argument("--parts", default="stream,idle,dispatch,frontier",
                        help="the parts to run, comma-separated (default: all four)")
    args = parser.parse_args(argv)
    binary = redis_binary()
    if binary is None:
        raise SystemExit("redis-server is not installed")
    began = time.monotonic()
    server = RedisServer(binary)
    server.start()
    try:
        # A long timeout: flushing millions of keys takes seconds, more on a loaded machine.
        client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=600)
        date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        print(f"crawlpace scale benchmark, {date}; {platform.platform()}, {os.cpu_count()} CPUs, "
              f"Python {platform.python_version()}, redis-server {client.info()['redis_version']}")
        out = asyncio.run(run(args, server.url, client))
        client.close()
    finally:
        server.stop()
    verdict = goals(out)
    print("goals")
    for name, met in verdict.items():
        print(f"  {'PASS' if met else 'FAIL'}  {name}")
    seconds = time.monotonic() - began
    print(f"finished in {seconds:.0f} s")
    if args.json:
        print(json.dumps({"benchmark": "scale", "date": date, "quick": args.quick,
                          "seconds": round(seconds, 1), "goals": verdict, **out}))


if __name__ == "__main__":
    main()
