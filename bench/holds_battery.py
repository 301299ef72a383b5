"""Retry-After holds on token buckets, on a fake clock: rampup's time to crawl a site against the oracle's.

Draws buckets as ``crawlpace sim random --kinds holds`` does (rate 0.5-30/s log-uniform, burst 1-10,
a 429 demands 1-60 s of quiet, log-uniform), 12 per seed, and crawls each, as ``crawlpace crawl``
paces it (rampup on, 16 workers), until it has ``rate x --seconds`` pages. Answers take
``--latencies`` seconds (3 ms: the start doubles once a second; 50 ms: the start's window of one sends
at 20/s from the first answer). The oracle needs ``(pages - burst) / rate`` seconds.

Figures: the mean and 10th percentile of oracle time / crawl time (capped at 1.5), refusals and
holds (429s that started one) per bucket, the share of crawls that drew a second hold, the summed
crawl time over the summed oracle time, overall and by class (burst 1-2 or 3-10, hold under 8 s or
not), and beside it the same for the oracle's time plus one hold: the first hold is one no pacer
that knows nothing of the site avoids (it is the first sign of the limit), so that figure is the
floor the crawl time can come down to. Deterministic: the same code gives the same figures on any
load.

    python bench/holds_battery.py                 # seeds 1-40, 3 ms and 50 ms (about a minute idle)
    python bench/holds_battery.py --quick --json  # seeds 1-4, 3 ms
    python bench/holds_battery.py --lag 0.1       # each send reaches the site 0.1 s late on average

``--lag``: each send reaches the site an exponentially drawn time after the throttler let it go
(mean ``--lag`` seconds), as on a loaded machine or in a fleet of busy workers, so sends paced
evenly can arrive bunched; the lag is part of the answer's latency. A fleet of 8 on a loaded machine
crawled a 5.62/s bucket of 2 with 2 s holds (r1:holds23 of seed 506584913) in 159 s where one
process took 47 s; this crawl gives 45 s without lag, and 87, 107 and 182 s (20-45 holds) at a mean
lag of 0.1, 0.2 and 0.3 s (bench/results/holds19.md).

Before and after a change, crawl by crawl (the battery is deterministic, so two trees' runs pair up):

    PYTHONPATH=/tmp/base/src python bench/holds_battery.py --rows /tmp/base.json
    python bench/holds_battery.py --rows /tmp/new.json --against /tmp/base.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import Pool
from typing import Protocol

from crawlpace import Settings, Throttler
from crawlpace.sim._limits import Embargo, TokenBucket
from crawlpace.testing import MockClock

URL = "https://site.example/page"


@dataclass
class Answer:
    status_code: int
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class HeldBucket:
    """A token bucket whose refusal demands ``hold`` seconds of quiet; sends inside it are refused."""

    rate: float
    burst: float
    hold: int
    bucket: TokenBucket = field(init=False)
    embargo: Embargo = field(default_factory=Embargo)
    holds: int = 0  # refusals that started a hold (the others came inside one)

    def __post_init__(self) -> None:
        self.bucket = TokenBucket(self.rate, self.burst)

    def arrive(self, now: float) -> Answer:
        if self.embargo.remaining(now) > 0.0:
            return Answer(429, {"Retry-After": str(math.ceil(self.embargo.remaining(now)))})
        if self.bucket.take(now) == 0.0:
            return Answer(200)
        self.embargo.extend(now, self.hold)
        self.holds += 1
        return Answer(429, {"Retry-After": str(self.hold)})


class Answered(Protocol):
    @property
    def status_code(self) -> int: ...


class Site(Protocol):
    """A site model: pure bookkeeping on the times it is handed."""

    def arrive(self, now: float) -> Answered: ...


async def crawl_site(site: Site, pages: int, latency: float, *, workers: int = 16, cap: float = 600.0,
                     seed: int = 1, count_work: bool = True, robots: bool = False,
                     refusals_at_once: bool = False,
                     stop_when_all_out: bool = False, lag: float = 0.0) -> tuple[float, int, int]:
    """Crawl ``site`` until ``pages`` are accepted (or ``cap`` virtual seconds), as ``crawlpace crawl``
    paces it (rampup on, ``workers`` workers); (seconds, requests sent, refusals).

    ``count_work``: the throttler is told the pages left, as ``crawlpace crawl``'s queue tells it.
    ``robots``: robots.txt is fetched first (answered in ``latency``, counted by no limiter).
    ``refusals_at_once``: an answer other than 200 comes in a millisecond (else in ``latency``).
    ``stop_when_all_out``: a worker stops once the pages accepted and out make ``pages`` (the crawl's
    queue is empty; a refused page is sent again by a worker still running), else once they are
    accepted. ``seed``: of the answers' times and the throttler's jitter. ``lag``: the mean of an
    exponential delay between a send and its arrival at the site (0: none; drawn from its own
    generator, so the crawl without lag is the one before the option)."""
    clock = MockClock(autojump=True)
    rng = random.Random(seed)
    lags = random.Random(seed + 1)
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True},
                                     "CONCURRENT_REQUESTS": 64})
    accepted = refused = sent = out = 0
    done_at = cap
    async with Throttler(settings, clock=clock, rng=random.Random(seed)) as throttler:
        if count_work and hasattr(throttler, "count_work"):  # (an older tree, run with --against, has none)
            # As the crawl's queue counts them: the pages not yet sent (those out are not counted).
            throttler.count_work(lambda _scope: (max(0, pages - accepted - out), False))
        if robots:
            async with throttler.slot("https://site.example/robots.txt") as permit:
                await clock.sleep(latency)
                permit.feedback(Answer(200), latency=latency)

        async def worker() -> None:
            nonlocal accepted, refused, done_at, out, sent
            while (accepted + out if stop_when_all_out else accepted) < pages and clock.now() < cap:
                async with throttler.slot(URL) as permit:
                    out += 1
                    if accepted >= pages or clock.now() >= cap:
                        out -= 1
                        permit.feedback(status=200, latency=0.0)
                        break
                    sent += 1
                    late = lags.expovariate(1.0 / lag) if lag > 0.0 else 0.0
                    if late > 0.0:
                        await clock.sleep(late)
                    answer = site.arrive(clock.now())
                    base = 0.001 if refusals_at_once and answer.status_code != 200 else latency
                    took = base * rng.uniform(0.9, 1.1)
                    await clock.sleep(took)
                    took += late
                    out -= 1
                    if answer.status_code == 200:
                        accepted += 1
                        if accepted == pages:
                            done_at = clock.now()
                    else:
                        refused += 1
                    permit.feedback(answer, latency=took)

        await asyncio.gather(*(worker() for _ in range(workers)))
    return done_at, sent, refused


async def crawl_pages(site: HeldBucket, pages: int, latency: float, *, workers: int = 16,
                      cap: float = 600.0, count_work: bool = True, lag: float = 0.0) -> tuple[float, int]:
    """Crawl ``site`` until ``pages`` are accepted (or ``cap`` virtual seconds); (seconds, refusals).

    ``count_work``: the throttler is told the pages left, as ``crawlpace crawl``'s queue tells it.
    ``lag``: the mean delay of a send on its way to the site (:func:`crawl_site`)."""
    took, _, refused = await crawl_site(site, pages, latency, workers=workers, cap=cap,
                                        count_work=count_work, lag=lag)
    return took, refused


def draw(seed: int, count: int = 12) -> list[tuple[float, int, int]]:
    """``count`` buckets (rate, burst, hold) drawn as the random farm's ``holds`` kind draws them."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        rate = round(math.exp(rng.uniform(math.log(0.5), math.log(30.0))), 2)
        burst = rng.randint(1, 10)
        hold = round(math.exp(rng.uniform(0.0, math.log(60.0))))
        out.append((rate, burst, hold))
    return out


