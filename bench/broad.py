"""A broad crawl where no site's limit binds: the crawler's own cost per page sets the pace.

Run it as ``python bench/broad.py`` (``--quick`` for a run under about a minute, ``--json``
for a last line of JSON with every figure).

The farm: ``crawlpace sim`` serving ``H`` sites (200 and 2,000 by default) of profile
``ratelimit`` whose bucket (5,000/s, burst 5,000) never runs dry, so every answer is a
200 page; the sites share one port on 127.0.0.2, 127.0.0.3, ... (2,000 sites reach
127.0.7.209: all of it loopback, which Linux routes for the whole of 127.0.0.0/8). The
URL list holds ``pages / H`` pages of every site, shuffled with a fixed seed, so that any
stretch of it spreads over many hosts as a broad crawl does.

Every contender gets the same limits: 64 requests in flight over all hosts, 2 per host,
no delay, no robots.txt, no retries that matter (nothing fails), a 10 s timeout:

* **aiohttp**: a bare aiohttp client (``bench/_peers/bare_client.py``), one
  ``TCPConnector(limit=64, limit_per_host=2)``: the ceiling;
* **aiohttp-uvloop**: the same on uvloop, when uvloop is installed (``--uvloop``);
* **httpx**: a bare ``httpx.AsyncClient`` (64 connections), a semaphore per host;
* **scrapy**: Scrapy alone with the list spider of ``bench/_peers/scrapy_list_spider.py``,
  ``CONCURRENT_REQUESTS=64``, ``CONCURRENT_REQUESTS_PER_DOMAIN=2``, no AutoThrottle;
* **scrapy-crawlpace**: the same spider under crawlpace's add-on, with the same fixed limits;
* **crawlpace**: ``crawlpace crawl URLS -o OUT --delay 0 --per-host 2 --concurrency 64
  --no-robots --quiet`` on the memory store;
* **crawlpace-redis**: the same with ``--redis`` on a redis-server started here on 127.0.0.1.

How a run is measured. The bench starts the contender and watches its output file (one
line per URL for every contender). Start-up (imports, reading the URL list, the journal
import) is left out: the clock starts when the first line appears, and stops when every
URL has its line or ``--seconds`` later. Within that window:

* **pages/s**: lines written in the window / the window's length;
* **CPU s per 1,000 pages**: the contender process's user + system CPU time in the window
  (from ``/proc/PID/stat``; for crawlpace-redis, plus redis-server's) / pages x 1,000;
* **peak RSS**: the process's ``VmHWM`` when the window closes (with the whole URL list
  loaded: it is read before the first page is fetched);
* **farm CPU**: the simulator's CPU share over the window; near 100 % means the farm, not
  the contender, set the pace.

The process is then killed (the figures are taken; a graceful stop would only cost time).
All farms serve for the whole run, and a contender's runs on them follow one another, so
both meet the same load of the machine. Each contender runs ``--rounds`` times per farm (the
order of the contenders rotates each round) and the medians are reported, with each
contender's ratio to bare aiohttp's pages/s and, per contender, the CPU per page at the
largest farm over that at the smallest (``growth``: 1.0 means the cost per page does not
depend on the number of hosts), and the same ratio for the CPU per page a contender spends
beyond bare aiohttp (``overhead_growth``): with the same number of pages, a larger farm has
fewer pages per host, so every contender opens more connections per page, and that cost
shows in ``growth`` whatever the contender does per request. Every complete line of the
output is also checked: the share of lines that answer a 200 (the ``200s`` column) must be
100 %.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spawn_env import pin_pythonpath

HERE = Path(__file__).resolve().parent
PEERS = HERE / "_peers"
CONCURRENCY = 64
PER_HOST = 2
RATE = 5000.0
SEED = 19
TICK = os.sysconf("SC_CLK_TCK")
POLL = 0.05
START_LIMIT = 120.0

# -- measuring a process ------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class LineCounter:
    """Counts the lines of a file that another process appends to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = 0
        self._offset = 0

    def poll(self) -> int:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return self.lines
        self._offset += len(data)
        self.lines += data.count(b"\n")
        return self.lines


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the farm and redis -----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Farm:
    hosts: int
    pages: int
    process: subprocess.Popen[bytes]
    urls: Path


