"""How much three crawlers get out of a simulated farm, and how many of its rules they break.

Run it as ``python bench/crawl_efficiency.py`` (add ``--quick`` for a run under a minute
and ``--json`` for a machine-readable last line).

Three contenders crawl the same list of page URLs, one after the other, each against a
fresh farm of the site simulator (``crawlpace sim``, the ``mixed`` farm unless
``--farm`` names another):

* **crawlpace**: ``crawlpace crawl URLS -o OUT.jsonl --quiet --json`` with its default
  settings: robots.txt obeyed, 1 request in flight and 1 s (with jitter) between
  requests per host, 16 in flight in all, 3 resends after a backoff answer, 10 s
  timeout. Rampup, which would look for faster rates, is not in crawlpace yet.
* **Scrapy**: ``scrapy runspider bench/_peers/scrapy_list_spider.py``, AutoThrottle on
  with its defaults, 8 requests in flight per domain, 2 retries on 429, 503 and the
  other codes of Scrapy's default list, robots.txt obeyed, 10 s timeout.
* **aiohttp**: ``bench/_peers/naive_aiohttp.py``, the naive baseline: 8 workers in all,
  a 1 s pause and a resend after 429, 503 or an exception (at most 3 resends), no
  robots.txt, 10 s timeout.

For each contender the script starts ``crawlpace sim FARM --urls URLS --output FIG``
as a subprocess (so the farm has its own process and its own clock of limits), waits
until it serves, runs the contender as another subprocess with a time limit (300 s,
15 s with ``--quick``; on the limit it gets SIGTERM, then SIGKILL after a grace
period, and the run is marked as cut), then stops the farm with SIGTERM and reads the
figures it writes. Per site it reports:

* **pages done**: page URLs the contender itself recorded with a final 200 (its own
  output file; robots.txt and answers it had given up on do not count);
* **goodput/capacity**: the farm's ratio of 200s per second of the site's active period
  to what the site can sustain (no figure for sites without a capacity);
* **429+503**: answers of those two statuses the farm gave;
* **violations**: requests that broke a ``Retry-After`` or a ``Crawl-delay`` the site
  had stated;
* **last request**: seconds from the contender's start to the site's last request.

Totals: pages done, requests, 429+503 and violations summed over the sites, the median
goodput/capacity over the sites that have a capacity, the wall time from the
contender's start to its exit (its interpreter's start-up included), and the seconds
to its last request to a site that is not dead (a dead site can hold a crawler long
after the rest is done). Ratios put each contender's figures over crawlpace's, and its
429+503 answers and violations per 100 requests. With ``--repeats R`` (3 by default, 1 with ``--quick``)
the three contenders take turns R times, each round starting with the next one, and
every figure printed is the median over the rounds.

``--quick`` crawls a smaller copy of the farm built on the fly: every site keeps its
profile and limits but serves at most 5 pages, and a ``flaky`` site hangs for at most
3 s (20 s in ``mixed``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "_peers"
#: Pages per site and longest hang of a ``flaky`` site in the ``--quick`` farm.
QUICK_PAGES = 5
QUICK_HANG = 3.0
#: Seconds a contender may run (full run, ``--quick``).
LIMIT = 300.0
QUICK_LIMIT = 15.0
#: Seconds between SIGTERM and SIGKILL for a contender past its limit.
GRACE = 5.0
QUICK_GRACE = 2.0
#: Seconds the farm may take to start serving, and to stop and write its figures.
SIM_START = 30.0
SIM_STOP = 30.0


# -- the contenders ------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a file (a line cut short by a kill is skipped)."""
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            row = json.loads(line)
            if isinstance(row, dict):
                rows.append(row)
    return rows


def final_statuses(rows: list[dict[str, Any]], ok: Callable[[dict[str, Any]], bool]) -> dict[str, bool]:
    """URL -> whether its last recorded answer counts as a page done."""
    done: dict[str, bool] = {}
    for row in rows:
        url = row.get("url")
        if isinstance(url, str):
            done[url] = ok(row)
    return done


