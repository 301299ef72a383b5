"""Does a fleet on one Redis pace a window announcing its budget in headers as one process does? Fake clock.

Run it as ``python bench/fleet_windows.py`` (``--quick`` for the first four cases and
20 s of fake time, ``--json`` for a machine-readable last line, ``--latency`` for the
pages' time, ``--contenders`` to pick from memory, redis-1, redis-4, redis-8).

Each case is a window limiter as the simulator's ``window`` profile answers it
(``crawlpace.sim``: fixed windows on the clock, moving windows, windows opened by a
request; budget headers in one family; ``Retry-After`` on refusals, on every answer as
Flask-Limiter sends it, or never). Workers crawl it through the store interface on a
fake clock, one event at a time, as ``tests/test_fleet_learning.py`` does, with the
answers' headers read as a crawl reads them; so the figures are exact for a run and
say nothing of the machine. Per case and contender: accepted pages per second over
the window's capacity, refusals, and requests that came while a refusal's
``Retry-After`` ran (violations).
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.redis_server import RedisServer, delivered, redis_binary  # noqa: E402
from tests.test_rampup_limiters import Response  # noqa: E402

from crawlpace import Settings  # noqa: E402
from crawlpace._responses._feedback import FeedbackBuilder  # noqa: E402
from crawlpace.sim._limits import ClockWindow, FixedWindow, SlidingWindow  # noqa: E402
from crawlpace.sim._rates import budget_headers  # noqa: E402
from crawlpace.sim._site import retry_after_value  # noqa: E402
from crawlpace.stores import Blocked, Outcome, open_store  # noqa: E402
from crawlpace.testing import MockClock  # noqa: E402

SETTINGS = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "CONCURRENT_REQUESTS": 16})
EPOCH = 1_700_000_000.37  # the Unix time at the fake clock's 0
SLOTS = 16  # requests each worker keeps in flight at most
POLL = 0.05  # a worker whose scope is blocked without a time looks again after this long

#: limit, window, kind, count refused, Retry-After, header style (the random farm's draws).
CASES: tuple[tuple[int, float, str, bool, str, str], ...] = (
    (13, 8.0, "sliding", False, "every", "x-ratelimit"),
    (2, 2.0, "started", False, "every", "x-ratelimit"),
    (2, 2.0, "sliding", False, "every", "x-ratelimit"),
    (3, 4.0, "sliding", False, "none", "x-rate-limit"),
    (6, 4.0, "sliding", True, "none", "policy"),
    (10, 7.0, "started", False, "every", "x-ratelimit"),
    (6, 2.9, "sliding", True, "refusals", "x-ratelimit"),
    (20, 5.0, "started", False, "every", "x-ratelimit"),
    (10, 4.0, "sliding", False, "refusals", "trio"),
    (5, 3.0, "fixed", False, "refusals", "x-ratelimit"),
    (86, 3.0, "started", False, "every", "x-ratelimit"),
    (67, 5.5, "sliding", True, "refusals", "trio"),
    (30, 1.0, "sliding", False, "refusals", "x-ratelimit"),
    (40, 2.0, "sliding", True, "none", "ietf"),
    (1, 1.0, "sliding", False, "refusals", "x-ratelimit"),
    (4, 1.0, "sliding", False, "none", "reset-after"),
)


class Site:
    """One window limiter answering as the simulator's ``WindowSite`` does, judged as the farm judges."""

    def __init__(self, limit: int, window: float, kind: str, count_refused: bool, retry_after: str,
                 style: str, latency: float) -> None:
        self.window, self.retry_after, self.style, self.latency = window, retry_after, style, latency
        self.counter: ClockWindow | SlidingWindow | FixedWindow = (
            ClockWindow(limit, window, count_refused=count_refused) if kind == "fixed"
            else SlidingWindow(limit, window, count_refused=count_refused) if kind == "sliding"
            else FixedWindow(limit, window, chained=False))
        self.quiet_until = 0.0  # a refusal's Retry-After runs until then
        self.violations = 0

    def answer(self, at: float) -> tuple[int, dict[str, str]]:
        if at < self.quiet_until - 0.01:
            self.violations += 1
        allowed = self.counter.take(at)
        reset = self.counter.reset(at)
        wall = EPOCH + at
        reset_at = int(wall + reset + 1) if self.retry_after == "every" else None
        extra = [] if self.style == "none" else budget_headers(
            self.style, self.counter.limit, self.counter.remaining(at), reset, self.window, wall,
            reset_at=reset_at)
        wait = None
        if reset_at is not None:
            wait = str(max(int(reset_at - wall), 0)).encode("ascii")
        elif not allowed and self.retry_after == "refusals":
            wait = retry_after_value(reset)
        if wait is not None:
            extra.append((b"retry-after", wait))
            if not allowed:
                self.quiet_until = max(self.quiet_until, at + float(wait))
        return (200 if allowed else 429), {name.decode(): value.decode() for name, value in extra}


