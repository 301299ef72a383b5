"""Where a sliding window's time goes, over the random farm's ``sliding`` sites with no budget header.

For each farm seed, each ``sliding`` site of ``draw_farm(seed, sites)`` whose answers carry no budget
header (``style = "none"``: nothing tells the window but the refusals) is crawled once on the fake
clock as ``bench/farm_trace.py`` crawls it (rampup on, pages in ``--latency`` seconds). Per site: the
crawl's time; the bench oracle's (the window's own rule from the start: ``limit`` sent at once, each
send once fewer than ``limit`` fell in the last ``window`` seconds); and the time a pacer would take
that sent by that rule from the first lock-out's fit on (the crawl's own sends before it). So the
crawl's loss splits in two: before the fit (the start and the first lock-out) and after it (the pace
the fit leads to). Deterministic: no sockets, no sleeping.

    PYTHONPATH=src python bench/sliding_windows.py --seeds 1-20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from crawlpace.sim._random import RANDOM_KINDS, draw_farm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _modules import load_file, seed_list


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-20", help="farm seeds, 'A-B' or 'A,B,C' (default 1-20)")
    parser.add_argument("--sites", type=int, default=30, help="sites per farm, as drawn (default 30)")
    parser.add_argument("--latency", type=float, default=0.02, help="a page's time in seconds (default 0.02)")
    parser.add_argument("--quick", action="store_true", help="the first three seeds only (a few seconds)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    if args.quick:
        args.seeds = ",".join(str(seed) for seed in list(seed_list(args.seeds))[:3])
    trace = load_file("_bench_farm_trace", Path(__file__).resolve().parent / "farm_trace.py")
    kinds = ",".join(RANDOM_KINDS)
    rows: list[dict[str, Any]] = []
    for seed in seed_list(args.seeds):
        for spec in draw_farm(seed, args.sites)["site"]:
            sliding = spec.get("profile") == "window" and spec.get("kind") == "sliding"
            if not sliding or spec.get("style") != "none":
                continue
            out = trace.trace(seed, spec["name"], args.sites, 60.0, kinds, args.latency)
            bounds = out["window_bounds"]
            row = {
                "seed": seed,
                "site": spec["name"],
                "limit": spec["limit"],
                "window": spec["window"],
                "pages": spec["pages"],
                "count_refused": spec["count_refused"],
                "crawl": out["done"],
                "refused": out["refused"],
                "oracle": bounds["oracle"],
                "after_fit": bounds.get("window_rule_after_fit", out["done"]),
            }
            row["score"] = round(row["oracle"] / row["crawl"], 3)
            row["score_after_fit"] = round(row["oracle"] / min(row["after_fit"], row["crawl"]), 3)
            rows.append(row)
            print(
                f"{seed}:{spec['name']:10} {spec['limit']:>4} per {spec['window']:>5} s, "
                f"{spec['pages']:>4} pages, refusals counted {spec['count_refused']!s:5}: "
                f"crawl {row['crawl']:7.2f} s ({row['refused']} refused), oracle {row['oracle']:7.2f} s, "
                f"the window's rule after the first fit {row['after_fit']:7.2f} s; "
                f"x oracle {row['score']} -> {row['score_after_fit']}",
                flush=True,
            )
    if rows:
        before = statistics.mean(r["score"] for r in rows)
        after = statistics.mean(r["score_after_fit"] for r in rows)
        print(
            f"{len(rows)} sites: mean x oracle {before:.3f}, with the window's rule after the first fit "
            f"{after:.3f}; refusals {sum(r['refused'] for r in rows)}"
        )
    if args.json:
        print(json.dumps({"benchmark": "sliding_windows", "seeds": args.seeds, "sites": rows}))


if __name__ == "__main__":
    main()
