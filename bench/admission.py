"""Admission throughput and per-scope memory of crawlpace, next to three peer libraries.

Run it as ``python bench/admission.py`` (add ``--quick`` for a run under a minute and
``--json`` for a machine-readable last line).

Part 1 counts uncontended acquire+release pairs per second for one scope that never
says no (no delay, no jitter, a huge concurrency), so what is timed is the fixed cost
of asking "may I send?" and saying "done". Each contender runs ``N`` iterations in a
tight loop; all contenders take turns (round-robin, with the starting contender
rotated every round) for ``R`` rounds, and the median rate is reported. No peer has
crawlpace's model (slots that are held, then given back, per scope), so each is asked
for its nearest equivalent:

* crawlpace (a) ``async with throttler.slot(scopes="bench")``, (b) ``try_acquire`` then
  ``release`` on the permit, (c) ``async with throttler.slot(url)`` where the scope is
  the URL's host, found by the default throttling manager.
* aiolimiter: ``async with limiter`` on an ``AsyncLimiter`` with a huge rate. It is a
  leaky bucket with nothing to give back, so entering the block is the whole cost.
* limits: ``hit()`` of a moving-window limiter over the in-memory storage (async and
  sync APIs). A hit records one timestamp per request and nothing is released. The
  moving window inserts each timestamp at the front of a list, so a hit costs more
  the more hits the window holds; the main rows keep the window at most
  ``LIMITS_WINDOW`` entries (the storage is reset after every such batch, inside the
  timed region), the supplementary "grows" row lets it fill up to ``N``. The fixed
  window (a counter per key) is timed as a supplementary row.
* pyrate-limiter (4.x): ``try_acquire`` (sync) and ``try_acquire_async`` on a
  ``Limiter`` over its default in-memory log bucket with a huge rate; the bucket is
  flushed before each round (outside the timed region) so rounds start alike. Its
  constant-state token bucket is a supplementary row.

Part 2 measures memory per idle scope: one admission for each of ``S`` distinct
names, with limits that keep every scope's state alive afterwards (a one-second
delay for crawlpace; one-second windows for the peers), measured as the tracemalloc
difference between a snapshot before and one after, divided by ``S``. The names
are created inside the measured region, so a key a library keeps counts against it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Protocol

import limits
import limits.aio.storage
import limits.aio.strategies
import limits.storage
import limits.strategies
from aiolimiter import AsyncLimiter
from pyrate_limiter import (
    AbstractBucket,
    BucketFactory,
    Duration,
    InMemoryBucket,
    Limiter,
    MonotonicClock,
    Rate,
    RateItem,
    StateBucket,
    TokenBucket,
)

from crawlpace import Jitter, NotReady, ScopeConfig, Settings, Throttler
from crawlpace.stores.memory import MemoryStore

HUGE = 10**9
SCOPE = "bench"
URL = "https://example.com/page"
# Most entries the limits moving window may hold in the main rows (see the docstring).
LIMITS_WINDOW = 1_000
# The project's stated target for crawlpace (a), in pairs per second.
GOAL = 250_000

Timed = Callable[[int], Awaitable[float]]


@dataclass
class Contender:
    """One way of doing an acquire+release pair, timed over ``n`` iterations."""

    key: str
    label: str
    run: Timed
    supplementary: bool = False
    rates: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


# -- part 1: throughput ---------------------------------------------------------


def bench_settings() -> Settings:
    """Settings under which the single scope never makes anyone wait."""
    return Settings(
        concurrent_requests=HUGE,
        scope_defaults=ScopeConfig(concurrency=HUGE, delay=0.0, delay_per_slot=0.0, jitter=Jitter()),
    )


def crawlpace_contenders(throttler: Throttler) -> list[Contender]:
    async def slot_scopes(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            async with throttler.slot(scopes=SCOPE):
                pass
        return time.perf_counter() - start

    async def try_release(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            permit = await throttler.try_acquire(scopes=SCOPE)
            if isinstance(permit, NotReady):
                raise RuntimeError(f"crawlpace refused an uncontended permit: {permit}")
            await permit.release()
        return time.perf_counter() - start

    async def slot_url(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            async with throttler.slot(URL):
                pass
        return time.perf_counter() - start

    return [
        Contender("crawlpace_slot", "crawlpace (a) slot(scopes=...)", slot_scopes),
        Contender("crawlpace_try_release", "crawlpace (b) try_acquire+release", try_release),
        Contender("crawlpace_slot_url", "crawlpace (c) slot(url)", slot_url),
    ]


def aiolimiter_contenders() -> list[Contender]:
    limiter = AsyncLimiter(max_rate=HUGE, time_period=1)

    async def enter(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            async with limiter:
                pass
        return time.perf_counter() - start

    return [Contender("aiolimiter", "aiolimiter async with", enter)]


def limits_contenders() -> list[Contender]:
    item = limits.RateLimitItemPerSecond(HUGE)
    astore = limits.aio.storage.MemoryStorage()
    amoving = limits.aio.strategies.MovingWindowRateLimiter(astore)
    afixed = limits.aio.strategies.FixedWindowRateLimiter(astore)
    sstore = limits.storage.MemoryStorage()
    smoving = limits.strategies.MovingWindowRateLimiter(sstore)

    async def aio_moving(n: int) -> float:
        await astore.reset()
        start = time.perf_counter()
        done = 0
        while done < n:
            batch = min(LIMITS_WINDOW, n - done)
            for _ in range(batch):
                if not await amoving.hit(item, SCOPE):
                    raise RuntimeError("limits refused a hit under a huge limit")
            await astore.reset()
            done += batch
        return time.perf_counter() - start

    async def aio_moving_grows(n: int) -> float:
        await astore.reset()
        start = time.perf_counter()
        for _ in range(n):
            if not await amoving.hit(item, SCOPE):
                raise RuntimeError("limits refused a hit under a huge limit")
        elapsed = time.perf_counter() - start
        await astore.reset()
        return elapsed

    async def aio_fixed(n: int) -> float:
        await astore.reset()
        start = time.perf_counter()
        for _ in range(n):
            if not await afixed.hit(item, SCOPE):
                raise RuntimeError("limits refused a hit under a huge limit")
        return time.perf_counter() - start

    async def sync_moving(n: int) -> float:
        sstore.reset()
        start = time.perf_counter()
        done = 0
        while done < n:
            batch = min(LIMITS_WINDOW, n - done)
            for _ in range(batch):
                if not smoving.hit(item, SCOPE):
                    raise RuntimeError("limits refused a hit under a huge limit")
            sstore.reset()
            done += batch
        return time.perf_counter() - start

    return [
        Contender("limits_aio_moving", f"limits aio moving window (<= {LIMITS_WINDOW:,} held)",
                  aio_moving),
        Contender("limits_sync_moving", f"limits sync moving window (<= {LIMITS_WINDOW:,} held)",
                  sync_moving),
        Contender("limits_aio_fixed", "limits aio fixed window", aio_fixed, supplementary=True),
        Contender("limits_aio_moving_grows", "limits aio moving window (grows to N)", aio_moving_grows,
                  supplementary=True),
    ]


def pyrate_contenders() -> tuple[list[Contender], list[Limiter]]:
    log_bucket = InMemoryBucket([Rate(HUGE, Duration.SECOND)])
    log_limiter = Limiter(log_bucket)
    state_bucket = StateBucket([Rate(HUGE, Duration.SECOND)], algorithm=TokenBucket())
    state_limiter = Limiter(state_bucket)

    async def sync_log(n: int) -> float:
        log_bucket.flush()
        start = time.perf_counter()
        for _ in range(n):
            if not log_limiter.try_acquire(SCOPE):
                raise RuntimeError("pyrate-limiter refused an item under a huge rate")
        return time.perf_counter() - start

    async def async_log(n: int) -> float:
        log_bucket.flush()
        start = time.perf_counter()
        for _ in range(n):
            if not await log_limiter.try_acquire_async(SCOPE):
                raise RuntimeError("pyrate-limiter refused an item under a huge rate")
        return time.perf_counter() - start

    async def sync_state(n: int) -> float:
        state_bucket.flush()
        start = time.perf_counter()
        for _ in range(n):
            if not state_limiter.try_acquire(SCOPE):
                raise RuntimeError("pyrate-limiter refused an item under a huge rate")
        return time.perf_counter() - start

    contenders = [
        Contender("pyrate_sync", "pyrate-limiter try_acquire", sync_log),
        Contender("pyrate_async", "pyrate-limiter try_acquire_async", async_log),
        Contender("pyrate_token_sync", "pyrate-limiter token bucket try_acquire", sync_state,
                  supplementary=True),
    ]
    return contenders, [log_limiter, state_limiter]


async def settle() -> None:
    """Let background work of the previous contender finish, then collect garbage."""
    await asyncio.sleep(0.005)
    gc.collect()


async def run_throughput(iterations: int, repeats: int, progress: bool) -> list[Contender]:
    throttler = Throttler(bench_settings())
    pyrate, pyrate_limiters = pyrate_contenders()
    everyone = [*crawlpace_contenders(throttler), *aiolimiter_contenders(), *limits_contenders(), *pyrate]
    order = sorted(everyone, key=lambda c: c.supplementary)
    try:
        warm = min(iterations, 20_000)
        for contender in order:
            await settle()
            await contender.run(warm)
        for round_no in range(repeats):
            shift = round_no % len(everyone)
            for contender in everyone[shift:] + everyone[:shift]:
                await settle()
                elapsed = await contender.run(iterations)
                contender.rates.append(iterations / elapsed)
            if progress:
                print(f"  round {round_no + 1}/{repeats} done", file=sys.stderr, flush=True)
    finally:
        await throttler.aclose()
        for limiter in pyrate_limiters:
            limiter.close()
    return order


# -- part 2: memory per idle scope ---------------------------------------------


class MemoryProbe(Protocol):
    """One library's way of keeping state for many keys."""

    async def setup(self) -> None:
        """Build the limiter and admit one warm-up key (one-time allocations go here)."""

    async def admit_all(self, names: int) -> int:
        """Admit one request for each of ``names`` new keys; return how many keys are held."""

    async def close(self) -> None:
        """Drop the limiter and stop its background work."""


