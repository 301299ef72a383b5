"""Does a fleet on one Redis learn a site's rate as fast as one process? Measured on a fake clock.

The machine's load does not count: the figures are the learning's alone.

Run it as ``python bench/fleet_learning.py`` (``--quick`` for one latency and a shorter
run, ``--json`` for a machine-readable last line).

Every contender crawls the same scripted site through the store interface, the way
``tests/test_fleet_learning.py`` does: a token bucket of 25 requests a second holding 10,
answering after a fixed latency (0.05 s and 0.2 s), rampup on, each worker keeping up to 16
requests in flight. Events run one at a time in time order on a fake clock, so what is
measured is the learning itself, not the machine's speed: the same run gives the same
figures. The contenders:

* **memory**: one process on the memory store, the reference;
* **redis-1**, **redis-4**, **redis-8**: 1, 4 or 8 workers, each with its own
  ``RedisStore`` on one private ``redis-server`` (started on a free port of 127.0.0.1).

Per contender and latency: the sends per second after the start phase (seconds 10 to the
end), that over the reference's, the 429s drawn over the whole run, and the busiest one
second of sends (the bucket lets 34 through in one).

A second table puts the same contenders on moving windows that announce their budget
(``RateLimit-Policy`` and ``RateLimit``, or the draft-07 dictionary; ``--quick``: 5 per 3 s
only): the sends per second over the run, that over the window's limit, and the 429s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.redis_server import RedisServer, redis_binary  # noqa: E402
from tests.test_fleet_learning import Announced, measure  # noqa: E402

CONTENDERS = (("memory", 1), ("redis-1", 1), ("redis-4", 4), ("redis-8", 8))

#: Moving windows that announce their budget (limit, seconds, header style): a spent budget's
#: answers say 0 left and a reset in whole seconds from now (bench/results/fleetstrict2.md).
ANNOUNCED = ((5, 3.0, "ietf"), (16, 12.0, "draft07"), (3, 1.0, "ietf"))


async def announced(url: str, windows: tuple[tuple[int, float, str], ...],
                    seconds: float) -> list[dict[str, Any]]:
    """Each contender on each announced moving window (pages in 0.04 s, robots.txt first): the
    sends per second over the whole run, that over the window's limit, and the 429s."""
    rows: list[dict[str, Any]] = []
    for limit, length, style in windows:
        for name, workers in CONTENDERS:
            site = Announced(limit, length, latency=0.04, style=style)
            result = await measure("memory://" if name == "memory" else url, workers, latency=0.04,
                                   seconds=seconds, site=site, robots=True)
            rate = result.per_second(0.0, seconds)
            rows.append({"window": f"{limit} per {length:g}s ({style})", "contender": name,
                         "rate": round(rate, 3), "over_limit": round(rate * length / limit, 3),
                         "refused": result.refused})
    return rows


async def run(url: str, latencies: tuple[float, ...], seconds: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for latency in latencies:
        reference = None
        for name, workers in CONTENDERS:
            started = time.monotonic()
            result = await measure("memory://" if name == "memory" else url, workers, latency=latency,
                                   seconds=seconds)
            rate = result.per_second(10.0, seconds)
            reference = rate if reference is None else reference
            rows.append({"latency": latency, "contender": name, "workers": workers,
                         "steady_rate": round(rate, 2),
                         "over_memory": round(rate / reference, 3) if reference else None,
                         "refused": result.refused, "busiest_second": result.busiest_second(),
                         "sends": len(result.sends), "wall": round(time.monotonic() - started, 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one latency (0.2 s), 20 s of fake time")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    latencies = (0.2,) if args.quick else (0.05, 0.2)
    seconds = 20.0 if args.quick else 40.0
    binary = redis_binary()
    if binary is None:
        sys.exit("fleet_learning: no redis-server (or valkey-server) on PATH")
    server = RedisServer(binary)
    server.start()
    try:
        rows = asyncio.run(run(server.url, latencies, seconds))
        windows = asyncio.run(announced(server.url, ANNOUNCED[:1] if args.quick else ANNOUNCED, seconds))
    finally:
        server.close()
    print(f"fleet learning: a 25/s token bucket (burst 10), rampup on, {seconds:g} s of fake time; "
          "steady = sends per second from 10 s on")
    print("| latency s | contender | steady /s | x memory | 429s | busiest 1 s | wall s |")
    print("|---:|:---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['latency']:g} | {row['contender']} | {row['steady_rate']:.1f} | "
              f"{row['over_memory']:.2f} | {row['refused']} | {row['busiest_second']} | {row['wall']:.1f} |")
    print(f"announced moving windows, {seconds:g} s of fake time: sends per second over the run")
    print("| window | contender | sends /s | x limit | 429s |")
    print("|:---|:---|---:|---:|---:|")
    for row in windows:
        print(f"| {row['window']} | {row['contender']} | {row['rate']:.2f} | {row['over_limit']:.2f} | "
              f"{row['refused']} |")
    if args.json:
        print(json.dumps({"benchmark": "fleet_learning", "seconds": seconds, "rows": rows,
                          "announced": windows}, sort_keys=True))


if __name__ == "__main__":
    main()