def farm_toml(hosts: int, per_site: int) -> str:
    sites = [f'[[site]]\nname = "s{index}"\nprofile = "ratelimit"\nrate = {RATE}\nburst = {int(RATE)}\n'
             f"pages = {per_site}\n" for index in range(hosts)]
    return "port = 0\n\n" + "\n".join(sites)


def start_farm(hosts: int, pages: int, folder: Path) -> Farm:
    return serving(launch_farm(hosts, pages, folder), hosts, folder)


def launch_farm(hosts: int, pages: int, folder: Path) -> subprocess.Popen[bytes]:
    """Start ``crawlpace sim`` on a farm of ``hosts`` sites; :func:`serving` waits for it."""
    per_site = max(pages // hosts, 1)
    spec = folder / "farm.toml"
    spec.write_text(farm_toml(hosts, per_site), encoding="utf-8")
    listed = folder / "listed.txt"
    err = (folder / "sim.stderr").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "crawlpace", "sim", str(spec), "--urls", str(listed),
                                "--output", ""], stdout=subprocess.PIPE, stderr=err, cwd=folder)
    err.close()
    return process


def serving(process: subprocess.Popen[bytes], hosts: int, folder: Path) -> Farm:
    """Wait until a launched farm serves, then write its shuffled URL list."""
    listed = folder / "listed.txt"
    assert process.stdout is not None
    deadline = time.monotonic() + START_LIMIT
    while time.monotonic() < deadline:
        line = process.stdout.readline().decode("utf-8", "replace")
        if not line:
            raise RuntimeError("crawlpace sim ended before serving: "
                               + (folder / "sim.stderr").read_text(errors="replace"))
        if line.startswith("serving"):
            break
    process.stdout.close()
    urls = [line for line in listed.read_text(encoding="utf-8").split() if "/page/" in line]
    random.Random(SEED).shuffle(urls)
    shuffled = folder / "urls.txt"
    shuffled.write_text("\n".join(urls) + "\n", encoding="utf-8")
    return Farm(hosts, len(urls), process, shuffled)


class Redis:
    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server") or shutil.which("valkey-server")
        if binary is None:
            raise RuntimeError("crawlpace-redis needs redis-server on PATH")
        self.port = free_port()
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), \
                    socket.create_connection(("127.0.0.1", self.port), 0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), 2) as sock:
            sock.sendall(b"FLUSHALL\r\n")
            sock.recv(16)


# -- the contenders -----------------------------------------------------------------

Command = Callable[[Path, Path, "Redis | None"], list[str]]


def bare(client: str, *extra: str) -> Command:
    def command(urls: Path, out: Path, redis: Redis | None) -> list[str]:
        return [sys.executable, str(PEERS / "bare_client.py"), client, str(urls), str(out),
                "--concurrency", str(CONCURRENCY), "--per-host", str(PER_HOST), *extra]
    return command


SCRAPY_LIMITS = {"AUTOTHROTTLE_ENABLED": "False", "CONCURRENT_REQUESTS": str(CONCURRENCY),
                 "CONCURRENT_REQUESTS_PER_DOMAIN": str(PER_HOST), "DOWNLOAD_DELAY": "0",
                 "ROBOTSTXT_OBEY": "False", "RETRY_ENABLED": "False", "LOG_LEVEL": "ERROR"}
ADDON = {"ADDONS": '{"crawlpace.scrapy.Addon": 100}', "DOWNLOAD_DELAY_PER_SLOT": "0",
         "RANDOMIZE_DOWNLOAD_DELAY": "False"}


def scrapy(**settings: str) -> Command:
    overrides = [arg for name, value in settings.items() for arg in ("-s", f"{name}={value}")]

    def command(urls: Path, out: Path, redis: Redis | None) -> list[str]:
        return [sys.executable, "-m", "scrapy", "runspider", str(PEERS / "scrapy_list_spider.py"),
                "-a", f"urls={urls}", "-a", f"out={out}", *overrides]
    return command


def crawlpace(shared: bool) -> Command:
    def command(urls: Path, out: Path, redis: Redis | None) -> list[str]:
        extra = ["--redis", redis.url] if shared and redis is not None else []
        return [sys.executable, "-m", "crawlpace", "crawl", str(urls), "-o", str(out), "--delay", "0",
                "--per-host", str(PER_HOST), "--concurrency", str(CONCURRENCY), "--no-robots", "--quiet",
                "--retries", "0", *extra]
    return command


