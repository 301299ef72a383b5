"""Rampup against token buckets with no burst (and bursty look-alikes) on a fake clock: share and refusals.

The grids of bench/results/strict4.md, over ``tests/test_rampup_limiters.py``'s harness (one source of
truth for the crawl and the limiter models). Three styles of strict bucket: ``nginx`` (429 at once,
robots.txt counted, so the page the door lets go is refused), ``sim`` (429 at once, robots.txt not
counted) and ``simwait`` (the simulator's ``Retry-After`` with the wait for the next token, rounded up).
Each send reaches the site up to a few milliseconds late, told as the permit's lag. Deterministic: no
sockets, no sleeping; compare two trees by running each with its own ``PYTHONPATH``.

    PYTHONPATH=src python bench/strict_buckets.py [--grid strict|slow|slowburst|bursty|fresh|freshburst|
        unseen|unseenburst|fresh5|fresh5burst|fresh6|slowrates|slowrates2|other]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections.abc import Iterator
from typing import Any

from limiter_kinds import harness  # the test harness's models, loaded once (one source of truth)

STYLES = ("nginx", "sim", "simwait")
#: Crawls run with ``--quick``.
QUICK = 6


def _options(style: str, latency: float, seed: int, lag: float) -> dict[str, Any]:
    options: dict[str, Any] = {"latency": latency, "seed": seed, "lag": lag, "told": True, "robots": 0.005,
                               "instant": True, "robots_unmeasured": True}
    if style == "nginx":
        options["robots_counted"] = True
    return options


def cases(grid: str) -> Iterator[tuple[str, Any, float, dict[str, Any]]]:
    """(name, limiter, seconds, the harness's options) for every crawl of ``grid``."""
    if grid in ("strict", "bursty"):
        shapes = ([(rate, 1.0) for rate in (2.0, 5.0, 10.0, 16.0, 25.0)] if grid == "strict" else
                  [(18.0, 2.0), (8.0, 3.0), (15.0, 5.0), (5.0, 2.0), (25.0, 3.0), (3.0, 2.0)])
        for rate, burst in shapes:
            for latency in (0.003, 0.05):
                for style in STYLES if grid == "strict" else STYLES[1:]:
                    for seed in (1, 2):
                        yield (f"{rate:g}/s burst {burst:g} {style} {latency:g} s s{seed}",
                               harness.Bucket(rate, burst, wait=style == "simwait"), 20.0,
                               _options(style, latency, seed, 0.002))
    elif grid in ("slow", "slowburst", "fresh", "freshburst", "unseen", "unseenburst"):
        fresh = grid.startswith(("fresh", "unseen"))
        burst = 1.0 if grid in ("slow", "fresh", "unseen") else 3.0 if grid == "slowburst" else 2.0
        rates = ((3.5, 5.5, 7.3, 9.1, 13.0, 21.0) if grid.startswith("fresh") else
                 (2.7, 4.4, 6.0, 11.5, 17.0) if fresh else (3.0, 4.0, 5.0, 6.5, 8.0))
        latencies = ((0.03, 0.07, 0.15) if grid.startswith("fresh") else (0.01, 0.04, 0.12) if fresh else
                     (0.02, 0.05, 0.1, 0.2))
        seeds = (7, 8) if grid.startswith("fresh") else (11, 12) if fresh else (1, 2)
        for rate in rates:
            for latency in latencies:
                for style in STYLES:
                    for seed in seeds:
                        yield (f"{rate:g}/s burst {burst:g} {style} {latency:g} s s{seed}",
                               harness.Bucket(rate, burst, wait=style == "simwait"), 30.0 if fresh else 20.0,
                               _options(style, latency, seed, 0.003 if fresh else 0.002))
    elif grid in ("fresh5", "fresh5burst", "fresh6"):
        # strict5's grids, each drawn before any of it was run: rates, pages and seeds no earlier grid used.
        burst = 2.0 if grid == "fresh5burst" else 1.0
        six = grid == "fresh6"
        for rate in (2.9, 4.2, 5.6, 8.8, 14.0) if six else (2.3, 3.3, 4.7, 7.7, 12.5, 19.0):
            for latency in (0.035, 0.055, 0.11) if six else (0.015, 0.06, 0.09):
                for style in STYLES:
                    for seed in (41, 42) if six else (31, 32):
                        yield (f"{rate:g}/s burst {burst:g} {style} {latency:g} s s{seed}",
                               harness.Bucket(rate, burst, wait=style == "simwait"), 30.0,
                               _options(style, latency, seed, 0.003))
    elif grid in ("slowrates", "slowrates2"):
        # Slow strict buckets (strict5's scratch grid, and recall1's unseen one drawn before it was run):
        # the recall's searches back to a level no strict bucket ever held.
        unseen = grid == "slowrates2"
        for rate in (1.1, 1.35, 1.65, 2.1) if unseen else (1.2, 1.5, 1.8, 2.4):
            for latency in (0.045, 0.09, 0.18) if unseen else (0.03, 0.07, 0.15):
                for style in STYLES:
                    for seed in (51, 52) if unseen else (1, 2):
                        yield (f"{rate:g}/s burst 1 {style} {latency:g} s s{seed}",
                               harness.Bucket(rate, 1.0, wait=style == "simwait"), 30.0,
                               _options(style, latency, seed, 0.003))
    elif grid == "other":
        others: list[tuple[str, Any, tuple[float, float], float]] = [
            ("window 11/1 s", harness.ClockWindow, (11, 1.0), 0.003),
            ("counter 30/3 s", harness.RequestRate, (30.0, 3.0), 0.003),
            ("window 20/2 s", harness.ClockWindow, (20, 2.0), 0.05),
            ("counter 10/1 s", harness.RequestRate, (10.0, 1.0), 0.05)]
        for seed in (1, 2):
            for name, kind, shape, latency in others:  # (a limiter keeps its state: a fresh one per crawl)
                options = {"latency": latency, "seed": seed, "instant": True}
                yield f"{name} s{seed}", kind(*shape), 20.0, options
    else:
        raise SystemExit(f"unknown grid {grid!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--grid", default="strict")
    parser.add_argument("--quick", action="store_true", help=f"the grid's first {QUICK} crawls only")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    shares, refused, rows = [], 0, []
    for index, (name, limiter, seconds, options) in enumerate(cases(args.grid)):
        if args.quick and index >= QUICK:
            break
        out = asyncio.run(harness.crawl(limiter, seconds, **options))
        shares.append(out.share)
        refused += out.refused
        rows.append({"crawl": name, "share": round(out.share, 4), "refused": out.refused})
        print(f"{name:42s} {out.share:.3f} {out.refused}", flush=True)
    print(f"MEAN {statistics.mean(shares):.4f} REFUSED {refused} n {len(shares)}")
    if args.json:
        print(json.dumps({"benchmark": "strict_buckets", "grid": args.grid, "quick": args.quick,
                          "mean_share": round(statistics.mean(shares), 4), "refused": refused, "rows": rows}))


if __name__ == "__main__":
    main()