@dataclass(frozen=True)
class Contender:
    """One crawler: how to start it, and how to read which pages it got."""

    key: str
    label: str
    settings: str
    command: Callable[[Path, Path], list[str]]
    page_ok: Callable[[dict[str, Any]], bool]

    def pages_done(self, output: Path) -> dict[str, bool]:
        return final_statuses(read_jsonl(output), self.page_ok)


def crawlpace_command(urls: Path, output: Path) -> list[str]:
    return [sys.executable, "-m", "crawlpace", "crawl", str(urls), "-o", str(output), "--quiet", "--json"]


def scrapy_command(urls: Path, output: Path) -> list[str]:
    return [sys.executable, "-m", "scrapy", "runspider", str(PEERS / "scrapy_list_spider.py"),
            "-a", f"urls={urls}", "-a", f"out={output}"]


def naive_command(urls: Path, output: Path) -> list[str]:
    return [sys.executable, str(PEERS / "naive_aiohttp.py"), str(urls), str(output)]


CONTENDERS: tuple[Contender, ...] = (
    Contender("crawlpace", "crawlpace",
              "crawlpace crawl defaults: robots.txt, 1 in flight + 1 s delay per host, 16 in all, "
              "3 resends, 10 s timeout",
              crawlpace_command,
              lambda row: row.get("outcome") == "ok" and row.get("status") == 200),
    Contender("scrapy", "Scrapy",
              "AutoThrottle (defaults), CONCURRENT_REQUESTS_PER_DOMAIN 8, RETRY_TIMES 2 on "
              "429/503/5xx/408, ROBOTSTXT_OBEY, DOWNLOAD_TIMEOUT 10",
              scrapy_command, lambda row: row.get("status") == 200),
    Contender("aiohttp", "aiohttp",
              "naive: 8 workers, 1 s pause + resend on 429/503/exception (3 resends), no robots.txt, "
              "10 s timeout",
              naive_command, lambda row: row.get("status") == 200),
)


# -- the farm -------------------------------------------------------------------------


def farm_source(name: str) -> dict[str, Any]:
    """The farm's parsed TOML, from a file or a shipped farm's name."""
    path = Path(name)
    if path.exists():
        text = path.read_text(encoding="utf-8")
    else:
        text = resources.files("crawlpace.sim").joinpath("farms", f"{name}.toml").read_text("utf-8")
    return tomllib.loads(text)


def toml_value(value: object) -> str:
    """A farm value written as TOML (numbers, booleans, strings and lists of them).

    JSON spells these the way TOML does; NaN and infinities, which JSON cannot, are refused.
    """
    return json.dumps(value, allow_nan=False)


def quick_farm(spec: dict[str, Any]) -> str:
    """A copy of the farm with at most ``QUICK_PAGES`` pages per site and short hangs."""
    lines = ["# Written by bench/crawl_efficiency.py --quick: the farm, with fewer pages and shorter hangs."]
    lines += [f"{key} = {toml_value(value)}" for key, value in spec.items() if key != "site"]
    for site in spec.get("site", []):
        shrunk = dict(site)
        shrunk["pages"] = min(int(site.get("pages", 50)), QUICK_PAGES)
        if site.get("profile") == "flaky":
            shrunk["hang"] = min(float(site.get("hang", 30.0)), QUICK_HANG)
        lines += ["", "[[site]]", *(f"{key} = {toml_value(value)}" for key, value in shrunk.items())]
    return "\n".join(lines) + "\n"


@dataclass
class SimProcess:
    """A running ``crawlpace sim``."""

    process: asyncio.subprocess.Process
    urls: Path
    figures: Path


async def start_sim(farm: str, folder: Path) -> SimProcess:
    urls, figures = folder / "urls.txt", folder / "sim.json"
    with (folder / "sim.stderr").open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawlpace", "sim", farm, "--urls", str(urls), "--output", str(figures),
            stdout=asyncio.subprocess.PIPE, stderr=err, cwd=folder)
    assert process.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(SIM_START):
            while True:
                line = (await process.stdout.readline()).decode("utf-8", "replace")
                if not line:
                    raise RuntimeError("crawlpace sim ended before serving:\n" + "".join(seen)
                                       + (folder / "sim.stderr").read_text(errors="replace"))
                seen.append(line)
                if line.startswith("serving"):
                    break
        if not urls.exists():
            raise RuntimeError(f"crawlpace sim wrote no URL file:\n{''.join(seen)}")
    except BaseException:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    return SimProcess(process, urls, figures)


