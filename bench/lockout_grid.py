"""Two fake-clock grids for a change to a first lock-out's probes: HAProxy's counter, and windows and buckets.

A sparser probe schedule in a counter's first lock-out saves HAProxy refusals and costs windows with short
periods the time it finds their end late (``bench/results/counters17.md``, ``counters18.md``). This runs
both sides, with robots.txt fetched as the crawl fetches it (answered in 5 ms, counted by the limiter, no
latency measured: the harness's ``robots_unmeasured``) and 429s at once, on the harness of
``tests/test_rampup_limiters.py``:

* **hap**: HAProxy's ``http_req_rate`` 100 per 10 s, its periods begun 0 to 8.5 s before the crawl,
  pages in 3 and 20 ms, two harness seeds, 15 s (the real bench's length): 24 crawls;
* **windows**: windows aligned to the clock (11/1, 5/1, 20/2 s: *short*; 30/10, 50/5, 8/4 s: *long*) at
  phases 0, 0.3 and 0.7, pages in 3 and 50 ms, 30 s; token buckets (2/s burst 5, 3/s burst 20, 10/s
  burst 10, 5/s burst 2) at the same latencies, 20 s; one harness seed: 44 crawls.

Per row: accepted, refused, share of capacity; per group: refused and mean share (the short windows'
worst too). Deterministic: no sockets, no sleeping.

    PYTHONPATH=src python bench/lockout_grid.py [--seeds 1,2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from limiter_kinds import harness  # the test harness's models, loaded once (one source of truth)

STARTS = (0.0, -1.1, -2.8, -4.7, -6.0, -8.5)
SHORT = ((11, 1.0), (5, 1.0), (20, 2.0))
LONG = ((30, 10.0), (50, 5.0), (8, 4.0))
BUCKETS = ((2.0, 5.0), (3.0, 20.0), (10.0, 10.0), (5.0, 2.0))


def _crawl(limiter: Any, seconds: float, latency: float, seed: int) -> Any:
    return asyncio.run(harness.crawl(limiter, seconds, latency=latency, instant=True, seed=seed, robots=0.005,
                                     robots_counted=True, robots_unmeasured=True))


def _row(group: str, name: str, out: Any) -> dict[str, Any]:
    return {"group": group, "case": name, "accepted": out.accepted, "refused": out.refused,
            "share": round(out.share, 3)}


def grid(seeds: list[int]) -> list[dict[str, Any]]:
    """Every crawl of both grids: HAProxy at each seed, the windows and buckets at the first."""
    rows = []
    for start in STARTS:
        for latency in (0.003, 0.02):
            for seed in seeds:
                out = _crawl(harness.RequestRate(100, 10.0, _start=start), 15.0, latency, seed)
                name = f"100/10 s from {start:g} s, {latency * 1000:g} ms, seed {seed}"
                rows.append(_row("hap", name, out))
    for group, windows in (("short", SHORT), ("long", LONG)):
        for limit, window in windows:
            for phase in (0.0, 0.3, 0.7):
                for latency in (0.003, 0.05):
                    out = _crawl(harness.ClockWindow(limit, window, phase), 30.0, latency, seeds[0])
                    name = f"{limit}/{window:g} s phase {phase:g}, {latency * 1000:g} ms"
                    rows.append(_row(group, name, out))
    for rate, burst in BUCKETS:
        for latency in (0.003, 0.05):
            out = _crawl(harness.Bucket(rate, burst), 20.0, latency, seeds[0])
            rows.append(_row("buckets", f"{rate:g}/s burst {burst:g}, {latency * 1000:g} ms", out))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2", help="harness seeds for HAProxy; the first for the rest")
    parser.add_argument("--quick", action="store_true", help="the first seed only (about half the time)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    started = time.perf_counter()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    rows = grid(seeds[:1] if args.quick else seeds)
    print("| group | case | accepted | refused | share |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['group']} | {row['case']} | {row['accepted']} | {row['refused']} "
              f"| {row['share']:.3f} |")
    groups: dict[str, dict[str, Any]] = {}
    for group in ("hap", "short", "long", "buckets"):
        part = [row for row in rows if row["group"] == group]
        accepted, refused = sum(row["accepted"] for row in part), sum(row["refused"] for row in part)
        groups[group] = {"crawls": len(part), "accepted": accepted, "refused": refused,
                         "pushback": round(refused / max(1, accepted + refused), 4),
                         "mean_share": round(sum(row["share"] for row in part) / len(part), 3),
                         "worst_share": min(row["share"] for row in part)}
        print(f"\n{group}: {len(part)} crawls, {accepted} accepted, {refused} refused "
              f"({100 * groups[group]['pushback']:.1f} %), mean share {groups[group]['mean_share']:.3f}, "
              f"worst {groups[group]['worst_share']:.3f}", end="")
    print()
    if args.json:
        print(json.dumps({"benchmark": "lockout_grid", "quick": args.quick, "seeds": args.seeds, "rows": rows,
                          "groups": groups, "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
