"""Rampup on the random farm's ``shifting`` sites, replayed on a fake clock: how soon a rise is found.

Each site of ``draw_farm(seed, ..., kinds=tuple(args.kinds.split(",")))`` becomes a limiter model of
``tests/test_rampup_limiters.py`` (a bucket as ``Bucket``, with one-second holds where the
site sends ``Retry-After``; a window as ``ClockWindow``; a counter as ``RequestRate`` at its
drawn phase) whose limit follows the drawn changes (``Shifting`` of
``tests/test_rampup_recall.py``). The crawl runs the harness's workers until the site's
pages are done (or three times the oracle's time), and reports per site: the oracle's time
to the pages over the crawl's (the limits in force known), refusals, the first recall after
the rise, when the accepted rate first reached 0.85 of the risen capacity, and the seconds lost
in each phase of the limit (``lost``: before the fall, at the lower limit, after the rise; the
summary sums them over the sites).

    PYTHONPATH=src python bench/shifting_recall.py --seeds 101-110 --sites 9 [--json]
    PYTHONPATH=src python bench/shifting_recall.py --kinds bucket,strict,fixed,reqrate --seconds 30 ...

With ``--kinds`` of steady limits (``bucket``, ``strict``, ``fixed``, ``reqrate``) the same models
run with no change: the cost side of a rule that tries a rise sooner.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import logging
import math
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from crawlpace.sim._random import draw_farm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _modules import load_file, seed_list

_TESTS = Path(__file__).resolve().parent.parent / "tests"


def _load(name: str) -> ModuleType:
    """``tests/<name>.py`` as ``tests.<name>`` (the module pytest imports: one copy, not two)."""
    return load_file(f"tests.{name}", _TESTS / f"{name}.py")


sys.path.insert(0, str(_TESTS.parent))
limiters = _load("test_rampup_limiters")
recall_tests = _load("test_rampup_recall")


class _Done(Exception):
    pass


class _Decisions(logging.Handler):
    """Keeps rampup's decisions, stamped with the limiter's last arrival time."""

    def __init__(self, site: Any) -> None:
        super().__init__(logging.DEBUG)
        self.site = site
        self.seen: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((self.site.now, record.getMessage()))


class Site:
    """``Shifting`` with the time of its last arrival and the steps kept for the oracle."""

    def __init__(self, spec: dict[str, Any]) -> None:
        base = spec.get("base", spec["profile"])
        if base == "ratelimit":
            inner: Any = limiters.Bucket(float(spec["rate"]), float(spec["burst"]),
                                         hold=1 if spec.get("retry_after") else 0)
        elif base == "window":
            inner = limiters.ClockWindow(int(spec["limit"]), float(spec["window"]))
        else:
            inner = limiters.RequestRate(float(spec["limit"]), float(spec["period"]))
            inner._start = -float(spec.get("phase", 0.0)) * float(spec["period"])
        self.base = inner.capacity
        self.steps = [(float(at), float(share)) for at, share in spec.get("changes", ())]
        self.shifting = recall_tests.Shifting(inner, list(self.steps))
        self.pages = int(spec["pages"])
        self.now = 0.0
        self.done = math.inf

    @property
    def capacity(self) -> float:
        return float(self.shifting.capacity)

    def arrive(self, now: float) -> Any:
        self.now = now
        answer = self.shifting.arrive(now)
        if answer.status_code == 200 and len(self.shifting.accepted) == self.pages:
            self.done = now
        return answer

    def leave(self, now: float) -> None:
        self.shifting.leave(now)

    def capacity_at(self, t: float) -> float:
        share = 1.0
        for at, factor in self.steps:
            if t >= at:
                share = factor
        return float(self.base * share)

    def oracle_time(self) -> float:
        """Seconds to the pages at the capacity in force (a window's or counter's rounding aside)."""
        left, t = float(self.pages), 0.0
        edges = [at for at, _ in self.steps] + [math.inf]
        for edge in edges:
            rate = self.capacity_at(t)
            if left <= rate * (edge - t):
                return t + left / rate
            left -= rate * (edge - t)
            t = edge
        return t


def lost_by_phase(site: Site, done: float) -> dict[str, float]:
    """Seconds lost in each phase of the limit up to ``done``: before the fall, at the lower limit,
    after the rise. A phase's loss is the pages the capacity in force allowed in it less the pages
    accepted in it, over that capacity: the time the crawl would need at the limit to make them up.
    (Negative where the crawl beat the capacity: a counter's first period, a bucket's burst.)"""
    edges = [at for at, _ in site.steps][:2]
    bounds = [0.0, *edges, math.inf][:4]
    names = ("before", "low", "after")
    accepted = sorted(site.shifting.accepted)
    lost: dict[str, float] = {}
    for name, start, end in zip(names, bounds, bounds[1:], strict=False):
        end = min(end, done)
        if end <= start:
            lost[name] = 0.0
            continue
        capacity = site.capacity_at(start)
        got = bisect.bisect_left(accepted, end) - bisect.bisect_left(accepted, start)
        lost[name] = round((capacity * (end - start) - got) / capacity, 2)
    return lost


async def run_site(spec: dict[str, Any]) -> dict[str, Any]:
    site = Site(spec)
    oracle = site.oracle_time()
    handler = _Decisions(site)
    log = logging.getLogger("crawlpace.policy.rampup")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        await limiters.crawl(site, 3.0 * oracle + 5.0, latency=0.02)
    finally:
        log.removeHandler(handler)
    done = min(site.done, 3.0 * oracle + 5.0)
    fall, rise = (site.steps[0][0], site.steps[1][0]) if site.steps else (math.inf, math.inf)
    recalls = [t for t, msg in handler.seen if "recall: no pushback" in msg]
    after = [t - rise for t in recalls if t >= rise]
    accepted = site.shifting.accepted
    reached = None
    new = site.capacity_at(rise)
    if rise < done:
        inner = site.shifting.inner
        width = max(2.0, getattr(inner, "window", 0.0), getattr(inner, "period", 0.0))
        j = 0
        for i, t in enumerate(accepted):
            if t < rise + width:
                continue
            while accepted[j] < t - width:
                j += 1
            if (i - j + 1) / width >= 0.85 * new:
                reached = t - rise
                break
    return {"name": spec["name"], "base": spec.get("base", spec["profile"]), "ratio": round(oracle / done, 3),
            "oracle": round(oracle, 1), "done": round(done, 1), "refused": len(site.shifting.refused),
            "fall": fall, "rise": rise, "rise_seen": rise < done, "recalls": len(recalls),
            "jumps": sum("the limit rose; climbing quickly" in msg for _, msg in handler.seen),
            "first_recall_after_rise": None if not after else round(after[0], 2),
            "reach85": None if reached is None else round(reached, 2), "lost": lost_by_phase(site, done)}



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="101-110", help="farm seeds, 'A-B' or 'A,B,...' (default 101-110)")
    parser.add_argument("--sites", type=int, default=9, help="sites per farm (default 9)")
    parser.add_argument("--seconds", type=float, default=60.0, help="a site's time at capacity (default 60)")
    parser.add_argument("--kinds", default="shifting",
                        help="shifting, or steady kinds the models cover: bucket, strict, fixed, reqrate")
    parser.add_argument("--json", action="store_true",
                        help="print the summary, with every site's row, as one JSON object on the last line")
    parser.add_argument("--quick", action="store_true", help="one farm of 4 sites, 30 s each (under a min)")
    parser.add_argument("--verbose", action="store_true", help="print each site's row as it ends")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.sites, args.seconds = "101", 4, 30.0
    started = time.perf_counter()
    rows = []
    for seed in seed_list(args.seeds):
        farm = draw_farm(seed, args.sites, seconds=args.seconds, kinds=tuple(args.kinds.split(",")))
        for spec in farm["site"]:
            row = asyncio.run(run_site(spec))
            row["seed"] = seed
            rows.append(row)
            if args.verbose:
                print(row, flush=True)
    ratios_capped = [min(1.0, row["ratio"]) for row in rows]
    ratios = sorted(row["ratio"] for row in rows)
    seen = [row for row in rows if row["rise_seen"]]
    firsts = [row["first_recall_after_rise"] for row in seen if row["first_recall_after_rise"] is not None]
    reach = [row["reach85"] for row in seen if row["reach85"] is not None]
    summary = {
        "sites": len(rows), "mean": round(statistics.fmean(ratios), 4),
        "capped_mean": round(statistics.fmean(ratios_capped), 4),
        "p10": ratios[max(0, math.ceil(0.1 * len(ratios)) - 1)], "refused": sum(r["refused"] for r in rows),
        "rises_in_crawl": len(seen),
        "first_recall_median": round(statistics.median(firsts), 2) if firsts else None,
        "no_recall_after_rise": len(seen) - len(firsts),
        "reach85_median": round(statistics.median(reach), 2) if reach else None,
        "never_reach85": len(seen) - len(reach),
        "lost": {name: round(sum(row["lost"].get(name, 0.0) for row in rows), 1)
                 for name in ("before", "low", "after")},
        "wall": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps({**summary, "rows": rows}))
    else:
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