async def stop_sim(sim: SimProcess) -> dict[str, Any]:
    """SIGTERM the farm; return the figures it wrote."""
    sim.process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(SIM_STOP):
        await sim.process.communicate()
    return load_json(sim.figures)


def load_json(path: Path) -> dict[str, Any]:
    figures: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return figures


# -- one run --------------------------------------------------------------------------


@dataclass
class SiteFigures:
    """One site in one run of one contender."""

    pages: int
    done: int
    requests: int
    ok: int
    throttled: int
    violations: int
    violation_kinds: dict[str, int]
    goodput: float | None
    capacity: float | None
    goodput_ratio: float | None
    last_request: float | None


@dataclass
class Run:
    """One contender against one fresh farm."""

    contender: str
    round: int
    wall: float
    exit_code: int | None
    cut: bool
    sites: dict[str, SiteFigures] = field(default_factory=dict)
    summary: dict[str, Any] | None = None

    def total(self, key: str) -> int:
        return sum(int(getattr(site, key)) for site in self.sites.values())

    @property
    def last_live_request(self) -> float | None:
        """Seconds to the last request to a site that is not dead (capacity 0)."""
        times = [site.last_request for site in self.sites.values()
                 if site.capacity != 0 and site.last_request is not None]
        return max(times) if times else None

    @property
    def median_ratio(self) -> float | None:
        ratios = [site.goodput_ratio for site in self.sites.values() if site.goodput_ratio is not None]
        return statistics.median(ratios) if ratios else None


async def run_process(command: list[str], folder: Path, limit: float,
                      grace: float) -> tuple[int | None, bool]:
    """Run a contender with a time limit; return its exit code and whether it was cut."""
    with (folder / "stdout.txt").open("wb") as out, (folder / "stderr.txt").open("wb") as err:
        process = await asyncio.create_subprocess_exec(*command, stdout=out, stderr=err, cwd=folder,
                                                       start_new_session=True)
    try:
        await asyncio.wait_for(process.wait(), limit)
        return process.returncode, False
    except TimeoutError:
        stop_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            stop_group(process.pid, signal.SIGKILL)
            await process.wait()
        return process.returncode, True
    finally:
        if process.returncode is None:  # interrupted (Ctrl-C): leave no crawler behind
            stop_group(process.pid, signal.SIGKILL)