async def held_bytes(probe: MemoryProbe, names: int) -> tuple[float, int]:
    """Bytes retained by ``probe.admit_all(names)`` (a tracemalloc snapshot diff)."""
    gc.collect()
    tracemalloc.start()
    try:
        await probe.setup()
        gc.collect()
        before = tracemalloc.take_snapshot()
        held = await probe.admit_all(names)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
        await probe.close()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return grown, held


class CrawlpaceProbe:
    def __init__(self) -> None:
        self.throttler: Throttler | None = None

    async def setup(self) -> None:
        # The default scope config (1 slot, 1 s delay, 1 s per slot) minus jitter: a scope
        # admitted once stays non-idle for a second, so the store's sweep cannot drop it.
        self.throttler = Throttler(Settings(scope_defaults=ScopeConfig(jitter=Jitter())))
        async with self.throttler.slot(scopes="warm-up"):
            pass

    async def admit_all(self, names: int) -> int:
        assert self.throttler is not None
        for i in range(names):
            async with self.throttler.slot(scopes=f"s{i}"):
                pass
        store = self.throttler.store
        assert isinstance(store, MemoryStore)
        return len(store) - 1

    async def close(self) -> None:
        if self.throttler is not None:
            await self.throttler.aclose()


class LimitsAioProbe:
    def __init__(self, moving: bool) -> None:
        self.moving = moving
        self.item = limits.RateLimitItemPerSecond(HUGE)
        self.store = limits.aio.storage.MemoryStorage()
        self.limiter: limits.aio.strategies.RateLimiter = (
            limits.aio.strategies.MovingWindowRateLimiter(self.store) if moving
            else limits.aio.strategies.FixedWindowRateLimiter(self.store))

    async def setup(self) -> None:
        await self.limiter.hit(self.item, "warm-up")

    async def admit_all(self, names: int) -> int:
        for i in range(names):
            if not await self.limiter.hit(self.item, f"s{i}"):
                raise RuntimeError("limits refused a hit under a huge limit")
        return (len(self.store.events) if self.moving else len(self.store.storage)) - 1

    async def close(self) -> None:
        await self.store.reset()
        await settle()  # let the storage's expiry task run out


