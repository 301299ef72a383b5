"""What one admission costs in Redis: crawlpace's shared store next to two Redis rate limiters.

Run it as ``python bench/redis_admission.py`` (about 8 minutes), ``--quick`` for a run
under a minute (three rounds of 1 s, without the supplementary contender), ``--json`` for
a machine-readable last line, ``--processes 1,2,4,8`` for other process counts. It
measures; it does not judge: the exit status is 0 whatever the figures, and the goals
that are missed are listed at the end.

A crawl that spreads over many workers pays for each request in trips to Redis and in
Redis CPU, and the one Redis server is what every worker shares. The goals (issue 21):
one round trip or less per admission (acquire and release together: a release rides with
the next call), per process at least twice as many admissions per second as a Redis rate
limiter manages checks, and no more Redis CPU per admission than such a check. The
contenders:

* **crawlpace**: ``RedisStore.acquire(((scope, 1.0),))`` then ``release(lease,
  Outcome(status=200, latency=0.01))``. Nothing ever blocks (no delay, no jitter, 1000
  slots per scope), so what is timed is the store's own work. Such a scope is a busy
  plain one, so the store keeps a local allotment of it (``stores/redis/_allot.py``, 0.7.0):
  a worker keeps the slots its requests used (each a lease in Redis, counted as held by
  every worker) and admits from them in the process; the first admission of a scope
  goes through the acquire script, and then every 50 ms of use one ``allot`` script
  call per scope and process sends the counts (sends, responses, latencies), renews
  the slots and checks the scope's policy version and limits. So most admissions are
  decided without Redis, and Redis sees one call per scope per 50 ms per process; a
  refusal or anything learned would go out at once (not in this bench: every answer
  is a 200). A scope with a delay, fewer than 4 slots, a quota or a learning policy
  (rampup, AutoThrottle) is admitted by the acquire script every time, as before.
* **crawlpace, scripts only** (supplementary): the same calls on a store opened with
  ``allot=0``, so every admission goes through the acquire script and every release
  through the release script, batched per process as above. This is what a scope with a
  delay, a quota or a learning policy costs per admission, since those never form an
  allotment.
* **crawlpace, no outcome** (supplementary): the same acquire, released with
  ``NO_OUTCOME``: no feedback, so no policy is written back. The difference with the
  row above is the price of the write-back path.
* **limits**: one ``hit()`` of ``limits.aio.strategies.MovingWindowRateLimiter`` over its
  async Redis storage (redis-py flavour), 10**9 per second: one Lua script per hit that
  pushes a timestamp on a list. The limit is far above the list's length, so the
  script's LINDEX looks past the end and stays O(1).
* **throttled-py**: one ``limit()`` of ``throttled.asyncio.Throttled`` with its token
  bucket over its async Redis store, 10**9 per second, non-blocking: one Lua script per
  check on a hash.

The peers only say "yes" or "no": nothing is held, nothing is given back, nothing is
learned from the answer. Each of their checks counts as one admission.

Is it like for like? Every contender runs the same T tasks per process, the same scopes in
the same order, the same warm-up, over a fresh client of its own on the same server, and
is timed the same way; each peer through its fastest asynchronous call (one script per
check). What one admission is differs, and in the peers' favour: a crawlpace admission
includes its release with an outcome (the lease given back, the response counted, the
latency averaged, the breaker's window fed), which a peer has no counterpart for. A
release is sent with the worker's next call, so the last T releases of a measurement (of
thousands of admissions) leave after its end: their cost is not counted, which is noise.
crawlpace's batching (the calls of a process's tasks share one script call) is the design
under test, not an artefact: a peer's calls of one process could be pipelined too, but
neither library does it. Round trips and server commands are counted the same way for
everyone (see below).

Each measurement runs P worker processes (P in ``--processes``; the workers are started
once, with a hidden ``--worker`` mode of this script, and the first P take part), each with
its own asyncio loop and a fresh client of the contender (new connections), whose T tasks
(``--tasks``, 8) admit requests back to back for D seconds (10 s, 1 s with ``--quick``).
Requests are spread round-robin over S scopes (``--scopes``, 100; each worker starts at
another one), so what is measured is the store, not one hot key. The server is flushed,
then each worker warms up (two passes over the scopes: scripts loaded, T connections
open, policies cached) before the timed part. A private redis-server is started on a
free port of 127.0.0.1 without persistence, and stopped at the end. Every run repeats
everything R = 3 times (``--repeats``), each round in another contender order, and reports
medians.

Figures, per contender and process count:

* admissions per second, summed over the processes and per process;
* **round trips** per admission, counted in the workers: every write of a command (or
  of a pipeline) on a redis-py asyncio connection is one round trip.
  ``INFO stats`` ``total_commands_processed`` cannot tell them apart from the commands
  a Lua script runs, which it counts too;
* server **commands** per admission (``total_commands_processed``, so including those
  run inside scripts) and, from ``INFO commandstats``, the EVALSHA calls per admission;
  for crawlpace also the policy write-backs (the release script's ``SET`` of the
  pickled policy) and the policy fetches (``GET``: another worker wrote the scope's
  policy since this one last saw it);
* **Redis CPU** per admission: ``used_cpu_user + used_cpu_sys`` of ``INFO cpu`` over the
  measurement, in microseconds; and the workers' own CPU per admission.
* the **limit check**, after the measurements, on every worker at once: each worker's
  T tasks admit on 2 scopes of 8 slots (so allotments form and the slots are contended)
  for up to 1 s, hold each slot 2 ms (a short request), and note the
  monotonic times between which they held it (``CLOCK_MONOTONIC`` is one clock for
  every process of the machine). The parent counts, per scope, the most slots held at
  once: it must not exceed 8. A release is noted before it is sent, so this count can
  only be below what Redis saw, never above, if the store keeps its limits.
* anything that went wrong: refusals (none are expected), calls that raised (counted as
  refusals, and the run goes on), and crawlpace's log warnings, tallied by message instead
  of printed, among them the outcomes whose write-back lost the race to other workers so
  many times that crawlpace gave up on sharing them ("lost").

Mind the machine: with fewer cores than worker processes plus Redis, the processes share
cores with each other and with the server, and the totals stop growing.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import logging
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, cast

import limits
import limits.aio.storage
import limits.aio.strategies
import redis
import redis.asyncio.connection
import throttled.asyncio

from crawlpace import Settings
from crawlpace._clock import AsyncioClock
from crawlpace.stores import Store, open_store
from crawlpace.stores.base import NO_OUTCOME, Lease, Outcome

if TYPE_CHECKING:
    from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
HUGE = 10**9
NAMESPACE = "bench"
OK = Outcome(status=200, latency=0.01)
# Passes over every scope each worker makes before the timed part.
WARMUP_PASSES = 2
# The limit check: scopes and slots per scope (few: every worker's tasks contend for them).
CHECK_SCOPES, CHECK_SLOTS = 2, 8
# The limit check: seconds each slot is held (a short request: holds of several processes overlap).
CHECK_HOLD = 0.002


# -- the contenders, as run inside a worker ----------------------------------------


class Admitter(Protocol):
    """One contender's way of admitting a request, set up in a worker process.

    ``errors`` counts the admissions that raised (and were counted as refused).
    """

    errors: int

    async def admit(self, scope: str) -> bool:
        """Admit one request to ``scope``; False if it was refused."""

    async def aclose(self) -> None:
        """Close the connections."""


def bench_settings(slots: int = 1000) -> Settings:
    """Settings without delays, ``slots`` per scope (1000: no scope ever makes a request wait)."""
    return Settings.from_scrapy({
        "DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0, "RANDOMIZE_DOWNLOAD_DELAY": False,
        "CONCURRENT_REQUESTS_PER_DOMAIN": slots, "CONCURRENT_REQUESTS": 100_000,
    })


class CrawlpaceAdmitter:
    def __init__(self, url: str, outcome: Outcome, slots: int = 1000, options: str = "") -> None:
        self.store: Store = open_store(f"{url}?namespace={NAMESPACE}{options}", bench_settings(slots),
                                       AsyncioClock(), random.Random(1))
        self.outcome = outcome
        self.errors = 0
        #: With ``hold``: each admission's scope and the monotonic times it was held between (the check).
        self.hold = False
        self.held: list[tuple[str, float, float]] = []

    async def admit(self, scope: str) -> bool:
        try:
            lease = await self.store.acquire(((scope, 1.0),))
        except ValueError:
            # crawlpace 0.4.0 stores send times rounded to 0.1 ms (Lua's tostring), so a scope
            # can look busy until a moment the reply then rounds to "now", and acquire fails
            # on an empty max(). Counted and reported, not hidden.
            self.errors += 1
            return False
        if not isinstance(lease, Lease):
            return False
        if self.hold:  # the limit check: hold the slot over turns of the loop, and note when
            began = time.monotonic()
            await asyncio.sleep(CHECK_HOLD)
            self.held.append((scope, began, time.monotonic()))
        await self.store.release(lease, self.outcome)
        return True

    async def aclose(self) -> None:
        await self.store.aclose()


class LimitsAdmitter:
    def __init__(self, url: str) -> None:
        self.storage = limits.aio.storage.RedisStorage(f"async+{url}", implementation="redispy")
        self.limiter = limits.aio.strategies.MovingWindowRateLimiter(self.storage)
        self.item = limits.RateLimitItemPerSecond(HUGE)
        self.errors = 0

    async def admit(self, scope: str) -> bool:
        return bool(await self.limiter.hit(self.item, scope))

    async def aclose(self) -> None:
        bridge: Any = self.storage.bridge  # the redis-py flavour holds one client
        await bridge.get_connection().aclose()


class ThrottledAdmitter:
    def __init__(self, url: str) -> None:
        self.store = throttled.asyncio.RedisStore(server=url)
        self.throttle = throttled.asyncio.Throttled(
            using=throttled.asyncio.RateLimiterType.TOKEN_BUCKET.value,
            quota=throttled.asyncio.per_sec(HUGE), store=self.store, timeout=-1)
        self.errors = 0

    async def admit(self, scope: str) -> bool:
        result = await self.throttle.limit(scope)
        return not result.limited

    async def aclose(self) -> None:
        # The store does not close its client itself; its backend holds it.
        client: Any = self.store._backend.get_client()
        await client.aclose()


@dataclass(frozen=True)
class Contender:
    key: str
    label: str
    supplementary: bool = False


CONTENDERS = (
    Contender("crawlpace", "crawlpace: acquire + release(200)"),
    Contender("limits", "limits: moving window hit"),
    Contender("throttled", "throttled-py: token bucket limit"),
    Contender("crawlpace_scripts", "crawlpace, allot=0: acquire + release(200) by script",
              supplementary=True),
    Contender("crawlpace_no_outcome", "crawlpace: acquire + release(no outcome)", supplementary=True),
)
PEERS = ("limits", "throttled")


def make_admitter(key: str, url: str) -> Admitter:
    if key == "crawlpace":
        return CrawlpaceAdmitter(url, OK)
    if key == "crawlpace_scripts":
        return CrawlpaceAdmitter(url, OK, options="&allot=0")
    if key == "crawlpace_no_outcome":
        return CrawlpaceAdmitter(url, NO_OUTCOME)
    if key == "limits":
        return LimitsAdmitter(url)
    if key == "throttled":
        return ThrottledAdmitter(url)
    raise ValueError(f"unknown contender {key!r}")


# -- the worker process ------------------------------------------------------------------

# Round trips made by this process: writes of a command or a pipeline on a connection.
_trips = 0


def count_round_trips() -> None:
    """Count every command (or pipeline) redis-py's asyncio connections send."""
    connection = redis.asyncio.connection.AbstractConnection
    send = connection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        global _trips
        _trips += 1
        await send(self, command, check_health)

    connection.send_packed_command = counted  # type: ignore[method-assign]


