"""Requests per second the site simulator's farm serves, next to the same sites under uvicorn.

Run it as ``python bench/sim_throughput.py`` (add ``--quick`` for a run under a minute
and ``--json`` for a machine-readable last line).

The requirement under test: the farm serves at least 3,000 requests/s in total on a
2-core machine while a client runs beside it, so that the simulator is never what
limits a benchmark of a crawler.

Three processes take part, all started with the ``spawn`` method and all bound to
127.0.0.x only:

* **the farm**: ``crawlpace.sim.Farm`` with ``--sites`` sites (4 by default) of
  profile ``ratelimit`` whose bucket (rate 10⁶/s, burst 10⁶) never runs dry, so every
  answer is a 200 page. The sites listen on 127.0.0.2, 127.0.0.3, ... on one port,
  each on the simulator's own small HTTP/1.1 server.
* **the peer**: the same site class, ``crawlpace.sim.RateLimitSite``, one instance per
  site, each served by its own uvicorn server (``http="h11"``, ``loop="asyncio"``, no
  access log) on 127.0.0.1, all in one process. Only the HTTP server differs, so the
  ratio compares the simulator's server with uvicorn's, on identical application code.
* **the client**: a bare asyncio HTTP/1.1 client (an ``asyncio.Protocol`` per
  connection, no HTTP library) that opens ``C`` keep-alive connections spread over the
  sites and, on each, sends ``GET /page/1`` again as soon as the previous answer's
  head and ``Content-Length`` body are in. It counts answers and non-200 statuses.

Both servers stay up for the whole run. For each connection count, ``R`` rounds
alternate between them (the order flips every round). In a round the client runs a
warm-up, then counts answers over the measured seconds; the rate is answers in the
measured part divided by its length. Each server process also reports how many
requests its sites counted and how much CPU time it used, so the client's figure is
checked against the server's own count, and the CPU shares show which process was
saturated. The medians over the rounds are reported, with the ratio farm/uvicorn.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import json
import multiprocessing
import os
import platform
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from crawlpace.sim import Site

#: The requirement: requests per second the farm must serve with a client beside it.
GOAL = 3_000
PATH = "/page/1"
# A bucket that never empties: every answer is a 200 page.
RATE = 1_000_000.0
BURST = 1_000_000
# How long a server process may take to start before the run is abandoned.
START_TIMEOUT = 60.0

Target = Literal["crawlpace", "uvicorn"]
TARGETS: tuple[Target, ...] = ("crawlpace", "uvicorn")


# -- the servers (each in its own process) ---------------------------------------


def _commands(conn: Connection, counts: Callable[[], dict[str, float]], stop: asyncio.Event) -> None:
    """Answer the parent's commands from the event loop, between requests."""
    command = conn.recv()
    if command == "count":
        conn.send(counts())
    elif command == "stop":
        stop.set()


