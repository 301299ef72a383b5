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
from tests.test_fleet_learning import measure  # noqa: E402

CONTENDERS = (("memory", 1), ("redis-1", 1), ("redis-4", 4), ("redis-8", 8))


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
    finally:
        server.close()
    print(f"fleet learning: a 25/s token bucket (burst 10), rampup on, {seconds:g} s of fake time; "
          "steady = sends per second from 10 s on")
    print("| latency s | contender | steady /s | x memory | 429s | busiest 1 s | wall s |")
    print("|---:|:---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['latency']:g} | {row['contender']} | {row['steady_rate']:.1f} | "
              f"{row['over_memory']:.2f} | {row['refused']} | {row['busiest_second']} | {row['wall']:.1f} |")
    if args.json:
        print(json.dumps({"benchmark": "fleet_learning", "seconds": seconds, "rows": rows}, sort_keys=True))


if __name__ == "__main__":
    main()