async def crawl(url: str, workers: int, site: Site, seconds: float) -> tuple[int, int]:
    """Accepted and refused requests of ``workers`` crawling ``site`` for ``seconds`` of fake time."""
    clock = MockClock()
    if url != "memory://":
        url += f"?namespace=w{uuid.uuid4().hex[:10]}&time=local"
    stores = [open_store(url, SETTINGS, clock, random.Random(n)) for n in range(workers)]
    builder = FeedbackBuilder(SETTINGS, wall_clock=lambda: EPOCH + clock.now())
    mix, order = random.Random(7), itertools.count()
    events: list[tuple[float, int, int, Any]] = [(0.0, next(order), worker, None)
                                                 for worker in range(workers)]
    heapq.heapify(events)
    inflight, trying = [0] * workers, [True] * workers
    accepted = refused = 0
    try:
        while events:
            at, _n, worker, answer = heapq.heappop(events)
            if at > seconds and answer is None:
                continue
            clock.advance(max(at - clock.now(), 0.0))
            store = stores[worker]
            if answer is not None:
                lease, status, headers = answer
                hint = builder.hint(Response(status, headers))
                feedback = builder.for_response(lease.demands, status=status, latency=site.latency,
                                                hold=builder.hold_of(hint, status), hint=hint)
                await store.release(lease, Outcome(status=status, latency=site.latency,
                                                   feedback=tuple(feedback.values())))
                await delivered(store)
                inflight[worker] -= 1
                if not trying[worker]:
                    trying[worker] = True
                    heapq.heappush(events, (at + mix.uniform(0.0, 0.002), next(order), worker, None))
                continue
            if inflight[worker] >= SLOTS:
                trying[worker] = False
                continue
            got = await store.acquire((("site", 1.0),))
            if isinstance(got, Blocked):
                again = got.ready_at if got.ready_at is not None else at + POLL
                heapq.heappush(events, (max(again, at) + mix.uniform(0.0, 0.002), next(order), worker, None))
                continue
            inflight[worker] += 1
            status, headers = site.answer(at)
            accepted += status == 200
            refused += status != 200
            heapq.heappush(events, (at + site.latency, next(order), worker, (got, status, headers)))
            heapq.heappush(events, (at, next(order), worker, None))
    finally:
        for each in stores:
            await each.aclose()
    return accepted, refused


async def run(url: str, contenders: list[str], cases: tuple[tuple[int, float, str, bool, str, str], ...],
              seconds: float, latency: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for case in cases:
        limit, window, kind, counted, retry_after, style = case
        counting = " counting refusals" if counted else ""
        label = f"{limit}/{window:g}s {kind}{counting}, Retry-After {retry_after}, {style}"
        row: dict[str, Any] = {"case": label}
        for name in contenders:
            workers = 1 if name == "memory" else int(name.split("-")[1])
            site = Site(*case, latency)
            ok, bad = await crawl("memory://" if name == "memory" else url, workers, site, seconds)
            row[name] = {"share": round(ok / (limit / window * seconds), 3), "refused": bad,
                         "violations": site.violations}
        rows.append(row)
        print(row["case"], "  ".join(f"{name} {v['share']:.2f}/{v['refused']}/{v['violations']}"
                                     for name, v in row.items() if name != "case"), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="the first four cases, 20 s of fake time")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds each answer takes (default 0.1)")
    parser.add_argument("--seconds", type=float, default=None, help="fake seconds per crawl (default 40)")
    parser.add_argument("--contenders", default="memory,redis-1,redis-4,redis-8",
                        help="comma-separated: memory, redis-1, redis-4, redis-8")
    args = parser.parse_args()
    cases = CASES[:4] if args.quick else CASES
    seconds = args.seconds or (20.0 if args.quick else 40.0)
    binary = redis_binary()
    if binary is None:
        raise SystemExit("fleet_windows.py needs a redis-server (or valkey-server) on PATH")
    server = RedisServer(binary)
    server.start()
    try:
        rows = asyncio.run(run(server.url, args.contenders.split(","), cases, seconds, args.latency))
    finally:
        server.close()
    if args.json:
        print(json.dumps({"benchmark": "fleet_windows", "seconds": seconds, "latency": args.latency,
                          "rows": rows}))


if __name__ == "__main__":
    main()