async def _serve_until_stopped(conn: Connection, urls: list[str],
                               counts: Callable[[], dict[str, float]]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    conn.send(urls)
    loop.add_reader(conn.fileno(), _commands, conn, counts, stop)
    try:
        await stop.wait()
    finally:
        loop.remove_reader(conn.fileno())


def _site_counts(sites: Sequence[Site]) -> dict[str, float]:
    """Requests and 200s counted by the sites, and this process's CPU seconds so far."""
    return {"requests": sum(site.stats.requests for site in sites),
            "ok": sum(site.stats.ok for site in sites),
            "cpu": time.process_time()}


def farm_process(conn: Connection, sites: int) -> None:
    """Serve a farm of ``sites`` unlimited sites until told to stop."""
    # Imported here, not at the top: every spawned child re-imports this script,
    # and the client needs none of the servers' modules.
    from crawlpace.sim import Farm

    spec = {"site": [{"name": f"site{index}", "profile": "ratelimit", "rate": RATE, "burst": BURST}
                     for index in range(sites)]}

    async def main() -> None:
        async with Farm(spec, port=0) as farm:
            apps = [info.app for info in farm.sites]
            await _serve_until_stopped(conn, [info.url for info in farm.sites], lambda: _site_counts(apps))

    asyncio.run(main())
    conn.close()


def _loopback_socket(host: str) -> socket.socket:
    # IPPROTO_TCP named explicitly: asyncio disables Nagle's algorithm only on
    # sockets that carry it, and uvicorn writes a response's head and body apart.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind((host, 0))
    return sock


def uvicorn_process(conn: Connection, sites: int) -> None:
    """Serve ``sites`` copies of the same site class with uvicorn, one server each, until told to stop."""
    import uvicorn

    from crawlpace.sim import RateLimitSite

    host = "127.0.0.1"

    async def main() -> None:
        apps = [RateLimitSite(rate=RATE, burst=BURST) for _ in range(sites)]
        sockets = [_loopback_socket(host) for _ in apps]
        servers = [uvicorn.Server(uvicorn.Config(app, host=host, port=int(sock.getsockname()[1]), http="h11",
                                                 loop="asyncio", ws="none", lifespan="off", access_log=False,
                                                 log_level="warning", log_config=None))
                   for app, sock in zip(apps, sockets, strict=True)]
        tasks = [asyncio.create_task(server.serve(sockets=[sock]))
                 for server, sock in zip(servers, sockets, strict=True)]
        while not all(server.started for server in servers):
            if any(task.done() for task in tasks):
                raise RuntimeError("a uvicorn server stopped before it started")
            await asyncio.sleep(0.01)
        try:
            urls = [f"http://{host}:{sock.getsockname()[1]}" for sock in sockets]
            await _serve_until_stopped(conn, urls, lambda: _site_counts(apps))
        finally:
            for server in servers:
                server.should_exit = True
            await asyncio.gather(*tasks)
            for sock in sockets:
                sock.close()

    asyncio.run(main())
    conn.close()


# -- the client (in its own process) -----------------------------------------------


class _Tally:
    """Counts shared by every connection of one client run."""

    def __init__(self) -> None:
        self.done = 0
        self.not_ok = 0
        self.running = True
        self.failures: list[str] = []


class _KeepAlive(asyncio.Protocol):
    """One keep-alive connection sending the same GET as soon as each answer is complete."""

    def __init__(self, request: bytes, tally: _Tally) -> None:
        self.request = request
        self.tally = tally
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        tally = self.tally
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end]).lower()
            at = head.find(b"\r\ncontent-length:")
            if at < 0:
                self._fail("an answer without Content-Length")
                return
            stop = head.find(b"\r\n", at + 2)
            length = int(head[at + 17:stop if stop >= 0 else len(head)])
            total = end + 4 + length
            if len(buffer) < total:
                return
            if head[9:12] != b"200":
                tally.not_ok += 1
            tally.done += 1
            del buffer[:total]
            if not tally.running:
                self._close()
                return
            if not buffer and self.transport is not None:
                self.transport.write(self.request)

    def _fail(self, reason: str) -> None:
        self.tally.failures.append(reason)
        self._close()

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.tally.failures.append(repr(exc))
        if not self.closed.done():
            self.closed.set_result(None)


@dataclass
class ClientResult:
    """What the client saw in one run."""

    rate: float
    measured: int
    done: int
    not_ok: int
    elapsed: float
    cpu: float
    failures: list[str] = field(default_factory=list)


async def run_client(urls: Sequence[str], connections: int, seconds: float, warmup: float) -> ClientResult:
    """Load the sites at ``urls`` over ``connections`` connections for ``warmup + seconds``."""
    loop = asyncio.get_running_loop()
    tally = _Tally()
    cpu_start = time.process_time()
    started = loop.time()
    protocols: list[_KeepAlive] = []
    for index in range(connections):
        host, _, port = urls[index % len(urls)].removeprefix("http://").partition(":")
        request = f"GET {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: sim-bench\r\n\r\n".encode()
        _, protocol = await loop.create_connection(functools.partial(_KeepAlive, request, tally),
                                                   host, int(port))
        protocols.append(protocol)
    await asyncio.sleep(warmup)
    before, begin = tally.done, loop.time()
    await asyncio.sleep(seconds)
    after, end = tally.done, loop.time()
    tally.running = False
    for protocol in protocols:
        protocol._close()
    await asyncio.gather(*(protocol.closed for protocol in protocols))
    measured = after - before
    return ClientResult(rate=measured / (end - begin), measured=measured, done=tally.done,
                        not_ok=tally.not_ok, elapsed=loop.time() - started,
                        cpu=time.process_time() - cpu_start, failures=tally.failures[:5])


