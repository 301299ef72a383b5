"""One site of a random farm, replayed on a fake clock: rampup's every decision and the pace per window.

The site is drawn by ``draw_farm(seed, sites, seconds=..., kinds=...)`` and crawled as
``bench/shifting_recall.py`` crawls it (a bucket, window or HAProxy counter of
``tests/test_rampup_limiters.py`` at its drawn phase, pages in 20 ms, 429s at once, until its pages
are done). It prints the site's draw, the oracle's time at the capacity (``limit / period`` for a
counter), the crawl's, rampup's decisions with their times, then per window (the counter's
period, at least 2 s) the accepted sends a second and the refusals. For a request-rate counter it
also gives the fastest even pace the counter lets through, ``(limit - 1) / period`` (even sends at
the limit read one more than it, the request counted), which the bench's oracle settles at
(``bench/_peers/oracle.py``). Deterministic: no sockets, no sleeping.

    PYTHONPATH=src python bench/farm_trace.py --seed 7002 --site reqrate05
    PYTHONPATH=src python bench/farm_trace.py --seed 7002 --site reqrate05 --kinds reqrate --json
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _modules import load_file


def _recall_bench() -> ModuleType:
    """``bench/shifting_recall.py`` (its site models and harness: one source of truth)."""
    return load_file("_bench_shifting_recall", Path(__file__).resolve().parent / "shifting_recall.py")


def windows(accepted: list[float], refused: list[float], end: float, width: float) -> list[dict[str, float]]:
    """Per window of ``width`` seconds from 0 to ``end``: its start, accepted sends a second, refusals."""
    rows = []
    accepted, refused = sorted(accepted), sorted(refused)
    start = 0.0
    while start < end:
        stop = start + width
        got = bisect.bisect_left(accepted, stop) - bisect.bisect_left(accepted, start)
        lost = bisect.bisect_left(refused, stop) - bisect.bisect_left(refused, start)
        rows.append({"at": round(start, 3), "rate": round(got / width, 3), "refused": lost})
        start = stop
    return rows


def even_pace(spec: dict[str, Any]) -> float | None:
    """The fastest even pace a request-rate counter lets through, ``(limit - 1) / period`` (None for
    other limiters)."""
    if spec.get("base", spec["profile"]) != "reqrate":
        return None
    return (float(spec["limit"]) - 1.0) / float(spec["period"])


#: The requests the bench's oracle keeps in flight on a window (``bench/_peers/oracle.py``'s RATE_INFLIGHT).
ORACLE_IN_FLIGHT = 4
#: The margin the oracle keeps past a send's leaving a sliding window (its log's 5 ms).
WINDOW_MARGIN = 0.005


def mirror(log: list[float], start: float, left: int, limit: int, window: float, latency: float) -> float:
    """The last answer's time when ``left`` pages go from ``start`` on by the sliding window's own rule,
    each send once fewer than ``limit`` sends of ``log`` (and of the new ones) fell in the last
    ``window`` seconds, at most ``ORACLE_IN_FLIGHT`` in flight of ``latency`` seconds: the schedule the
    bench's oracle keeps for a sliding window (``bench/_peers/oracle.py``), from a given record on."""
    sends = sorted(log)
    end = start
    for i in range(left):
        t = start
        if len(sends) >= limit:
            t = max(t, sends[-limit] + window + WINDOW_MARGIN)
        if i >= ORACLE_IN_FLIGHT:
            t = max(t, sends[-ORACLE_IN_FLIGHT] + latency)
        sends.append(t)
        end = t + latency
    return end


