"""A fleet on buckets with no burst whose writes lag their grants unevenly: measured on a fake clock.

Run it as ``python bench/fleet_writes.py`` (``--quick`` for fewer cases, ``--json`` for a
machine-readable last line).

Every case crawls one scripted site through ``tests/test_fleet_writes.py``'s harness: a token
bucket with no burst (its refusals hold it quiet for a ``Retry-After``, or not), pages in 20 ms,
4 or 8 workers each with its own ``RedisStore`` on one private ``redis-server`` (127.0.0.1),
every write lagging its grant by 0-0.3 s and one in ten by 0.5-2.5 s, every answer read that
late (a loaded machine's event loops, bench/results/fleetviol2.md), the crawl's last look played
as ``crawl/_fetch.py`` plays it. Events run one at a time in time order on a fake clock: the same
run gives the same figures, whatever the machine's load.

Per case: the arrivals per second from 20 s to 60 s over the bucket's rate, the refusals and
the arrivals inside a hold the site announced (violations).
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
from tests.test_fleet_writes import measure  # noqa: E402

#: (rate per second, Retry-After seconds: 0 for none)
SITES = ((1.67, 1.0), (5.0, 1.0), (0.8, 0.0), (12.0, 0.0))
SECONDS = 60.0


async def run(url: str, sites: tuple[tuple[float, float], ...], fleets: tuple[int, ...],
              seeds: tuple[int, ...]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for rate, hold in sites:
        for workers in fleets:
            for seed in seeds:
                started = time.monotonic()
                result = await measure(url, workers, rate=rate, hold=hold, seconds=SECONDS, seed=seed)
                rows.append({"rate": rate, "hold": hold, "workers": workers, "seed": seed,
                             "share": round(result.per_second(20.0, SECONDS) / rate, 3),
                             "refused": result.refused, "violations": result.violations,
                             "arrivals": len(result.arrivals), "wall": round(time.monotonic() - started, 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="two sites, fleets of 4, two seeds")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    sites = SITES[:2] if args.quick else SITES
    fleets = (4,) if args.quick else (4, 8)
    seeds = (1, 2) if args.quick else (1, 2, 3)
    binary = redis_binary()
    if binary is None:
        sys.exit("fleet_writes: no redis-server (or valkey-server) on PATH")
    server = RedisServer(binary)
    server.start()
    try:
        rows = asyncio.run(run(server.url, sites, fleets, seeds))
    finally:
        server.close()
    print(f"fleet writes: buckets with no burst, writes lagging their grants, {SECONDS:g} s of fake time; "
          "share = arrivals per second from 20 s on over the rate")
    print("| rate /s | Retry-After s | workers | seed | share | refused | violations | arrivals |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['rate']:g} | {row['hold']:g} | {row['workers']} | {row['seed']} | "
              f"{row['share']:.3f} | "
              f"{row['refused']} | {row['violations']} | {row['arrivals']} |")
    refused = sum(row["refused"] for row in rows)
    arrivals = sum(row["arrivals"] for row in rows)
    totals: dict[str, Any] = {"refused": refused, "arrivals": arrivals,
              "refused_share": round(refused / arrivals, 4) if arrivals else None,
              "violations": sum(row["violations"] for row in rows),
              "mean_share": round(sum(row["share"] for row in rows) / len(rows), 3)}
    print(f"all: {refused} refused of {arrivals} ({100.0 * refused / max(arrivals, 1):.1f} %), "
          f"{totals['violations']} violations, mean share {totals['mean_share']:.3f}")
    if args.json:
        print(json.dumps({"benchmark": "fleet_writes", "seconds": SECONDS, "rows": rows, "totals": totals},
                         sort_keys=True))


if __name__ == "__main__":
    main()