def client_process(conn: Connection) -> None:
    """Run load on command: each message is (urls, connections, seconds, warmup); None ends."""
    while True:
        job = conn.recv()
        if job is None:
            break
        urls, connections, seconds, warmup = job
        # A plain dict: the child's classes live in a module the parent cannot import by name.
        conn.send(dataclasses.asdict(asyncio.run(run_client(urls, connections, seconds, warmup))))
    conn.close()


# -- orchestration --------------------------------------------------------------------


class Peer:
    """A child process driven over a pipe."""

    def __init__(self, name: str, target: Callable[..., None], *args: object) -> None:
        context = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, child = context.Pipe()
        self.process = context.Process(target=target, args=(child, *args), name=name, daemon=True)
        self.process.start()
        child.close()

    def ask(self, message: object, timeout: float = START_TIMEOUT) -> Any:
        self.conn.send(message)
        return self.wait(timeout)

    def wait(self, timeout: float = START_TIMEOUT) -> Any:
        if not self.conn.poll(timeout):
            raise RuntimeError(f"{self.name} did not answer within {timeout:g} s")
        return self.conn.recv()

    def close(self, goodbye: object) -> None:
        with contextlib.suppress(OSError):  # the process may be gone already
            self.conn.send(goodbye)
        self.process.join(10.0)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5.0)
        self.conn.close()


@dataclass
class Round:
    """One measurement of one server."""

    target: Target
    connections: int
    client: ClientResult
    server_requests: int
    server_ok: int
    server_cpu: float

    @property
    def unanswered(self) -> int:
        """Requests the server counted beyond the answers the client read (at most one per connection)."""
        return self.server_requests - self.client.done

    @property
    def consistent(self) -> bool:
        answered_ok = self.client.done - self.client.not_ok
        return 0 <= self.unanswered <= self.connections and self.server_ok >= answered_ok


@dataclass
class Series:
    rounds: list[Round] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [entry.client.rate for entry in self.rounds]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    def median_share(self, pick: Callable[[Round], float]) -> float:
        return statistics.median(pick(entry) for entry in self.rounds)


def measure(client: Peer, server: Peer, target: Target, urls: list[str], connections: int,
            seconds: float, warmup: float) -> Round:
    before = server.ask("count")
    result = ClientResult(**client.ask((urls, connections, seconds, warmup), timeout=warmup + seconds + 60.0))
    after = server.ask("count")
    return Round(target, connections, result, int(after["requests"] - before["requests"]),
                 int(after["ok"] - before["ok"]), after["cpu"] - before["cpu"])


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_round(number: int, entry: Round) -> None:
    client = entry.client
    print(f"{entry.connections:>5} {number:>5} {entry.target:<10} {client.rate:>10,.0f} "
          f"{client.not_ok:>7} {entry.server_cpu / client.elapsed:>8.0%} {client.cpu / client.elapsed:>8.0%} "
          f"{entry.unanswered:>7} {'ok' if entry.consistent else 'MISMATCH':>8}", flush=True)
    for failure in client.failures:
        print(f"      client failure: {failure}", flush=True)


