"""Warm start: how much sooner a second crawl of the same farm reaches each site's capacity.

Run it as ``python bench/warm_start.py`` (a few minutes), ``--quick`` for under a minute,
``--json`` for one line of JSON figures at the end. It measures; the exit status is 0
whatever the figures, and the criteria that fail are listed at the end.

Two contenders on the same farm, one after the other in one run:

* **cold**: ``crawlpace crawl``'s job with rampup on every host and ``--learned FILE`` on a
  new, empty file: every site starts at rampup's first rate (1 request per second) and
  the crawl writes what it learns as it goes;
* **warm**: the same crawl again, on a fresh copy of the farm, reading that file: each
  site starts at half the rate the cold run settled on, and rampup climbs from there.

The farm is the shipped ``ratelimits`` farm (token buckets of 2, 10 and 50 requests per
second, 429 without Retry-After past them, so the limit is only found by running into
it) with fewer pages: each site has about 12 s of pages at its capacity (6 s with
``--quick``). Farm and crawler share one process and one event loop here (the site
simulator is in-process), which is the same handicap for both contenders.

Per site: **t90** is the first moment, counted from the start of the crawl, at which
the 200s of the last ``max(1, 5 / capacity)`` seconds reach 90 % of the capacity (from
the crawl's own output: each line's time and status, to the millisecond); **429** is
the refusals the farm counted over the whole run. Criteria (the
issue's): warm t90 at most a third of cold t90 on every site, and no more 429s than
the cold run in total.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from crawlpace import Settings
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.sim import Farm

SITES = (("limit2", 2.0, 2), ("limit10", 10.0, 5), ("limit50", 50.0, 10))
#: Seconds of pages at capacity per site, full run and --quick.
SECONDS, QUICK_SECONDS = 12.0, 6.0


def farm_spec(seconds: float) -> dict[str, Any]:
    return {"site": [{"name": name, "profile": "ratelimit", "rate": rate, "burst": burst,
                      "retry_after": False, "pages": int(rate * seconds)} for name, rate, burst in SITES]}


def t90(times: list[float], capacity: float) -> float | None:
    """The first moment at which the 200s of the last ``max(1, 5 / capacity)`` s reach 90 % of capacity.

    Args:
        times: when each 200 of the site arrived, in seconds from the crawl's start.
        capacity: the site's capacity, in 200s per second.
    """
    span = max(1.0, 5.0 / capacity)
    need = math.ceil(0.9 * capacity * span - 1e-9)
    times = sorted(times)
    for end in range(need - 1, len(times)):
        if times[end] - times[end - need + 1] <= span:
            return times[end]
    return None


async def crawl(folder: Path, name: str, learned: Path, seconds: float) -> dict[str, Any]:
    settings = Settings.from_scrapy({
        "THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "DOWNLOAD_DELAY": 1.0, "CONCURRENT_REQUESTS": 64,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 16, "CRAWLPACE_LEARNED": str(learned)})
    async with Farm(farm_spec(seconds)) as farm:
        urls = [f"{site.url}/page/{n}" for site in farm.sites for n in range(1, site.app.pages + 1)]
        job = CrawlJob(settings, CrawlOptions(output=folder / f"{name}.jsonl", trust_env=False, robots=False,
                                              retries=20))
        started, wall_start = time.monotonic(), time.time()
        summary = await job.run(urls)
        wall = time.monotonic() - started
        by_host: dict[str, list[float]] = {}
        for line in (folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["status"] == 200:
                by_host.setdefault(record["scope"], []).append(record["time"] - wall_start)
        figures = {}
        for site in farm.sites:
            stats = site.app.stats
            capacity = float(site.app.capacity or 0.0)
            figures[site.name] = {"t90": t90(by_host.get(site.host, []), capacity), "ok": stats.ok,
                                  "throttled": stats.throttled, "capacity": capacity}
    return {"wall": wall, "done": summary.answered, "sites": figures}


def ratio(warm: float | None, cold: float | None) -> float | None:
    if warm is None or cold is None or cold == 0:
        return None
    return warm / cold


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer pages: under a minute")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON figures")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    seconds = QUICK_SECONDS if args.quick else SECONDS
    with tempfile.TemporaryDirectory(prefix="warm-start-") as tmp:
        folder = Path(tmp)
        learned = folder / "learned.sqlite"
        cold = await crawl(folder, "cold", learned, seconds)
        warm = await crawl(folder, "warm", learned, seconds)
    print(f"{'site':9} {'capacity/s':>10} {'cold t90':>9} {'warm t90':>9} {'warm/cold':>9} "
          f"{'cold 429':>9} {'warm 429':>9}")
    failures = []
    rows = {}
    for name, _rate, _burst in SITES:
        c, w = cold["sites"][name], warm["sites"][name]
        r = ratio(w["t90"], c["t90"])
        rows[name] = {"capacity": c["capacity"], "cold_t90": c["t90"], "warm_t90": w["t90"], "ratio": r,
                      "cold_429": c["throttled"], "warm_429": w["throttled"]}

        def show(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f}"

        print(f"{name:9} {c['capacity']:10.0f} {show(c['t90']):>9} {show(w['t90']):>9} {show(r):>9} "
              f"{c['throttled']:9d} {w['throttled']:9d}")
        if r is None or r > 1 / 3 + 1e-9:
            failures.append(f"{name}: warm t90 {show(w['t90'])} s is not at most a third of cold "
                            f"{show(c['t90'])} s")
    cold_429 = sum(site["throttled"] for site in cold["sites"].values())
    warm_429 = sum(site["throttled"] for site in warm["sites"].values())
    print(f"{'total':9} {'':10} {'':9} {'':9} {'':9} {cold_429:9d} {warm_429:9d}")
    print(f"wall: cold {cold['wall']:.1f} s, warm {warm['wall']:.1f} s "
          f"(ratio {warm['wall'] / cold['wall']:.2f}); pages done: cold {cold['done']}, warm {warm['done']}")
    if warm_429 > cold_429:
        failures.append(f"warm drew {warm_429} 429s, more than the cold run's {cold_429}")
    print("criteria: all met" if not failures else "criteria not met:\n  " + "\n  ".join(failures))
    if args.json:
        print(json.dumps({"quick": args.quick, "sites": rows, "cold_429": cold_429, "warm_429": warm_429,
                          "cold_wall": cold["wall"], "warm_wall": warm["wall"], "failures": failures}))


if __name__ == "__main__":
    asyncio.run(main())