@dataclass(frozen=True)
class Contender:
    name: str
    command: Command
    needs: str = ""


CONTENDERS = {c.name: c for c in (
    Contender("aiohttp", bare("aiohttp"), "aiohttp"),
    Contender("aiohttp-uvloop", bare("aiohttp", "--uvloop"), "uvloop"),
    Contender("httpx", bare("httpx"), "httpx"),
    Contender("scrapy", scrapy(**SCRAPY_LIMITS), "scrapy"),
    Contender("scrapy-crawlpace", scrapy(**SCRAPY_LIMITS, **ADDON), "scrapy"),
    Contender("crawlpace", crawlpace(shared=False)),
    Contender("crawlpace-redis", crawlpace(shared=True), "redis"),
)}
DEFAULT = "aiohttp,httpx,scrapy,scrapy-crawlpace,crawlpace,crawlpace-redis"


def installed(module: str) -> bool:
    try:
        version(module)
    except PackageNotFoundError:
        return False
    return True


# -- one run --------------------------------------------------------------------------


@dataclass
class Run:
    contender: str
    hosts: int
    pages: int = 0
    seconds: float = 0.0
    cpu: float = 0.0
    rss_mb: float = 0.0
    farm_cpu_share: float = 0.0
    finished: bool = False
    ok_share: float | None = None
    not_200: dict[str, int] = field(default_factory=dict)
    error: str = ""

    @property
    def rate(self) -> float | None:
        return self.pages / self.seconds if self.seconds > 0 and self.pages else None

    @property
    def cpu_per_1000(self) -> float | None:
        return self.cpu / self.pages * 1000 if self.pages else None


def run_one(contender: Contender, farm: Farm, folder: Path, limit: float, redis: Redis | None) -> Run:
    run = Run(contender.name, farm.hosts)
    out = folder / f"{contender.name}-{farm.hosts}.jsonl"
    for stale in folder.glob(f"{out.name}*"):
        stale.unlink()
    if redis is not None and contender.name == "crawlpace-redis":
        redis.flush()
    err = (folder / f"{contender.name}.stderr").open("wb")
    process = subprocess.Popen(contender.command(farm.urls, out, redis), stdout=subprocess.DEVNULL,
                               stderr=err, cwd=folder)
    err.close()
    extra = [redis.process.pid] if redis is not None and contender.name == "crawlpace-redis" else []
    counter = LineCounter(out)
    try:
        started = time.monotonic()
        while counter.poll() == 0:
            if process.poll() is not None or time.monotonic() - started > START_LIMIT:
                run.error = (f"no output (exit {process.poll()}): "
                             + _tail(folder / f"{contender.name}.stderr"))
                return run
            time.sleep(0.01)
        t0, lines0 = time.monotonic(), counter.lines
        cpu0 = sum(cpu_seconds(pid) for pid in (process.pid, *extra))
        farm0 = cpu_seconds(farm.process.pid)
        while True:
            time.sleep(POLL)
            lines = counter.poll()
            now = time.monotonic()
            exited = process.poll() is not None
            if lines >= farm.pages or exited or now - t0 >= limit:
                break
        if not exited:
            run.cpu = sum(cpu_seconds(pid) for pid in (process.pid, *extra)) - cpu0
            run.rss_mb = peak_rss_mb(process.pid)
        run.farm_cpu_share = (cpu_seconds(farm.process.pid) - farm0) / (now - t0)
        run.pages, run.seconds = lines - lines0, now - t0
        run.finished = lines >= farm.pages
        if exited and not run.finished:
            run.error = f"exited with {process.returncode}: " + _tail(folder / f"{contender.name}.stderr")
    finally:
        # Measured already: no need to wait for a graceful stop (crawlpace's would write its summary).
        process.kill()
        process.wait()
    if out.exists():  # every line written, complete or not, must be a 200 page
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()
                if line.endswith("}")]
        run.ok_share = sum(1 for row in rows if row.get("status") == 200) / max(len(rows), 1)
        run.not_200 = dict(Counter(f"{row.get('status')} {row.get('error') or ''}".strip()
                                   for row in rows if row.get("status") != 200).most_common(3))
    return run


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-600:]


