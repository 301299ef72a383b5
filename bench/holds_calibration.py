"""The random farm's own holds sites on a fake clock: where their time goes, and whether the bucket
fit's stated chances come true.

Draws ``crawlpace sim random`` farms (``draw_farm(seed, 30, seconds=60)``) and keeps their ``holds``
sites (``retryafter``: a token bucket whose 429 demands ``embargo`` seconds of quiet), each with the
pages the farm gives it. Each is crawled as ``bench/holds_battery.py`` crawls (rampup on, 16 workers,
the work told) until every page is accepted. Besides the time against the oracle's, two figures:

- **where the time goes**: each crawl's time over the oracle's is split into the first hold (the
  first sign of the limit, which no pacer that knows nothing avoids), the holds after it, and the
  rest (pacing under the rate, the start);
- **calibration**: every ``rampup fit: a token bucket; pacing at R/s (it holds with a chance of C)``
  decision is checked against the crawl: it *held* when no hold started between it and the next
  decision of the fit. Per band of stated chance, the mean stated chance beside the share that held;
  the first fit of a crawl (made on the start's sends alone) apart from the later ones.

Deterministic (fake clock): the same tree gives the same figures on any load.

    python bench/holds_calibration.py --quick --json                  # 5 farms, 3 ms answers
    python bench/holds_calibration.py --seeds 11-25 --latencies 0.003,0.05
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import statistics
from multiprocessing import Pool
from typing import Any

from crawlpace.sim._random import draw_farm
from holds_battery import Answer, HeldBucket, crawl_site

#: Farms of the quick run: stop 51's three fresh seeds and two the holds pages used.
QUICK = (355139759, 2125520156, 1145499104, 1407, 2208)
#: Bands of stated chance the calibration is reported in.
BANDS = ((0.0, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 0.999), (0.999, 1.01))
_FIT = re.compile(r"rampup fit: a token bucket; pacing at ([0-9.e+-]+)/s "
                  r"\(it holds with a chance of ([0-9.]+)\)")


class Traced(HeldBucket):
    """A held bucket that notes when each hold started and the time of the last arrival."""

    def __init__(self, rate: float, burst: float, hold: int) -> None:
        super().__init__(rate, burst, hold)
        self.started: list[float] = []
        self.last = 0.0

    def arrive(self, now: float) -> Answer:
        before = self.holds
        answer = super().arrive(now)
        self.last = now
        if self.holds > before:
            self.started.append(now)
        return answer


class _Fits(logging.Handler):
    """Collects the bucket fit's decisions, each at the time of the site's last arrival."""

    def __init__(self, site: Traced) -> None:
        super().__init__(logging.DEBUG)
        self.site = site
        self.fits: list[tuple[float, float, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = _FIT.search(record.getMessage())
        if found:
            self.fits.append((self.site.last, float(found.group(1)), float(found.group(2))))


def farm_sites(seeds: list[int]) -> list[dict[str, Any]]:
    """The ``retryafter`` sites of each seed's farm of 30 sites and 60 s, with their seed."""
    return [{**site, "farm": seed} for seed in seeds for site in draw_farm(seed, 30, seconds=60)["site"]
            if site.get("profile") == "retryafter"]


def one(job: tuple[dict[str, Any], float]) -> dict[str, Any]:
    """Crawl one site; its times, holds and fit decisions (time, pace / rate, chance, held)."""
    spec, latency = job
    rate, burst = float(spec["rate"]), float(spec["burst"])
    hold, pages = int(spec["embargo"]), int(spec["pages"])
    site = Traced(rate, burst, hold)
    handler = _Fits(site)
    log = logging.getLogger("crawlpace")
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        took, _, refused = asyncio.run(crawl_site(site, pages, latency))
    finally:
        log.removeHandler(handler)
    oracle = max(0.0, pages - burst) / rate + latency
    fits = []
    for i, (at, pace, sure) in enumerate(handler.fits):
        until = handler.fits[i + 1][0] if i + 1 < len(handler.fits) else float("inf")
        held = not any(at < start <= until for start in site.started)
        fits.append([round(at, 2), round(pace / rate, 3), sure, held])
    return {"farm": spec["farm"], "name": spec["name"], "rate": rate, "burst": burst, "hold": hold,
            "pages": pages, "latency": latency, "seconds": round(took, 2), "oracle": round(oracle, 2),
            "holds": site.holds, "refused": refused, "fits": fits}


