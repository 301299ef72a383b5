"""What any start could give the random farm's ``errors`` sites, on a fake clock, against the oracle.

Each ``errors`` site of ``crawlpace.sim._random.draw_farm(seed, 30, seconds=60)`` (no limit, 5-30 % of
answers 5xx, answers in 0-50 ms) is crawled as ``bench/errors_farm.py`` crawls it (one copy of that
crawl), twice: from the polite start (``DOWNLOAD_DELAY`` 1 s, the default: 1/s, doubling per round) and
from a start that costs nothing (``--free``, by default 100/s: the gap cap, the pace at which an unlimited
quick site's start ends). Beside each crawl's active period stands the oracle's, worked out as the
random farm's oracle (``bench/_peers/oracle.py``) sends a flaky site's pages: 8 in flight, no gap, every
failed page sent again (``pages / (1 - errors)`` sends, a 5xx answered in 1 ms as the crawl's are).
The ratio is the farm's for a site with no capacity (goodput over the oracle's = oracle time over crawl
time), capped at 1.

The gap between the two ratios bounds what any change of the start can give these sites: the free start
is as fast as the start's end, from the first page. Sites are split at the start's latency signal
(20 ms): under it the start climbs from 1/s and ends at 100/s; from it the start doubles from the window
of one (``1 / latency``). The farm-mean line is that gap times the errors sites' share of the farms drawn
(a 30-site farm deals each of its 16 kinds once before any twice: about 2 in 30).

Variants as errors_farm's: ``nohang`` (the 5xx, no hangs: the pacing), ``clean`` (no errors either).
Hangs are left out: a hang's tail (3-15 s) is the oracle's too and decides the ratio by luck.

    PYTHONPATH=src python bench/start_bound.py                      # stop 56's three seeds, crawl seeds 1-3
    PYTHONPATH=src python bench/start_bound.py --seeds 918273645,42424242 --json
    PYTHONPATH=src python bench/start_bound.py --quick --json       # one farm seed, crawl seed 1 (seconds)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

import errors_farm
from crawlpace import Settings
from crawlpace.sim._random import draw_farm
from errors_farm import parse_seeds

#: The random farm's oracle sends a flaky site's pages this many at once, with no gap (``FLAKY_INFLIGHT``).
ORACLE_INFLIGHT = 8
#: A 5xx's answer time in the crawl (errors_farm answers the flaky site's 5xx in 1 ms).
ERROR_TIME = 0.001
#: The start's latency signal (``T.latency_signal``): under it the start climbs from its starting rate.
SIGNAL = 0.02
#: Stop 56's three seeds (bench/results/stop56.md).
STOP56_SEEDS = "506584913,1054002142,350780327"


def oracle_time(site: Mapping[str, Any], variant: str) -> float:
    """The oracle's active period on ``site``: its sends (the pages, each failed one sent again) 8 at once."""
    errors = 0.0 if variant == "clean" else float(site["errors"])
    sends = int(site["pages"]) / (1.0 - errors)
    each = (1.0 - errors) * float(site["latency"]) + errors * ERROR_TIME
    return sends * each / ORACLE_INFLIGHT


def start_rate(rate: float) -> Any:
    """A patch under which errors_farm's crawls start at ``rate`` a second (``DOWNLOAD_DELAY`` = 1 / rate)."""

    class _Started:
        @staticmethod
        def from_scrapy(values: Mapping[str, Any]) -> Settings:
            return Settings.from_scrapy({**values, "DOWNLOAD_DELAY": 1.0 / rate})

    # errors_farm's crawl builds its settings from its module's name ``Settings``.
    return mock.patch.object(errors_farm, "Settings", _Started)


