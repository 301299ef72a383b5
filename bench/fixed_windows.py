"""Where a crawl of a window aligned to the clock loses its pages, window by window, on the fake clock.

The random farm's ``fixed`` sites that send no budget header (``N`` per window of ``W`` seconds
aligned to the clock, refused requests counted or not, ``Retry-After`` on refusals or none), crawled
as ``bench/over_limit.py`` crawls them (the throttler with rampup on, as ``crawlpace crawl`` runs it,
against the simulator's own ``ClockWindow``; the crawl's clock starts at a random point of a window;
robots.txt first; refusals answered at once). Each of the site's windows the crawl spans, up to its
last page, is put in one class, and the pages it fell short of ``N`` (the last window pro rata) are
summed per class over ``N`` times the windows spanned:

* ``start``: the windows up to the first one with a refusal (the start phase and its overshoot);
* ``after lock-out``: the window after one that refused (the wait after a lock-out: its end seen a
  probe gap late, then the level paced evenly through a window that had its whole ``N``);
* ``under level``: any other window (the level or the search under ``N / W``).

A window with a refusal in it was full (a clock window refuses only then), so it loses nothing.
Deterministic: no sockets, no sleeping; two trees' runs pair up site by site.

    PYTHONPATH=src python bench/fixed_windows.py [--seeds 1-40] [--latencies 0.003,0.05] [--json]
    PYTHONPATH=/tmp/base/src python bench/fixed_windows.py --rows /tmp/base.json
    PYTHONPATH=src python bench/fixed_windows.py --against /tmp/base.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import time
from typing import Any

from limiter_kinds import harness  # the test harness, loaded once (one source of truth)
from over_limit import WindowSite, build, window_sites

CLASSES = ("start", "after lock-out", "under level")
HARNESS_SEEDS = (1, 2, 3)


def _seeds(text: str) -> list[int]:
    if "-" in text:
        first, last = (int(x) for x in text.split("-"))
        return list(range(first, last + 1))
    return [int(x) for x in text.split(",") if x]


def account(site: WindowSite, arrivals: list[tuple[float, bool]], end: float) -> dict[str, float]:
    """The pages each class of window fell short of ``N``, as a share of ``N`` per window spanned."""
    width, limit = site.window, site.limit
    counts: dict[int, tuple[int, int]] = {}
    for at, accepted in arrivals:
        if at > end:
            break
        index = math.floor((at + site.offset) / width)
        ok, refused = counts.get(index, (0, 0))
        counts[index] = (ok + accepted, refused + (not accepted))
    short = dict.fromkeys(CLASSES, 0.0)
    if not counts:
        return short
    refused_at = [index for index, (_, refused) in counts.items() if refused]
    first_refused = min(refused_at) if refused_at else None
    last = math.floor((end + site.offset) / width)
    before_refused = False
    for index in range(min(counts), last + 1):
        ok, refused = counts.get(index, (0, 0))
        full = float(limit)
        if index == last:  # the last window, up to the crawl's end
            full *= min(1.0, (end + site.offset - index * width) / width)
        if first_refused is None or index <= first_refused:
            kind = "start"
        elif before_refused:
            kind = "after lock-out"
        else:
            kind = "under level"
        short[kind] += max(0.0, full - ok) if not refused else 0.0
        before_refused = refused > 0
    spanned = limit * end / width
    return {kind: value / spanned for kind, value in short.items()}


async def run(entry: dict[str, Any], latency: float, harness_seed: int, seconds: float) -> dict[str, Any]:
    """Crawl one site; its share of capacity, refusals and the classes' shortfalls."""
    site = build(entry, harness_seed)
    arrivals: list[tuple[float, bool]] = []
    arrive = site.arrive

    def logged(now: float) -> Any:
        answer = arrive(now)
        arrivals.append((now, answer.status_code == 200))
        return answer

    site.arrive = logged  # type: ignore[method-assign]
    out = await harness.crawl(site, seconds, seed=harness_seed, latency=latency, instant=True, robots=0.005)
    end = site.done_at if site.done_at is not None else seconds
    share = site.served / max(end, 1e-9) / site.capacity
    return {"share": round(share, 4), "refused": out.refused, "seconds": round(end, 3),
            "short": {kind: round(value, 4) for kind, value in account(site, arrivals, end).items()}}


