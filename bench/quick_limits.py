"""Quick sites whose limit lies past 100/s, on a fake clock: share of capacity and refusals.

Rampup's start stops at 100/s on a site answering under 20 ms (the gap cap, ``_rampup_start``), so a
limiter past that pace never refuses it. A start paced past 100/s by its slots (errors18's patch,
bench/results/errors18.md) meets such limiters' overshoot: this runs one crawl per case and seed with
the limiter models of ``tests/test_rampup_limiters.py`` (loaded as ``bench/limiter_kinds.py`` loads
them), so two trees can be compared case by case. Deterministic.

    PYTHONPATH=src python bench/quick_limits.py [--seconds 30] [--seeds 1,2] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from typing import Any

from limiter_kinds import harness  # the test harness's models, loaded once (one source of truth)

#: (name, limiter factory, page latency in seconds).
CASES: list[tuple[str, Callable[[], Any], float]] = [
    ("no limit, 5 ms", lambda: harness.NoLimit(), 0.005),
    ("bucket 150/s no burst, 5 ms", lambda: harness.Bucket(150.0, 1.0), 0.005),
    ("bucket 150/s burst 10, 5 ms", lambda: harness.Bucket(150.0, 10.0), 0.005),
    ("bucket 150/s burst 50, 5 ms", lambda: harness.Bucket(150.0, 50.0), 0.005),
    ("bucket 120/s no burst, 3 ms", lambda: harness.Bucket(120.0, 1.0), 0.003),
    ("bucket 200/s burst 20, 10 ms", lambda: harness.Bucket(200.0, 20.0), 0.01),
    ("bucket 300/s no burst, 3 ms", lambda: harness.Bucket(300.0, 1.0), 0.003),
    ("bucket 150/s burst 10, 2 s holds, 5 ms", lambda: harness.Bucket(150.0, 10.0, 2), 0.005),
    (
        "bucket 150/s burst 5, Retry-After next token, 5 ms",
        lambda: harness.Bucket(150.0, 5.0, wait=True),
        0.005,
    ),
    ("HAProxy 1500 per 10 s, 5 ms", lambda: harness.RequestRate(1500, 10.0), 0.005),
    ("HAProxy 300 per 2 s, 5 ms", lambda: harness.RequestRate(300, 2.0), 0.005),
    ("HAProxy 2000 per 10 s, 10 ms", lambda: harness.RequestRate(2000, 10.0), 0.01),
    ("window 1500 per 10 s, 5 ms", lambda: harness.ClockWindow(1500, 10.0), 0.005),
    ("window 250 per 1 s, 3 ms", lambda: harness.ClockWindow(250, 1.0), 0.003),
    ("conn cap 4 freed 20 ms late, 5 ms", lambda: harness.ConnectionCap(4, 0.005), 0.005),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="virtual seconds a crawl (default 30)")
    parser.add_argument("--seeds", default="1,2", help="crawl seeds, comma-separated (default 1,2)")
    parser.add_argument("--skip-unlimited", action="store_true", help="leave out the case with no limit")
    parser.add_argument("--quick", action="store_true", help="one seed, 10 virtual seconds a crawl")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    if args.quick:
        args.seconds = min(args.seconds, 10.0)
        args.seeds = args.seeds.split(",")[0]
    seeds = [int(seed) for seed in args.seeds.split(",")]
    rows: list[dict[str, Any]] = []
    print("| case | seed | accepted | refused | share |")
    print("|---|--:|--:|--:|--:|")
    for name, make, latency in CASES:
        if args.skip_unlimited and name.startswith("no limit"):
            continue
        for seed in seeds:
            out = asyncio.run(harness.crawl(make(), args.seconds, latency=latency, seed=seed))
            row = {
                "case": name,
                "seed": seed,
                "accepted": out.accepted,
                "refused": out.refused,
                "share": round(out.share, 3),
            }
            rows.append(row)
            print(f"| {name} | {seed} | {out.accepted} | {out.refused} | {out.share:.3f} |", flush=True)
    if args.json:
        print(json.dumps({"benchmark": "quick_limits", "seconds": args.seconds, "rows": rows}))


if __name__ == "__main__":
    main()