class WarningTally(logging.Handler):
    """Counts crawlpace's log records by their message template instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[str(record.msg)] = self.counts.get(str(record.msg), 0) + 1


async def admit_many(admitter: Admitter, scopes: Sequence[str], start: int, tasks: int,
                     until: float | None, total: int = 0) -> tuple[int, int]:
    """Admit with ``tasks`` tasks until ``until`` (or ``total`` admissions): (admitted, refused)."""
    turn = itertools.count(start)
    admitted = refused = 0

    async def loop() -> None:
        nonlocal admitted, refused
        while (time.monotonic() < until) if until is not None else (admitted + refused < total):
            if await admitter.admit(scopes[next(turn) % len(scopes)]):
                admitted += 1
            else:
                refused += 1

    await asyncio.gather(*(loop() for _ in range(tasks)))
    return admitted, refused


def send(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


async def receive() -> dict[str, Any]:
    line = await asyncio.to_thread(sys.stdin.readline)
    return cast(dict[str, Any], json.loads(line)) if line else {"cmd": "quit"}


async def check_limits(url: str, slots: int, scopes: int, tasks: int, duration: float) -> list[Any]:
    """Admit on a few scopes of ``slots`` slots, each slot held a moment; say when each was held.

    CLOCK_MONOTONIC is one clock for every process of the machine, so the
    parent can count, per scope, how many slots the processes held at once.
    """
    admitter = CrawlpaceAdmitter(url, OK, slots)
    admitter.hold = True
    try:
        names = [f"check{i}" for i in range(scopes)]
        await admit_many(admitter, names, 0, tasks, time.monotonic() + duration)
    finally:
        await admitter.aclose()
    return [[scope, began, ended] for scope, began, ended in admitter.held]


def most_held(intervals: Sequence[Sequence[Any]]) -> tuple[int, int]:
    """The most slots of one scope held at once in ``intervals`` (scope, from, to), and their number."""
    events: dict[str, list[tuple[float, int]]] = {}
    for scope, began, ended in intervals:
        events.setdefault(scope, []).extend(((began, 1), (ended, -1)))
    most = 0
    for marks in events.values():
        marks.sort(key=lambda mark: (mark[0], mark[1]))  # a release before an admission at the same instant
        level = 0
        for _at, step in marks:
            level += step
            most = max(most, level)
    return most, len(intervals)


async def worker(url: str, index: int, scopes: int) -> None:
    """Serve the parent's measurements: prepare a contender, run it on "go", report."""
    count_round_trips()
    tally = WarningTally()
    logging.getLogger("crawlpace").addHandler(tally)
    names = [f"s{i}" for i in range(scopes)]
    send({"ready": index})
    admitter: Admitter | None = None
    try:
        while True:
            message = await receive()
            if admitter is not None:
                await admitter.aclose()
                admitter = None
            if message["cmd"] == "check":
                send({"held": await check_limits(url, int(message["slots"]), int(message["scopes"]),
                                                 int(message["tasks"]), float(message["duration"]))})
                continue
            if message["cmd"] != "prepare":
                return
            tasks = int(message["tasks"])
            start = index * scopes // int(message["workers"])
            admitter = make_admitter(message["contender"], url)
            await admit_many(admitter, names, start, tasks, None, WARMUP_PASSES * scopes)
            send({"prepared": index})
            go = await receive()
            if go["cmd"] != "go":
                return
            tally.counts.clear()
            errors, trips, cpu, began = admitter.errors, _trips, time.process_time(), time.monotonic()
            admitted, refused = await admit_many(admitter, names, start, tasks, began + float(go["duration"]))
            elapsed = time.monotonic() - began
            send({"admitted": admitted, "refused": refused, "errors": admitter.errors - errors,
                  "elapsed": elapsed,
                  "trips": _trips - trips, "cpu": time.process_time() - cpu, "warnings": tally.counts})
    finally:
        if admitter is not None:
            await admitter.aclose()