def calibration(rows: list[dict[str, Any]], first: bool) -> list[dict[str, float]]:
    """Per band of stated chance: fits, mean stated chance, share that held (first fits or later)."""
    chosen = [f for r in rows for i, f in enumerate(r["fits"]) if (i == 0) == first]
    out = []
    for low, high in BANDS:
        band = [f for f in chosen if low <= f[2] < high]
        if band:
            stated = statistics.mean(f[2] for f in band)
            out.append({"band": low, "fits": len(band), "stated": round(stated, 3),
                        "held": round(sum(1 for f in band if f[3]) / len(band), 3)})
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Time over the oracle's, its split, and the fits' calibration."""
    oracle = sum(r["oracle"] for r in rows)
    first = sum(r["hold"] for r in rows if r["holds"] >= 1)
    later = sum(r["hold"] * max(0, r["holds"] - 1) for r in rows)
    took = sum(r["seconds"] for r in rows)
    return {"crawls": len(rows), "time_x_oracle": round(took / oracle, 3),
            "mean": round(statistics.mean(min(1.0, r["oracle"] / r["seconds"]) for r in rows), 3),
            "holds": round(statistics.mean(r["holds"] for r in rows), 2),
            "first_hold_s": round(first, 1), "later_holds_s": round(later, 1),
            "rest_s": round(took - oracle - first - later, 1),
            "first_fits": calibration(rows, True), "later_fits": calibration(rows, False)}


def _seeds(text: str) -> list[int]:
    if "-" in text:
        first, last = (int(x) for x in text.split("-"))
        return list(range(first, last + 1))
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the five QUICK farms, 3 ms answers only")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--seeds", default="11-25", help="farm seeds, 'A-B' or 'A,B,C' (default 11-25)")
    parser.add_argument("--latencies", default="0.003,0.05", help="answer times in seconds")
    parser.add_argument("--processes", type=int, default=2, help="crawls run in parallel (default 2)")
    parser.add_argument("--rows", help="write every crawl's figures to this JSON file")
    args = parser.parse_args(argv)
    seeds = list(QUICK) if args.quick else _seeds(args.seeds)
    latencies = [float(x) for x in args.latencies.split(",")]
    if args.quick:
        latencies = latencies[:1]
    jobs = [(site, latency) for site in farm_sites(seeds) for latency in latencies]
    with Pool(max(1, args.processes)) as pool:
        rows = pool.map(one, jobs, chunksize=1)
    figures = {f"{latency:g}": summary([r for r in rows if r["latency"] == latency]) for latency in latencies}
    for latency, f in figures.items():
        print(f"answers in {latency} s: {f['crawls']} holds sites, time x oracle {f['time_x_oracle']}, "
              f"mean {f['mean']}, holds {f['holds']}; over the oracle: first holds {f['first_hold_s']} s, "
              f"later holds {f['later_holds_s']} s, the rest {f['rest_s']} s")
        for kind in ("first_fits", "later_fits"):
            for band in f[kind]:
                print(f"  {kind.replace('_', ' ')}, chance from {band['band']:.2f}: {band['fits']} fits, "
                      f"stated {band['stated']:.2f}, held {band['held']:.2f}")
    if args.rows:
        with open(args.rows, "w", encoding="utf-8") as handle:
            json.dump(rows, handle)
    if args.json:
        print(json.dumps({"benchmark": "holds_calibration", "seeds": seeds, "latencies": latencies,
                          "figures": figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
