"""Fleets on connection caps and knees, on a fake clock: goodput over capacity and refusals per cell.

Run it as ``python bench/fleet_caps.py`` (``--quick`` for four cells, ``--json`` for a
machine-readable last line; ``--sites``, ``--workers``, ``--lags`` pick the grid).

The grid storm1-storm5 measured (bench/results/storm5.md), kept here, not in /tmp: each site is a
port of a random farm's cap or knee (seed 883305661's ``--kinds softknee,hardknee,conncap``,
``slots6`` the test harness's cap of 6, ``cc10`` a port of a random farm's conncap06, ``cc1`` the cap of 1 of
seed 342453864), crawled through ``tests/test_fleet_learning.measure`` by N workers, each on its own
``RedisStore`` on one private ``redis-server``, with ``lag`` seconds between each grant and the
request's write, and again between its answer and its release (a loaded machine's event loops). The
figures per cell: accepted pages a second from 5 s to the end over the site's capacity, and the
refusals drawn in the whole run. Events run one at a time in time order: the same cell gives the same
figures on any machine.

``--sigma S --seeds A,B`` draws each request's two lags apart (``tests/test_fleet_learning.Lags``: a
seeded lognormal of median ``lag`` and shape S), a loaded machine's uneven lags, under which fleets
storm where fixed lags do not (bench/results/storm7.md: ``--sites cc1,s715cc06,s1588cc06,conncap03,
hardknee02,s1588cc02,slots6,s715hk07 --lags 0.05,0.1 --sigma 1 --seeds 1,2``). Without it every lag is
``lag``, as before. ``--told`` (with ``--sigma``): the workers tell rampup each request's two lags as a
crawl measures them (``tests/test_fleet_learning.crawl``'s ``told``); without it they tell none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.redis_server import RedisServer, redis_binary  # noqa: E402
from tests.test_fleet_learning import Front, HardKnee, Knee, Lags, LateSlots, Slots, measure  # noqa: E402

Site = Slots | LateSlots | Knee | Front

#: name -> (a fresh site, its capacity in pages a second)
SITES: dict[str, tuple[Callable[[], Site], float]] = {
    "cc10": (lambda: LateSlots(0.288, 10, 0.092), 10 / (0.288 + 0.092)),
    "slots6": (lambda: Slots(0.155, 6), 6 / 0.155),
    "softknee01": (lambda: Knee(0.186, 11, 33), 11 / 0.186),
    "hardknee02": (lambda: HardKnee(0.155, 0.0102, 6), HardKnee(0.155, 0.0102, 6).capacity()),
    "conncap03": (lambda: LateSlots(0.279, 4, 0.0845), 4 / (0.279 + 0.0845)),
    "softknee04": (lambda: Knee(0.326, 4, 12), 4 / 0.326),
    "conncap05": (lambda: LateSlots(0.188, 9, 0.0286), 9 / (0.188 + 0.0286)),
    "hardknee06": (lambda: HardKnee(0.221, 0.0248, 14), HardKnee(0.221, 0.0248, 14).capacity()),
    "cc1": (lambda: LateSlots(0.124, 1, 0.022), 1 / (0.124 + 0.022)),
    # storm6's ports of the real storms' sites (seeds 715309124 and 1588231097, never tuned on there)
    "s715cc06": (lambda: LateSlots(0.167, 1, 0.0913), 1 / (0.167 + 0.0913)),
    "s715hk07": (lambda: HardKnee(0.211, 0.00988, 4), HardKnee(0.211, 0.00988, 4).capacity()),
    "s1588hk08": (lambda: HardKnee(0.185, 0.0362, 2), HardKnee(0.185, 0.0362, 2).capacity()),
    "s1588cc02": (lambda: LateSlots(0.115, 6, 0.0341), 6 / (0.115 + 0.0341)),
    "s1588cc06": (lambda: Slots(0.309, 4), 4 / 0.309),
    # storm9's ports of stop 58's wide caps freed at once (seed 1877489519's conncap14 and conncap18), where
    # real fleets of 4 and 8 ran at 0.38-0.56 of the capacity with 1-2 refusals
    "s1877cc14": (lambda: Slots(0.33, 13), 13 / 0.33),
    "s1877cc18": (lambda: Slots(0.306, 13), 13 / 0.306),
    # strict buckets (no burst) with pages of a few ms, the random farms' ``strict`` kind (strict6):
    # seed 301981447's strict09 (13.6/s) and strict25 (11.4/s), seed 1327435007's strict09 (25.4/s)
    "strict13": (lambda: Front(13.6, 0.003), 13.6),
    "strict11": (lambda: Front(11.4, 0.003), 11.4),
    "strict25": (lambda: Front(25.4, 0.003), 25.4),
}
GRID = ("cc10", "slots6", "hardknee02", "conncap03", "conncap05", "hardknee06", "cc1")
QUICK = (("slots6", 4, 0.02), ("cc1", 4, 0.05), ("cc10", 8, 0.05), ("conncap03", 8, 0.05))


async def run(url: str, cells: list[tuple[str, int, float, int]], seconds: float,
              sigma: float, told: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, workers, lag, seed in cells:
        make, capacity = SITES[name]
        started = time.monotonic()
        lags: float | Lags = Lags(lag, sigma, seed) if sigma > 0.0 else lag
        result = await measure(url, workers, latency=0.0, seconds=seconds, site=make(), lag=lags,
                               told=told)
        rows.append({"site": name, "workers": workers, "lag": lag, "seed": seed,
                     "goodput": round(result.ok_per_second(5.0, seconds) / capacity, 3),
                     "refused": result.refused, "sends": len(result.sends),
                     "wall": round(time.monotonic() - started, 1)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help=f"four cells only: {QUICK}")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--sites", default=",".join(GRID), help=f"comma-separated, of: {', '.join(SITES)}")
    parser.add_argument("--workers", default="4,8", help="comma-separated fleet sizes (default 4,8)")
    parser.add_argument("--lags", default="0.02,0.03,0.05", help="comma-separated lags in seconds")
    parser.add_argument("--seconds", type=float, default=30.0, help="fake seconds per cell (default 30)")
    parser.add_argument("--sigma", type=float, default=0.0,
                        help="draw each request's two lags from a lognormal of median LAG and this shape "
                             "(tests/test_fleet_learning.Lags); 0 (default): every lag is LAG")
    parser.add_argument("--seeds", default="1", help="with --sigma: comma-separated seeds of the lag draws")
    parser.add_argument("--told", action="store_true",
                        help="with --sigma: the workers tell rampup each request's lags as a crawl measures "
                             "them (the way in as the feedback's lag, the way back in its latency)")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")] if args.sigma > 0.0 else [0]
    if args.quick:
        cells = [(name, workers, lag, seed) for name, workers, lag in QUICK for seed in seeds]
    else:
        unknown = [name for name in args.sites.split(",") if name not in SITES]
        if unknown:
            sys.exit(f"fleet_caps: unknown sites {unknown}; use {', '.join(SITES)}")
        cells = [(name, int(workers), float(lag), seed) for lag in args.lags.split(",")
                 for name in args.sites.split(",") for workers in args.workers.split(",") for seed in seeds]
    binary = redis_binary()
    if binary is None:
        sys.exit("fleet_caps: no redis-server (or valkey-server) on PATH")
    server = RedisServer(binary)
    server.start()
    try:
        rows = asyncio.run(run(server.url.split("?")[0], cells, args.seconds, args.sigma,
                               args.told and args.sigma > 0.0))
    finally:
        server.close()
    drawn = f"; lags drawn per request (lognormal, shape {args.sigma:g})" if args.sigma > 0.0 else ""
    drawn += ", told" if args.told and args.sigma > 0.0 else ""
    print(f"fleet caps: {args.seconds:g} s of fake time per cell; goodput = accepted pages a second "
          f"from 5 s on over the site's capacity{drawn}")
    print("| site | workers | lag s | seed | goodput | refused | sends | wall s |")
    print("|:---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['site']} | {row['workers']} | {row['lag']:g} | {row['seed']} | {row['goodput']:.2f} "
              f"| {row['refused']} | {row['sends']} | {row['wall']:g} |")
    if args.json:
        print(json.dumps({"seconds": args.seconds, "sigma": args.sigma, "told": args.told, "rows": rows}))


if __name__ == "__main__":
    main()
