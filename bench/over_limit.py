"""Window sites of a random farm on the fake clock: their busiest window, judged as the simulator judges it.

``crawl_efficiency.py`` marks a site *over limit + 1* when, within one of its own windows (counted as
the site counts: any span of its length for a moving window, per window aligned to the clock for a
fixed one, the counter's reading for HAProxy's request-rate counter), it saw more than its limit plus
one requests, refused ones included. This script replays the random farm's window sites
(``reqrate``, ``sliding``, ``fixed``, and ``shifting`` on a counter or a window; those that send no
RateLimit header) on the fake-clock harness
of ``tests/test_rampup_limiters.py`` (the throttler with rampup on, as ``crawlpace crawl`` runs it),
each against the simulator's own limiter (``crawlpace.sim._limits``) and judged by the simulator's
own books (``crawlpace.sim._stats.SiteStats``): exact and fast, where a real-HTTP round of the farm
takes minutes and its timing drifts with the machine's load. Each site runs at two page latencies
(3 ms and 50 ms) and several harness seeds. Deterministic: no sockets, no sleeping. Beside the
verdict, each row has the busiest window without the first lock-out's refusals (the simulator's
``peak_per_window_without_lockout``): what the crawl sent besides the probes no pacer that does not
know the window keeps within the limit.

    PYTHONPATH=src python bench/over_limit.py [--seeds 228096579,883305661,1051141758]
        [--kinds reqrate,sliding,fixed,shifting] [--sites reqrate17,fixed10] [--seconds 60] [--lag 0.05]
        [--quick] [--json]

``--lag``: each request reaches the site up to that many seconds after its send (the harness's
``lag``: a loaded crawler machine's own delays, as on a real-HTTP round at load 20-40).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from crawlpace.sim._limits import ClockWindow, RequestRate, SlidingWindow
from crawlpace.sim._random import draw_farm
from crawlpace.sim._site import retry_after_value
from crawlpace.sim._stats import SiteStats
from limiter_kinds import harness  # the test harness's models, loaded once (one source of truth)

#: The seeds of the stop-47 random farm (r1, r2, r3), whose one-process crawl put 7 of 90 sites over
#: their limit + 1 (bench/results/stop47.md).
SEEDS = (228096579, 883305661, 1051141758)
KINDS = ("reqrate", "sliding", "fixed", "shifting")
#: The page latencies each site is crawled at: the simulator's pages on an idle machine, and on a
#: loaded one.
LATENCIES = (0.003, 0.05)
HARNESS_SEEDS = (1, 2, 3)


@dataclass
class WindowSite:
    """One site of the farm: its limiter (the simulator's), and its books, kept the simulator's way.

    ``offset``: where the crawl's clock starts on the site's, for windows aligned to the clock (the
    crawl meets a window part spent). ``retry_after``: a refusal says when the oldest counted request
    leaves (the farm's ``retry_after = "refusals"``, whole seconds rounded up). ``pages``: once that
    many were served the crawl of the farm would be over; later arrivals are left out of the books."""

    name: str
    limiter: ClockWindow | SlidingWindow | RequestRate
    limit: int
    window: float
    kind: str
    retry_after: bool
    offset: float
    stats: SiteStats
    pages: int
    served: int = 0
    done_at: float | None = None  # when the last page was served (None: the crawl ran out of time)
    #: A ``shifting`` site's steps, as the simulator's ``ShiftingSite`` takes them: (seconds after the
    #: first request, factor of the configured limit), applied before the request that finds them due.
    changes: tuple[tuple[float, float], ...] = ()
    first: float | None = None

    @property
    def judged_limit(self) -> int:
        """The limit the judge holds the busiest window to: the highest of the run (a shifting site's
        steps included, as ``crawl_efficiency.window_limit`` takes the highest capacity)."""
        return max([self.limit, *(max(round(self.limit * factor), 1) for _, factor in self.changes)])

    @property
    def capacity(self) -> float:
        return self.limit / self.window

    def arrive(self, now: float) -> Any:
        at = now + self.offset
        if self.served >= self.pages:
            return harness.Response(200)  # (the farm's crawl would be over: none of its books)
        self.first = at if self.first is None else self.first
        while self.changes and at - self.first >= self.changes[0][0]:
            factor = self.changes[0][1]
            self.changes = self.changes[1:]
            self.limiter.limit = max(round(self.limit * factor), 1)
        self.stats.arrive(at)
        self.stats.limited(at)
        allowed = self.limiter.take(at)
        self.stats.answered(at, 200 if allowed else 429)
        if allowed:
            self.served += 1
            if self.served == self.pages:
                self.done_at = now
            return harness.Response(200)
        if self.retry_after and not isinstance(self.limiter, RequestRate):
            return harness.Response(429, {"Retry-After": retry_after_value(self.limiter.reset(at)).decode()})
        return harness.Response(429)

    def leave(self, now: float) -> None:
        pass

    @property
    def busiest(self) -> int:
        """The most requests within one of the site's windows, as the simulator counts them."""
        return self.stats.peak_per_window

    @property
    def busiest_without_lockout(self) -> int | None:
        """The same with the first lock-out's refusals left out (None: no lock-out ended; see
        ``SiteStats.peak_per_window_without_lockout``)."""
        return self.stats.peak_per_window_without_lockout


def window_sites(seed: int, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """The farm's sites of ``kinds`` (30 sites, 60 s, as crawl_efficiency.py draws it) that announce
    nothing in headers (a ``shifting`` site: one whose base is a counter or a window)."""
    sites: list[dict[str, Any]] = draw_farm(seed, 30, seconds=60.0)["site"]
    return [site for site in sites if site["name"].rstrip("0123456789") in kinds
            and site.get("style", "none") == "none"
            and (site["profile"] != "shifting" or site.get("base") in ("reqrate", "window"))]


def build(entry: dict[str, Any], harness_seed: int) -> WindowSite:
    """The site of one farm entry, as the simulator builds it (``crawlpace.sim._windows``; a
    ``shifting`` site's limit steps as ``crawlpace.sim._shifting`` steps it; the judge's limit is the
    configured one, the highest of the run, as ``crawl_efficiency.py`` judges it)."""
    if entry["profile"] == "shifting":
        site = build({**entry, "profile": entry["base"]}, harness_seed)
        site.changes = tuple((float(at), float(factor)) for at, factor in entry["changes"])
        return site
    stats = SiteStats()
    limit, pages = int(entry["limit"]), int(entry["pages"])
    limiter: ClockWindow | SlidingWindow | RequestRate
    if entry["profile"] == "reqrate":
        period, phase = float(entry["period"]), float(entry.get("phase", 0.0))
        limiter = RequestRate(limit, period, phase)
        stats.watch_window(period, "counter", phase=phase)
        return WindowSite(entry["name"], limiter, limit, period, "counter", False, 0.0, stats, pages)
    window, refused = float(entry["window"]), bool(entry.get("count_refused", False))
    retry = entry.get("retry_after", "refusals") != "none"
    if entry["kind"] == "sliding":
        limiter = SlidingWindow(limit, window, count_refused=refused)
        stats.watch_window(window, "sliding")
        return WindowSite(entry["name"], limiter, limit, window, "sliding", retry, 0.0, stats, pages)
    if entry["kind"] != "fixed":
        raise ValueError(f"{entry['name']}: window kind {entry['kind']!r} is not replayed here")
    limiter = ClockWindow(limit, window, count_refused=refused)
    stats.watch_window(window, "clock")
    offset = random.Random(harness_seed).uniform(0.0, window)
    return WindowSite(entry["name"], limiter, limit, window, "clock", retry, offset, stats, pages)


async def run(entry: dict[str, Any], seconds: float, latency: float, harness_seed: int,
              lag: float = 0.0) -> dict[str, Any]:
    site = build(entry, harness_seed)
    judged = site.judged_limit
    out = await harness.crawl(site, seconds, seed=harness_seed, latency=latency, instant=True, robots=0.005,
                              lag=lag)
    # Goodput over the crawl's own time (to its last page when it ran out of pages), over capacity.
    span = site.done_at if site.done_at is not None else seconds
    share = site.served / max(span, 1e-9) / site.capacity
    without = site.busiest_without_lockout
    return {"busiest": site.busiest, "limit": judged, "over": site.busiest > judged + 1,
            "busiest_without_lockout": without,
            "over_without_lockout": without is not None and without > judged + 1,
            "share": round(share, 3), "refused": out.refused, "pages": site.served}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=",".join(str(seed) for seed in SEEDS),
                        help="farm seeds, comma-separated (r1, r2, ... in that order)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="site kinds, of reqrate, sliding, fixed, shifting")
    parser.add_argument("--sites", default="", help="only these site names (e.g. reqrate17,fixed10)")
    parser.add_argument("--seconds", type=float, default=60.0, help="virtual seconds per crawl")
    parser.add_argument("--lag", type=float, default=0.0,
                        help="each request reaches the site up to this many seconds after its send")
    parser.add_argument("--quick", action="store_true",
                        help="30 virtual seconds, one harness seed, the 50 ms latency only (under a minute)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    kinds = tuple(kind for kind in args.kinds.split(",") if kind)
    if any(kind not in KINDS for kind in kinds):
        raise SystemExit(f"--kinds: use some of {', '.join(KINDS)}")
    names = {name for name in args.sites.split(",") if name}
    seconds = 30.0 if args.quick else args.seconds
    latencies = (0.05,) if args.quick else LATENCIES
    seeds = (1,) if args.quick else HARNESS_SEEDS
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    print("| site | limit / window | latency | seed | busiest window | without the first lock-out | refused "
          "| goodput / capacity |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for number, farm_seed in enumerate(int(seed) for seed in args.seeds.split(",") if seed):
        for entry in window_sites(farm_seed, kinds):
            if names and entry["name"] not in names:
                continue
            for latency in latencies:
                for harness_seed in seeds:
                    row = asyncio.run(run(entry, seconds, latency, harness_seed, args.lag))
                    row.update(site=f"r{number + 1}:{entry['name']}", latency=latency, seed=harness_seed)
                    rows.append(row)
                    span = entry.get("period", entry.get("window"))
                    print(f"| {row['site']} | {row['limit']} / {span} s | {latency:g} | {harness_seed} | "
                          f"{row['busiest']}{' !' if row['over'] else ''} | "
                          f"{row['busiest_without_lockout']}{' !' if row['over_without_lockout'] else ''} | "
                          f"{row['refused']} | "
                          f"{row['share']:.2f} |")
    over = sorted({row["site"] for row in rows if row["over"]})
    summary = {
        "runs": len(rows),
        "runs_over_limit": sum(1 for row in rows if row["over"]),
        "sites": len({row["site"] for row in rows}),
        "sites_over_limit": over,
        "runs_over_without_lockout": sum(1 for row in rows if row["over_without_lockout"]),
        "sites_over_without_lockout": sorted({row["site"] for row in rows if row["over_without_lockout"]}),
        "mean_share": round(statistics.fmean(row["share"] for row in rows), 3) if rows else None,
        "refused": sum(row["refused"] for row in rows),
        "worst_excess": max((row["busiest"] - row["limit"] for row in rows), default=0),
    }
    print(f"\nover limit + 1 ('!'): {summary['runs_over_limit']} of {summary['runs']} runs; sites: "
          f"{', '.join(over) or 'none'}; mean goodput/capacity {summary['mean_share']}; "
          f"refused {summary['refused']}; worst excess +{summary['worst_excess']}")
    print(f"without the first lock-out's refusals: {summary['runs_over_without_lockout']} runs over; sites: "
          f"{', '.join(summary['sites_over_without_lockout']) or 'none'}")
    if args.json:
        print(json.dumps({"benchmark": "over_limit", "quick": args.quick, "seconds": seconds, "lag": args.lag,
                          "farm_seeds": args.seeds, "kinds": list(kinds), "summary": summary, "rows": rows,
                          "wall": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