class LimitsSyncProbe:
    def __init__(self) -> None:
        self.item = limits.RateLimitItemPerSecond(HUGE)
        self.store = limits.storage.MemoryStorage()
        self.limiter = limits.strategies.MovingWindowRateLimiter(self.store)

    async def setup(self) -> None:
        self.limiter.hit(self.item, "warm-up")

    async def admit_all(self, names: int) -> int:
        for i in range(names):
            if not self.limiter.hit(self.item, f"s{i}"):
                raise RuntimeError("limits refused a hit under a huge limit")
        return len(self.store.events) - 1

    async def close(self) -> None:
        self.store.reset()


class BucketPerName(BucketFactory):
    """A pyrate-limiter factory keeping one bucket per item name (per-key limits)."""

    def __init__(self, make: Callable[[], AbstractBucket]) -> None:
        self._make = make
        self._clock = MonotonicClock()
        self.by_name: dict[str, AbstractBucket] = {}

    def wrap_item(self, name: str, weight: int = 1) -> RateItem:
        return RateItem(name, self._clock.now(), weight=weight)

    def get(self, item: RateItem) -> AbstractBucket:
        bucket = self.by_name.get(item.name)
        if bucket is None:
            bucket = self.by_name[item.name] = self._make()
            self.schedule_leak(bucket)
        return bucket


