"""Rampup against one pure limiter model per case, on a fake clock: goodput share and refusals.

The cases of ``tests/test_rampup_limiters.py`` (the throttler with rampup on, as
``crawlpace crawl`` runs it, against token buckets with and without holds,
windows aligned to the clock, nginx's limit_req line, HAProxy's request-rate counter and connection
cap, a latency knee), with their figures printed rather than asserted, so two
trees can be compared case by case. Deterministic: no sockets, no sleeping.

    PYTHONPATH=src python bench/limiter_kinds.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _modules import load_file


def _harness() -> ModuleType:
    """The harness and limiter models of ``tests/test_rampup_limiters.py`` (one source of truth)."""
    tests = Path(__file__).resolve().parent.parent / "tests"
    return load_file("test_rampup_limiters", tests / "test_rampup_limiters.py")


harness = _harness()

#: (name, limiter, seconds, options of the harness's crawl).
CASES: list[tuple[str, Any, float, dict[str, Any]]] = [
    ("bucket 6/s burst 4, Retry-After 4 s", harness.Bucket(6.0, 4.0, 4), 150.0, {}),
    ("bucket 3/s burst 3, Retry-After 10 s", harness.Bucket(3.0, 3.0, 10), 150.0, {}),
    ("bucket 5/s no burst, Retry-After 5 s", harness.Bucket(5.0, 1.0, 5), 60.0, {}),
    ("the same, sends up to 50 ms late", harness.Bucket(5.0, 1.0, 5), 60.0,
     {"latency": 0.003, "seed": 2, "lag": 0.05}),
    ("window 30 per 10 s on the clock", harness.ClockWindow(30, 10.0), 300.0, {}),
    ("window 100 per 60 s on the clock", harness.ClockWindow(100, 60.0), 300.0, {}),
    ("strict bucket 3/s", harness.Bucket(3.0, 1.0), 120.0, {}),
    ("strict bucket 12/s", harness.Bucket(12.0, 1.0), 120.0, {}),
    ("strict 8/s, instant 429, pages 0.3 s", harness.Bucket(8.0, 1.0), 90.0,
     {"latency": 0.3, "instant": True}),
    ("HAProxy http_req_rate 10 per 1 s", harness.RequestRate(10.0, 1.0), 120.0, {}),
    ("HAProxy http_req_rate 100 per 10 s", harness.RequestRate(100.0, 10.0), 150.0, {}),
    ("HAProxy conn_cur 3, freed 20 ms late", harness.ConnectionCap(3, 0.1), 120.0, {"latency": 0.1}),
    ("conn_cur 8, pages 0.2 s, freed 50 ms late", harness.ConnectionCap(8, 0.2, 0.05), 60.0,
     {"latency": 0.2}),
    ("bucket 25/s burst 5", harness.Bucket(25.0, 5.0), 90.0, {}),
    ("bucket 25/s burst 5, instant 429, pages 0.2 s", harness.Bucket(25.0, 5.0), 90.0,
     {"latency": 0.2, "instant": True}),
    ("knee 7 in flight, 0.2 s, throughput falls past it", harness.Knee(7, 0.2, 2.0, 21), 60.0, {}),
    ("knee 4 in flight, 0.3 s, throughput falls past it", harness.Knee(4, 0.3, 2.0, 12), 60.0, {}),
    ("nginx line 15.6/s burst 3 delay 2, 503 as quick as a page", harness.Queue(15.6, 3, 2), 45.0,
     {"latency": 0.002, "instant": True, "robots": 0.005, "refusal_as_page": True}),
    ("nginx line 18/s burst 1, 503 as quick as a page", harness.Queue(18.0, 1), 45.0,
     {"latency": 0.002, "instant": True, "robots": 0.005, "refusal_as_page": True}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a third of each case's seconds (under 10 s)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = []
    print("| case | goodput / capacity | refusals | requests |")
    print("|---|---:|---:|---:|")
    for name, limiter, seconds, options in CASES:
        out = asyncio.run(harness.crawl(limiter, seconds / 3 if args.quick else seconds, **options))
        rows.append({"case": name, "share": round(out.share, 3), "refused": out.refused,
                     "requests": out.accepted + out.refused})
        print(f"| {name} | {out.share:.2f} | {out.refused} | {out.accepted + out.refused} |")
    if args.json:
        print(json.dumps({"benchmark": "limiter_kinds", "quick": args.quick, "cases": rows,
                          "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
