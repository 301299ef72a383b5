"""Redis server work per admission, counted in instructions: a figure a loaded machine cannot blur.

Run it as ``python bench/redis_instructions.py`` (``--quick`` for a run under a minute,
``--json`` for a machine-readable last line). It needs valgrind (``apt-get install
valgrind``) and says so when it is missing.

``bench/redis_admission.py`` reads the server's CPU time per admission from ``INFO cpu``.
On a machine shared with other work that figure moves by half from one run to the next:
the server is preempted inside a script, its caches are cold, the clock runs while it
waits. This script asks the question another way. It runs a private ``redis-server``
under valgrind's callgrind tool, with counting switched on only while the contenders of
``redis_admission.py`` (same settings, same scopes, same tasks) admit a fixed number of
requests, and divides the instructions the server ran by the admissions. The count does
not depend on load, so two contenders compare within a few per cent, and a change to a
script shows its effect at once. It counts user-space instructions only: the system
calls of reading and writing a socket, which a contender that batches pays once per
batch and the others once per check, are not in it (they are in ``redis_admission.py``'s
CPU figure). Under valgrind the server runs some 50 times slower, so the batches of a
contender that batches are as full as its tasks allow (8 acquires and their releases):
this is the figure of a busy worker, not of a lone task.

One process, T tasks (``--tasks``, 8), N admissions per contender (``--admissions``,
3000; 1000 with ``--quick``) over S scopes (100) after a warm-up of two passes. crawlpace
releases each lease with a 200 and a latency, as in ``redis_admission.py``; its releases
are flushed before counting stops, so each admission pays for its own release.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.redis_server import free_port, redis_binary

from redis_admission import (
    PEERS,
    CrawlpaceAdmitter,
    admit_many,
    make_admitter,
    versions,
)

CONTENDERS = ("crawlpace", *PEERS)


class GrindedServer:
    """A redis-server under callgrind, counting only between :meth:`start` and :meth:`stop`."""

    def __init__(self, binary: str, folder: str) -> None:
        self.port = free_port()
        self.out = os.path.join(folder, "callgrind.out")
        self.process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self.out}.%p",
             binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 60.0
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise SystemExit("redis_instructions: no redis-server under valgrind") from None
                time.sleep(0.1)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.process.pid)], capture_output=True, check=False)

    def start(self) -> None:
        self._control("-z")
        self._control("-i", "on")

    def stop(self) -> int:
        """Stop counting; the instructions counted since :meth:`start`."""
        self._control("-i", "off")
        for name in glob.glob(self.out + ".*"):
            os.remove(name)
        self._control("-d")
        total = 0
        for name in glob.glob(self.out + ".*"):
            with open(name) as dump:
                for line in dump:
                    if line.startswith("totals:"):
                        total = int(line.split()[1])
            os.remove(name)
        return total

    def close(self) -> None:
        self.client.close()
        self.process.terminate()
        try:
            self.process.wait(30.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def count(server: GrindedServer, key: str, admissions: int, tasks: int,
                scopes: int) -> dict[str, float]:
    """Admit ``admissions`` requests with contender ``key``; the server's instructions per admission."""
    names = [f"s{i}" for i in range(scopes)]
    server.client.flushall()
    admitter = make_admitter(key, server.url)
    try:
        await admit_many(admitter, names, 0, tasks, None, 2 * scopes)
        if isinstance(admitter, CrawlpaceAdmitter):
            await admitter.store.flush()  # type: ignore[attr-defined]
        server.start()
        admitted, refused = await admit_many(admitter, names, 0, tasks, None, admissions)
        if isinstance(admitter, CrawlpaceAdmitter):
            await admitter.store.flush()  # type: ignore[attr-defined]  # its releases are part of the bill
        total = server.stop()
    finally:
        await admitter.aclose()
    return {"admitted": admitted, "refused": refused,
            "instructions_per_admission": round(total / admitted) if admitted else float("nan")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1000 admissions per contender (< 1 min)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--admissions", type=int, default=0, help="admissions per contender (N)")
    parser.add_argument("--tasks", type=int, default=8, help="concurrent tasks (T)")
    parser.add_argument("--scopes", type=int, default=100, help="scopes the requests spread over (S)")
    args = parser.parse_args(argv)
    admissions = args.admissions or (1000 if args.quick else 3000)
    binary = redis_binary()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None or binary is None:
        raise SystemExit("redis_instructions: needs valgrind (callgrind) and redis-server on PATH")
    began = time.monotonic()
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    print(f"Redis server instructions per admission (callgrind), {date}")
    print(f"{admissions} admissions per contender, {args.tasks} tasks, {args.scopes} scopes, one process")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        server = GrindedServer(binary, folder)
        server_version = str(server.client.info("server")["redis_version"])
        try:
            for key in CONTENDERS:
                results[key] = asyncio.run(count(server, key, admissions, args.tasks, args.scopes))
                print(f"  {key:10s} {results[key]['instructions_per_admission']:>10,.0f} instructions per "
                      f"admission", flush=True)
        finally:
            server.close()
    ours = results["crawlpace"]["instructions_per_admission"]
    ratios = {peer: round(ours / results[peer]["instructions_per_admission"], 2) for peer in PEERS}
    for peer, ratio in ratios.items():
        print(f"crawlpace / {peer}: {ratio:.2f} (goal: at most 1)")
    seconds = time.monotonic() - began
    print(f"finished in {seconds:.0f} s")
    if args.json:
        print(json.dumps({"benchmark": "redis_instructions", "date": date, "versions": versions(),
                          "admissions": admissions, "tasks": args.tasks, "scopes": args.scopes,
                          "results": results, "ratio_crawlpace_over_peer": ratios,
                          "met": all(r <= 1.0 for r in ratios.values()), "seconds": round(seconds, 1),
                          "server": server_version}, sort_keys=True))


if __name__ == "__main__":
    main()
