"""What watching a throttler costs per request: plain, with a recorder, with a full monitor.

Run it as ``python bench/observe_overhead.py`` (``--quick`` for a run under a minute,
``--json`` for a machine-readable last line).

Each contender times ``N`` uncontended ``async with throttler.slot(url)`` blocks with
``permit.feedback(status=200)``, spread round-robin over ``S`` hosts whose limits
never say no (no delay, no jitter, a huge concurrency), so what is timed is the fixed
cost of one admission and one release, plus what the observers add:

* plain: a ``Throttler`` with nothing attached;
* recorder: a :class:`crawlpace.observe.Recorder` attached (the counters behind the
  metrics and the report: two calls per request);
* monitor: a :class:`crawlpace.observe.Monitor` with its metrics server on a free
  loopback port and its sampler reading the busiest 50 scopes every second (the
  default), so the sampling's share of the loop is counted too; nobody scrapes the
  endpoint during the run;
* monitor, 10 Hz: the same sampling ten times a second, to show what sampling costs.

Every contender has its own throttler on the memory store. They take turns for ``R``
rounds of short runs (the first contender rotated each round), so that a machine
loaded by other work slows every contender alike, and the median rate is reported,
with each ratio to plain.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from crawlpace import Jitter, ScopeConfig, Settings, Throttler
from crawlpace.observe import Monitor, MonitorOptions, Recorder

HUGE = 10**9


def settings() -> Settings:
    """Limits that never refuse: what is timed is the bookkeeping alone."""
    return Settings(concurrent_requests=HUGE, scope_defaults=ScopeConfig(
        concurrency=HUGE, delay=0.0, delay_per_slot=0.0, jitter=Jitter(0.0, 0.0)))


@dataclass
class Contender:
    key: str
    label: str
    throttler: Throttler
    rates: list[float] = field(default_factory=list)
    monitor: Monitor | None = None


def timer(contender: Contender, urls: list[str]) -> Callable[[int], Awaitable[float]]:
    throttler = contender.throttler

    async def run(n: int) -> float:
        count = len(urls)
        start = time.perf_counter()
        for index in range(n):
            async with throttler.slot(urls[index % count]) as permit:
                permit.feedback(status=200)
        return time.perf_counter() - start
    return run


async def main_async(args: argparse.Namespace) -> None:
    iterations = args.iterations or (5_000 if args.quick else 10_000)
    repeats = args.repeats or (15 if args.quick else 41)
    urls = [f"https://h{index}.example/page" for index in range(args.scopes)]
    plain = Contender("plain", "Throttler, nothing attached", Throttler(settings()))
    recorded = Contender("recorder", "Throttler + Recorder", Throttler(settings()))
    recorded.throttler.observe(Recorder())
    watched = Contender("monitor", "Throttler + Monitor (metrics server, sampling every 1 s)",
                        Throttler(settings()))
    watched.monitor = Monitor(watched.throttler, MonitorOptions(metrics_port=0, interval=1.0))
    busy = Contender("monitor_10hz", "Throttler + Monitor (sampling every 0.1 s)", Throttler(settings()))
    busy.monitor = Monitor(busy.throttler, MonitorOptions(metrics_port=0, interval=0.1))
    for contender in (watched, busy):
        assert contender.monitor is not None
        await contender.monitor.start()
    everyone = [plain, recorded, watched, busy]
    runs = {c.key: timer(c, urls) for c in everyone}
    try:
        for contender in everyone:
            await runs[contender.key](min(iterations, 20_000))
        for round_no in range(repeats):
            shift = round_no % len(everyone)
            for contender in everyone[shift:] + everyone[:shift]:
                await asyncio.sleep(0.005)
                gc.collect()
                contender.rates.append(iterations / await runs[contender.key](iterations))
            print(f"  round {round_no + 1}/{repeats} done", file=sys.stderr, flush=True)
    finally:
        for contender in everyone:
            if contender.monitor is not None:
                await contender.monitor.aclose()
            await contender.throttler.aclose()
    base = statistics.median(plain.rates)
    print(f"observe overhead: {iterations} slot()+feedback per run over {args.scopes} hosts, "
          f"median of {repeats} rounds; Python {platform.python_version()}")
    print(f"{'contender':<62} {'per second':>12} {'us/request':>11} {'vs plain':>9}")
    figures = {}
    for contender in everyone:
        rate = statistics.median(contender.rates)
        figures[contender.key] = {"per_second": round(rate), "us_per_request": round(1e6 / rate, 3),
                                  "vs_plain": round(rate / base, 3)}
        print(f"{contender.label:<62} {rate:>12,.0f} {1e6 / rate:>11.2f} {rate / base:>9.2f}")
    if args.json:
        print(json.dumps({"iterations": iterations, "repeats": repeats, "scopes": args.scopes,
                          "contenders": figures}, sort_keys=True))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer iterations and rounds (< 1 min)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--iterations", type=int, default=0, help="slot() blocks per timed run")
    parser.add_argument("--repeats", type=int, default=0, help="rounds over all contenders")
    parser.add_argument("--scopes", type=int, default=1000, help="distinct hosts cycled through")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main_async(parse_args()))
