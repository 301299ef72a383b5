"""Throughput against real API rate limiters, through ``crawlpace.http``.

Run it as ``python bench/api_limiters.py`` (``--quick`` for a run under a
minute, ``--json`` for a machine-readable last line). Needs the ``bench``
extra (Flask-Limiter and waitress).

Each case starts a Flask app guarded by Flask-Limiter (``headers_enabled=True``,
in-memory storage, one limit for every caller) under waitress on 127.0.0.1, in
a process of its own, and sends ``n = k * limit + 1`` GETs to it from 8 tasks
through one ``crawlpace.http.throttled_client`` with
``{"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0}``.
A refused call (429) is retried by the client and counted.

Flask-Limiter sends ``X-RateLimit-Limit``, ``-Remaining``, ``-Reset`` (epoch
seconds) and a ``Retry-After`` on every answer, successes included.

The score is the ideal time over the measured one: a client that knew when
each window starts would spend each window's ``limit`` calls at its start, so
its ``n`` calls would take ``k`` windows (1.0: as fast as the limit allows).
The peer, measured in the same round against a fresh app, is a plain httpx
client told the limit and the window (:func:`run_oracle`): what a client can
reach that cannot see when its requests reach the server. Each row gives the
medians over the rounds, and the median of crawlpace's score over the peer's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

OPEN: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0,
                        "DOWNLOAD_DELAY_PER_SLOT": 0}
TASKS = 8


def serve(strategy: str, limit: str, port: int) -> None:
    """Run the Flask-Limiter app (in the child process)."""
    import waitress
    from flask import Flask
    from flask_limiter import Limiter

    app = Flask("api_limiters")
    limiter = Limiter(lambda: "everyone", app=app, default_limits=[limit], headers_enabled=True,
                      strategy=strategy, storage_uri="memory://")
    counts = {"200": 0, "429": 0}

    @app.after_request
    def count(response: Any) -> Any:
        key = str(response.status_code)
        if key in counts:
            counts[key] += 1
        return response

    @app.route("/")
    def index() -> str:
        return "ok"

    @app.route("/counts")
    @limiter.exempt
    def tally() -> dict[str, int]:
        return dict(counts)

    waitress.serve(app, host="127.0.0.1", port=port, threads=TASKS, _quiet=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def app_server(strategy: str, limit: str) -> Iterator[str]:
    port = free_port()
    child = subprocess.Popen([sys.executable, __file__, "--serve", strategy, limit, str(port)])
    try:
        deadline = time.monotonic() + 20.0
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise RuntimeError("the Flask-Limiter app did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        child.terminate()
        child.wait(10)


async def run_case(base: str, calls: int) -> dict[str, Any]:
    from crawlpace.http import throttled_client

    done = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(calls):
        queue.put_nowait(i)

    async with throttled_client(OPEN, retries=10, timeout=30.0) as client:
        async def worker() -> None:
            nonlocal done
            while not queue.empty():
                queue.get_nowait()
                response = await client.get(base + "/")
                if response.status_code == 200:
                    done += 1

        start = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(TASKS)))
        elapsed = time.monotonic() - start
    import httpx

    async with httpx.AsyncClient() as plain:
        counts = (await plain.get(base + "/counts")).json()
    return {"elapsed": elapsed, "ok": done, "refused": counts["429"], "served": counts["200"]}


async def run_oracle(base: str, calls: int, amount: int, window: float) -> dict[str, Any]:
    """The peer: a plain httpx client that knows the limit and its window.

    It keeps the times its counted requests were answered and sends while
    fewer than ``amount`` of them (with those in flight) lie within the last
    ``window`` seconds: safe for a fixed window (however it is aligned) and a
    moving one alike, since an answer comes after the request reached the
    server. What it cannot know is when a request reached the server.
    """
    import httpx

    done = refused = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(calls):
        queue.put_nowait(i)
    answers: list[float] = []
    inflight = 0
    changed = asyncio.Condition()

    def ready_at(now: float) -> float:
        recent = [t for t in answers if t > now - window]
        free = amount - inflight - len(recent)
        if free > 0:
            return now
        if inflight >= amount:
            return float("inf")
        return sorted(recent)[-(amount - inflight)] + window

    async with httpx.AsyncClient(timeout=30.0) as http:
        async def worker() -> None:
            nonlocal done, refused, inflight
            while not queue.empty():
                queue.get_nowait()
                while True:
                    async with changed:
                        while (at := ready_at(time.monotonic())) > time.monotonic():
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(changed.wait(), min(at - time.monotonic(), 1.0))
                        inflight += 1
                    response = await http.get(base + "/")
                    async with changed:
                        inflight -= 1
                        answers.append(time.monotonic())
                        changed.notify_all()
                    if response.status_code == 200:
                        done += 1
                        break
                    refused += 1

        start = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(TASKS)))
        elapsed = time.monotonic() - start
    return {"elapsed": elapsed, "ok": done, "refused": refused}


def parse_limit(limit: str) -> tuple[int, float]:
    amount, _per, *rest = limit.split()
    count, unit = (1, rest[0]) if len(rest) == 1 else (int(rest[0]), rest[1])
    seconds = {"second": 1.0, "seconds": 1.0, "minute": 60.0, "minutes": 60.0}[unit]
    return int(amount), count * seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a run under a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--limits", help='comma-separated limits, e.g. "10 per second,100 per minute"')
    parser.add_argument("--serve", nargs=3, metavar=("STRATEGY", "LIMIT", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], args.serve[1], int(args.serve[2]))
        return
    # Short windows run six of them (the 60 calls at 10 per second), longer ones fewer.
    if args.quick:
        limits, rounds = ["10 per second", "20 per 2 seconds"], args.rounds or 1
    else:
        limits = ["10 per second", "20 per 2 seconds", "50 per 10 seconds", "100 per minute"]
        rounds = args.rounds or 3
    if args.limits:
        limits = args.limits.split(",")
    results: list[dict[str, Any]] = []
    for limit in limits:
        amount, window = parse_limit(limit)
        k = 6 if window < 10 else 3 if window < 60 else 2
        if args.quick and window >= 2:
            k = 4
        calls = k * amount + 1
        for strategy in ("fixed-window", "moving-window"):
            scores, refusals, peers, peer_refusals = [], [], [], []
            for _ in range(rounds):
                with app_server(strategy, limit) as base:
                    got = asyncio.run(run_case(base, calls))
                with app_server(strategy, limit) as base:
                    peer = asyncio.run(run_oracle(base, calls, amount, window))
                scores.append(k * window / got["elapsed"])
                refusals.append(got["refused"] / (got["ok"] + got["refused"]))
                peers.append(k * window / peer["elapsed"])
                peer_refusals.append(peer["refused"] / (peer["ok"] + peer["refused"]))
            row = {"limit": limit, "strategy": strategy, "calls": calls, "rounds": rounds,
                   "score": statistics.median(scores), "refusal_rate": statistics.median(refusals),
                   "scores": [round(x, 3) for x in scores], "peer": statistics.median(peers),
                   "peer_refusal_rate": statistics.median(peer_refusals),
                   "peers": [round(x, 3) for x in peers],
                   "x_peer": statistics.median(a / b for a, b in zip(scores, peers, strict=True)),
                   "refusals": [round(x, 4) for x in refusals]}
            results.append(row)
            print(f"{limit:>18} {strategy:>14}: {row['score']:.2f} of the limit (ideal 1.00), refusals "
                  f"{100 * row['refusal_rate']:.1f} %; peer {row['peer']:.2f} (refusals "
                  f"{100 * row['peer_refusal_rate']:.1f} %); x peer {row['x_peer']:.2f}  "
                  f"rounds {row['scores']} peer {row['peers']}", flush=True)
    if args.json:
        when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        print(json.dumps({"bench": "api_limiters", "when": when,
                          "python": platform.python_version(), "load": os.getloadavg()[0],
                          "results": results}))


if __name__ == "__main__":
    main()