def window_bounds(spec: dict[str, Any], accepted: list[float], refused: list[float],
                  decisions: list[tuple[float, str]], latency: float) -> dict[str, float] | None:
    """For a sliding window (``profile = "window"``, ``kind = "sliding"``): the oracle's time (the
    window's own rule from the start, all ``limit`` at once), and the time a pacer would take that knew
    ``(limit, window)`` from the first lock-out's fit on and sent by the window's rule from there (the
    crawl's own sends before it, refusals in its log when the site counts them). None for other sites."""
    if spec.get("profile") != "window" or spec.get("kind") != "sliding":
        return None
    limit, window, pages = int(spec["limit"]), float(spec["window"]), int(spec["pages"])
    fits = [at for at, text in decisions if "fit:" in text and "(a lock-out)" in text]
    out = {"oracle": round(mirror([], 0.0, pages, limit, window, latency), 3)}
    if fits:
        at = fits[0]
        log = [t for t in accepted if t <= at]
        if spec.get("count_refused"):
            log += [t for t in refused if t <= at]
        done = sum(1 for t in accepted if t <= at)
        out["first_fit"] = round(at, 3)
        out["window_rule_after_fit"] = round(mirror(log, at, pages - done, limit, window, latency), 3)
    return out


def trace(seed: int, name: str, sites: int, seconds: float, kinds: str,
          latency: float = 0.02) -> dict[str, Any]:
    """Crawl the site ``name`` of the farm drawn with ``seed``; its figures and decisions."""
    bench = _recall_bench()
    farm = bench.draw_farm(seed, sites, seconds=seconds, kinds=tuple(kinds.split(",")))
    found = [spec for spec in farm["site"] if spec["name"] == name]
    if not found:
        raise SystemExit(f"no site {name} in farm {seed}: {[spec['name'] for spec in farm['site']]}")
    spec = found[0]
    site = bench.Site(spec)
    oracle = site.oracle_time()
    limit = 3.0 * oracle + 5.0
    handler = bench._Decisions(site)
    log = logging.getLogger("crawlpace.policy.rampup")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        asyncio.run(bench.limiters.crawl(site, limit, latency=latency))
    finally:
        log.removeHandler(handler)
    done = min(site.done, limit)
    width = max(2.0, float(spec.get("period", spec.get("window", 0.0))))
    accepted, refused = list(site.shifting.accepted), list(site.shifting.refused)
    return {"spec": spec, "capacity": round(site.capacity, 3), "even_pace": even_pace(spec),
            "oracle": round(oracle, 2), "done": round(done, 2), "ratio": round(oracle / done, 3),
            "refused": len(refused),
            "window_bounds": window_bounds(spec, accepted, refused,
                                           [(at, text) for at, text in handler.seen], latency),
            "decisions": [(round(at, 3), text) for at, text in handler.seen if at <= done],
            "windows": windows(accepted, refused, done, width)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True, help="the farm's seed")
    parser.add_argument("--site", required=True, help="the site's name in the farm, e.g. reqrate05")
    parser.add_argument("--sites", type=int, default=9, help="sites per farm, as drawn (default 9)")
    parser.add_argument("--seconds", type=float, default=60.0, help="a site's time at capacity (default 60)")
    parser.add_argument("--kinds", default="reqrate",
                        help="the kinds the farm was drawn from (default reqrate; as shifting_recall.py)")
    parser.add_argument("--latency", type=float, default=0.02, help="a page's time in seconds (default 0.02)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--quick", action="store_true", help="20 s at capacity (a shorter trace)")
    args = parser.parse_args()
    if args.quick:
        args.seconds = min(args.seconds, 20.0)
    out = trace(args.seed, args.site, args.sites, args.seconds, args.kinds, args.latency)
    print(out["spec"])
    print(f"capacity {out['capacity']}/s, even pace {out['even_pace']}; oracle {out['oracle']} s, "
          f"crawl {out['done']} s: {out['ratio']} x; {out['refused']} refused")
    if out["window_bounds"]:
        bounds = out["window_bounds"]
        print(f"sliding window: the oracle's rule from the start {bounds['oracle']} s"
              + (f"; the window's rule from the first lock-out's fit ({bounds['first_fit']} s) on "
                 f"{bounds['window_rule_after_fit']} s" if "first_fit" in bounds else ""))
    for at, text in out["decisions"]:
        print(f"{at:9.3f}  {text}")
    print(" ".join(f"{row['at']:g}:{row['rate']:g}/{row['refused']}" for row in out["windows"]))
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