def _key(row: dict[str, Any]) -> tuple[str, float, int]:
    return row["site"], row["latency"], row["seed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", default="1-40", help="farm seeds, 'A-B' or 'A,B,C' (default 1-40)")
    parser.add_argument("--latencies", default="0.003,0.05", help="page latencies in seconds")
    parser.add_argument("--seconds", type=float, default=60.0, help="virtual seconds per crawl at most")
    parser.add_argument("--rows", help="write every crawl's figures to this JSON file")
    parser.add_argument("--against", help="a --rows file of the same crawls (another tree): compare")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on the last line")
    parser.add_argument("--quick", action="store_true", help="seeds 1-4 at 50 ms only (under a minute)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.latencies = "1-4", "0.05"
    started = time.perf_counter()
    latencies = [float(x) for x in args.latencies.split(",") if x]
    rows: list[dict[str, Any]] = []
    for farm_seed in _seeds(args.seeds):
        for entry in window_sites(farm_seed, ("fixed",)):
            for latency in latencies:
                for harness_seed in HARNESS_SEEDS:
                    row = asyncio.run(run(entry, latency, harness_seed, args.seconds))
                    row.update(site=f"{farm_seed}:{entry['name']}", limit=entry["limit"],
                               window=entry["window"], retry_after=entry["retry_after"],
                               latency=latency, seed=harness_seed)
                    rows.append(row)
    summary: dict[str, Any] = {"crawls": len(rows), "sites": len({row["site"] for row in rows})}
    if rows:
        summary["share"] = round(statistics.fmean(row["share"] for row in rows), 4)
        summary["refused"] = round(statistics.fmean(row["refused"] for row in rows), 2)
        summary["short"] = {kind: round(statistics.fmean(row["short"][kind] for row in rows), 4)
                            for kind in CLASSES}
    print("| site | N / W | Retry-After | mean share | refused | start | after lock-out | under level |")
    print("|---|---|---|--:|--:|--:|--:|--:|")
    for site in sorted({row["site"] for row in rows}, key=lambda s: statistics.fmean(
            row["share"] for row in rows if row["site"] == s)):
        mine = [row for row in rows if row["site"] == site]
        shorts = [statistics.fmean(row["short"][kind] for row in mine) for kind in CLASSES]
        print(f"| {site} | {mine[0]['limit']} / {mine[0]['window']:g} s | {mine[0]['retry_after']} | "
              f"{statistics.fmean(row['share'] for row in mine):.3f} | "
              f"{statistics.fmean(row['refused'] for row in mine):.1f} | "
              + " | ".join(f"{value:.3f}" for value in shorts) + " |")
    if rows:
        print(f"\n{summary['crawls']} crawls of {summary['sites']} sites: mean share {summary['share']:.4f}, "
              f"refusals {summary['refused']:.2f} a crawl; short of N: "
              + ", ".join(f"{kind} {value:.4f}" for kind, value in summary["short"].items()))
    if args.rows:
        with open(args.rows, "w", encoding="utf-8") as handle:
            json.dump(rows, handle)
    if args.against:
        with open(args.against, encoding="utf-8") as handle:
            before = {_key(row): row for row in json.load(handle)}
        pairs = [(before[_key(row)], row) for row in rows if _key(row) in before]
        if pairs:
            moved = [after["share"] - base["share"] for base, after in pairs]
            was = statistics.fmean(b["share"] for b, _ in pairs)
            print(f"against {len(pairs)} crawls: share {was:.4f} -> "
                  f"{statistics.fmean(a['share'] for _, a in pairs):.4f}, refusals "
                  f"{sum(b['refused'] for b, _ in pairs)} -> {sum(a['refused'] for _, a in pairs)}; "
                  f"{sum(d > 0.005 for d in moved)} better, {sum(d < -0.005 for d in moved)} worse by 0.005+")
    if args.json:
        print(json.dumps({"benchmark": "fixed_windows", "seeds": args.seeds, "latencies": latencies,
                          "summary": summary, "wall": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
