"""The CPU cost of rampup's request-rate counter fit (policy/_rampup_counter.py), on a fake clock.

The fit runs at a refusal after a lock-out, inside the answer's handling, on the crawl's event loop:
every other host of the crawl waits for it. This crawls HAProxy-style counters (``N`` per ``T``,
refused requests counted, periods off the crawl's clock) as ``crawlpace crawl`` paces them (rampup
on, 16 workers, pages in 3 or 50 ms, 429s at once), records every fit the crawl asked for, and times
each again on its own (CPU time, the best of ``--repeats``). With ``--exhaustive`` each fit is
compared with the grid search without pruning or budget (counters4's): its cost, and whether the
counters found are the same.

Figures: per case the crawl's share of the counter's capacity and its refusals, the fits asked for
and given, and the median and worst CPU time of one fit; overall the same. The crawls are
deterministic; the times depend on the machine and its load.

    python bench/counter_fit.py                       # 8 counters, about 10 s idle
    python bench/counter_fit.py --quick --json        # 3 counters
    python bench/counter_fit.py --exhaustive          # and the unpruned search beside it
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

import crawlpace.policy._rampup_counter as fit_module
import crawlpace.policy._rampup_episode as episode_module
from crawlpace import Settings, Throttler
from crawlpace.sim._limits import RequestRate
from crawlpace.testing import MockClock

URL = "https://site.example/page"
# (limit, period, start of its first period before the crawl, seconds, page latency)
CASES = [(100, 10.0, -2.8, 60.0, 0.003), (100, 10.0, -6.0, 30.0, 0.003), (30, 3.0, -1.7, 60.0, 0.04),
         (100, 10.0, -4.7, 30.0, 0.003), (100, 10.0, -1.1, 30.0, 0.003), (10, 1.0, 0.0, 120.0, 0.05),
         (100, 10.0, -2.8, 150.0, 0.05), (89, 2.8, -0.994, 20.0, 0.003)]


@dataclass
class Answer:
    status_code: int


async def crawl(counter: RequestRate, seconds: float, latency: float) -> tuple[int, int]:
    """Crawl one site for ``seconds`` of virtual time; the pages accepted and refused."""
    clock = MockClock(autojump=True)
    rng = random.Random(1)
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True},
                                     "CONCURRENT_REQUESTS": 64})
    accepted = refused = 0
    async with Throttler(settings, clock=clock, rng=random.Random(1)) as throttler:

        async def worker() -> None:
            nonlocal accepted, refused
            while clock.now() < seconds:
                async with throttler.slot(URL) as permit:
                    if clock.now() >= seconds:
                        permit.feedback(status=200, latency=0.0)
                        break
                    answer = Answer(200 if counter.take(clock.now()) else 429)
                    took = latency * rng.uniform(0.9, 1.1) if answer.status_code == 200 else 0.001
                    await clock.sleep(took)
                    accepted += answer.status_code == 200
                    refused += answer.status_code != 200
                    permit.feedback(answer, latency=took)

        await asyncio.gather(*(worker() for _ in range(16)))
    return accepted, refused


def exhaustive(sends: list[tuple[float, bool]], cycle: float, complete: bool) -> tuple[float, float] | None:
    """The grid search without pruning or budget: the lowest and highest rate of the counters that fit."""
    record = fit_module._Record(sends, complete)
    record.scans = -(10**9)
    ratio = 2.0 ** (1.0 / fit_module._STEPS_PER_DOUBLING)
    period, rates = cycle / 2.0, []
    while period <= 12.0 * cycle:
        for step in range(fit_module.PHASES):
            start = sends[0][0] - (step + 0.5) * period / fit_module.PHASES
            if record.scan(period, start, fit_module._COARSE) is None:
                continue
            for u in (-1, 0, 1):
                fine = period * ratio ** (u / 3)
                for v in (-1, 0, 1):
                    limit = record.scan(fine, start + v * fine / (fit_module.PHASES * 3), fit_module._FINE)
                    if limit is not None:
                        rates.append(limit / fine)
        period *= ratio
    return (min(rates), max(rates)) if rates else None


def timed(call: Any, repeats: int) -> tuple[float, Any]:
    """The best CPU time of ``repeats`` calls, in ms, and the result."""
    best, out = math.inf, None
    for _ in range(repeats):
        began = time.process_time()
        out = call()
        best = min(best, time.process_time() - began)
    return best * 1000.0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the first 3 counters only")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--repeats", type=int, default=5, help="timings of each fit (the best is kept)")
    parser.add_argument("--exhaustive", action="store_true", help="time the unpruned search too")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give 1 or more")
    calls: list[tuple[list[tuple[float, bool]], float, dict[str, Any]]] = []
    original = fit_module.fit_counter

    def recorded(sends: list[tuple[float, bool]], cycle: float, **kwargs: Any) -> Any:
        calls.append((list(sends), cycle, kwargs))
        return original(sends, cycle, **kwargs)

    episode_module.fit_counter = recorded  # type: ignore[attr-defined]  # (the episode rules call it so)
    rows, every, slow = [], [], []
    for limit, period, start, seconds, latency in CASES[:3] if args.quick else CASES:
        calls.clear()
        counter = RequestRate(limit, period, (-start % period) / period)  # the first send at 0 s
        accepted, refused = asyncio.run(crawl(counter, seconds, latency))
        times, given, same = [], 0, 0
        for sends, cycle, kwargs in calls:
            ms, fit = timed(lambda: original(sends, cycle, **kwargs), args.repeats)  # noqa: B023
            times.append(ms)
            given += fit is not None
            if args.exhaustive:
                slow_ms, full = timed(lambda: exhaustive(sends, cycle, kwargs.get("complete", True)), 1)  # noqa: B023
                slow.append(slow_ms)
                same += fit is None or (fit.low.rate, fit.high) == full
        every += times
        row = {"counter": f"{limit}/{period:g}s start {start:g}s, {seconds:g}s, {latency * 1000:g} ms",
               "share": round(accepted / seconds / (limit / period), 3), "refused": refused,
               "fits": len(calls), "given": given,
               "median_ms": round(statistics.median(times), 2) if times else 0.0,
               "worst_ms": round(max(times), 2) if times else 0.0}
        if args.exhaustive:
            row["same_as_exhaustive"] = same
        rows.append(row)
        print(" | ".join(f"{key} {value}" for key, value in row.items()), flush=True)
    summary: dict[str, Any] = {"fits": len(every), "median_ms": round(statistics.median(every), 2),
                               "worst_ms": round(max(every), 2)}
    if slow:
        summary |= {"exhaustive_median_ms": round(statistics.median(slow), 1),
                    "exhaustive_worst_ms": round(max(slow), 1)}
    print("all: " + " | ".join(f"{key} {value}" for key, value in summary.items()))
    if args.json:
        print(json.dumps({"cases": rows, **summary}))


if __name__ == "__main__":
    main()