def rows(seeds: list[int], crawl_seeds: list[int], variants: list[str],
         free: float) -> Iterator[dict[str, Any]]:
    """Every crawl pair: each errors site, crawl seed and variant, from the polite and the free start."""
    for seed in seeds:
        for site in draw_farm(seed, 30, seconds=60)["site"]:
            if site["profile"] != "flaky":
                continue
            for variant in variants:
                for crawl_seed in crawl_seeds:
                    polite = asyncio.run(errors_farm.crawl(site, crawl_seed, variant))["active"]
                    with start_rate(free):
                        quick = asyncio.run(errors_farm.crawl(site, crawl_seed, variant))["active"]
                    oracle = oracle_time(site, variant)
                    yield {"site": f"{seed}:{site['name']}", "cs": crawl_seed, "variant": variant,
                           "latency": site["latency"], "errors": site["errors"], "pages": site["pages"],
                           "polite": round(polite, 3), "free": round(quick, 3), "oracle": round(oracle, 3),
                           "polite_ratio": round(min(1.0, oracle / polite), 4) if polite > 0 else None,
                           "free_ratio": round(min(1.0, oracle / quick), 4) if quick > 0 else None}


def summary(found: list[dict[str, Any]], farms: int) -> dict[str, Any]:
    """Mean ratios per variant and latency band, and what the free start adds to a 30-site farm's mean."""
    out: dict[str, Any] = {}
    sites = len({row["site"] for row in found})
    share = sites / (30.0 * farms) if farms else 0.0
    for variant in sorted({row["variant"] for row in found}):
        figures: dict[str, Any] = {}
        for band, keep in (("all", lambda lat: True), ("quick", lambda lat: lat < SIGNAL),
                           ("window", lambda lat: lat >= SIGNAL)):
            chosen = [row for row in found if row["variant"] == variant and keep(row["latency"])
                      and row["polite_ratio"] is not None and row["free_ratio"] is not None]
            if not chosen:
                continue

            def mean(key: str, chosen: list[dict[str, Any]] = chosen) -> float:
                return round(statistics.fmean(row[key] for row in chosen), 3)

            figures[band] = {"crawls": len(chosen),
                             "polite_s": mean("polite"),
                             "free_s": mean("free"),
                             "oracle_s": mean("oracle"),
                             "polite_ratio": mean("polite_ratio"),
                             "free_ratio": mean("free_ratio")}
        if "all" in figures:
            gain = figures["all"]["free_ratio"] - figures["all"]["polite_ratio"]
            figures["farm_mean_gain"] = round(gain * share, 4)
        out[variant] = figures
    return {"sites": sites, "errors_share": round(share, 4), "variants": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=STOP56_SEEDS, 
                        help="farm seeds, 'A-B' or 'a,b,c' (default stop 56's)")
    parser.add_argument("--crawl-seeds", default="1,2,3", help="crawl seeds (default 1,2,3)")
    parser.add_argument("--variants", default="nohang,clean", help="nohang, clean (comma-separated)")
    parser.add_argument("--free", type=float, default=100.0, help="the free start's rate (default 100/s)")
    parser.add_argument("--quick", action="store_true", help="the first farm seed and crawl seed 1 only")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on the last line")
    args = parser.parse_args()
    seeds, crawl_seeds = parse_seeds(args.seeds), parse_seeds(args.crawl_seeds)
    if args.quick:
        seeds, crawl_seeds = seeds[:1], crawl_seeds[:1]
    found: list[dict[str, Any]] = []
    print("| site | cs | variant | latency s | errors | pages | polite s | free s | oracle s | polite x "
          "| free x |")
    print("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in rows(seeds, crawl_seeds, args.variants.split(","), args.free):
        found.append(row)
        print(f"| {row['site']} | {row['cs']} | {row['variant']} | {row['latency']} | {row['errors']} | "
              f"{row['pages']} | {row['polite']:.2f} | {row['free']:.2f} | {row['oracle']:.2f} | "
              f"{row['polite_ratio']} | {row['free_ratio']} |", flush=True)
    result = summary(found, len(seeds))
    for variant, figures in result["variants"].items():
        for band in ("all", "quick", "window"):
            if band in figures:
                f = figures[band]
                print(f"{variant} {band}: {f['crawls']} crawls, polite {f['polite_s']} s "
                      f"({f['polite_ratio']} x oracle), free {f['free_s']} s ({f['free_ratio']} x), "
                      f"oracle {f['oracle_s']} s")
        print(f"{variant}: a free start adds {figures.get('farm_mean_gain')} to a 30-site farm's mean "
              f"({result['sites']} errors sites in {len(seeds)} farms)")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
