"""A fleet of ``crawlpace crawl --redis`` workers sharing one store, for ``bench/crawl_efficiency.py``.

Run it as ``python bench/_peers/fleet.py URLS.txt OUT.jsonl WORKERS``.

It starts a private ``redis-server`` on a free port of 127.0.0.1 (no persistence) and
WORKERS processes of ``crawlpace crawl --redis URL -o OUT.N.jsonl --quiet --json
--wait-for-urls 300`` without a URL file, waits until every one of them has asked the
shared frontier for work (each is then imported, connected and ready), and only then
fills the frontier with the URLs (``SharedFrontier.enqueue``, as ``crawlpace enqueue``
does). So the fleet starts crawling together, as a fleet of long-running workers would,
and the worker start-up is measured apart: the seconds from this script's start to the
enqueue go to ``fleet.json`` beside OUT.jsonl (``startup``; ``ready``: when each
worker first asked, in seconds from the start; ``cpu``: each worker's CPU seconds by
then), which ``bench/crawl_efficiency.py``
reads. Each worker takes URLs from the shared frontier, and all of them share every
host's limits, rampup state and robots.txt through the store. When they have all ended,
their output files are joined into OUT.jsonl (the contender's record of pages done).
SIGTERM stops the workers (then the server) and still joins what they wrote: each worker
has ``STOP_GRACE`` seconds to end before it is killed. The server runs in a session of its
own, so that a signal to this script's process group (``crawl_efficiency.py`` past its time
limit) does not take the store away from workers that are stopping; every child is killed
by the kernel should this script die first (``die_with_parent``), so none is left behind.

Before the workers start, crawlpace's modules are compiled to bytecode once
(``compileall``), as installing a wheel does: run from a source checkout with
``PYTHONDONTWRITEBYTECODE`` set, every worker would otherwise compile all of them
again, about a fifth of its start-up CPU. That compilation counts in ``startup``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib.util
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

#: Seconds the server may take to answer its first PING.
SERVER_START = 10.0
#: Seconds the workers may take to start; past it the URLs go in anyway (and the figure says so).
WORKERS_START = 240.0
#: More options for every worker, from the environment (``FLEET_WORKER_FLAGS="-vv"`` logs each
#: worker's decisions into its ``workerN.stderr``, to diagnose a run).
WORKER_FLAGS = tuple(os.environ.get("FLEET_WORKER_FLAGS", "").split())
#: Seconds a worker waits on the empty frontier for the URLs (longer than the start allowance).
WAIT_FOR_URLS = 300.0


#: Seconds the workers have to end after a SIGTERM before they are killed.
STOP_GRACE = 1.0
#: Linux's prctl option that sends a signal to a process when its parent dies.
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before it runs its program: the kernel kills it when its parent dies (Linux).

    A ``preexec_fn``: a benchmark killed outright (SIGKILL, an outer timeout)
    would otherwise leave its crawlers, farm and Redis server running.
    Elsewhere it does nothing.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        sys.exit("fleet: no redis-server (or valkey-server) on PATH")
    port = free_port()
    server = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--dir", str(folder)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True, preexec_fn=die_with_parent)
    deadline = time.monotonic() + SERVER_START
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            if conn.recv(16).startswith(b"+PONG"):
                return server, f"redis://127.0.0.1:{port}/0"
        time.sleep(0.05)
    server.kill()
    sys.exit(f"fleet: redis-server did not answer on port {port}")


async def fill_when_ready(store: str, urls: Path, crawlers: list[subprocess.Popen[bytes]],
                          started: float) -> dict[str, object]:
    """Wait until every worker has asked the frontier for work, then enqueue the URLs."""
    from crawlpace.frontier._shared import SharedFrontier

    frontier = SharedFrontier(store, worker="fleet-filler")
    ready: dict[str, float] = {}
    try:
        deadline = time.monotonic() + WORKERS_START
        while time.monotonic() < deadline and all(crawler.poll() is None for crawler in crawlers):
            counts = await frontier.counts()
            now = time.monotonic() - started
            for name in counts.workers:
                ready.setdefault(name, round(now, 3))
            if len(ready) >= len(crawlers):
                break
            await asyncio.sleep(0.05)
        go = time.monotonic()
        cpu = [cpu_seconds(crawler.pid) for crawler in crawlers]
        with urls.open(encoding="utf-8") as lines:
            report = await frontier.enqueue(lines)
    finally:
        await frontier.aclose()
    return {"startup": round(go - started, 3), "enqueue_seconds": round(time.monotonic() - go, 3),
            "workers": len(crawlers), "workers_ready": len(ready), "ready": sorted(ready.values()),
            "urls": report.added, "cpu": cpu}


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far; None where /proc cannot tell."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 3)
    return None


def command_calls(store: str) -> dict[str, int]:
    """The server's calls per command so far (``INFO commandstats``: ``evalsha`` is every script call,
    an admission's, a release's or an allotment's); empty where the server does not answer."""
    port = int(store.rsplit(":", 1)[1].split("/", 1)[0])
    calls: dict[str, int] = {}
    with (contextlib.suppress(OSError, ValueError),
          socket.create_connection(("127.0.0.1", port), timeout=2.0) as conn):
        conn.sendall(b"INFO commandstats\r\n")
        reply = b""
        while b"\r\n" not in reply:
            reply += conn.recv(65536)
        head, _, body = reply.partition(b"\r\n")  # a bulk string: $LENGTH, then the text
        while len(body) < int(head[1:]):
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        for line in body.decode(errors="replace").splitlines():
            if line.startswith("cmdstat_"):  # cmdstat_evalsha:calls=12,usec=...
                name, _, stats = line[len("cmdstat_"):].partition(":")
                calls[name] = int(stats.split(",", 1)[0].split("=", 1)[1])
    return calls