# -- the report -----------------------------------------------------------------------


def median(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def summarise(runs: list[Run], names: list[str], farms: list[int]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for hosts in farms:
        rows: dict[str, Any] = {}
        for name in names:
            mine = [run for run in runs if run.contender == name and run.hosts == hosts]
            rows[name] = {
                "pages_per_s": median([run.rate for run in mine]),
                "cpu_s_per_1000": median([run.cpu_per_1000 for run in mine]),
                "peak_rss_mb": median([run.rss_mb or None for run in mine]),
                "farm_cpu_share": median([run.farm_cpu_share for run in mine]),
                "ok_share": median([run.ok_share for run in mine]),
                "rounds": len(mine), "errors": [run.error for run in mine if run.error],
                "not_200": [run.not_200 for run in mine if run.not_200],
            }
        base = rows.get("aiohttp", {}).get("pages_per_s")
        scrapy_rate = rows.get("scrapy", {}).get("pages_per_s")
        for row in rows.values():
            rate = row["pages_per_s"]
            row["vs_aiohttp"] = rate / base if rate and base else None
            row["vs_scrapy"] = rate / scrapy_rate if rate and scrapy_rate else None
        table[str(hosts)] = rows
    if len(farms) > 1:
        small, large = str(min(farms)), str(max(farms))
        table["growth"] = {}
        for name in names:
            low, high = table[small][name]["cpu_s_per_1000"], table[large][name]["cpu_s_per_1000"]
            table["growth"][name] = high / low if low and high else None
        # The same growth for what a contender spends beyond the bare client: opening a
        # connection per new host costs every contender alike, and hides in the plain figure.
        base_low, base_high = table[small].get("aiohttp", {}), table[large].get("aiohttp", {})
        table["overhead_growth"] = {}
        for name in names:
            if name == "aiohttp" or not base_low or not base_high:
                continue
            low, high = table[small][name]["cpu_s_per_1000"], table[large][name]["cpu_s_per_1000"]
            b_low, b_high = base_low["cpu_s_per_1000"], base_high["cpu_s_per_1000"]
            if None in (low, high, b_low, b_high) or low - b_low <= 0:
                table["overhead_growth"][name] = None
            else:
                table["overhead_growth"][name] = (high - b_high) / (low - b_low)
    return table


def print_table(table: dict[str, Any], names: list[str], farms: list[int], pages: dict[int, int]) -> None:
    for hosts in farms:
        rows = table[str(hosts)]
        print(f"\n{hosts} hosts, {pages[hosts]:,} pages listed")
        print("| contender | pages/s | x aiohttp | x scrapy | CPU s/1000 pages | peak RSS MB | farm CPU "
              "| 200s |")
        print("|---|--:|--:|--:|--:|--:|--:|--:|")
        for name in names:
            row = rows[name]
            print(f"| {name} | {fmt(row['pages_per_s'])} | {fmt(row['vs_aiohttp'], 2)} | "
                  f"{fmt(row['vs_scrapy'], 2)} | {fmt(row['cpu_s_per_1000'], 3)} | "
                  f"{fmt(row['peak_rss_mb'])} | "
                  f"{fmt(None if row['farm_cpu_share'] is None else row['farm_cpu_share'] * 100)} % | "
                  f"{fmt(None if row['ok_share'] is None else row['ok_share'] * 100)} % |")
            for lines in row["not_200"][:1]:
                print(f"|   {name}: lines other than a 200: {lines} |")
            for error in row["errors"][:1]:
                print(f"|   {name} failed: {error.strip().splitlines()[-1] if error.strip() else error} |")
    if "growth" in table:
        print(f"\nCPU per page at {max(farms)} hosts / at {min(farms)} hosts: "
              + ", ".join(f"{name} {fmt(value, 2)}" for name, value in table["growth"].items()))
    if table.get("overhead_growth"):
        print("the same for the CPU per page beyond bare aiohttp's: "
              + ", ".join(f"{name} {fmt(value, 2)}" for name, value in table["overhead_growth"].items()))


def main(argv: list[str] | None = None) -> None:
    pin_pythonpath()  # the crawls it starts run this tree's crawlpace (bench/_spawn_env.py)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10,000 pages, 2 s windows, 1 round")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    parser.add_argument("--hosts", default="200,2000", help="farm sizes, comma-separated (default 200,2000)")
    parser.add_argument("--pages", type=int, help="pages listed per farm (default 100,000; 10,000 quick)")
    parser.add_argument("--seconds", type=float, help="longest window per run (default 30; 2 quick)")
    parser.add_argument("--rounds", type=int, help="runs per contender and farm (default 3; 1 quick)")
    parser.add_argument("--contenders", default=DEFAULT,
                        help=f"comma-separated, from {', '.join(CONTENDERS)} (default {DEFAULT})")
    parser.add_argument("--uvloop", action="store_true", help="add aiohttp-uvloop")
    args = parser.parse_args(argv)
    began = time.monotonic()
    pages = args.pages or (10_000 if args.quick else 100_000)
    limit = args.seconds or (2.0 if args.quick else 30.0)
    rounds = args.rounds or (1 if args.quick else 3)
    farms = [int(part) for part in args.hosts.split(",")]
    names = [name.strip() for name in args.contenders.split(",") if name.strip()]
    if args.uvloop and "aiohttp-uvloop" not in names:
        names.insert(1, "aiohttp-uvloop")
    unknown = [name for name in names if name not in CONTENDERS]
    if unknown:
        parser.error(f"--contenders: unknown {unknown}; choose from {', '.join(CONTENDERS)}")
    skipped = [name for name in names if CONTENDERS[name].needs not in ("", "redis")
               and not installed(CONTENDERS[name].needs)]
    if "crawlpace-redis" in names and not (shutil.which("redis-server") or shutil.which("valkey-server")):
        skipped.append("crawlpace-redis")
    for name in skipped:
        print(f"skipping {name}: not installed", file=sys.stderr)
    names = [name for name in names if name not in skipped]
    runs: list[Run] = []
    listed: dict[int, int] = {}
    root = Path(tempfile.mkdtemp(prefix="crawlpace-broad-"))
    redis = Redis(root) if "crawlpace-redis" in names else None
    # Every farm serves for the whole run (an idle one costs nothing), so that a contender's
    # runs on the farms come one right after the other, under the same load of the machine.
    running: list[Farm] = []
    try:
        launched = []
        for hosts in farms:  # all farms start at once; the large one takes seconds to set up
            folder = root / f"h{hosts}"
            folder.mkdir()
            launched.append((launch_farm(hosts, pages, folder), hosts, folder))
        for process, hosts, folder in launched:
            try:
                running.append(serving(process, hosts, folder))
            except BaseException:
                for other, _, _ in launched:
                    stop(other)
                raise
            listed[hosts] = running[-1].pages
        for round_no in range(rounds):
            order = names[round_no % len(names):] + names[:round_no % len(names)]
            for name in order:
                for farm in running:
                    run = run_one(CONTENDERS[name], farm, root / f"h{farm.hosts}", limit, redis)
                    runs.append(run)
                    print(f"  {farm.hosts} hosts, round {round_no + 1}: {name}: {fmt(run.rate)} pages/s, "
                          f"{fmt(run.cpu_per_1000, 3)} CPU s/1000, {fmt(run.rss_mb)} MB"
                          f"{' ' + run.error.strip()[-200:] if run.error else ''}", file=sys.stderr)
    finally:
        for farm in running:
            stop(farm.process)
        if redis is not None:
            stop(redis.process)
        shutil.rmtree(root, ignore_errors=True)
    table = summarise(runs, names, farms)
    took = time.monotonic() - began
    print(f"broad crawl, {dt.date.today()}, {platform.python_version()}, {os.cpu_count()} cores; "
          f"{CONCURRENCY} in flight, {PER_HOST} per host, windows of at most {limit:g} s, {rounds} round(s); "
          f"the bench took {took:.0f} s")
    print_table(table, names, farms, listed)
    if args.json:
        print(json.dumps({"date": str(dt.date.today()), "pages": listed, "seconds": limit, "rounds": rounds,
                          "took_s": round(took, 1),
                          "results": table, "runs": [run.__dict__ for run in runs]}, default=str))


if __name__ == "__main__":
    main()
