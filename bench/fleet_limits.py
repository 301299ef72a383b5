"""Does a fleet crawl a random farm's holds, counters and shifting limits as fast as one process? Fake clock.

Run it as ``python bench/fleet_limits.py --seeds 1,2,3`` (``--workers 1,4,8``, ``--lag 0.05`` for a
loaded machine's lags, ``--json`` for one JSON line per crawl, the totals last). Events run one at
a time in time order on a fake clock, so a run's figures are the same on any load.

Every ``holds`` site of ``draw_farm(seed, --sites, kinds=["holds"])`` (``crawlpace.sim._random``: a
token bucket of 0.5-30/s and burst 1-10 whose 429 demands 1-60 s of quiet, ``Retry-After`` on every
refusal, sends inside the quiet refused and answered with what is left of it) is crawled to its last
page as ``bench/fleet_errors.py`` crawls, robots.txt first (one worker fetches it, exempt from the
limits): each page is sent once a worker has a free slot (16 each)
and its store admits; a refused page goes back to the shared frontier and is sent again; the answers'
headers are read as a crawl reads them (``FeedbackBuilder``), so the hold reaches the store with the
release. Contenders: one process on the memory store (``1``) and fleets of N workers on one private
``redis-server`` (one ``RedisStore`` each, ``N`` >= 2).

Per crawl: the oracle's seconds (``(pages - burst) / rate + latency``), the crawl's seconds from the
first send to the last page's answer, their ratio (``x``: oracle over crawl), the refusals and the
holds the site started (429s outside a quiet).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import random
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests.redis_server import RedisServer, delivered, redis_binary  # noqa: E402
from tests.test_fleet_learning import Lags  # noqa: E402
from tests.test_rampup_limiters import Response  # noqa: E402

from _modules import load_file  # noqa: E402
from crawlpace import Settings  # noqa: E402
from crawlpace._responses._feedback import FeedbackBuilder  # noqa: E402
from crawlpace.sim._random import draw_farm  # noqa: E402
from crawlpace.stores import Blocked, Lease, Outcome, Store, open_store  # noqa: E402
from crawlpace.testing import MockClock  # noqa: E402

SETTINGS = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "CONCURRENT_REQUESTS": 16})
SLOTS = 16  # each worker's requests in flight at most (a crawl's CONCURRENT_REQUESTS)
POLL = 0.05  # a worker whose scope is blocked without a time looks again after this long
QUICK = 0.001  # seconds a refusal takes (the site answers it at once)
ROBOTS_TOOK = 0.005  # seconds robots.txt takes (no latency for rampup: a crawl's is not the pages')
COPY_POLL = 0.2  # the other workers find the fetcher's robots.txt copy within this long (a crawl's)
EPOCH = 1_700_000_000.37  # the Unix time at the fake clock's 0
LIMIT = 900.0  # seconds of fake time a crawl may take at most
#: With ``--lag``: whether the latency a crawl measures counts the answer-to-release lag (as
#: ``bench/fleet_errors.py``'s ``--lag-in-latency``).
LAG_IN_LATENCY = False


#: The random farm's profiles this bench crawls, by kind: ``holds`` (Retry-After holds), and the
#: request-rate counters and shifting limits ``bench/shifting_recall.py`` models.
PROFILES = {"holds": ("retryafter",), "reqrate": ("reqrate",), "shifting": ("shifting",)}


def site_model(spec: dict[str, Any]) -> Any:
    """The site's model: ``bench/holds_battery.HeldBucket`` for a holds site, else
    ``bench/shifting_recall.Site`` (one source of each model)."""
    here = Path(__file__).resolve().parent
    if spec["profile"] == "retryafter":
        held = load_file("_bench_holds_battery", here / "holds_battery.py").HeldBucket
        return held(float(spec["rate"]), float(spec["burst"]), int(spec["embargo"]))
    return load_file("_bench_shifting_recall", here / "shifting_recall.py").Site(spec)


def oracle_time(spec: dict[str, Any], latency: float) -> float:
    """The oracle's seconds: ``(pages - burst) / rate + latency`` for a holds bucket, else the pages at
    the capacity in force (``shifting_recall.Site.oracle_time``)."""
    if spec["profile"] == "retryafter":
        return max(0, int(spec["pages"]) - int(spec["burst"])) / float(spec["rate"]) + latency
    return float(site_model(spec).oracle_time()) + latency


@dataclass
class Crawl:
    done: float  # seconds from the first send to the last page's answer (or the limit)
    sends: int
    refused: int
    holds: int  # refusals that started a quiet
    looks: int  # the store's refusals to admit
    log: list[tuple[float, int, int]]  # each send's time, worker and status


async def crawl(stores: list[Store], clock: MockClock, spec: dict[str, Any], latency: float,
                lag: Lags | None = None, work: str = "none") -> Crawl:
    """Crawl the holds site ``spec`` to its last page through ``stores`` (one per worker)."""
    builder = FeedbackBuilder(SETTINGS, wall_clock=lambda: EPOCH + clock.now())
    site = site_model(spec)
    mix = random.Random(7)  # spreads the workers' attempts, as their own event loops would
    jitter = random.Random(spec["seed"])  # the pages' answer times
    order = itertools.count()
    frontier = list(range(int(spec["pages"])))
    left = set(frontier)
    Event = tuple[float, int, int, tuple[Lease, int, int, dict[str, str], float] | None]
    # One worker fetches robots.txt first (exempt from the site's limits, as the farm's sites serve
    # it); the pages wait for its answer, the other workers find its copy within COPY_POLL.
    events: list[Event] = [(0.0, next(order), 0, None)]
    robots: Lease | None = None
    robots_out = True
    inflight = [0] * len(stores)
    idle = [False] * len(stores)
    sends = refused = looks = 0
    last = 0.0
    log: list[tuple[float, int, int]] = []

    attempt: dict[int, int] = {}  # each worker's one live attempt (older ones are dropped)

    def retry(w: int, at: float) -> None:
        idle[w] = False
        attempt[w] = number = next(order)
        heapq.heappush(events, (at, number, w, None))

    attempt[0] = events[0][1]
    while events and left:
        at, number, worker, answer = heapq.heappop(events)
        if at > LIMIT:
            break
        if answer is None and attempt.get(worker) != number:
            continue  # moved earlier by a release
        clock.advance(max(at - clock.now(), 0.0))
        store = stores[worker]
        if answer is not None:
            lease, page, status, headers, took = answer
            if lease is robots:
                feedback = tuple(builder.for_response(lease.demands, status=200, latency=None, hold=None,
                                                      hint=None).values())
                await store.release(lease, Outcome(status=200, latency=ROBOTS_TOOK, feedback=feedback))
                await delivered(store)
                inflight[worker] -= 1
                robots_out = False
                # The fetcher's pages go at once, the other workers' once they find its copy.
                for w in range(len(stores)):
                    retry(w, at + (0.0 if w == worker else mix.uniform(0.0, COPY_POLL)))
                continue
            hint = builder.hint(Response(status, headers))
            feedback = tuple(builder.for_response(lease.demands, status=status, latency=took,
                                                  hold=builder.hold_of(hint, status), hint=hint).values())
            if status != 200:
                frontier.append(page)  # (counted in the work told below)
            if work in ("crawl", "shared"):
                # As a crawl counts its work (crawl/_job.py ``_work_left``): one process its pages
                # not yet sent, none to come; a fleet's worker (``_shared_job.unloaded``: None) only a
                # floor, more to come. ``shared``: the fleet told the frontier's count as one process.
                exact = len(stores) == 1 or work == "shared"
                feedback = tuple(replace(f, left=len(frontier) if exact else 0, more=not exact)
                                 for f in feedback)
            await store.release(lease, Outcome(status=status, latency=took, feedback=feedback))
            await delivered(store)
            inflight[worker] -= 1
            if status == 200:
                left.discard(page)
                last = at
            else:
                for w, sleeping in enumerate(idle):  # a page back in the frontier wakes the idle
                    if sleeping and w != worker:
                        retry(w, at + mix.uniform(0.0, 0.002))
            retry(worker, at)  # a crawl's release makes its scope's queue due at once
            continue
        if robots_out and robots is not None:
            continue  # the pages wait for robots.txt's answer (its release schedules every worker)
        if not frontier or inflight[worker] >= SLOTS:
            idle[worker] = True  # woken when a page comes back or a slot is freed
            continue
        got = await store.acquire((("site", 1.0),))
        if isinstance(got, Blocked):
            looks += 1
            again = got.ready_at if got.ready_at is not None else at + POLL
            retry(worker, max(again, at) + mix.uniform(0.0, 0.002))
            continue
        if robots is None:
            robots = got
            inflight[worker] += 1
            heapq.heappush(events, (at + ROBOTS_TOOK, next(order), worker, (got, -1, 200, {}, ROBOTS_TOOK)))
            continue
        page = frontier.pop(0)
        sends += 1
        inflight[worker] += 1
        there = lag.draw() if lag is not None else 0.0  # the grant to the request's write
        back = lag.draw() if lag is not None else 0.0  # the answer to its release
        # The site answers at the arrival; sends drawn late may arrive out of order (as the lags do).
        reply = site.arrive(at + there)
        status = reply.status_code
        took = (QUICK if status != 200 else latency) * jitter.uniform(0.9, 1.1)
        if status != 200:
            refused += 1
        log.append((round(at, 4), worker, status))
        heapq.heappush(events, (at + there + took + back, next(order), worker,
                                (got, page, status, dict(reply.headers),
                                 took + back if LAG_IN_LATENCY else took)))
        retry(worker, at)  # the next page at once
    return Crawl(done=round(last, 3), sends=sends, refused=refused, holds=getattr(site, "holds", 0),
                 looks=looks, log=log)


async def measure(url: str, workers: int, spec: dict[str, Any], latency: float, lag: Lags | None,
                  work: str = "none") -> Crawl:
    clock = MockClock()
    if url != "memory://":
        url += f"?namespace=h{uuid.uuid4().hex[:10]}&time=local"
    stores = [open_store(url, SETTINGS, clock, random.Random(n)) for n in range(workers)]
    try:
        return await crawl(stores, clock, spec, latency, lag, work)
    finally:
        for store in stores:
            await store.aclose()


def farm_sites(seed: int, sites: int, kinds: list[str], farm: int = 0) -> list[dict[str, Any]]:
    """The sites of ``kinds`` of ``draw_farm(seed, sites, kinds=kinds)`` (60 s at capacity each), or with
    ``farm`` those of the random farm of that many sites of every kind (``crawl_efficiency --farm
    random --sites N``)."""
    if farm:
        profiles = {name for kind in kinds for name in PROFILES[kind]}
        return [spec for spec in draw_farm(seed, farm, seconds=60.0)["site"] if spec["profile"] in profiles]
    return list(draw_farm(seed, sites, seconds=60.0, kinds=kinds)["site"])


async def run(url: str, seeds: list[int], sites: int, workers: list[int], names: set[str] | None,
              latency: float, lag: tuple[float, float] | None, as_json: bool, farm: int = 0,
              kinds: tuple[str, ...] = ("holds",), work: str = "none") -> dict[str, Any]:
    sums = {n: [0.0, 0.0, 0, 0] for n in workers}  # oracle s, crawl s, refused, holds
    ratios: dict[int, list[float]] = {n: [] for n in workers}
    for seed in seeds:
        for spec in farm_sites(seed, sites, list(kinds), farm):
            if names and spec["name"] not in names:
                continue
            oracle = oracle_time(spec, latency)
            row: dict[str, Any] = {"seed": seed, "site": spec["name"], "pages": spec["pages"],
                                   "oracle": round(oracle, 3),
                                   "spec": {k: v for k, v in spec.items()
                                            if k not in ("name", "seed", "pages")}}
            for n in workers:
                lags = Lags(lag[0], lag[1], int(spec["seed"])) if lag is not None else None
                got = await measure("memory://" if n == 1 else url, n, spec, latency, lags, work)
                row[f"w{n}"] = got.done
                row[f"w{n}_x"] = round(min(oracle / got.done, 1.5), 3) if got.done > 0 else 0.0
                row[f"w{n}_refused"] = got.refused
                row[f"w{n}_holds"] = got.holds
                sums[n][0] += oracle
                sums[n][1] += got.done
                sums[n][2] += got.refused
                sums[n][3] += got.holds
                ratios[n].append(row[f"w{n}_x"])
            print(json.dumps(row) if as_json else
                  f"{seed} {spec['name']} {row['spec']}, {spec['pages']} p, oracle {oracle:.1f} s: "
                  + ", ".join(f"{n}w {row[f'w{n}']:.1f}s {row[f'w{n}_x']:.2f}x "
                              f"{row[f'w{n}_refused']}r/{row[f'w{n}_holds']}h" for n in workers), flush=True)
    totals = {str(n): {"oracle_over_crawl": round(s[0] / s[1], 4) if s[1] else 0.0,
                       "mean_x": round(sum(ratios[n]) / len(ratios[n]), 4) if ratios[n] else 0.0,
                       "min_x": min(ratios[n], default=0.0), "refused": s[2], "holds": s[3]}
              for n, s in sums.items()}
    return totals


#: ``--quick``: the first seed's sites, one process and a fleet of 4.
QUICK_SEEDS = "1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--sites", type=int, default=6, help="sites drawn per seed (default 6)")
    parser.add_argument("--kinds", default="holds",
                        help=f"comma-separated kinds to draw from, of {', '.join(PROFILES)} (default holds)")
    parser.add_argument("--workers", default="1,4,8", help="1 is one process on the memory store")
    parser.add_argument("--site", default="", help="only these site names (comma-separated)")
    parser.add_argument("--latency", type=float, default=0.02, help="a page's time in seconds (default 0.02)")
    parser.add_argument("--lag", type=float, default=0.0,
                        help="each request's two lags (grant to write, answer to release), drawn from a "
                             "lognormal of this median (tests/test_fleet_learning.Lags); 0: none")
    parser.add_argument("--sigma", type=float, default=1.0, help="with --lag: the lognormal's shape")
    parser.add_argument("--lag-in-latency", action="store_true",
                        help="with --lag: the latency measured counts the answer-to-release lag")
    parser.add_argument("--farm", type=int, default=0,
                        help="the holds sites of the random farm of this many sites (crawl_efficiency's "
                             "--farm random --sites N), not of --sites holds sites")
    parser.add_argument("--work", choices=("none", "crawl", "shared"), default="none",
                        help="the work left each release tells rampup: none (every contender guesses), "
                             "crawl (as crawlpace crawl: one process its exact pages left, a fleet's worker "
                             "a floor with more to come), shared (every contender the frontier's count)")
    parser.add_argument("--quick", action="store_true", help=f"seed {QUICK_SEEDS}, 3 sites, 1 and 4 workers")
    parser.add_argument("--json", action="store_true", help="a JSON line per site; the totals last")
    args = parser.parse_args()
    global LAG_IN_LATENCY
    LAG_IN_LATENCY = args.lag_in_latency
    seeds = [int(s) for s in (QUICK_SEEDS if args.quick else args.seeds).split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    if args.quick:
        workers, args.sites = [n for n in workers if n <= 4], 3
    names = set(args.site.split(",")) if args.site else None
    binary = redis_binary()
    if binary is None:
        sys.exit("fleet_limits: no redis-server (or valkey-server) on PATH")
    server = RedisServer(binary)
    server.start()
    try:
        totals = asyncio.run(run(server.url.split("?")[0], seeds, args.sites, workers, names, args.latency,
                                 (args.lag, args.sigma) if args.lag > 0.0 else None, args.json,
                                 args.farm, tuple(args.kinds.split(",")), args.work))
    finally:
        server.close()
    if not args.json:
        for n, t in totals.items():
            print(f"{n} worker(s): oracle/crawl (summed) {t['oracle_over_crawl']}, mean x {t['mean_x']}, "
                  f"min x {t['min_x']}, refused {t['refused']}, holds {t['holds']}")
    print(json.dumps({"totals": totals}))


if __name__ == "__main__":
    main()
