"""A Scrapy fleet on crawlpace's shared frontier against one Scrapy process, on the simulator's farm.

Run it as ``python bench/scrapy_fleet.py`` (three rounds of two crawls, a few minutes;
``--quick`` for one small round without the dead site, about a minute; ``--json`` for a
machine-readable last line).

Each round crawls the page list of a fresh ``crawlpace sim`` farm (``mixed`` unless ``--farm``
names another) twice, with the list spider of ``bench/_peers/scrapy_list_spider.py``:

* **single**: one Scrapy process with crawlpace's add-on and rampup on for every host (the
  in-memory store, crawlpace's own scheduler): the reference;
* **fleet**: ``--processes`` Scrapy processes (4) started together, each given the whole list,
  with ``SCHEDULER = "crawlpace.scrapy.SharedScheduler"`` and ``CRAWLPACE_STORE`` on a
  redis-server of the bench's own (from PATH, on a free loopback port): one shared queue, one
  duplicate filter, one set of limits;
* **split** (with ``--split``): the same processes without the shared queue, each given a
  quarter of the list (round robin), the limits still shared through Redis: what a fleet did
  before, a reference for what the shared queue itself costs.

Measured per crawl: the seconds from starting the first process to the end of the last (wall,
which includes starting the interpreters: on a loaded machine, four Scrapy start-ups at once
cost seconds of their own); the crawl span, from the farm's first request to its last, as the
farm's clock saw them, and the same span without the sites that never answer 200 (the ``dead``
site of the mixed farm ends when the circuit breaker gives it up, after jittered pauses whose
sum varies by tens of seconds from run to run, in one process as in a fleet); the pages recorded
with a final 200 (union of every process's output), the URLs recorded by more than one process
(**twice**), the URLs nobody recorded (**missing**), and the broken rules the farm counted (a
request inside a Retry-After embargo or closer than a Crawl-delay). The summary gives the
medians over the rounds and the ratios fleet/single of the medians (the target: a crawl span
ratio of 1.1 or less, every URL once, 0 broken rules).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spawn_env import pin_pythonpath

ROOT = Path(__file__).resolve().parent
SPIDER = ROOT / "_peers" / "scrapy_list_spider.py"
#: The add-on with rampup on for every host, from its defaults (the spider's own AutoThrottle and
#: 8 per domain would otherwise become the add-on's limits).
ADDON = {"ADDONS": json.dumps({"crawlpace.scrapy.Addon": 100}),
         "THROTTLING_SCOPE_DEFAULTS": json.dumps({"rampup": True}),
         "AUTOTHROTTLE_ENABLED": False, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}
#: Seconds a crawl may take before it is stopped (and counted as cut).
LIMIT, QUICK_LIMIT = 300.0, 60.0
QUICK_PAGES, QUICK_HANG = 4, 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def farm_text(name: str, quick: bool) -> str:
    """The farm's TOML; with ``quick``, a few pages per site, short hangs and no dead site.

    A dead site lasts as long as its circuit breaker takes to give it up (tens of seconds, however few
    its pages), which would keep a quick round above a minute.
    """
    path = Path(name)
    text = path.read_text("utf-8") if path.exists() else \
        resources.files("crawlpace.sim").joinpath("farms", f"{name}.toml").read_text("utf-8")
    if not quick:
        return text
    spec = tomllib.loads(text)
    lines = [f"{key} = {json.dumps(value)}" for key, value in spec.items() if key != "site"]
    for site in spec.get("site", []):
        if site.get("profile") == "dead":
            continue
        shrunk = {**site, "pages": min(int(site.get("pages", 50)), QUICK_PAGES)}
        if "hang" in site:
            shrunk["hang"] = min(float(site["hang"]), QUICK_HANG)
        lines += ["", "[[site]]", *(f"{key} = {json.dumps(value)}" for key, value in shrunk.items())]
    return "\n".join(lines) + "\n"


class Redis:
    """A redis-server of the bench's own on a free loopback port."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not on PATH: apt-get install redis-server")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="bench-redis-")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?namespace=bench{uuid.uuid4().hex[:8]}"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