def summarise(results: dict[int, dict[Target, Series]]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    print()
    print(f"{'conns':>5} {'server':<10} {'median/s':>10} {'min..max':>17} {'server CPU':>10} "
          f"{'client CPU':>10} {'farm/uvicorn':>12}")
    for connections, series in results.items():
        ratio = series["crawlpace"].median / series["uvicorn"].median
        row: dict[str, Any] = {"ratio_crawlpace_over_uvicorn": round(ratio, 3)}
        for target in TARGETS:
            entries = series[target]
            server_cpu = entries.median_share(lambda entry: entry.server_cpu / entry.client.elapsed)
            client_cpu = entries.median_share(lambda entry: entry.client.cpu / entry.client.elapsed)
            spread = f"{min(entries.rates):,.0f}..{max(entries.rates):,.0f}"
            shown = f"{ratio:.2f}" if target == "crawlpace" else ""
            print(f"{connections:>5} {target:<10} {entries.median:>10,.0f} {spread:>17} {server_cpu:>10.0%} "
                  f"{client_cpu:>10.0%} {shown:>12}")
            row[target] = {
                "median_rps": round(entries.median),
                "min_rps": round(min(entries.rates)),
                "max_rps": round(max(entries.rates)),
                "rounds_rps": [round(rate) for rate in entries.rates],
                "median_server_cpu_share": round(server_cpu, 3),
                "median_client_cpu_share": round(client_cpu, 3),
                "non_200": sum(entry.client.not_ok for entry in entries.rounds),
                "server_count_consistent": all(entry.consistent for entry in entries.rounds),
                "client_failures": sum(len(entry.client.failures) for entry in entries.rounds),
            }
        figures[str(connections)] = row
    return figures


def run(args: argparse.Namespace) -> None:
    rounds: int = args.rounds or (3 if args.quick else 7)
    seconds: float = args.seconds or (2.5 if args.quick else 9.0)
    warmup: float = args.warmup if args.warmup is not None else (0.5 if args.quick else 1.0)
    counts = [int(value) for value in args.connections.split(",")]
    sites: int = args.sites
    print(f"site simulator throughput: {sites} sites, connections {counts}, {rounds} rounds of "
          f"{warmup:g} s warm-up + {seconds:g} s measured; Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs ({cpu_model()})", flush=True)
    servers = {"crawlpace": Peer("farm", farm_process, sites),
               "uvicorn": Peer("uvicorn", uvicorn_process, sites)}
    client = Peer("client", client_process)
    results: dict[int, dict[Target, Series]] = {}
    try:
        urls: dict[Target, list[str]] = {target: servers[target].wait() for target in TARGETS}
        for target in TARGETS:
            print(f"  {target}: {', '.join(urls[target])}", flush=True)
        print()
        print(f"{'conns':>5} {'round':>5} {'server':<10} {'answers/s':>10} {'non-200':>7} {'srv CPU':>8} "
              f"{'cli CPU':>8} {'unread':>7} {'count':>8}")
        for connections in counts:
            series: dict[Target, Series] = {target: Series() for target in TARGETS}
            results[connections] = series
            for number in range(1, rounds + 1):
                order = TARGETS if number % 2 else TARGETS[::-1]
                for target in order:
                    entry = measure(client, servers[target], target, urls[target], connections,
                                    seconds, warmup)
                    series[target].rounds.append(entry)
                    print_round(number, entry)
    finally:
        client.close(None)
        for peer in servers.values():
            peer.close("stop")
    figures = summarise(results)
    met = {str(connections): series["crawlpace"].median >= GOAL for connections, series in results.items()}
    worst = min(series["crawlpace"].median for series in results.values())
    print()
    print(f"goal: the farm serves >= {GOAL:,} requests/s with a client beside it: "
          f"{'met' if all(met.values()) else 'MISSED'} (lowest median {worst:,.0f}/s)")
    if args.json:
        print(json.dumps({
            "benchmark": "sim_throughput",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "cpu_model": cpu_model(),
            "versions": {name: version(name) for name in ("crawlpace", "uvicorn", "h11")},
            "sites": sites,
            "path": PATH,
            "rounds": rounds,
            "seconds": seconds,
            "warmup": warmup,
            "connections": counts,
            "results": figures,
            "goal_rps": GOAL,
            "goal_met_by_connections": met,
            "goal_met": all(met.values()),
        }, sort_keys=True))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 short rounds per connection count (< 1 min)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--rounds", type=int, default=0, help="rounds per server and connection count")
    parser.add_argument("--seconds", type=float, default=0.0, help="measured seconds per round")
    parser.add_argument("--warmup", type=float, default=None, help="unmeasured seconds before each round")
    parser.add_argument("--connections", default="8,64", help="client connection counts, comma-separated")
    parser.add_argument("--sites", type=int, default=4, help="sites per server")
    args = parser.parse_args(argv)
    if args.sites < 1 or args.rounds < 0 or args.seconds < 0:
        parser.error("--sites must be >= 1, --rounds and --seconds >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    run(parse_args(argv))


if __name__ == "__main__":
    main()