class PyrateProbe:
    def __init__(self, token: bool) -> None:
        self.token = token
        self.rates = [Rate(HUGE, Duration.SECOND)]
        self.factory = BucketPerName(self.make)
        self.limiter: Limiter | None = None

    def make(self) -> AbstractBucket:
        if self.token:
            return StateBucket(self.rates, algorithm=TokenBucket())
        return InMemoryBucket(self.rates)

    async def setup(self) -> None:
        self.limiter = Limiter(self.factory)
        self.limiter.try_acquire("warm-up")

    async def admit_all(self, names: int) -> int:
        assert self.limiter is not None
        for i in range(names):
            if not self.limiter.try_acquire(f"s{i}"):
                raise RuntimeError("pyrate-limiter refused an item under a huge rate")
        return len(self.factory.by_name) - 1

    async def close(self) -> None:
        if self.limiter is not None:
            self.limiter.close()


@dataclass
class MemoryRow:
    key: str
    label: str
    bytes_total: float
    held: int

    def per_scope(self, scopes: int) -> float:
        return self.bytes_total / scopes


async def run_memory(names: int) -> list[MemoryRow]:
    probes: list[tuple[str, str, MemoryProbe]] = [
        ("crawlpace", "crawlpace memory store", CrawlpaceProbe()),
        ("limits_aio_moving", "limits aio moving window", LimitsAioProbe(moving=True)),
        ("limits_sync_moving", "limits sync moving window", LimitsSyncProbe()),
        ("limits_aio_fixed", "limits aio fixed window", LimitsAioProbe(moving=False)),
        ("pyrate_log", "pyrate-limiter, InMemoryBucket per name", PyrateProbe(token=False)),
        ("pyrate_token", "pyrate-limiter, token StateBucket per name", PyrateProbe(token=True)),
    ]
    rows: list[MemoryRow] = []
    for key, label, probe in probes:
        total, held = await held_bytes(probe, names)
        rows.append(MemoryRow(key, label, total, held))
    return rows