async def start_sim(farm: Path, folder: Path, name: str) -> tuple[asyncio.subprocess.Process, Path, Path]:
    urls, figures = folder / "urls.txt", folder / f"{name}-sim.json"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawlpace", "sim", str(farm), "--urls", str(urls), "--output", str(figures),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, cwd=folder)
    assert process.stdout is not None
    async with asyncio.timeout(30):
        while not (await process.stdout.readline()).startswith(b"serving"):
            if process.returncode is not None:
                raise RuntimeError("crawlpace sim ended before serving")
    return process, urls, figures


async def crawl(name: str, processes: int, settings: dict[str, object], urls: Path, folder: Path,
                limit: float, *, split: bool = False) -> dict[str, Any]:
    wanted = [line for line in urls.read_text("utf-8").split() if line]  # noqa: ASYNC240 - before the crawl
    overrides = [arg for key, value in settings.items() for arg in ("-s", f"{key}={value}")]
    outputs = [folder / f"{name}-{n}.jsonl" for n in range(processes)]
    lists = [urls] * processes
    if split:  # each process its own share of the list, round robin
        lists = [folder / f"{name}-{n}.urls" for n in range(processes)]
        for n, part in enumerate(lists):
            part.write_text("\n".join(wanted[n::processes]) + "\n", encoding="utf-8")
    started = time.monotonic()
    running = []
    for n, output in enumerate(outputs):
        log = (folder / f"{name}-{n}.log").open("wb")
        running.append(await asyncio.create_subprocess_exec(
            sys.executable, "-m", "scrapy", "runspider", str(SPIDER), "-a", f"urls={lists[n]}", "-a",
            f"out={output}", "-s", "LOG_LEVEL=INFO", *overrides, stdout=log, stderr=log, cwd=folder))
    cut = False
    try:
        async with asyncio.timeout(limit):
            codes = [await process.wait() for process in running]
    except TimeoutError:
        cut = True
        for process in running:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        codes = [await process.wait() for process in running]
    seconds = time.monotonic() - started
    seen: dict[str, int] = {}
    ok: set[str] = set()
    for output in outputs:
        if not output.exists():
            continue
        for line in output.read_text("utf-8").splitlines():
            row = json.loads(line)
            seen[row["url"]] = seen.get(row["url"], 0) + 1
            if row.get("status") == 200:
                ok.add(row["url"])
    return {"seconds": round(seconds, 2), "cut": cut, "exit_codes": codes, "done": len(ok),
            "pages": len(wanted), "twice": sum(1 for count in seen.values() if count > 1),
            "missing": sum(1 for url in wanted if url not in seen)}


async def one_round(args: argparse.Namespace, redis: Redis, folder: Path) -> dict[str, dict[str, Any]]:
    farm = folder / "farm.toml"
    farm.write_text(farm_text(args.farm, args.quick), encoding="utf-8")
    limit = QUICK_LIMIT if args.quick else LIMIT
    results = {}
    contenders: list[tuple[str, int, dict[str, object]]] = [
        ("single", 1, ADDON),
        ("fleet", args.processes, {**ADDON, "CRAWLPACE_STORE": redis.url(),
                                    "SCHEDULER": "crawlpace.scrapy.SharedScheduler"})]
    if args.split:
        contenders.append(("split", args.processes, {**ADDON, "CRAWLPACE_STORE": redis.url()}))
    for name, processes, settings in contenders:
        sim, urls, figures = await start_sim(farm, folder, name)
        try:
            result = await crawl(name, processes, settings, urls, folder, limit, split=name == "split")
        finally:
            sim.send_signal(signal.SIGTERM)
            await sim.communicate()
        sites = json.loads(figures.read_text("utf-8"))["sites"]
        result["violations"] = sum(int(site["violations"]) for site in sites.values())
        result["violation_kinds"] = {f"{site_name}/{kind}": count for site_name, site in sites.items()
                                     for kind, count in site["violation_kinds"].items() if count}
        result["requests"] = sum(int(site["requests"]) for site in sites.values())
        firsts = [site["first"] for site in sites.values() if site["first"] is not None]
        lasts = [site["last"] for site in sites.values() if site["last"] is not None]
        result["span"] = round(max(lasts) - min(firsts), 2) if firsts else None
        # The same without the sites that never answer 200 (a dead site ends when the circuit breaker gives
        # it up, a schedule of jittered pauses that varies by tens of seconds from one run to the next).
        live = [site for site in sites.values() if site["ok"] and site["first"] is not None]
        result["live_span"] = round(max(site["last"] for site in live) - min(firsts), 2) if live else None
        results[name] = result
        print(f"  {name:6} {processes} process(es): {result['seconds']:6.1f} s wall, farm's first to last "
              f"request {result['span']} s ({result['live_span']} s without the dead sites), "
              f"{result['done']}/"
              f"{result['pages']} pages with a 200, twice {result['twice']}, missing {result['missing']}, "
              f"{result['violations']} broken rules, {result['requests']} requests"
              f"{', CUT' if result['cut'] else ''}", flush=True)
    return results


