"""One 429 on a library scope: what a Retry-After-only site allowing 5/s gets through ``crawlpace.http``.

Run it as ``python bench/library_backoff.py`` (``--quick`` for a run under a
minute, ``--json`` for a machine-readable last line).

The site (crawlpace's simulator server on 127.0.0.2) is a token bucket of
``--rate`` requests a second with bursts of ``--burst``; a request over it gets
429 with ``Retry-After`` in whole seconds (the wait for the next token, rounded
up) and nothing else: no RateLimit headers. Issue 37's client: 8 tasks sharing
one ``crawlpace.http.throttled_client`` with the library defaults of a user
who wants speed (``CONCURRENT_REQUESTS_PER_DOMAIN`` 8, no delays), each task
fetching pages until ``--calls`` have been answered 200 (the client resends a
429 itself, after its hold).

Reported per round: goodput (200s a second) as a share of the site's rate,
the same share for an oracle (8 tasks spaced exactly ``1/rate`` apart by one
shared clock, told the limit), the 429s, and the requests that *arrived*
inside a hold the site had announced (more than 20 ms after the 429 left the
site, which no send made after reading it can beat on loopback, and before the
hold's end). Medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from crawlpace.http import throttled_client
from crawlpace.sim import SimServer
from crawlpace.sim._asgi import Receive, Scope, Send, respond

HOST = "127.0.0.2"
LIBRARY: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0,
                           "DOWNLOAD_DELAY_PER_SLOT": 0}
TASKS = 8
#: A request arriving this long after a 429 left the site may have been sent before it was read.
LAG = 0.02


@dataclass
class Site:
    """A token bucket that answers 429 with Retry-After only, and notes what arrives when."""

    rate: float
    burst: float
    tokens: float = 0.0
    at: float = 0.0
    arrivals: list[float] = field(default_factory=list)
    holds: list[tuple[float, float]] = field(default_factory=list)
    ok: int = 0
    refused: int = 0

    def __post_init__(self) -> None:
        self.tokens, self.at = self.burst, time.monotonic()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        now = time.monotonic()
        self.arrivals.append(now)
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            self.ok += 1
            await respond(send, 200, b"page")
            return
        seconds = max(1, math.ceil((1.0 - self.tokens) / self.rate))
        self.refused += 1
        self.holds.append((now, now + seconds))
        await respond(send, 429, b"slow down", headers=[(b"retry-after", str(seconds).encode())])

    def inside_holds(self) -> int:
        return sum(1 for t in self.arrivals for start, end in self.holds if start + LAG < t < end)


async def crawlpace_round(site: Site, url: str, calls: int) -> float:
    done = 0
    async with throttled_client(LIBRARY, retries=10, trust_env=False) as client:
        started = time.monotonic()

        async def task() -> None:
            nonlocal done
            while done < calls:
                response = await client.get(f"{url}/p")
                if response.status_code == 200:
                    done += 1

        await asyncio.gather(*(task() for _ in range(TASKS)))
        return time.monotonic() - started


async def oracle_round(site: Site, url: str, calls: int) -> float:
    done = 0
    spacing = 1.0 / site.rate
    next_at = time.monotonic() + spacing  # the bucket starts full; the oracle does not rely on it
    async with httpx.AsyncClient(trust_env=False) as client:
        started = time.monotonic()

        async def task() -> None:
            nonlocal done, next_at
            while done < calls:
                slot = next_at
                next_at += spacing
                await asyncio.sleep(max(0.0, slot - time.monotonic()))
                response = await client.get(f"{url}/p")
                if response.status_code == 200:
                    done += 1

        await asyncio.gather(*(task() for _ in range(TASKS)))
        return time.monotonic() - started


async def one(kind: str, rate: float, burst: float, calls: int) -> dict[str, float]:
    site = Site(rate, burst)
    async with SimServer(site, HOST) as server:
        run = crawlpace_round if kind == "crawlpace" else oracle_round
        seconds = await run(site, server.url, calls)
    return {"share": site.ok / seconds / rate, "refused": site.refused, "inside_holds": site.inside_holds(),
            "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run under a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--rate", type=float, default=5.0, help="the site's requests a second (5)")
    parser.add_argument("--burst", type=float, default=5.0, help="the site's bucket size (5)")
    parser.add_argument("--calls", type=int, help="200s each round waits for (150; 60 with --quick)")
    parser.add_argument("--rounds", type=int, help="rounds per contender (3; 1 with --quick)")
    args = parser.parse_args()
    calls = args.calls or (60 if args.quick else 150)
    rounds = args.rounds or (1 if args.quick else 3)
    results: dict[str, list[dict[str, float]]] = {"crawlpace": [], "oracle": []}
    for _ in range(rounds):
        for kind in results:
            results[kind].append(asyncio.run(one(kind, args.rate, args.burst, calls)))
    summary: dict[str, Any] = {
        "bench": "library_backoff", "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(), "load": os.getloadavg()[0], "rate": args.rate,
        "burst": args.burst, "calls": calls, "rounds": rounds,
    }
    for kind, runs in results.items():
        summary[kind] = {key: statistics.median(run[key] for run in runs)
                         for key in ("share", "refused", "inside_holds", "seconds")}
    summary["ratio_to_oracle"] = summary["crawlpace"]["share"] / summary["oracle"]["share"]
    for kind in results:
        row = summary[kind]
        print(f"{kind:>9}: {row['share']:.2f} of {args.rate:g}/s, {row['refused']:g} refusals, "
              f"{row['inside_holds']:g} requests inside a hold, {row['seconds']:.1f} s (median of {rounds})")
    print(f"crawlpace / oracle: {summary['ratio_to_oracle']:.2f} (load average {summary['load']:.1f})")
    if args.json:
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
