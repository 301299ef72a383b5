"""Rampup against nginx ``limit_req`` with no burst read on its event loop's cached clock, on a fake clock.

nginx stamps a request with the time its event loop woke for it, in whole milliseconds
(``ngx_current_msec``), and applies ``limit_req``'s arithmetic (thousandths of a request) to those stamps.
On a loaded machine the loop wakes late, so two sends spaced just over the limit's gap can be read just
under it: a *hair* refusal, which real nginx makes (bench/results/real4.md) and a token bucket on exact
times never does. The limiter is ``tests/test_rampup_limiters.NginxReq`` (one source of truth: the
simulator's :class:`~crawlpace.sim._limits.RequestQueue` with no burst, on a
:class:`~crawlpace.sim._limits.LoopClock` whose turns wake up to ``stale`` after an arrival); the crawl is
that file's harness, as ``bench/strict_buckets.py``'s ``nginx`` style runs it (429 at once, robots.txt
counted, sends up to 2 ms late told as the permit's lag). Each refusal is a **hair** when its arrival came
at least the limit's gap after the last accepted one (only the loop's clock refused it), else a pace
refusal (the door, the start, a search step). Deterministic: compare two trees by running each with its
own ``PYTHONPATH``.

    PYTHONPATH=src python bench/nginx_clock.py [--grid traced|fresh] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections.abc import Iterator
from typing import Any

from limiter_kinds import harness  # the test harness's models, loaded once (one source of truth)

#: Crawls run with ``--quick``.
QUICK = 6


def cases(grid: str) -> Iterator[tuple[str, int, float, float, int, float]]:
    """(name, rate, stale, page latency, seed, seconds) for every crawl of ``grid``."""
    rates: tuple[int, ...]
    stales: tuple[float, ...]
    if grid == "traced":  # real4's case (10 r/s, nginx's own pages) and its neighbours
        rates, stales, seconds = (10, 5, 25), (0.0, 0.002, 0.004, 0.008), 30.0
        latencies, seeds = (0.003, 0.03), (1, 2)
    elif grid == "fresh":  # drawn before any rule was measured on it
        rates, stales, seconds = (4, 8, 12, 20), (0.003, 0.006), 40.0
        latencies, seeds = (0.01, 0.05), (21, 22)
    else:
        raise SystemExit(f"unknown grid {grid!r}")
    for stale in stales:
        for rate in rates:
            for latency in latencies:
                for seed in seeds:
                    name = f"{rate}/s stale {stale * 1000:g} ms pages {latency:g} s s{seed}"
                    yield name, rate, stale, latency, seed, seconds


def crawl(rate: int, stale: float, latency: float, seed: int, seconds: float) -> dict[str, Any]:
    """One crawl: share, refusals, hairs and each hair's arrival gap and stamp gap (ms)."""
    limiter = harness.NginxReq(rate, 0, stale, seed)
    out = asyncio.run(harness.crawl(limiter, seconds, latency=latency, seed=seed, lag=0.002, told=True,
                                    instant=True, robots=0.005, robots_counted=True, robots_unmeasured=True))
    hairs = []
    last: tuple[float, int] | None = None
    for arrival, stamp, status in limiter.log:
        if status == 200:
            last = (arrival, stamp)
        elif last is not None and arrival - last[0] >= 1.0 / rate - 1e-9:
            hairs.append((round((arrival - last[0]) * 1000, 1), stamp - last[1]))
    return {"share": round(out.share, 4), "refused": out.refused, "hairs": len(hairs), "hair_gaps": hairs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--grid", default="traced", help="traced (real4's case and neighbours) or fresh")
    parser.add_argument("--quick", action="store_true", help=f"the grid's first {QUICK} crawls only")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    rows = []
    for index, (name, rate, stale, latency, seed, seconds) in enumerate(cases(args.grid)):
        if args.quick and index >= QUICK:
            break
        row = {"crawl": name, **crawl(rate, stale, latency, seed, seconds)}
        rows.append(row)
        gaps = " ".join(f"{gap:g}->{stamp}" for gap, stamp in row["hair_gaps"])
        print(f"{name:36s} {row['share']:.3f} refused {row['refused']} hairs {row['hairs']}  {gaps}",
              flush=True)
    mean = statistics.mean(row["share"] for row in rows)
    refused, hairs = sum(row["refused"] for row in rows), sum(row["hairs"] for row in rows)
    print(f"MEAN {mean:.4f} REFUSED {refused} HAIRS {hairs} n {len(rows)}")
    if args.json:
        print(json.dumps({"benchmark": "nginx_clock", "grid": args.grid, "quick": args.quick,
                          "mean_share": round(mean, 4), "refused": refused, "hairs": hairs, "rows": rows}))


if __name__ == "__main__":
    main()