def wait_all(crawlers: list[subprocess.Popen[bytes]], stopping: list[float]) -> list[int]:
    """Wait for every worker to end; once a SIGTERM came, kill those still running after ``STOP_GRACE``."""
    while any(crawler.poll() is None for crawler in crawlers):
        if stopping and time.monotonic() - stopping[0] >= STOP_GRACE:
            for crawler in crawlers:
                if crawler.poll() is None:
                    crawler.kill()
        time.sleep(0.05)
    return [crawler.wait() for crawler in crawlers]


def main(urls: Path, output: Path, workers: int) -> int:
    started = time.monotonic()
    folder = output.parent
    server, store = start_redis(folder)
    crawlers: list[subprocess.Popen[bytes]] = []
    stopping: list[float] = []  # when a SIGTERM came

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.append(time.monotonic())
        for crawler in crawlers:
            if crawler.poll() is None:
                crawler.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    outputs = [folder / f"{output.name}.{n}" for n in range(workers)]
    try:
        spec = importlib.util.find_spec("crawlpace")
        if spec is not None and spec.submodule_search_locations:
            subprocess.run([sys.executable, "-m", "compileall", "-q", *spec.submodule_search_locations],
                           check=False, stdout=subprocess.DEVNULL)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)  # compileall's, not the workers'
        before = used.ru_utime + used.ru_stime
        for n, out in enumerate(outputs):
            with (folder / f"worker{n}.stderr").open("wb") as err:
                crawlers.append(subprocess.Popen(
                    [sys.executable, "-m", "crawlpace", "crawl", "-o", str(out), "--redis", store, "--quiet",
                     "--json", "--wait-for-urls", str(WAIT_FOR_URLS), *WORKER_FLAGS],
                    stdout=subprocess.DEVNULL, stderr=err, preexec_fn=die_with_parent))
        timing: dict[str, object] | None = None
        if not stopping:
            timing = asyncio.run(fill_when_ready(store, urls, crawlers, started))
            (folder / "fleet.json").write_text(json.dumps(timing), encoding="utf-8")
        codes = wait_all(crawlers, stopping)
        if timing is not None:
            # The store's work and the workers' CPU seconds (all of them, waited for) for the crawl.
            timing["calls"] = command_calls(store)
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            timing["workers_cpu"] = round(used.ru_utime + used.ru_stime - before, 3)
            (folder / "fleet.json").write_text(json.dumps(timing), encoding="utf-8")
    finally:
        for crawler in crawlers:
            if crawler.poll() is None:
                crawler.kill()
                crawler.wait()
        server.terminate()
        server.wait()
        with output.open("w", encoding="utf-8") as joined:
            for out in outputs:
                if out.exists():
                    joined.write(out.read_text(encoding="utf-8", errors="replace"))
    return max(codes, default=0)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: fleet.py URLS.txt OUT.jsonl WORKERS")
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])))