# -- the parent: server, workers, measurements --------------------------------------------


def start_server() -> RedisServer:
    sys.path.insert(0, str(ROOT))
    from tests.redis_server import started_server

    return started_server("redis_admission")


class Worker:
    """One worker process, spoken to in JSON lines over its stdin and stdout."""

    def __init__(self, url: str, index: int, scopes: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(index), "--url", url,
             "--scopes", str(scopes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def tell(self, message: dict[str, Any]) -> None:
        stdin = cast(IO[str], self.process.stdin)
        stdin.write(json.dumps(message) + "\n")
        stdin.flush()

    def hear(self) -> dict[str, Any]:
        line = cast(IO[str], self.process.stdout).readline()
        if not line:
            raise RuntimeError(f"worker {self.process.pid} exited with {self.process.wait()}")
        return cast(dict[str, Any], json.loads(line))

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.tell({"cmd": "quit"})
                self.process.wait(10.0)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def server_info(client: redis.Redis) -> dict[str, Any]:
    return client.info("all")


def command_calls(info: dict[str, Any]) -> dict[str, int]:
    return {key.removeprefix("cmdstat_"): int(value["calls"]) for key, value in info.items()
            if key.startswith("cmdstat_")}


def redis_cpu(info: dict[str, Any]) -> float:
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def merge(tallies: Sequence[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for tally in tallies:
        for key, count in tally.items():
            total[key] = total.get(key, 0) + count
    return total


@dataclass
class Run:
    """One measurement: a contender on P processes for D seconds."""

    contender: str
    processes: int
    rates: list[float]  # admissions per second, per process
    admitted: int
    refused: int  # blocked, or raised (errors)
    errors: int
    trips: int
    client_cpu: float
    commands: int
    calls: dict[str, int]
    server_cpu: float
    warnings: dict[str, int]  # crawlpace's log warnings, by message template

    @property
    def total(self) -> float:
        return sum(self.rates)

    def per_admission(self, amount: float) -> float:
        return amount / self.admitted if self.admitted else float("nan")


def measure(client: redis.Redis, workers: Sequence[Worker], contender: str, duration: float,
            tasks: int) -> Run:
    client.flushall()
    for worker_ in workers:
        worker_.tell({"cmd": "prepare", "contender": contender, "tasks": tasks, "workers": len(workers)})
    for worker_ in workers:
        worker_.hear()
    before = server_info(client)
    for worker_ in workers:
        worker_.tell({"cmd": "go", "duration": duration})
    results = [worker_.hear() for worker_ in workers]
    after = server_info(client)
    calls_before, calls_after = command_calls(before), command_calls(after)
    calls = {name: count - calls_before.get(name, 0) for name, count in calls_after.items()}
    calls["info"] = calls.get("info", 0) - 1  # the INFO that took the first reading
    return Run(
        contender=contender, processes=len(workers),
        rates=[r["admitted"] / r["elapsed"] for r in results],
        admitted=sum(r["admitted"] for r in results), refused=sum(r["refused"] for r in results),
        errors=sum(r["errors"] for r in results),
        trips=sum(r["trips"] for r in results), client_cpu=sum(r["cpu"] for r in results),
        # Less the first INFO, counted in the second reading.
        commands=int(after["total_commands_processed"]) - int(before["total_commands_processed"]) - 1,
        calls={name: count for name, count in calls.items() if count},
        server_cpu=redis_cpu(after) - redis_cpu(before),
        warnings=merge([r["warnings"] for r in results]))


@dataclass
class Cell:
    """A contender at one process count: every run, and their medians."""

    runs: list[Run] = field(default_factory=list)

    def median(self, figure: str) -> float:
        return statistics.median(self.value(run, figure) for run in self.runs)

    @staticmethod
    def value(run: Run, figure: str) -> float:
        match figure:
            case "total":
                return run.total
            case "per_process":
                return run.total / run.processes
            case "slowest_process":
                return min(run.rates)
            case "round_trips":
                return run.per_admission(run.trips)
            case "commands":
                return run.per_admission(run.commands)
            case "redis_cpu_us":
                return run.per_admission(run.server_cpu * 1e6)
            case "client_cpu_us":
                return run.per_admission(run.client_cpu * 1e6)
            case "refused":
                return run.refused
            case "errors":
                return run.errors
            case "lost_outcomes":
                # The release's write-back lost the race _WRITE_TRIES times in a row.
                lost = sum(n for msg, n in run.warnings.items() if "outcome was not shared" in msg)
                return run.per_admission(lost)
        # Otherwise a command's calls per admission, e.g. "evalsha".
        return run.per_admission(run.calls.get(figure, 0))


FIGURES = ("total", "per_process", "slowest_process", "round_trips", "commands", "evalsha", "set", "get",
           "redis_cpu_us", "client_cpu_us", "refused", "errors",
           "lost_outcomes")


def run_all(url: str, client: redis.Redis, processes: Sequence[int], repeats: int, duration: float,
            tasks: int, scopes: int, progress: bool,
            contenders: Sequence[Contender] = CONTENDERS
            ) -> tuple[dict[tuple[str, int], Cell], dict[str, int]]:
    """Every measurement, then the limit check on every worker: (cells, the check's figures)."""
    cells = {(c.key, n): Cell() for c in contenders for n in processes}
    check: dict[str, int] = {}
    workers: list[Worker] = []
    try:
        workers = [Worker(url, index, scopes) for index in range(max(processes))]
        for worker_ in workers:
            worker_.hear()
        for round_no in range(repeats):
            turn = round_no % len(contenders)
            order = [*contenders[turn:], *contenders[:turn]]
            for n in processes:
                for contender in order:
                    run = measure(client, workers[:n], contender.key, duration, tasks)
                    cells[contender.key, n].runs.append(run)
                    if progress:
                        print(f"  round {round_no + 1}/{repeats}, {n} process(es), {contender.key}: "
                              f"{run.total:,.0f}/s, {run.per_admission(run.trips):.2f} round trips",
                              file=sys.stderr, flush=True)
        client.flushall()
        for worker_ in workers:
            worker_.tell({"cmd": "check", "slots": CHECK_SLOTS, "scopes": CHECK_SCOPES, "tasks": tasks,
                          "duration": min(duration, 1.0)})
        most, admissions = most_held([interval for worker_ in workers for interval in worker_.hear()["held"]])
        check = {"slots": CHECK_SLOTS, "scopes": CHECK_SCOPES, "processes": len(workers), "most_held": most,
                 "admissions": admissions}
    finally:
        for worker_ in workers:
            worker_.stop()
    return cells, check


# -- report --------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> None:
    """Print aligned columns: the first ``left`` flush left, the others right."""
    widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(len(headers))]
    for cells in (headers, *rows):
        print("  ".join(cell.ljust(width) if i < left else cell.rjust(width)
                        for i, (cell, width) in enumerate(zip(cells, widths, strict=True))).rstrip())


def ran(cells: dict[tuple[str, int], Cell]) -> list[Contender]:
    """The contenders measured, in their usual order."""
    return [c for c in CONTENDERS if any(key == c.key for key, _ in cells)]


def print_throughput(cells: dict[tuple[str, int], Cell], processes: Sequence[int]) -> None:
    print("admissions per second (median), summed over the processes / per process")
    headers = ["processes", *(c.key for c in ran(cells)), *(f"crawlpace/{peer}" for peer in PEERS)]
    rows = []
    for n in processes:
        row = [str(n)]
        for contender in ran(cells):
            cell = cells[contender.key, n]
            row.append(f"{cell.median('total'):,.0f} / {cell.median('per_process'):,.0f}")
        ours = cells["crawlpace", n].median("per_process")
        row += [f"{ours / cells[peer, n].median('per_process'):.2f}" for peer in PEERS]
        rows.append(row)
    table(headers, rows)


def print_costs(cells: dict[tuple[str, int], Cell], processes: Sequence[int]) -> None:
    print("cost per admission (median): round trips counted by the clients; server commands include "
          "those\nrun inside scripts; SET = policy write-backs, GET = policy fetches; CPU in microseconds "
          "(client: all\nprocesses); lost = outcomes whose write-back lost the race every time")
    headers = ["contender", "procs", "round trips", "commands", "EVALSHA", "SET", "GET", "Redis CPU",
               "client CPU", "lost"]
    rows = []
    for contender in ran(cells):
        for n in processes:
            cell = cells[contender.key, n]
            rows.append([contender.key, str(n), f"{cell.median('round_trips'):.2f}",
                         f"{cell.median('commands'):.1f}", f"{cell.median('evalsha'):.2f}",
                         f"{cell.median('set'):.2f}", f"{cell.median('get'):.2f}",
                         f"{cell.median('redis_cpu_us'):.1f}", f"{cell.median('client_cpu_us'):.0f}",
                         f"{cell.median('lost_outcomes'):.1%}"])
    table(headers, rows, left=1)


def goals(cells: dict[tuple[str, int], Cell], processes: Sequence[int],
          check: dict[str, int]) -> dict[str, Any]:
    """Issue 21's goals: per process at least twice every peer's rate, Redis CPU per admission at most the
    peers', one round trip or less per admission; and the limit check (never more held than a scope has)."""
    twice = {f"{peer}@{n}": cells["crawlpace", n].median("per_process")
             >= 2.0 * cells[peer, n].median("per_process") for peer in PEERS for n in processes}
    cpu = {str(n): cells["crawlpace", n].median("redis_cpu_us")
           <= min(cells[peer, n].median("redis_cpu_us") for peer in PEERS) for n in processes}
    one_trip = {str(n): cells["crawlpace", n].median("round_trips") <= 1.0 + 1e-3 for n in processes}
    kept = bool(check.get("admissions")) and check["most_held"] <= check["slots"]
    return {"twice_peers_per_process": twice, "redis_cpu_at_most_peers": cpu,
            "round_trips_at_most_1": one_trip, "limits_kept": kept,
            "met": all(twice.values()) and all(cpu.values()) and all(one_trip.values()) and kept}


def print_goals(verdict: dict[str, Any]) -> None:
    print("goals")
    for key, ok in verdict["twice_peers_per_process"].items():
        peer, n = key.split("@")
        print(f"  {'PASS' if ok else 'FAIL'}  crawlpace admissions/s per process >= 2 x {peer} checks/s, "
              f"{n} process(es)")
    for n, ok in verdict["redis_cpu_at_most_peers"].items():
        print(f"  {'PASS' if ok else 'FAIL'}  crawlpace Redis CPU per admission <= every peer's, "
              f"{n} process(es)")
    for n, ok in verdict["round_trips_at_most_1"].items():
        print(f"  {'PASS' if ok else 'FAIL'}  crawlpace round trips per admission <= 1, {n} process(es)")
    print(f"  {'PASS' if verdict['limits_kept'] else 'FAIL'}  no scope had more slots held at once than its "
          "limit (the limit check)")
    missed = [key for key, ok in verdict["twice_peers_per_process"].items() if not ok]
    missed += [f"redis_cpu@{n}" for n, ok in verdict["redis_cpu_at_most_peers"].items() if not ok]
    missed += [f"round_trips@{n}" for n, ok in verdict["round_trips_at_most_1"].items() if not ok]
    missed += [] if verdict["limits_kept"] else ["limits_kept"]
    print("all goals met" if not missed else f"missed: {', '.join(missed)}")


def cell_json(cell: Cell) -> dict[str, Any]:
    return {
        "median": {figure: round(cell.median(figure), 3) for figure in FIGURES},
        "runs": [{"per_process": [round(rate, 1) for rate in run.rates], "admitted": run.admitted,
                  "refused": run.refused, "errors": run.errors, "round_trips": run.trips,
                  "commands": run.commands, "calls": run.calls, "warnings": run.warnings,
                  "redis_cpu_s": round(run.server_cpu, 4),
                  "client_cpu_s": round(run.client_cpu, 4)} for run in cell.runs],
    }


def versions() -> dict[str, str]:
    return {name: version(name) for name in ("crawlpace", "limits", "throttled-py", "redis", "hiredis")}


def benchmark(args: argparse.Namespace) -> None:
    began = time.monotonic()
    processes = sorted({int(p) for p in args.processes.split(",") if p.strip()})
    if not processes or processes[0] < 1:
        raise SystemExit("--processes: give positive counts, e.g. 1,2,4,8")
    duration = args.duration or (1.0 if args.quick else 10.0)
    repeats = args.repeats or 3
    # The supplementary contender explains a figure; a quick run keeps to the goals.
    contenders = [c for c in CONTENDERS if not (args.quick and c.supplementary and not args.supplementary)]
    server = start_server()
    try:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        server_version = str(server_info(client)["redis_version"])
        machine = {"platform": platform.platform(), "machine": platform.machine(),
                   "cpu_count": os.cpu_count(), "python": platform.python_version(),
                   "redis_server": server_version}
        date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        print(f"crawlpace Redis admission benchmark, {date}")
        print(f"machine: {machine['platform']}, {machine['cpu_count']} CPUs, Python {machine['python']}, "
              f"redis-server {server_version}")
        print(f"{', '.join(f'{k} {v}' for k, v in versions().items())}")
        print(f"{duration:g} s per measurement, {repeats} round(s), {args.tasks} tasks per process, "
              f"{args.scopes} scopes, processes {','.join(map(str, processes))}")
        cells, check = run_all(server.url, client, processes, repeats, duration, args.tasks, args.scopes,
                        progress=not args.json, contenders=contenders)
        client.close()
    finally:
        server.close()
    print()
    print_throughput(cells, processes)
    print()
    print_costs(cells, processes)
    print()
    verdict = goals(cells, processes, check)
    print(f"limit check: {check.get('processes', 0)} process(es) x {args.tasks} tasks on {CHECK_SCOPES} "
          f"scopes of {CHECK_SLOTS} slots, each slot held {CHECK_HOLD * 1000:g} ms: "
          f"{check.get('admissions', 0):,} admissions, at most {check.get('most_held', 0)} slots of "
          "one scope held at once")
    print()
    print_goals(verdict)
    for (key, n), cell in cells.items():
        refused = sum(run.refused for run in cell.runs)
        if refused:
            errors = sum(run.errors for run in cell.runs)
            admitted = sum(run.admitted for run in cell.runs)
            print(f"warning: {key}, {n} process(es): {refused:,} refused ({errors:,} of them raised) "
                  f"next to {admitted:,} admitted; nothing is meant to be refused")
    warned = merge([run.warnings for cell in cells.values() for run in cell.runs])
    for message, count in sorted(warned.items(), key=lambda item: -item[1]):
        print(f"crawlpace logged {count:,} times: {message}")
    seconds = time.monotonic() - began
    print(f"finished in {seconds:.0f} s")
    if args.json:
        print(json.dumps({
            "benchmark": "redis_admission",
            "date": date,
            "machine": machine,
            "versions": versions(),
            "duration_s": duration,
            "repeats": repeats,
            "tasks_per_process": args.tasks,
            "scopes": args.scopes,
            "processes": processes,
            "contenders": {c.key: {"label": c.label, "supplementary": c.supplementary} for c in contenders},
            "results": {c.key: {str(n): cell_json(cells[c.key, n]) for n in processes} for c in contenders},
            "ratio_crawlpace_over_peer_per_process": {
                peer: {str(n): round(cells["crawlpace", n].median("per_process")
                                     / cells[peer, n].median("per_process"), 3) for n in processes}
                for peer in PEERS},
            "ratio_scripts_over_peer_per_process": {
                peer: {str(n): round(cells["crawlpace_scripts", n].median("per_process")
                                     / cells[peer, n].median("per_process"), 3) for n in processes}
                for peer in PEERS} if ("crawlpace_scripts", processes[0]) in cells else None,
            "goals": verdict,
            "limit_check": check,
            "seconds": round(seconds, 1),
        }, sort_keys=True))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="1 s per measurement, no supplementary contender (< 1 min)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--supplementary", action="store_true",
                        help="with --quick: run the supplementary contenders too (over a minute)")
    parser.add_argument("--processes", default="1,2,4,8", help="worker process counts (default 1,2,4,8)")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds per measurement (D)")
    parser.add_argument("--repeats", type=int, default=0, help="rounds over every measurement (R, 3)")
    parser.add_argument("--tasks", type=int, default=8, help="concurrent tasks per process (T)")
    parser.add_argument("--scopes", type=int, default=100, help="scopes the requests spread over (S)")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker is not None:
        asyncio.run(worker(args.url, args.worker, args.scopes))
    else:
        benchmark(args)


if __name__ == "__main__":
    main()
