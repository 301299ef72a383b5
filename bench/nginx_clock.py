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


def cases(grid: str) -> Iterator[tuple[str, int, float, bool, float, int, float]]:
    """(name, rate, stale, tail, page latency, seed, seconds) for every crawl of ``grid``.

    A loop's wake ``stale`` is drawn evenly up to it, or with ``tail`` from an exponential law of that
    mean (mostly short, now and then several times as long: the law whose hairs recur at the pace the
    arrivals' spread sets, as on real nginx at load 8-12, bench/results/real5.md).
    """
    rates: tuple[int, ...]
    stales: tuple[tuple[float, bool], ...]
    if grid == "traced":  # real4's case (10 r/s, nginx's own pages) and its neighbours
        rates, seconds, latencies, seeds = (10, 5, 25), 30.0, (0.003, 0.03), (1, 2)
        stales = ((0.0, False), (0.002, False), (0.004, False), (0.008, False),
                  (0.001, True), (0.002, True), (0.004, True))
    elif grid == "fresh":  # drawn before any rule was measured on it
        rates, seconds, latencies, seeds = (4, 8, 12, 20), 40.0, (0.01, 0.05), (21, 22)
        stales = ((0.003, False), (0.006, False))
    elif grid == "fresh2":  # drawn before real5's margin rule was written, run after
        rates, seconds, latencies, seeds = (6, 15, 30), 40.0, (0.005, 0.02), (31, 32)
        stales = ((0.0015, True), (0.003, True), (0.005, True))
    else:
        raise SystemExit(f"unknown grid {grid!r}")
    for stale, tail in stales:
        for rate in rates:
            for latency in latencies:
                for seed in seeds:
                    law = "tail" if tail else "stale"
                    name = f"{rate}/s {law} {stale * 1000:g} ms pages {latency:g} s s{seed}"
                    yield name, rate, stale, tail, latency, seed, seconds


def crawl(rate: int, stale: float, tail: bool, latency: float, seed: int, seconds: float) -> dict[str, Any]:
    """One crawl: share, refusals, hairs and each hair's arrival gap and stamp gap (ms)."""
    limiter = harness.NginxReq(rate, 0, stale, seed, tail=tail)
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
    parser.add_argument("--grid", default="traced", help="traced, fresh or fresh2")
    parser.add_argument("--quick", action="store_true",
                        help="one crawl per wake law: the grid's first rate, page time and seed")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    rows = []
    first = next(cases(args.grid))
    for name, rate, stale, tail, latency, seed, seconds in cases(args.grid):
        if args.quick and (rate, latency, seed) != (first[1], first[4], first[5]):
            continue
        row = {"crawl": name, **crawl(rate, stale, tail, latency, seed, seconds)}
        rows.append(row)
        gaps = " ".join(f"{gap:g}->{stamp}" for gap, stamp in row["hair_gaps"])
        print(f"{name:38s} {row['share']:.3f} refused {row['refused']} hairs {row['hairs']}  {gaps}",
              flush=True)
    mean = statistics.mean(row["share"] for row in rows)
    refused, hairs = sum(row["refused"] for row in rows), sum(row["hairs"] for row in rows)
    print(f"MEAN {mean:.4f} REFUSED {refused} HAIRS {hairs} n {len(rows)}")
    if args.json:
        print(json.dumps({"benchmark": "nginx_clock", "grid": args.grid, "quick": args.quick,
                          "mean_share": round(mean, 4), "refused": refused, "hairs": hairs, "rows": rows}))


if __name__ == "__main__":
    main()
