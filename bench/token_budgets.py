"""Token budgets against a stand-in LLM API, in one process and in three sharing one Redis.

Run it as ``python bench/token_budgets.py`` (``--quick`` for a run under a
minute, ``--json`` for a machine-readable last line). Needs redis-server on
the PATH for the three-process case.

The API is :class:`crawlpace.sim.token_api.TokenAPI` (OpenAI's headers), in a
process of its own on 127.0.0.1: 600 requests and 20,000 tokens a minute,
refilled continuously. Every request sends a prompt of 100 tokens and asks for
up to 200 (answers use 50 to 200, 125 on average), so the tokens budget is
the tighter one, by far. Clients learn both budgets from the answers' headers
(no budget in their settings), reserve 300 tokens per request and settle the
actual use from the body (:func:`crawlpace.budgets.openai_usage`); 8 tasks a
process, each refused request retried.

The full run adds an API that counts input and output tokens apart
(Anthropic's headers): 600 requests, 40,000 input and 4,000 output tokens a
minute, so the output tokens bind; clients reserve 100 input and 200 output
tokens per request.

The score is the tokens the API served per second in the steady part of the
run (from the 10th second on, after the budget's first burst) over the
tighter budget's refill (20,000 / 60 per second; 4,000 / 60 output tokens);
the reference is the budget itself (1.0). Refusals are the API's 429s over
all the requests it saw.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

REQUESTS, TOKENS, WINDOW = 600, 20_000, 60.0
INPUT_TOKENS, OUTPUT_TOKENS = 40_000, 4_000
#: Per style: the budget kinds, and the kind whose budget binds with its size.
STYLES = {"openai": (("requests", "tokens"), "tokens", TOKENS),
          "anthropic": (("requests", "input-tokens", "output-tokens"), "output-tokens", OUTPUT_TOKENS)}
PROMPT, MAX_TOKENS = 100, 200
WARMUP = 10.0
TASKS = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def serve(port: int, style: str) -> None:
    """Run the stand-in API (in the child process); print its figures on stdin's end."""
    from crawlpace.sim import SimServer
    from crawlpace.sim.token_api import TokenAPI

    if style == "openai":
        api = TokenAPI(requests=REQUESTS, tokens=TOKENS, window=WINDOW, latency=(0.05, 0.25))
    else:
        api = TokenAPI(requests=REQUESTS, input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS,
                       window=WINDOW, latency=(0.05, 0.25), style="anthropic")
    scored = STYLES[style][1]
    used: list[tuple[float, float]] = []
    charge = api._charge

    def record(kind: str, units: float) -> None:
        charge(kind, units)
        if kind == scored:
            used.append((time.monotonic(), units))

    api._charge = record  # type: ignore[method-assign]
    async with SimServer(api, "127.0.0.1", port):
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    start = used[0][0] if used else 0.0
    print(json.dumps({"answered": api.stats.answered, "refused": api.stats.refused,
                      "used": [(round(t - start, 4), units) for t, units in used]}), flush=True)


async def client(base: str, seconds: float, redis_url: str | None, style: str) -> int:
    import httpx

    from crawlpace import Throttler
    from crawlpace.budgets import TokenBudget, anthropic_usage, openai_usage

    budget = TokenBudget("api", kinds=STYLES[style][0],
                         usage=openai_usage if style == "openai" else anthropic_usage)
    settings = {"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0, "CONCURRENT_REQUESTS_PER_DOMAIN": TASKS,
                "RANDOMIZE_DOWNLOAD_DELAY": False, "THROTTLING_SCOPES": budget.settings()}
    sent = 0
    throttler = Throttler(settings, store=redis_url) if redis_url else Throttler(settings)
    async with throttler, httpx.AsyncClient(timeout=30.0) as http:
        stop = time.monotonic() + seconds

        async def task() -> None:
            nonlocal sent
            while time.monotonic() < stop:
                async with throttler.slot(scopes=budget.scopes(input_tokens=PROMPT,
                                                               output_tokens=MAX_TOKENS)) as permit:
                    response = await http.get(base + "/v1/chat",
                                              params={"prompt_tokens": PROMPT, "max_tokens": MAX_TOKENS})
                    budget.feedback(permit, response)
                    sent += 1

        await asyncio.gather(*(task() for _ in range(TASKS)))
    return sent


@contextlib.contextmanager
def api_server(style: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(port), style], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the stand-in API did not start")
        yield f"http://127.0.0.1:{port}", child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)


def figures(child: subprocess.Popen[str], seconds: float, budget: float) -> dict[str, Any]:
    out, _ = child.communicate("stop\n", timeout=30)
    data = json.loads(out.strip().splitlines()[-1])
    steady = sum(units for t, units in data["used"] if WARMUP <= t <= seconds)
    rate = steady / (seconds - WARMUP)
    seen = data["answered"] + data["refused"]
    return {"score": rate / (budget / WINDOW), "refusal_rate": data["refused"] / max(seen, 1),
            "answered": data["answered"], "refused": data["refused"]}


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        raise RuntimeError("redis-server is not on the PATH")
    port = free_port()
    child = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        child.terminate()
        child.wait(10)


def run(processes: int, seconds: float, style: str) -> dict[str, Any]:
    with api_server(style) as (base, child):
        if processes == 1:
            asyncio.run(client(base, seconds, None, style))
        else:
            with redis_server() as url:
                workers = [subprocess.Popen([sys.executable, __file__, "--client", base, str(seconds), url,
                                             style]) for _ in range(processes)]
                for worker in workers:
                    if worker.wait(seconds + 60) != 0:
                        raise RuntimeError("a client process failed")
        return figures(child, seconds, STYLES[style][2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a run under a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(int(args.serve[0]), args.serve[1]))
        return
    if args.client:
        asyncio.run(client(args.client[0], float(args.client[1]), args.client[2], args.client[3]))
        return
    seconds = 25.0 if args.quick else 70.0
    cases = [("openai", 1), ("openai", 3)] + ([] if args.quick else [("anthropic", 1), ("anthropic", 3)])
    results = []
    for style, processes in cases:
        row = {"style": style, "processes": processes, "seconds": seconds, **run(processes, seconds, style)}
        results.append(row)
        print(f"{style:>9}, {processes} process(es): {row['score']:.2f} of the {STYLES[style][1]} budget "
              "(reference 1.00), "
              f"refusals {100 * row['refusal_rate']:.2f} % ({row['refused']} of "
              f"{row['answered'] + row['refused']})", flush=True)
    if args.json:
        when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        print(json.dumps({"bench": "token_budgets", "when": when, "python": platform.python_version(),
                          "load": os.getloadavg()[0], "results": results}))


if __name__ == "__main__":
    main()
