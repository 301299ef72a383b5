"""The most a pacer can get from a bucket with no burst when each send arrives late by its own lag.

A bucket of ``rate`` with no burst refuses an arrival less than ``1 / rate`` after the last one it
accepted. Sends spaced evenly at a share ``f`` of the rate, each arriving late by a lag drawn as
``tests/test_fleet_learning.Lags`` draws the way in (``0.002 + (median - 0.002) * exp(N(0, shape))``),
are accepted or refused by that rule. For each refusal cap, this prints the best share of the limit
accepted among the shares ``f`` whose refusals stay under the cap: no pacer that only knows its own send
stamps does better (a fleet's sends are at best evenly spaced too). bench/results/strict6.md, section 3.

    python bench/strict_spread_bound.py [--shapes 0.5,1] [--rates 13.6,25.4] [--medians 0.02,0.05]
                                        [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import random


def accepted(rate: float, share: float, median: float, shape: float, sends: int = 30000,
             seed: int = 1) -> tuple[float, float]:
    """(the share of the limit accepted, the share of sends refused) at a pace of ``share`` of ``rate``."""
    draws = random.Random(seed)
    gap, least = 1.0 / (rate * share), 1.0 / rate
    arrivals = sorted(i * gap + 0.002 + (median - 0.002) * math.exp(draws.gauss(0.0, shape))
                      for i in range(sends))
    last, refused = -math.inf, 0
    for at in arrivals:
        if at - last >= least:
            last = at
        else:
            refused += 1
    return (sends - refused) / sends * share, refused / sends


def best(rate: float, median: float, shape: float, cap: float) -> float:
    """The best share of the limit accepted at paces of 0.10-0.99 of it with at most ``cap`` refused."""
    shares = (accepted(rate, step / 100, median, shape) for step in range(10, 100))
    return max((share for share, refused in shares if refused <= cap), default=0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shapes", default="0.5,1", help="spreads of the lag's logarithm")
    parser.add_argument("--rates", default="13.6,25.4", help="the buckets' rates, per second")
    parser.add_argument("--medians", default="0.02,0.05", help="the lags' medians, in seconds")
    parser.add_argument("--quick", action="store_true", help="one shape, rate and median")
    parser.add_argument("--json", action="store_true", help="print every row as JSON on the last line")
    args = parser.parse_args()
    if args.quick:
        args.shapes, args.rates, args.medians = "0.5", "13.6", "0.02"
    rows = []
    print("| shape | rate | median s | best share, <= 2 % refused | <= 5 % |")
    print("|--:|--:|--:|--:|--:|")
    for shape in (float(x) for x in args.shapes.split(",")):
        for rate in (float(x) for x in args.rates.split(",")):
            for median in (float(x) for x in args.medians.split(",")):
                row = {"shape": shape, "rate": rate, "median": median,
                       "best_2pct": round(best(rate, median, shape, 0.02), 4),
                       "best_5pct": round(best(rate, median, shape, 0.05), 4)}
                rows.append(row)
                print(f"| {shape:g} | {rate:g} | {median:g} | {row['best_2pct']:.2f} "
                      f"| {row['best_5pct']:.2f} |", flush=True)
    if args.json:
        print(json.dumps({"benchmark": "strict_spread_bound", "rows": rows}))


if __name__ == "__main__":
    main()