def one(job: tuple[float, int, int, float, float, bool, float]) -> dict[str, float]:
    """Crawl one bucket; its figures."""
    rate, burst, hold, latency, seconds, count_work, lag = job
    pages = max(5, round(rate * seconds))
    site = HeldBucket(rate, float(burst), hold)
    took, refused = asyncio.run(crawl_pages(site, pages, latency, count_work=count_work, lag=lag))
    oracle = max(0.0, pages - burst) / rate + latency
    return {"rate": rate, "burst": burst, "hold": hold, "latency": latency, "seconds": took,
            "oracle": oracle, "refused": refused, "holds": site.holds, "share": min(1.5, oracle / took)}


def summary(rows: list[dict[str, float]]) -> dict[str, float]:
    """Mean and p10 share, refusals and holds per bucket, the share of crawls with a second hold,
    summed time over the oracle's, and the oracle's time plus one hold over the oracle's."""
    shares = sorted(r["share"] for r in rows)
    oracle = sum(r["oracle"] for r in rows)
    return {"crawls": len(rows), "mean": round(statistics.mean(shares), 3),
            "p10": round(shares[len(shares) // 10], 3),
            "refused": round(statistics.mean(r["refused"] for r in rows), 2),
            "holds": round(statistics.mean(r["holds"] for r in rows), 2),
            "second_hold": round(sum(1 for r in rows if r["holds"] >= 2) / len(rows), 3),
            "time_x_oracle": round(sum(r["seconds"] for r in rows) / oracle, 3),
            "one_hold_x_oracle": round(sum(r["oracle"] + r["hold"] for r in rows) / oracle, 3)}


CLASSES: dict[str, Callable[[dict[str, float]], bool]] = {
    "burst 1-2, hold < 8 s": lambda r: r["burst"] <= 2 and r["hold"] < 8,
    "burst 1-2, hold >= 8 s": lambda r: r["burst"] <= 2 and r["hold"] >= 8,
    "burst 3-10, hold < 8 s": lambda r: r["burst"] > 2 and r["hold"] < 8,
    "burst 3-10, hold >= 8 s": lambda r: r["burst"] > 2 and r["hold"] >= 8,
}


def _key(row: dict[str, float]) -> tuple[float, float, float, float]:
    return row["rate"], row["burst"], row["hold"], row["latency"]


def against(rows: list[dict[str, float]], before: list[dict[str, float]], shown: int = 6) -> list[str]:
    """Lines comparing ``rows`` with ``before`` (the same jobs, an earlier tree), crawl by crawl: how many
    are faster or slower by over half a second, the seconds gained and lost per class and answer time,
    and the largest changes each way."""
    pairs = [(b, r) for b, r in zip(before, rows, strict=True) if _key(b) == _key(r)]
    if len(pairs) != len(rows):
        return [f"--against: {len(rows) - len(pairs)} of {len(rows)} crawls differ in their bucket"]
    change = [r["seconds"] - b["seconds"] for b, r in pairs]
    oracle = sum(b["oracle"] for b, _ in pairs)
    times = sum(b["seconds"] for b, _ in pairs) / oracle, sum(r["seconds"] for _, r in pairs) / oracle
    out = [f"against {len(pairs)} crawls: {sum(d < -0.5 for d in change)} faster, "
           f"{sum(d > 0.5 for d in change)} slower (by 0.5 s or more); time x oracle "
           f"{times[0]:.3f} -> {times[1]:.3f}",
           "| class | answers | seconds gained | seconds lost | holds before -> after |",
           "|---|--:|--:|--:|--:|"]
    for name, test in CLASSES.items():
        for latency in sorted({b["latency"] for b, _ in pairs}):
            chosen = [(b, r, d) for (b, r), d in zip(pairs, change, strict=True)
                      if test(b) and b["latency"] == latency]
            if chosen:
                gained = sum(max(0.0, -d) for _, _, d in chosen)
                lost = sum(max(0.0, d) for _, _, d in chosen)
                held = (f"{sum(b['holds'] for b, _, _ in chosen):g} -> "
                        f"{sum(r['holds'] for _, r, _ in chosen):g}")
                out.append(f"| {name} | {latency:g} s | {gained:.0f} | {lost:.0f} | {held} |")
    ranked = sorted(zip(change, pairs, strict=True), key=lambda x: x[0])
    for d, (b, r) in ranked[:shown] + ranked[-shown:]:
        if abs(d) > 0.5:
            out.append(f"  {b['rate']:g}/s burst {b['burst']:g}, {b['hold']:g} s holds, {b['latency']:g} s "
                       f"answers: {b['seconds']:.1f} -> {r['seconds']:.1f} s (oracle {b['oracle']:.1f}), "
                       f"holds {b['holds']:g} -> {r['holds']:g}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="seeds 1-4, 3 ms answers only")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--seeds", default="1-40",
                        help="seeds of 12 buckets each, 'A-B' or 'A,B,C' (default 1-40)")
    parser.add_argument("--latencies", default="0.003,0.05",
                        help="answer times in seconds (default 0.003,0.05)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="pages per bucket: rate x this (default 20)")
    parser.add_argument("--processes", type=int, default=2, help="crawls run in parallel (default 2)")
    parser.add_argument("--lag", type=float, default=0.0,
                        help="mean seconds a send takes to reach the site, drawn per send (default 0)")
    parser.add_argument("--no-count", action="store_true",
                        help="do not tell the throttler the pages left (as a crawl without a queue)")
    parser.add_argument("--rows", help="write every crawl's figures to this JSON file")
    parser.add_argument("--against", help="a --rows file of the same jobs (another tree): compare crawl "
                        "by crawl")
    args = parser.parse_args(argv)
    if "-" in args.seeds:
        first, last = (int(x) for x in args.seeds.split("-"))
        seeds = list(range(first, last + 1))
    else:
        seeds = [int(x) for x in args.seeds.split(",")]
    latencies = [float(x) for x in args.latencies.split(",")]
    if args.quick:
        seeds, latencies = seeds[:4], latencies[:1]
    jobs = [(rate, burst, hold, latency, args.seconds, not args.no_count, args.lag) for seed in seeds
            for rate, burst, hold in draw(seed) for latency in latencies]
    with Pool(max(1, args.processes)) as pool:
        rows = pool.map(one, jobs, chunksize=1)
    figures = {"all": summary(rows)}
    for name, test in CLASSES.items():
        chosen = [r for r in rows if test(r)]
        if chosen:
            figures[name] = summary(chosen)
    answers = ", ".join(f"{x:g}" for x in latencies)
    lagged = f", sends {args.lag:g} s late on average" if args.lag > 0.0 else ""
    print(f"holds battery: seeds {seeds[0]}-{seeds[-1]}, answers in {answers} s{lagged}")
    print("| class | crawls | mean | p10 | refusals | holds | second hold | time x oracle "
          "| one hold x oracle |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, f in figures.items():
        print(f"| {name} | {f['crawls']:g} | {f['mean']:.3f} | {f['p10']:.3f} | {f['refused']:.2f} | "
              f"{f['holds']:.2f} | {f['second_hold']:.2f} | {f['time_x_oracle']:.2f} | "
              f"{f['one_hold_x_oracle']:.2f} |")
    if args.rows:
        with open(args.rows, "w", encoding="utf-8") as handle:
            json.dump(rows, handle)
    if args.against:
        with open(args.against, encoding="utf-8") as handle:
            print("\n".join(against(rows, json.load(handle))))
    if args.json:
        print(json.dumps({"benchmark": "holds_battery", "seeds": seeds, "latencies": latencies,
                          "lag": args.lag, "figures": figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