async def main() -> None:
    pin_pythonpath()  # the crawls it starts run this tree's crawlpace (bench/_spawn_env.py)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--farm", default="mixed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="one round on a small farm (under a minute)")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    parser.add_argument("--keep", type=Path, help="keep each round's logs and outputs under this folder")
    parser.add_argument("--split", action="store_true",
                        help="also run the fleet the old way: each process its own share of the list, "
                             "the limits shared through the same Redis, no shared queue")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    redis = Redis()
    runs: list[dict[str, dict[str, Any]]] = []
    try:
        for number in range(rounds):
            print(f"round {number + 1}/{rounds} (load average {os.getloadavg()[0]:.1f})", flush=True)
            if args.keep is not None:
                folder = args.keep / f"round{number + 1}"
                folder.mkdir(parents=True, exist_ok=True)
                runs.append(await one_round(args, redis, folder))
                continue
            with tempfile.TemporaryDirectory(prefix="bench-scrapy-fleet-") as temporary:
                runs.append(await one_round(args, redis, Path(temporary)))
    finally:
        redis.close()
    summary: dict[str, Any] = {"farm": args.farm, "quick": args.quick, "rounds": rounds,
                               "processes": args.processes, "runs": runs}
    for name in ("single", "fleet", "split") if args.split else ("single", "fleet"):
        summary[f"{name}_seconds_median"] = statistics.median(run[name]["seconds"] for run in runs)
        summary[f"{name}_span_median"] = statistics.median(run[name]["span"] or 0.0 for run in runs)
        summary[f"{name}_live_span_median"] = statistics.median(run[name]["live_span"] or 0.0 for run in runs)
    summary["ratio"] = round(summary["fleet_seconds_median"] / summary["single_seconds_median"], 3)
    summary["span_ratio"] = round(summary["fleet_span_median"] / max(summary["single_span_median"], 1e-9), 3)
    summary["live_span_ratio"] = round(summary["fleet_live_span_median"]
                                       / max(summary["single_live_span_median"], 1e-9), 3)
    summary["fleet_twice"] = max(run["fleet"]["twice"] for run in runs)
    summary["fleet_missing"] = max(run["fleet"]["missing"] for run in runs)
    summary["violations"] = max(run[name]["violations"] for run in runs for name in ("single", "fleet"))
    if args.split:
        single = max(summary["single_span_median"], 1e-9)
        summary["split_span_ratio"] = round(summary["split_span_median"] / single, 3)
        print(f"split fleet (own queues, shared limits): wall {summary['split_seconds_median']:.1f} s, "
              f"crawl span {summary['split_span_median']:.1f} s: ratio {summary['split_span_ratio']:.2f}")
    print(f"median wall time (start of the first process to the end of the last): single "
          f"{summary['single_seconds_median']:.1f} s, fleet of {args.processes} "
          f"{summary['fleet_seconds_median']:.1f} s: ratio {summary['ratio']:.2f}; median crawl span (the "
          f"farm's first request to its last): single {summary['single_span_median']:.1f} s, fleet "
          f"{summary['fleet_span_median']:.1f} s: ratio {summary['span_ratio']:.2f} (target <= 1.1); the "
          f"same without the dead sites: single {summary['single_live_span_median']:.1f} s, fleet "
          f"{summary['fleet_live_span_median']:.1f} s: ratio {summary['live_span_ratio']:.2f}; fleet "
          f"URLs twice {summary['fleet_twice']}, missing {summary['fleet_missing']}; broken rules (most in a "
          f"run) {summary['violations']}")
    if args.json:
        print(json.dumps(summary))


if __name__ == "__main__":
    asyncio.run(main())
