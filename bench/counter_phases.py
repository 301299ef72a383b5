"""Quick request-rate counters at every phase of their period, on a fake clock: share and refusals.

Several tests of ``tests/test_rampup_limiters.py`` pin one HAProxy counter at one phase (its periods
began so many seconds before the crawl's first request) and bound the share it gets. Where the counter's
allowance runs out near the start's 100/s, what comes after the first lock-out depends on where a probe
lands in the counter's blended reading, and a few milliseconds of difference in the sends before it
(a start that passes 100/s, say) moves a crawl from 0.98 of capacity to 0.64 and back. This runs each
such counter at ``--phases`` evenly spread phases and prints the mean and the worst, so two trees are
compared over the counter, not over one draw of its phase. Deterministic: no sockets, no sleeping.

    PYTHONPATH=src python bench/counter_phases.py [--quick] [--phases N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from limiter_kinds import harness  # the test harness's models, loaded once (one source of truth)

#: (name, limit, period, seconds, page latency): 429s at once, as the pinned tests run them.
CASES: list[tuple[str, float, float, float, float]] = [
    ("100 per 10 s, 3 ms", 100.0, 10.0, 30.0, 0.003),
    ("245 per 6.49 s, 4 ms", 245.0, 6.49, 30.0, 0.004),
    ("93 per 9.2 s, 4 ms", 93.0, 9.2, 30.0, 0.004),
    ("600 per 2 s, 3 ms", 600.0, 2.0, 20.0, 0.003),
]


def sweep(limit: float, period: float, seconds: float, latency: float, phases: int) -> list[dict[str, Any]]:
    """One crawl per phase: the counter's periods began ``period * (i + 0.5) / phases`` before it."""
    rows = []
    for i in range(phases):
        start = -period * (i + 0.5) / phases
        out = asyncio.run(harness.crawl(harness.RequestRate(limit, period, _start=start), seconds,
                                        latency=latency, instant=True))
        rows.append({"start": round(start, 3), "share": round(out.share, 3), "refused": out.refused})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 phases of two counters (under a minute)")
    parser.add_argument("--phases", type=int, default=10, help="phases per counter (default 10)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    started = time.perf_counter()
    cases = CASES[:2] if args.quick else CASES
    phases = 4 if args.quick else max(1, args.phases)
    summary = []
    print("| counter | mean share | worst share | mean refusals | shares by phase |")
    print("|---|--:|--:|--:|---|")
    for name, limit, period, seconds, latency in cases:
        rows = sweep(limit, period, seconds, latency, phases)
        mean = sum(row["share"] for row in rows) / len(rows)
        worst = min(row["share"] for row in rows)
        refused = sum(row["refused"] for row in rows) / len(rows)
        summary.append({"case": name, "mean_share": round(mean, 3), "worst_share": worst,
                        "mean_refused": round(refused, 2), "phases": rows})
        shares = " ".join(f"{row['share']:.2f}" for row in rows)
        print(f"| {name} | {mean:.3f} | {worst:.2f} | {refused:.1f} | {shares} |", flush=True)
    if args.json:
        print(json.dumps({"benchmark": "counter_phases", "quick": args.quick, "phases": phases,
                          "cases": summary, "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
