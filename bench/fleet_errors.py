"""Does a fleet crawl a flaky site (5xx and hangs that are the site's own) as fast as one process? Fake clock.

Run it as ``python bench/fleet_errors.py --seeds 1972282492,1297527866`` (``--workers 1,4,8``,
``--json`` for one JSON line per crawl). The machine's load does not count: events run one at a
time in time order on a fake clock, so a run's figures are the same every time.

Every ``errors`` site of ``draw_farm(seed, 8, kinds=["errors"])`` (``crawlpace.sim._random``) is
crawled to its last page: each page is sent once a worker has a free slot (16 each, a crawl's
``CONCURRENT_REQUESTS``) and its store admits; the site answers as ``FlakySite`` does (its share
of 5xx at once, its share of hangs after ``hang`` seconds, the rest after ``latency``); a 5xx
page goes back to the shared frontier and is sent again (up to ``RESENDS`` times), as
``crawlpace crawl`` resends; a hang past ``TIMEOUT`` is a timeout (``for_exception``), resent too.
The feedback is what a crawl builds (``FeedbackBuilder``). Contenders: one process on the memory
store, and fleets of ``--workers`` on one private ``redis-server`` (one ``RedisStore`` each), the
fleet's workers taking pages from one shared frontier.

Per crawl: seconds from the first send to the last page's answer (``done``), and the sends.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.redis_server import RedisServer, delivered, redis_binary  # noqa: E402
from tests.test_fleet_learning import Lags  # noqa: E402

from crawlpace import Settings  # noqa: E402
from crawlpace._responses._feedback import FeedbackBuilder  # noqa: E402
from crawlpace.sim._random import draw_farm  # noqa: E402
from crawlpace.stores import Blocked, Lease, Outcome, Store, open_store  # noqa: E402
from crawlpace.testing import MockClock  # noqa: E402

SETTINGS = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "CONCURRENT_REQUESTS": 16})
SLOTS = 16  # each worker's requests in flight at most (a crawl's CONCURRENT_REQUESTS)
POLL = 0.05  # a worker whose slots are all busy looks again after this long
TIMEOUT = 10.0  # a crawl's per-request timeout (the bench's 10 s)
RESENDS = 3  # a crawl's resends of a failed page
QUICK = 0.001  # seconds a 5xx takes (the site answers it at once)
LIMIT = 300.0  # seconds of fake time a crawl may take at most
#: With ``--lag``: whether the latency a crawl measures counts the answer-to-release lag (a loaded
#: event loop reads the answer late, and a crawl's latency is the time to its reading); set by
#: ``--lag-in-latency``.
LAG_IN_LATENCY = False


@dataclass
class Crawl:
    done: float  # seconds from the first send to the last page's answer (or the limit)
    sends: int
    pages: int
    left: int  # pages never answered 200 (resends spent, or the limit)
    blocked: int  # the store's refusals to admit (each a look at the store: a call to Redis in a fleet)
    log: list[tuple[float, int, int | None]]  # each send's time, worker and status (None: a timeout)


async def crawl(stores: list[Store], clock: MockClock, site: dict[str, Any], seed: int,
                lag: Lags | None = None) -> Crawl:
    """Crawl ``site`` to its last page through ``stores`` (one per worker). ``lag``: each request's two
    lags (grant to write, answer to release; a loaded machine's event loops), drawn per request; the
    site draws its answer at the request's arrival and the release comes that much after the answer."""
    builder = FeedbackBuilder(SETTINGS, wall_clock=clock.now)
    rng = random.Random(seed)  # the site's draws, in the order the sends reach it
    mix = random.Random(7)  # spreads the workers' attempts, as their own event loops would
    order = itertools.count()
    frontier = list(range(site["pages"]))
    tries = dict.fromkeys(frontier, 0)
    left = set(frontier)
    Event = tuple[float, int, int, tuple[Lease, int, int | None, float] | None]
    status: int | None
    events: list[Event] = [(0.0, next(order), w, None) for w in range(len(stores))]
    inflight = [0] * len(stores)
    idle = [False] * len(stores)
    sends, last, looks = 0, 0.0, 0
    log: list[tuple[float, int, int | None]] = []

    def wake_all(at: float) -> None:
        for w, sleeping in enumerate(idle):
            if sleeping:
                idle[w] = False
                heapq.heappush(events, (at + mix.uniform(0.0, 0.002), next(order), w, None))

    while events and left:
        at, _, worker, answer = heapq.heappop(events)
        if at > LIMIT:
            break
        clock.advance(max(at - clock.now(), 0.0))
        store = stores[worker]
        if answer is not None:
            lease, page, answered, took = answer
            if answered is None:
                feedback = builder.for_exception(lease.demands, TimeoutError(), None)
            else:
                feedback = tuple(builder.for_response(lease.demands, status=answered, latency=took, hold=None,
                                                      hint=None).values())
            await store.release(lease, Outcome(status=answered, latency=took, feedback=feedback))
            await delivered(store)
            inflight[worker] -= 1
            last = at
            if answered == 200:
                left.discard(page)
            elif tries[page] <= RESENDS:
                frontier.append(page)
                wake_all(at)
            else:
                left.discard(page)  # given up, as a crawl gives up after its resends
            if idle[worker] or not frontier:
                idle[worker] = False
                heapq.heappush(events, (at + mix.uniform(0.0, 0.002), next(order), worker, None))
            continue
        if not frontier:
            idle[worker] = True  # woken when a page comes back
            continue
        if inflight[worker] >= SLOTS:
            idle[worker] = True  # a release starts the next attempt
            continue
        got = await store.acquire((("site", 1.0),))
        if isinstance(got, Blocked):
            looks += 1
            again = got.ready_at if got.ready_at is not None else at + POLL
            heapq.heappush(events, (max(again, at) + mix.uniform(0.0, 0.002), next(order), worker, None))
            continue
        page = frontier.pop(0)
        tries[page] += 1
        sends += 1
        inflight[worker] += 1
        there = lag.draw() if lag is not None else 0.0  # the grant to the request's write
        back = lag.draw() if lag is not None else 0.0  # the answer to its release
        draw = rng.random()
        if draw < site["errors"]:
            status, took = site["status"], QUICK
        elif draw < site["errors"] + site["hangs"]:
            status, took = (200, site["hang"]) if site["hang"] < TIMEOUT else (None, TIMEOUT)
        else:
            status, took = 200, max(site["latency"], QUICK)
        log.append((round(at, 4), worker, status))
        seen = took + back if LAG_IN_LATENCY else took  # a crawl reads its answer late by ``back``
        heapq.heappush(events, (at + there + took + back, next(order), worker, (got, page, status, seen)))
        heapq.heappush(events, (at, next(order), worker, None))  # the next page at once
    return Crawl(done=round(last, 3), sends=sends, pages=site["pages"], left=len(left), blocked=looks,
                 log=log)


async def measure(url: str, workers: int, site: dict[str, Any], seed: int, lag: Lags | None = None) -> Crawl:
    clock = MockClock()
    if url != "memory://":
        url += f"?namespace=e{uuid.uuid4().hex[:10]}&time=local"
    stores = [open_store(url, SETTINGS, clock, random.Random(n)) for n in range(workers)]
    try:
        return await crawl(stores, clock, site, seed, lag)
    finally:
        for store in stores:
            await store.aclose()


def errors_sites(seed: int, farm: int) -> list[dict[str, Any]]:
    """The ``errors`` sites of a seed: of ``draw_farm(seed, 8, kinds=["errors"])``, or with ``farm``
    of the random farm of that many sites of every kind that ``crawl_efficiency --farm random`` draws."""
    if farm:
        drawn = draw_farm(seed, farm, seconds=60.0)["site"]
        return [site for site in drawn if site["profile"] == "flaky"]
    return list(draw_farm(seed, 8, kinds=["errors"])["site"])


def busiest(log: list[tuple[float, int, int | None]]) -> int:
    """The most sends in one second of the crawl (whole seconds from its first send)."""
    seconds: dict[int, int] = {}
    for at, _, _ in log:
        seconds[int(at - log[0][0])] = seconds.get(int(at - log[0][0]), 0) + 1
    return max(seconds.values(), default=0)


async def run(url: str, seeds: list[int], workers: list[int], names: set[str] | None,
              as_json: bool, farm: int = 0, lag: tuple[float, float] | None = None) -> None:
    totals: dict[int, float] = dict.fromkeys(workers, 0.0)
    for seed in seeds:
        for site in errors_sites(seed, farm):
            if names and site["name"] not in names:
                continue
            row: dict[str, Any] = {"seed": seed, "site": site["name"], "errors": site["errors"],
                                   "hangs": site["hangs"], "pages": site["pages"]}
            for n in workers:
                lags = Lags(lag[0], lag[1], site["seed"]) if lag is not None else None
                result = await measure("memory://" if n == 1 else url, n, site, site["seed"], lags)
                row[f"w{n}"] = result.done
                row[f"w{n}_sends"] = result.sends
                row[f"w{n}_left"] = result.left
                row[f"w{n}_busiest"] = busiest(result.log)
                row[f"w{n}_blocked"] = result.blocked
                totals[n] += result.done
            print(json.dumps(row) if as_json else
                  f"{seed} {site['name']} e={site['errors']} h={site['hangs']} pages={site['pages']}: "
                  + ", ".join(f"{n}w {row[f'w{n}']:.2f}s/{row[f'w{n}_sends']} ({row[f'w{n}_busiest']}/s)"
                              for n in workers), flush=True)
    print(json.dumps({"totals": {str(n): round(t, 3) for n, t in totals.items()}}))


#: The sites of the default seed that ``--quick`` crawls (errors02: a hang at a cap of one slot).
QUICK_SITES = "errors01,errors02"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1972282492")
    parser.add_argument("--workers", default="1,4,8", help="1 is one process on the memory store")
    parser.add_argument("--sites", default="", help="only these site names (comma-separated)")
    parser.add_argument("--quick", action="store_true", help=f"one process and 4 workers, on {QUICK_SITES}")
    parser.add_argument("--json", action="store_true", help="a JSON line per site; the totals last")
    parser.add_argument("--farm", type=int, default=0,
                        help="the errors sites of the random farm of this many sites (crawl_efficiency's "
                             "--farm random --sites N), not of 8 errors sites")
    parser.add_argument("--lag", type=float, default=0.0,
                        help="each request's two lags (grant to write, answer to release), drawn from a "
                             "lognormal of this median (tests/test_fleet_learning.Lags); 0: none")
    parser.add_argument("--sigma", type=float, default=1.0, help="with --lag: the lognormal's shape")
    parser.add_argument("--lag-in-latency", action="store_true",
                        help="with --lag: the latency measured counts the answer-to-release lag")
    args = parser.parse_args()
    global LAG_IN_LATENCY
    LAG_IN_LATENCY = args.lag_in_latency
    seeds = [int(s) for s in args.seeds.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    names = set(args.sites.split(",")) if args.sites else None
    if args.quick:
        workers = [n for n in workers if n <= 4]
        names = names or set(QUICK_SITES.split(","))
    binary = redis_binary()
    if binary is None:
        sys.exit("fleet_errors: no redis-server (or valkey-server) on PATH")
    server = RedisServer(binary)
    server.start()
    try:
        asyncio.run(run(server.url.split("?")[0], seeds, workers, names, args.json, args.farm,
                        (args.lag, args.sigma) if args.lag > 0.0 else None))
    finally:
        server.close()


if __name__ == "__main__":
    main()