# -- report -----------------------------------------------------------------------


def print_throughput(contenders: list[Contender]) -> dict[str, dict[str, float]]:
    base = contenders[0].median
    figures: dict[str, dict[str, float]] = {}
    print(f"{'contender':<46} {'median pairs/s':>15} {'crawlpace(a)/peer':>18} {'min..max':>22}")
    for contender in contenders:
        ratio = base / contender.median
        spread = f"{min(contender.rates):,.0f}..{max(contender.rates):,.0f}"
        mark = " *" if contender.supplementary else ""
        print(f"{contender.label + mark:<46} {contender.median:>15,.0f} {ratio:>18.2f} {spread:>22}")
        figures[contender.key] = {
            "median_pairs_per_s": round(contender.median),
            "ratio_crawlpace_a_over_this": round(ratio, 3),
            "min_pairs_per_s": round(min(contender.rates)),
            "max_pairs_per_s": round(max(contender.rates)),
            "supplementary": contender.supplementary,
        }
    print("  * supplementary row (not the nearest equivalent; see the module docstring)")
    return figures


def print_memory(rows: list[MemoryRow], scopes: int) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    print()
    print(f"memory held for {scopes:,} distinct idle scopes (tracemalloc snapshot diff)")
    print(f"{'store':<46} {'bytes/scope':>12} {'keys held':>10}")
    for row in rows:
        print(f"{row.label:<46} {row.per_scope(scopes):>12,.0f} {row.held:>10,}")
        figures[row.key] = {"bytes_per_scope": round(row.per_scope(scopes), 1), "keys_held": row.held}
    return figures


def peer_versions() -> dict[str, str]:
    return {name: version(name) for name in ("crawlpace", "aiolimiter", "limits", "pyrate-limiter")}


async def main_async(args: argparse.Namespace) -> None:
    iterations: int = args.iterations or (20_000 if args.quick else 100_000)
    repeats: int = args.repeats or (5 if args.quick else 15)
    scopes: int = args.scopes
    print(f"crawlpace admission benchmark: N={iterations:,} iterations, R={repeats} rounds, "
          f"Python {platform.python_version()}, {platform.machine()}")
    contenders = await run_throughput(iterations, repeats, progress=not args.json)
    throughput = print_throughput(contenders)
    memory = print_memory(await run_memory(scopes), scopes)
    goal = GOAL
    crawl = contenders[0].median
    # The stated goal: at least GOAL pairs/s, and ahead of limits and pyrate-limiter
    # (their nearest-equivalent rows, not the supplementary ones).
    ahead = {c.key: crawl > c.median for c in contenders
             if not c.supplementary and c.key.startswith(("limits", "pyrate"))}
    print()
    print(f"goal: crawlpace (a) >= {goal:,} pairs/s: {'met' if crawl >= goal else 'MISSED'} "
          f"({crawl:,.0f})")
    behind = [key for key, ok in ahead.items() if not ok]
    print("goal: crawlpace (a) ahead of limits and pyrate-limiter: "
          + ("met" if not behind else f"MISSED (behind {', '.join(behind)})"))
    if args.json:
        print(json.dumps({
            "benchmark": "admission",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "machine": platform.machine(),
            "versions": peer_versions(),
            "iterations": iterations,
            "repeats": repeats,
            "limits_window_cap": LIMITS_WINDOW,
            "throughput": throughput,
            "memory_scopes": scopes,
            "memory": memory,
            "goal_pairs_per_s": goal,
            "goal_rate_met": crawl >= goal,
            "goal_ahead_of": ahead,
            "goal_ahead_met": not behind,
        }, sort_keys=True))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer iterations and rounds (< 1 min)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--iterations", type=int, default=0, help="pairs per timed run (N)")
    parser.add_argument("--repeats", type=int, default=0, help="rounds over all contenders (R)")
    parser.add_argument("--scopes", type=int, default=10_000, help="distinct scopes for the memory test")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    main()