def stop_group(pid: int, signum: int) -> None:
    """Signal the contender's process group (it was started in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def site_of(url: str, prefixes: dict[str, str]) -> str | None:
    for prefix, name in prefixes.items():
        if url.startswith(prefix):
            return name
    return None


async def run_one(contender: Contender, round_no: int, farm: str, folder: Path, limit: float,
                  grace: float) -> Run:
    sim = await start_sim(farm, folder)
    try:
        started = time.monotonic()
        exit_code, cut = await run_process(contender.command(sim.urls, folder / "out.jsonl"), folder,
                                           limit, grace)
        wall = time.monotonic() - started
    finally:
        figures = await stop_sim(sim)
    run = Run(contender.key, round_no, wall, exit_code, cut)
    tally(run, contender, folder, sim.urls, figures, started)
    return run


def tally(run: Run, contender: Contender, folder: Path, url_file: Path, figures: dict[str, Any],
          started: float) -> None:
    """Fill ``run`` from the farm's figures and the contender's own output."""
    urls = [line for line in url_file.read_text(encoding="utf-8").split() if line]
    output = folder / "out.jsonl"
    sites: dict[str, dict[str, Any]] = figures["sites"]
    prefixes = {f"{site['url']}/": name for name, site in sites.items()}
    pages = dict.fromkeys(sites, 0)
    for url in urls:
        name = site_of(url, prefixes)
        if name is not None:
            pages[name] += 1
    done = dict.fromkeys(sites, 0)
    for url, ok in contender.pages_done(output).items():
        name = site_of(url, prefixes)
        if ok and name is not None:
            done[name] += 1
    for name, site in sites.items():
        last = site.get("last")
        run.sites[name] = SiteFigures(
            pages=pages[name], done=done[name], requests=int(site["requests"]), ok=int(site["ok"]),
            throttled=int(site["throttled"]), violations=int(site["violations"]),
            violation_kinds={str(k): int(v) for k, v in dict(site.get("violation_kinds") or {}).items()},
            goodput=site.get("goodput"), capacity=site.get("capacity"),
            goodput_ratio=site.get("goodput_ratio"),
            last_request=None if last is None else round(float(last) - started, 3))
    if contender.key == "crawlpace":
        lines = (folder / "stdout.txt").read_text(encoding="utf-8", errors="replace").splitlines()
        for line in reversed(lines):
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    run.summary = json.loads(line)
                break


# -- medians over the rounds ------------------------------------------------------------------


def median_of(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


SITE_KEYS = ("pages", "done", "requests", "ok", "throttled", "violations", "goodput_ratio", "last_request")


def site_medians(runs: list[Run], site: str) -> dict[str, float | None]:
    return {key: median_of([getattr(run.sites[site], key) for run in runs]) for key in SITE_KEYS}


def total_medians(runs: list[Run]) -> dict[str, float | None]:
    return {
        "pages": median_of([run.total("pages") for run in runs]),
        "done": median_of([run.total("done") for run in runs]),
        "requests": median_of([run.total("requests") for run in runs]),
        "ok": median_of([run.total("ok") for run in runs]),
        "throttled": median_of([run.total("throttled") for run in runs]),
        "violations": median_of([run.total("violations") for run in runs]),
        "goodput_ratio": median_of([run.median_ratio for run in runs]),
        "wall": median_of([run.wall for run in runs]),
        "last_live_request": median_of([run.last_live_request for run in runs]),
        "cut_runs": sum(run.cut for run in runs),
    }


# -- report --------------------------------------------------------------------------------


def fmt(value: float | None, kind: str = "n") -> str:
    if value is None:
        return "-"
    if kind == "%":
        return f"{value:.0%}"
    if kind == "s":
        return f"{value:.1f}"
    if kind == "x":
        return f"{value:.2f}"
    return f"{value:g}" if value != int(value) else f"{int(value)}"


Figures = dict[str, dict[str, float | None]]


def print_site_table(names: list[str], contenders: list[Contender], sites: dict[str, Figures],
                     totals: Figures) -> None:
    groups = (("pages done", "done", "n"), ("goodput/capacity", "goodput_ratio", "%"),
              ("429+503", "throttled", "n"), ("violations", "violations", "n"))
    width = max(len(c.label) for c in contenders) + 1
    site_width = max(len(name) for name in [*names, "total"]) + 1
    group_width = width * len(contenders)
    head1 = f"{'':<{site_width}}{'pages':>6}" + "".join(
        f" | {title:^{group_width}}" for title, _, _ in groups)
    head2 = f"{'site':<{site_width}}{'':>6}" + "".join(
        " | " + "".join(f"{c.label:>{width}}" for c in contenders) for _ in groups)
    print(head1)
    print(head2)
    print("-" * len(head2))

    def row(label: str, pages: float | None, figures: Figures) -> str:
        return f"{label:<{site_width}}{fmt(pages):>6}" + "".join(
            " | " + "".join(f"{fmt(figures[c.key][key], kind):>{width}}" for c in contenders)
            for _, key, kind in groups)

    for name in names:
        first = sites[name][contenders[0].key]
        print(row(name, first["pages"], sites[name]))
    print("-" * len(head2))
    print(row("total", totals[contenders[0].key]["pages"], totals))
    print("  goodput/capacity total: the median over the sites that have a capacity")


def print_last_requests(names: list[str], contenders: list[Contender], sites: dict[str, Figures]) -> None:
    width = max(len(c.label) for c in contenders) + 2
    site_width = max(len(name) for name in names) + 1
    print()
    print("seconds from the contender's start to the site's last request")
    print(f"{'site':<{site_width}}" + "".join(f"{c.label:>{width}}" for c in contenders))
    for name in names:
        print(f"{name:<{site_width}}" + "".join(
            f"{fmt(sites[name][c.key]['last_request'], 's'):>{width}}" for c in contenders))


def ratios(contenders: list[Contender], totals: Figures) -> dict[str, dict[str, Any]]:
    """Each contender's totals next to crawlpace's, and its refusals and violations per request."""
    base = totals["crawlpace"]

    def over(mine: float | None, theirs: float | None) -> float | None:
        return None if mine is None or not theirs else round(mine / theirs, 3)

    result: dict[str, dict[str, Any]] = {}
    for contender in contenders:
        mine = totals[contender.key]
        requests = mine["requests"]

        def per_100(count: float | None, requests: float | None = requests) -> float | None:
            return None if count is None or not requests else round(100 * count / requests, 1)

        wall, done = mine["wall"], mine["done"]
        result[contender.key] = {
            "wall_over_crawlpace": over(wall, base["wall"]),
            "last_live_request_over_crawlpace": over(mine["last_live_request"], base["last_live_request"]),
            "pages_done_over_crawlpace": over(done, base["done"]),
            "requests_over_crawlpace": over(requests, base["requests"]),
            "pages_per_minute_of_wall": None if done is None or not wall else round(60 * done / wall, 1),
            "throttled_per_100_requests": per_100(mine["throttled"]),
            "violations_per_100_requests": per_100(mine["violations"]),
        }
    return result


def print_totals(contenders: list[Contender], totals: Figures, ratio: dict[str, dict[str, Any]],
                 runs: list[Run]) -> None:
    print()
    print("totals; x cp = this contender's figure over crawlpace's; /100 req = per 100 requests")
    print(f"{'contender':<10} {'wall s':>7} {'x cp':>5} {'live s':>7} {'x cp':>5} {'done':>5} {'x cp':>5} "
          f"{'requests':>8} {'429+503':>7} {'/100 req':>8} {'violations':>10} {'/100 req':>8}  exit codes")
    for c in contenders:
        mine, r = totals[c.key], ratio[c.key]
        codes = ",".join("-" if run.exit_code is None else str(run.exit_code)
                         for run in runs if run.contender == c.key)
        cut = int(mine["cut_runs"] or 0)
        print(f"{c.label:<10} {fmt(mine['wall'], 's'):>7} {fmt(r['wall_over_crawlpace'], 'x'):>5} "
              f"{fmt(mine['last_live_request'], 's'):>7} "
              f"{fmt(r['last_live_request_over_crawlpace'], 'x'):>5} "
              f"{fmt(mine['done']):>5} {fmt(r['pages_done_over_crawlpace'], 'x'):>5} "
              f"{fmt(mine['requests']):>8} {fmt(mine['throttled']):>7} "
              f"{fmt(r['throttled_per_100_requests']):>8} {fmt(mine['violations']):>10} "
              f"{fmt(r['violations_per_100_requests']):>8}  "
              f"{codes}{f' ({cut} cut at the time limit)' if cut else ''}")
    print("  wall s: start to exit; live s: start to the last request to a site that is not dead")


def peer_versions() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in ("crawlpace", "scrapy", "twisted", "aiohttp", "httpx"):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


async def run_rounds(chosen: list[Contender], repeats: int, farm: str, root: Path, limit: float,
                     grace: float, progress: bool) -> list[Run]:
    """Every contender ``repeats`` times, each round starting with the next one."""
    runs: list[Run] = []
    for round_no in range(repeats):
        shift = round_no % len(chosen)
        for contender in chosen[shift:] + chosen[:shift]:
            folder = fresh_folder(root / f"round{round_no + 1}-{contender.key}")
            run = await run_one(contender, round_no + 1, farm, folder, limit, grace)
            runs.append(run)
            if progress:
                print(f"  round {round_no + 1}/{repeats}: {contender.label}: {run.wall:.1f} s, "
                      f"{run.total('done')}/{run.total('pages')} pages, exit {run.exit_code}"
                      f"{' (cut at the time limit)' if run.cut else ''}", file=sys.stderr, flush=True)
    return runs


def fresh_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def report(args: argparse.Namespace, chosen: list[Contender], runs: list[Run], repeats: int, limit: float,
           started: float) -> None:
    names = list(runs[0].sites)
    sites = {name: {c.key: site_medians([r for r in runs if r.contender == c.key], name) for c in chosen}
             for name in names}
    totals = {c.key: total_medians([r for r in runs if r.contender == c.key]) for c in chosen}
    ratio = ratios(chosen, totals)
    print()
    print(f"{'medians over ' + str(repeats) + ' rounds' if repeats > 1 else 'one round'}; "
          f"pages done: page URLs the contender recorded with a final 200")
    print_site_table(names, chosen, sites, totals)
    print_last_requests(names, chosen, sites)
    print_totals(chosen, totals, ratio, runs)
    print(f"\nwhole benchmark: {time.monotonic() - started:.1f} s")
    if args.json:
        print(json.dumps({
            "benchmark": "crawl_efficiency",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "versions": peer_versions(),
            "farm": args.farm,
            "quick": args.quick,
            "quick_pages": QUICK_PAGES if args.quick else None,
            "quick_hang": QUICK_HANG if args.quick else None,
            "repeats": repeats,
            "limit_seconds": limit,
            "contenders": {c.key: c.settings for c in chosen},
            "sites": sites,
            "totals": totals,
            "ratios": ratio,
            "runs": [asdict(run) for run in runs],
            "seconds": round(time.monotonic() - started, 1),
        }, sort_keys=True))




def benchmark(args: argparse.Namespace) -> None:
    repeats: int = args.repeats or (1 if args.quick else 3)
    limit: float = args.limit or (QUICK_LIMIT if args.quick else LIMIT)
    grace = QUICK_GRACE if args.quick else GRACE
    chosen = [c for c in CONTENDERS if c.key in args.contenders.split(",")]
    if not any(c.key == "crawlpace" for c in chosen):
        raise SystemExit("crawlpace must be one of the contenders (the ratios are against it)")
    spec = farm_source(args.farm)
    started = time.monotonic()
    print(f"crawl efficiency: farm {args.farm}{' (quick copy)' if args.quick else ''}, "
          f"{len(spec.get('site', []))} sites, {repeats} round(s), limit {limit:g} s per contender, "
          f"Python {platform.python_version()}", flush=True)
    with contextlib.ExitStack() as stack:
        if args.workdir:
            root = Path(args.workdir).resolve()
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="crawl-efficiency-")))
        farm = args.farm
        if args.quick:
            quick = root / "quick-farm.toml"
            quick.write_text(quick_farm(spec), encoding="utf-8")
            farm = str(quick)
        elif Path(args.farm).exists():
            farm = str(Path(args.farm).resolve())
        runs = asyncio.run(run_rounds(chosen, repeats, farm, root, limit, grace, progress=not args.json))
    report(args, chosen, runs, repeats, limit, started)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help=f"a farm of at most {QUICK_PAGES} pages per site, one round (< 1 min)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--farm", default="mixed",
                        help="a shipped farm's name or a farm TOML file (default: mixed)")
    parser.add_argument("--repeats", type=int, default=0,
                        help="rounds over all contenders (default 3, quick 1)")
    parser.add_argument("--limit", type=float, default=0.0,
                        help=f"seconds a contender may run (default {LIMIT:g}, quick {QUICK_LIMIT:g})")
    parser.add_argument("--contenders", default=",".join(c.key for c in CONTENDERS),
                        help="comma-separated subset of: " + ", ".join(c.key for c in CONTENDERS))
    parser.add_argument("--workdir", default=None,
                        help="keep every farm's and contender's files here (default: a temporary folder)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    benchmark(parse_args(argv))


if __name__ == "__main__":
    main()
