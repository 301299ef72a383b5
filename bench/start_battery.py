"""Quick sites' starts with the work known, on a fake clock: rampup's time to crawl against the oracle's.

The start phase of a site answering under 20 ms doubles once a round (``_rampup_start``), which keeps
an unlimited site with 50-300 pages (the random farm's ``errors`` kind) at a few seconds where the
oracle takes a fraction of one. Every limited kind of the random farm answers as quickly, so a faster
start must be judged on both: this battery draws quick sites as ``crawlpace sim random`` draws them
(the kinds below, parameters from its ranges), tells the throttler each site's pages left as
``crawlpace crawl``'s queue does (``Throttler.count_work``), and crawls each until its pages are
accepted. Answers take ``--latencies`` seconds (all under the start's 20 ms latency signal).

Kinds: ``none`` (no limit, 50-300 pages), ``errors`` (no limit, 5-30 % instant 5xx, 50-300 pages),
``bucket`` (0.5-60/s, burst 1-20, plain 429 or ``Retry-After`` of the next token), ``strict`` (0.5-30/s,
no burst), ``holds`` (0.5-30/s, burst 1-10, 1-60 s holds), ``fixed`` (N per 1-30 s window on the
clock), ``reqrate`` (HAProxy's counter, refused requests counted, period 1-60 s). A limited site has
``capacity x U(0.5, 1) x --seconds`` pages (at least 10, at most 1,500), as the farm draws them.

Figures per kind: the mean and 10th percentile of oracle time / crawl time (capped at 1), refusals per
site and as a share of requests, and the summed crawl time over the oracle's. The oracle sends at the
limit (a bucket's burst at once, a window's count at its start, a counter's allowance at once) and an
unlimited site at one page per answer on 16 connections (far quicker than any polite start: compare
two trees' ``mean s``, not the shares, on the unlimited kinds). Deterministic.

What the start costs (``start s``, ``start cost s``): the seconds from the first page to the start's end
(a limited site's first refusal; an unlimited one's first quarter second at 0.9 of 100/s, the pace its
start ends at), and those seconds less the pages answered by then over the site's capacity (its limit,
or 100/s): the time a crawl told the limit at once would have saved. Negative where a burst gave more.

The limiter models are those of ``tests/test_rampup_limiters.py`` (loaded as ``bench/limiter_kinds.py``
loads them), the crawl loop is ``bench/holds_battery.py``'s: one copy of each.

    PYTHONPATH=src python bench/start_battery.py --seeds 1-20 --json
    PYTHONPATH=src python bench/start_battery.py --rows /tmp/new.json --against /tmp/base.json
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import math
import random
import statistics
from dataclasses import dataclass, field
from multiprocessing import Pool
from typing import Any

from holds_battery import Answered, Site, crawl_site
from limiter_kinds import harness

KINDS = ("none", "errors", "bucket", "strict", "holds", "fixed", "reqrate")
WORKERS = 16
PARAMS = ("rate", "burst", "hold", "limit", "window", "period")
#: The pace an unlimited quick site's start ends at (the gap cap, ``_rampup_start``'s ``_gap_cap``).
NO_LIMIT_PACE = 100.0


@dataclass
class Open:
    """No limit; ``errors`` of the answers are an instant 5xx, drawn from ``seed``."""

    errors: float = 0.0
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def arrive(self, now: float) -> Answered:
        answer: Answered = harness.Response(503 if self.rng.random() < self.errors else 200)
        return answer


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def draw(kind: str, rng: random.Random, seconds: float) -> tuple[Site, int, float, dict[str, Any]]:
    """A site of ``kind``: (site, pages, oracle seconds less latency, parameters)."""
    if kind in ("none", "errors"):
        pages = rng.randint(50, 300)
        errors = round(rng.uniform(0.05, 0.3), 2) if kind == "errors" else 0.0
        return Open(errors, rng.randrange(2**31)), pages, 0.0, {"errors": errors}
    if kind in ("bucket", "strict", "holds"):
        rate = round(_log_uniform(rng, 0.5, 60.0 if kind == "bucket" else 30.0), 3)
        burst = 1 if kind == "strict" else rng.randint(1, 20 if kind == "bucket" else 10)
        hold = round(_log_uniform(rng, 1.0, 60.0)) if kind == "holds" else 0
        wait = kind != "holds" and rng.random() < 0.7
        pages = min(max(round(rate * rng.uniform(0.5, 1.0) * seconds), 10), 1500)
        site: Site = harness.Bucket(rate, float(burst), hold, wait)
        return site, pages, max(0.0, pages - burst) / rate, {"rate": rate, "burst": burst, "hold": hold}
    if kind == "fixed":
        window = round(_log_uniform(rng, 1.0, min(30.0, seconds / 2)), 2)
        limit = max(round(_log_uniform(rng, 0.5, 30.0) * window), math.ceil(0.5 * window))
        pages = min(max(round(limit / window * rng.uniform(0.5, 1.0) * seconds), 10), 1500)
        phase = round(rng.random(), 3)
        first = (1.0 - phase) * window  # the oracle's first window ends here
        periods = max(0, math.ceil(pages / limit) - 1)
        oracle = first + (periods - 1) * window if periods else 0.0
        return harness.ClockWindow(limit, window, phase), pages, oracle, {"limit": limit, "window": window}
    if kind == "reqrate":
        period = round(_log_uniform(rng, 1.0, 60.0), 2)
        limit = max(round(_log_uniform(rng, 0.5, 60.0) * period), math.ceil(0.5 * period), 10)
        pages = min(max(round(limit / period * rng.uniform(0.5, 1.0) * seconds), 10), 1500)
        phase = round(rng.random(), 3)
        counter = harness.RequestRate(float(limit), period, _start=-phase * period)
        return counter, pages, max(0.0, pages - limit) * period / limit, {
            "limit": limit, "period": period}
    raise ValueError(kind)


@dataclass
class Logged:
    """A site whose arrivals are noted (time, status), to find where the start ended."""

    site: Site
    log: list[tuple[float, int]] = field(default_factory=list)

    def arrive(self, now: float) -> Answered:
        answer = self.site.arrive(now)
        self.log.append((now, answer.status_code))
        return answer


def capacity(kind: str, params: dict[str, Any]) -> float:
    """Pages a second the site allows once the start is over: its limit, or for the unlimited kinds the
    100/s the start reaches on its own (past it the gap cap, not the start, paces a quick site)."""
    if kind in ("none", "errors"):
        return NO_LIMIT_PACE
    if kind in ("bucket", "strict", "holds"):
        return float(params["rate"])
    if kind == "fixed":
        return float(params["limit"]) / float(params["window"])
    return float(params["limit"]) / float(params["period"])


def start_cost(kind: str, params: dict[str, Any], log: list[tuple[float, int]]) -> tuple[float, float]:
    """(seconds from the first page to the start's end, seconds the start cost).

    The start ends at the first refusal on a limited site, and on an unlimited one at the first quarter
    second sent at 0.9 of ``NO_LIMIT_PACE``. Its cost is that time less the pages answered by then
    over the site's :func:`capacity` (negative where a burst gave more than the rate)."""
    if not log:
        return 0.0, 0.0
    first = log[0][0]
    end = log[-1][0]
    if kind in ("none", "errors"):
        times = [at for at, _ in log]
        for i, at in enumerate(times):
            if bisect.bisect_left(times, at + 0.25) - i >= 0.9 * NO_LIMIT_PACE * 0.25:
                end = at
                break
    else:
        end = next((at for at, status in log if status != 200), end)
    answered = sum(1 for at, status in log if at <= end and (status == 200 or kind == "errors"))
    return end - first, end - first - answered / capacity(kind, params)


def jobs(seeds: list[int], latencies: list[float], seconds: float) -> list[tuple[str, int, float, float]]:
    """Every kind at every latency for every seed."""
    return [(kind, seed, latency, seconds) for seed in seeds for kind in KINDS for latency in latencies]


def one(job: tuple[str, int, float, float]) -> dict[str, Any]:
    """Draw and crawl one site; its figures."""
    kind, seed, latency, seconds = job
    rng = random.Random(f"{kind}-{seed}")
    site, pages, oracle, params = draw(kind, rng, seconds)
    logged = Logged(site)
    took, sent, refused = asyncio.run(crawl_site(logged, pages, latency, workers=WORKERS, cap=300.0,
                                                 seed=seed, robots=True, refusals_at_once=True,
                                                 stop_when_all_out=True))
    if kind in ("none", "errors"):
        oracle = math.ceil(pages / (1.0 - params["errors"]) / WORKERS) * latency
    oracle = max(oracle, latency)
    start, cost = start_cost(kind, params, logged.log)
    return {"start": round(start, 3), "start_cost": round(cost, 3),
            "kind": kind, "seed": seed, "latency": latency, "pages": pages, **params,
            "seconds": round(took, 3), "oracle": round(oracle, 3), "sent": sent, "refused": refused,
            "share": min(1.0, oracle / took)}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and p10 share, refusals per site and per request, summed time over the oracle's, mean seconds."""
    shares = sorted(r["share"] for r in rows)
    sent, oracle = sum(r["sent"] for r in rows), sum(r["oracle"] for r in rows)
    return {"sites": len(rows), "mean": round(statistics.mean(shares), 3),
            "p10": round(shares[len(shares) // 10], 3),
            "refused": round(statistics.mean(r["refused"] for r in rows), 2),
            "refused_share": round(sum(r["refused"] for r in rows) / max(1, sent), 4),
            "time_x_oracle": round(sum(r["seconds"] for r in rows) / max(1e-9, oracle), 3),
            "seconds": round(statistics.mean(r["seconds"] for r in rows), 2),
            "start_s": round(statistics.mean(r.get("start", 0.0) for r in rows), 2),
            "start_cost_s": round(statistics.mean(r.get("start_cost", 0.0) for r in rows), 2)}


def _seeds(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-10", help="seeds, 'A-B' (default 1-10)")
    parser.add_argument("--latencies", default="0.003,0.01", help="answer times, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="a limited site's time at capacity")
    parser.add_argument("--rows", help="write every crawl's figures to this JSON file")
    parser.add_argument("--against", help="compare with rows an earlier run wrote, crawl by crawl")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on the last line")
    parser.add_argument("--quick", action="store_true", help="seeds 1-2 only (under a minute)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = "1-2"
    todo = jobs(_seeds(args.seeds), [float(x) for x in args.latencies.split(",")], args.seconds)
    with Pool(2) as pool:
        rows = pool.map(one, todo)
    if args.rows:
        with open(args.rows, "w", encoding="utf-8") as f:
            json.dump(rows, f)
    result = {kind: summary([r for r in rows if r["kind"] == kind]) for kind in KINDS}
    result["all"] = summary(rows)
    result["limited"] = summary([r for r in rows if r["kind"] not in ("none", "errors")])
    if not args.json:
        print("| kind | sites | mean | p10 | refused/site | refused % | time x oracle | mean s | start s "
              "| start cost s |")
        print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for kind, s in result.items():
            print(f"| {kind} | {s['sites']} | {s['mean']:.3f} | {s['p10']:.3f} | {s['refused']:.2f} | "
                  f"{100 * s['refused_share']:.1f} | {s['time_x_oracle']:.2f} | {s['seconds']:.2f} | "
                  f"{s['start_s']:.2f} | {s['start_cost_s']:.2f} |")
    if args.against:
        with open(args.against, encoding="utf-8") as f:
            before = json.load(f)
        pairs = list(zip(before, rows, strict=True))
        worse = [(b, r) for b, r in pairs if r["seconds"] > b["seconds"] * 1.1 + 0.2]
        better = [(b, r) for b, r in pairs if r["seconds"] * 1.1 + 0.2 < b["seconds"]]
        print(f"against {len(rows)} crawls: {len(better)} faster, {len(worse)} slower (by 10 % + 0.2 s)")
        for b, r in sorted(worse, key=lambda p: p[0]["seconds"] - p[1]["seconds"])[:12]:
            shown = {k: v for k, v in r.items() if k in PARAMS}
            print(f"  slower {r['kind']} seed {r['seed']} {r['latency']:g} s {r['pages']} pages {shown}: "
                  f"{b['seconds']:.1f} -> {r['seconds']:.1f} s (oracle {r['oracle']:.1f}), "
                  f"refused {b['refused']} -> {r['refused']}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
