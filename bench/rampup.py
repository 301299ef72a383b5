"""How well rampup finds and holds the rate each simulated site tolerates.

Run it as ``python bench/rampup.py`` (about 20 minutes), ``--quick`` for a smoke run of
about a minute (every scenario side by side; the quick ``shifting`` scenario, whose W is
6 s, crawls for 7W = 42 s), ``--json`` for a
machine-readable last line, ``--only NAME[,NAME]`` for some of the scenarios. It measures;
it does not judge: the exit status is 0 whatever the figures, and the criteria that fail
are listed at the end.

Rampup (``rampup = true`` in a scope, or ``crawlpace crawl --rampup``) makes the throttler
look for the highest rate a site puts up with, aiming at ``rampup_backoff_target``
backoff answers (429 or 503) per window, the window being the scope key ``window``.
Below, W is that window: 60 s in the full run, 10 s with ``--quick`` (written as
``window`` in ``[scope_defaults]`` of a generated settings file, next to the target,
1 by default, ``--target LOW[,HIGH]`` to change it). Every criterion counted "per
window" scales with W.

Each scenario crawls against a fresh farm of the site simulator in its own process:
``crawlpace sim FARM --urls URLS --output FIG --plot PNG``, then ``crawlpace crawl URLS
-o OUT --quiet --json --no-robots --concurrency 64 ...`` with a time limit (SIGTERM on the
limit, SIGKILL after a grace period), then SIGTERM to the farm, which writes its figures:
per site the totals and a second-by-second timeline of arrivals, 200s, refusals (429
and 503) and the hidden capacity. Farms are copies of the shipped ones, written to a
temporary folder, with enough pages that no site runs dry before the crawl is cut. A
crawl that is cut runs D seconds plus a few of start-up slack; only the first D seconds
of each site's timeline, counted from the site's first request, are measured.

Scenarios and criteria:

1. ``ratelimits``: the shipped farm of three token buckets refilling at 2, 10 and 50
   requests per second, which answer 429 without Retry-After when empty, so the limit
   can only be found by running into it. Rampup on for D = 3W. Per site:
   *goodput after W* (200s per second from W to D, once the search had a window to
   settle) over the hidden limit must be at least 0.90, and the *backoff answers*
   over the whole run at most target_high x D/W + 2 (the target for each window, plus
   a little for the start).
2. ``short``: one bucket of 10 requests per second (bursts of 5, no Retry-After) with
   300 pages (100 with ``--quick``), crawled to the end (or cut at 120 s, 30 s with
   ``--quick``). A short crawl cannot spend long searching: the pages over the seconds
   from the site's first request to its last, over the limit, must be at least 0.85
   (and every page must be done), with at most 5 429s.
3. ``headers``: the shipped farm of three sites that announce a budget of 50 requests
   per 10 s, each in another header family (IETF RateLimit, RateLimit-* trio,
   X-RateLimit-*). Rampup on for 3W (2W with ``--quick``). A crawler that reads the
   headers needs no search: per site, goodput over the whole run over the capacity
   (5 per second) must be at least 0.95, and no 429 may come after the first W.
4. ``overload``: one ``overload`` site (50 ms per request alone, 20 ms more per other
   request in flight, 503 past 4 in flight), whose best rate comes from a number of
   requests in flight, not from a delay. First a sweep without rampup at a fixed 1 to
   6 in flight (``--per-host c --delay 0``, ``delay_per_slot = 0``) for 20 s each (2 s
   with ``--quick``), recording goodput and the median latency of the 200s (the
   ``latency`` of each line of the crawl's output: seconds to the response headers).
   The best fixed goodput is the sweep's highest, the unloaded latency the median at
   1 in flight. Then rampup on for 3W (2W with ``--quick``): its goodput after the
   first W must reach 0.85 x the best fixed goodput, and the median latency of its
   200s after W must stay within 2 x the unloaded latency (more in flight than the
   site can use only makes every request slower). With this site the two meet at 3 in
   flight only: 4 give the most 200s, but at 110 ms each, over twice the 50 ms of one.
5. ``shifting``: the shipped farm of a bucket (10 per second), a header budget
   (100 per 10 s) and an overload site (8 in flight), whose limit halves W after each
   site's first request and comes back 3W later (60 s and 240 s in the full run,
   6 s and 24 s with ``--quick``, whose W is 6 s so that the scenario fits in a minute),
   crawled with rampup on for 7W. After each change, the table shows the backoff answers
   and goodput over usable capacity in the window-long intervals k = 0, 1, 2 from the
   change (k = 2: from 2W to 3W after it). In interval 2 rampup must have settled: at
   most target_high + 1 backoff answers and goodput at least 0.8 x the usable capacity.
   The usable capacity is the site's capacity, except for the overload-based site: there
   it is the rate at the most requests in flight whose latency stays within 2x the
   latency alone, the same rule as scenario 4 (its raw capacity needs 8 in flight at
   3.8x the latency).

Each scenario prints a table; the overload scenario also the sweep. The run ends with one
PASS or FAIL line per criterion, then the list of failures. ``--plot-dir DIR`` (default
``bench/out/rampup``, ``''`` for none) receives one PNG per scenario from the farm's own
``--plot``: each site's rate over time against its hidden limit (for ``overload``, the
rampup run). Scenarios run one after the other; ``--jobs N`` runs N side by side, which
``--quick`` does with all of them by default (the figures are then a little noisier: the
crawls share the machine).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from crawl_efficiency import farm_source, read_jsonl, run_process, start_sim, stop_sim, toml_value

HERE = Path(__file__).resolve().parent
#: The window W (seconds), full run and ``--quick``.
WINDOW = 60.0
QUICK_WINDOW = 10.0
#: Seconds a cut crawl runs past the measured span: its start-up, so the span is whole.
SLACK = 3.0
#: Seconds between SIGTERM and SIGKILL for a crawl past its limit.
GRACE = 5.0
QUICK_GRACE = 2.0
#: Requests in flight over all sites (``--concurrency``).
CONCURRENCY = 64
#: Pages per site: this many times what the site can serve in the crawl's time, plus a few.
PAGE_MARGIN = 1.25

SHORT_RATE, SHORT_BURST = 10.0, 5
SHORT_PAGES, QUICK_SHORT_PAGES = 300, 100
#: Seconds the short crawl may take (at the limit it needs 30 s, 10 s with --quick).
SHORT_LIMIT, QUICK_SHORT_LIMIT = 120.0, 30.0
SWEEP = (1, 2, 3, 4, 5, 6)
SWEEP_SECONDS, QUICK_SWEEP_SECONDS = 20.0, 2.0
#: When the shifting sites change, in windows from their first request, and by what factor.
SHIFTS = ((1, 0.5), (4, 1.0))
SHIFT_INTERVALS = 3
#: The shifting scenario's W with ``--quick``: 7W must fit in under a minute.
QUICK_SHIFT_WINDOW = 6.0

# Criteria.
RATELIMIT_GOODPUT = 0.90
RATELIMIT_SPARE = 2
SHORT_AVERAGE = 0.85
SHORT_429 = 5
HEADERS_GOODPUT = 0.95
OVERLOAD_SHARE = 0.85
OVERLOAD_LATENCY = 2.0
SHIFT_GOODPUT = 0.8
SHIFT_SPARE = 1


# -- settings of one run -----------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What every scenario needs to know about the run."""

    quick: bool
    window: float
    target: tuple[float, float]
    root: Path
    plot_dir: Path | None
    grace: float
    progress: bool

    def windows(self, count: float) -> float:
        return count * self.window

    def say(self, text: str) -> None:
        if self.progress:
            print(f"  {text}", file=sys.stderr, flush=True)


# -- criteria -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Criterion:
    """One figure against its bound; a figure that could not be measured fails."""

    scenario: str
    subject: str
    name: str
    value: float | None
    op: str
    bound: float

    @property
    def passed(self) -> bool:
        if self.value is None or math.isnan(self.value):
            return False
        if self.op == ">=":
            return self.value >= self.bound
        if self.op == "<=":
            return self.value <= self.bound
        return self.value == self.bound

    def line(self) -> str:
        return (f"{'PASS' if self.passed else 'FAIL'}  {self.scenario:<10} {self.subject:<16} "
                f"{self.name:<44} {fmt(self.value, 3):>7} {self.op} {fmt(self.bound, 3)}")

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "subject": self.subject, "name": self.name,
                "value": None if self.value is None else round(self.value, 4), "op": self.op,
                "bound": self.bound, "passed": self.passed}


@dataclass
class Outcome:
    """What one scenario measured, printed and judged."""

    name: str
    heading: str
    table: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    criteria: list[Criterion] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    def noticed(self, run: Trial) -> None:
        """Keep the crawl's own troubles, once each, to print under the table."""
        self.notes += [note for note in run.trouble() if note not in self.notes]

    def check(self, subject: str, name: str, value: float | None, op: str, bound: float) -> None:
        self.criteria.append(Criterion(self.name, subject, name, value, op, bound))


# -- formatting ---------------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if value == int(value):
        return str(int(value))
    return f"{value:.{digits}f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns right-aligned, the first left-aligned, under a rule."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        return "  ".join([f"{first:<{widths[0]}}", *(f"{cell:>{w}}" for cell, w in zip(rest, widths[1:],
                                                                                         strict=True))])

    head = line(headers)
    return [head, "-" * len(head), *(line(row) for row in rows)]


def ratio(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole


# -- farms and settings, written to the work folder -----------------------------------------------


def site_capacity(site: dict[str, Any]) -> float:
    """What a site can serve per second at best (the highest it reaches, for a shifting one)."""
    profile = str(site.get("base") if site.get("profile") == "shifting" else site.get("profile"))
    factor = max([1.0, *(float(step[1]) for step in site.get("changes", []))])
    if profile in ("ratelimit", "retryafter"):
        base = float(site["rate"])
    elif profile == "headers":
        base = float(site["limit"]) / float(site.get("window", 10.0))
    elif profile == "overload":
        latency, per_inflight = float(site.get("latency", 0.05)), float(site.get("per_inflight", 0.02))
        limit = int(site.get("limit", 4))
        base = max(limit / (latency + per_inflight * (limit - 1)), 1.0 / latency)
    else:
        base = 10.0
    return base * factor


def with_pages(site: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The site with enough pages to serve at its capacity for ``seconds``."""
    need = math.ceil(site_capacity(site) * seconds * PAGE_MARGIN) + 20
    return {**site, "pages": max(int(site.get("pages", 50)), need)}


def write_farm(path: Path, comment: str, sites: Sequence[dict[str, Any]]) -> Path:
    lines = [f"# Written by bench/rampup.py: {comment}", "port = 0"]
    for site in sites:
        lines += ["", "[[site]]", *(f"{key} = {toml_value(value)}" for key, value in site.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_settings(path: Path, plan: Plan, defaults: dict[str, object] | None = None) -> Path:
    """A crawlpace settings file: the window W, the backoff target and ``defaults`` for every scope."""
    lines = ["# Written by bench/rampup.py.", f"concurrent_requests = {CONCURRENCY}",
             f"rampup_backoff_target = {toml_value(list(plan.target))}", "", "[scope_defaults]",
             f"window = {toml_value(plan.window)}"]
    lines += [f"{key} = {toml_value(value)}" for key, value in (defaults or {}).items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def shipped_sites(name: str) -> list[dict[str, Any]]:
    return [dict(site) for site in farm_source(name).get("site", [])]


# -- one crawl against one fresh farm ---------------------------------------------------------------


@dataclass
class SiteRun:
    """One site's figures in one trial, measured over ``span`` whole seconds from its first request."""

    name: str
    stats: dict[str, Any]
    span: int

    def _bins(self, key: str) -> list[int]:
        timeline = self.stats.get("timeline") or {}
        return [int(count) for count in timeline.get(key, [])]

    def count(self, key: str, start: float, end: float) -> int:
        """Events of the timeline row ``key`` in the seconds [start, end) of the span."""
        low = max(round(start), 0)
        high = min(round(end), self.span) if math.isfinite(end) else self.span
        return sum(self._bins(key)[low:high]) if high > low else 0

    def ok(self, start: float = 0.0, end: float = math.inf) -> int:
        return self.count("ok", start, end)

    def refused(self, start: float = 0.0, end: float = math.inf) -> int:
        return self.count("refused", start, end)

    def rate(self, start: float = 0.0, end: float = math.inf) -> float | None:
        """200s per second over [start, end) of the span."""
        low = max(round(start), 0)
        high = min(round(end), self.span) if math.isfinite(end) else self.span
        return self.ok(low, high) / (high - low) if high > low else None

    def capacity_at(self, offset: float) -> float | None:
        steps = (self.stats.get("timeline") or {}).get("capacity") or []
        value: float | None = None
        for start, capacity in steps:
            if float(start) <= offset:
                value = None if capacity is None else float(capacity)
        return value

    def changes(self) -> list[float]:
        """Seconds from the first request at which the capacity changed."""
        steps = (self.stats.get("timeline") or {}).get("capacity") or []
        return [float(start) for start, _ in steps[1:]]


@dataclass
class Trial:
    """One crawl against one fresh farm."""

    folder: Path
    figures: dict[str, Any]
    summary: dict[str, Any] | None
    records: list[dict[str, Any]]
    started: float
    ended: float
    wall_offset: float
    exit_code: int | None
    cut: bool

    def site(self, name: str, seconds: float | None = None) -> SiteRun:
        """A site measured over its first ``seconds`` (all it has, when None), as far as the crawl ran."""
        stats: dict[str, Any] = self.figures["sites"][name]
        first = stats.get("first")
        if first is None:
            return SiteRun(name, stats, 0)
        ran = self.ended - float(first)  # one monotonic clock for the whole machine
        span = ran if seconds is None else min(seconds, ran)
        return SiteRun(name, stats, max(math.floor(span + 1e-6), 0))

    def latencies(self, site: SiteRun, start: float = 0.0) -> list[float]:
        """Latencies of the site's 200s written in the seconds [start, span) from its first request.

        A line's ``time`` is the wall clock when the crawl wrote it; the offset between the
        wall clock and the monotonic one, read when the crawl started, places it on the site's clock.
        """
        url = str(site.stats.get("url", ""))
        first = site.stats.get("first")
        if first is None:
            return []
        origin = float(first) + self.wall_offset
        return [float(row["latency"]) for row in self.records
                if str(row.get("url", "")).startswith(url + "/") and row.get("status") == 200
                and isinstance(row.get("latency"), int | float) and isinstance(row.get("time"), int | float)
                and origin + start <= float(row["time"]) < origin + site.span]

    def trouble(self) -> list[str]:
        """What went wrong with the crawl itself, or says rampup is off, from its exit code and stderr."""
        lines = (self.folder / "stderr.txt").read_text(encoding="utf-8", errors="replace").splitlines() \
            if (self.folder / "stderr.txt").exists() else []
        notes = [f"crawl warned: {line.strip()}" for line in dict.fromkeys(lines)
                 if "no effect" in line and "rampup" in line]
        if self.exit_code not in (0, 1, 130):
            how = "was killed after its grace period" if self.exit_code == -9 else f"exited {self.exit_code}"
            notes.append(f"crawl {how}; its stderr ends: " + " | ".join(lines[-3:]))
        return notes

    def pages_done(self, site: SiteRun) -> int:
        url = str(site.stats.get("url", ""))
        done = {str(row["url"]) for row in self.records
                if str(row.get("url", "")).startswith(url + "/") and row.get("outcome") == "ok"
                and row.get("status") == 200}
        return len(done)


async def trial(plan: Plan, folder: Path, farm: Path, crawl_args: Sequence[str], limit: float,
                plot: Path | None = None) -> Trial:
    """Serve ``farm`` fresh, crawl all its pages with ``crawl_args`` for at most ``limit`` s, stop it."""
    output = make_folder(folder) / "out.jsonl"
    # The farm is named relative to its folder, where the sim runs: the plot's title shows that name.
    sim = await start_sim(farm.name if farm.parent == folder else str(farm), folder, plot)
    try:
        command = [sys.executable, "-m", "crawlpace", "crawl", str(sim.urls), "-o", str(output), "--quiet",
                   "--json", "--no-robots", *crawl_args]
        started = time.monotonic()
        wall_offset = time.time() - started
        exit_code, cut = await run_process(command, folder, limit, plan.grace)
        ended = time.monotonic()
    finally:
        figures = await stop_sim(sim)
    if exit_code == 3:
        raise RuntimeError("crawlpace crawl refused its settings:\n"
                           + (folder / "stderr.txt").read_text(errors="replace"))
    return Trial(folder, figures, last_json(folder / "stdout.txt"), read_jsonl(output), started, ended,
                 wall_offset, exit_code, cut)


def last_json(path: Path) -> dict[str, Any] | None:
    """The crawl's ``--json`` summary: the last line of its standard output that is an object."""
    if not path.exists():
        return None
    for line in reversed(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                summary = json.loads(line)
                return summary if isinstance(summary, dict) else None
            return None
    return None


def rampup_args(settings: Path) -> list[str]:
    return ["--rampup", "--concurrency", str(CONCURRENCY), "--config", str(settings)]


def plot_path(plan: Plan, name: str) -> Path | None:
    return None if plan.plot_dir is None else plan.plot_dir / f"{name}.png"


def trial_figures(run: Trial) -> dict[str, Any]:
    """What a trial's JSON keeps besides the per-site figures: how the crawl went."""
    summary = run.summary or {}
    return {"exit_code": run.exit_code, "cut": run.cut, "seconds": round(run.ended - run.started, 2),
            "crawl_requests": summary.get("requests"), "crawl_answered": summary.get("answered"),
            "crawl_statuses": summary.get("statuses")}


def site_totals(site: SiteRun) -> dict[str, Any]:
    keys = ("requests", "ok", "throttled", "statuses", "peak_inflight", "peak_per_second", "capacity",
            "goodput", "goodput_ratio", "active")
    return {key: site.stats.get(key) for key in keys}


def round_all(values: dict[str, Any]) -> dict[str, Any]:
    return {key: round(value, 4) if isinstance(value, float) else value for key, value in values.items()}


# -- the scenarios -------------------------------------------------------------------------------------


async def scenario_ratelimits(plan: Plan, outcome: Outcome) -> None:
    w = plan.window
    duration = plan.windows(3)
    folder = make_folder(plan.root / "ratelimits")
    sites = [with_pages(site, duration + SLACK) for site in shipped_sites("ratelimits")]
    farm = write_farm(folder / "ratelimits.toml", "the ratelimits farm with more pages", sites)
    allowed = plan.target[1] * duration / w + RATELIMIT_SPARE
    outcome.heading = (f"ratelimits: 3 token buckets, 429 without Retry-After; rampup on for "
                       f"{fmt(duration)} s (3W); goodput from W = {fmt(w)} s on")
    run = await trial(plan, folder, farm, rampup_args(write_settings(folder / "crawlpace.toml", plan)),
                      duration + SLACK, plot_path(plan, "ratelimits"))
    outcome.noticed(run)
    rows = []
    outcome.figures["crawl"] = trial_figures(run)
    for spec in sites:
        name = str(spec["name"])
        site = run.site(name, duration)
        limit = float(spec["rate"])
        goodput = site.rate(w, duration)
        backoff = site.refused(0, duration)
        rows.append([name, fmt(limit), fmt(site.span), fmt(goodput), fmt(ratio(goodput, limit)), fmt(backoff),
                     fmt(allowed), fmt(site.count("requests", 0, duration)),
                     fmt(site.stats.get("peak_inflight"))])
        outcome.figures[name] = round_all({
            "limit": limit, "span": site.span, "goodput_after_window": goodput,
            "goodput_after_window_over_limit": ratio(goodput, limit), "backoff": backoff,
            "backoff_allowed": allowed, "totals": site_totals(site)})
        outcome.check(name, "goodput after W / limit", ratio(goodput, limit), ">=", RATELIMIT_GOODPUT)
        outcome.check(name, "429+503 over the run", backoff, "<=", allowed)
    outcome.table = table(["site", "limit/s", "span s", "200s/s after W", "/limit", "429+503", "allowed",
                           "requests", "peak in flight"], rows)


async def scenario_short(plan: Plan, outcome: Outcome) -> None:
    pages = QUICK_SHORT_PAGES if plan.quick else SHORT_PAGES
    limit = QUICK_SHORT_LIMIT if plan.quick else SHORT_LIMIT
    folder = make_folder(plan.root / "short")
    site_spec = {"name": "short10", "profile": "ratelimit", "rate": SHORT_RATE, "burst": SHORT_BURST,
                 "retry_after": False, "pages": pages}
    farm = write_farm(folder / "short.toml", "one bucket of 10/s for a short crawl", [site_spec])
    outcome.heading = (f"short: {pages} pages of one bucket of {fmt(SHORT_RATE)}/s (bursts of {SHORT_BURST}, "
                       f"no Retry-After), crawled to the end with rampup on (time limit {fmt(limit)} s)")
    run = await trial(plan, folder, farm, rampup_args(write_settings(folder / "crawlpace.toml", plan)), limit,
                      plot_path(plan, "short"))
    outcome.noticed(run)
    site = run.site("short10")
    done = run.pages_done(site)
    active = float(site.stats.get("active") or 0.0)
    average = done / active if active > 0 else None
    backoff = int(site.stats.get("statuses", {}).get("429", 0))
    complete = done == pages
    outcome.figures = round_all({"pages": pages, "done": done, "complete": complete, "first_to_last": active,
                                 "average_rate": average, "average_over_limit": ratio(average, SHORT_RATE),
                                 "429": backoff, "totals": site_totals(site), "crawl": trial_figures(run)})
    outcome.table = table(
        ["site", "pages", "done", "first to last s", "pages/s", "/limit", "429s", "requests", "cut"],
        [["short10", fmt(pages), fmt(done), fmt(active), fmt(average), fmt(ratio(average, SHORT_RATE)),
          fmt(backoff), fmt(site.stats.get("requests")), "yes" if run.cut else "no"]])
    outcome.check("short10", "every page done (1 = yes)", float(complete), "==", 1.0)
    outcome.check("short10", "pages / (first to last request) / limit", ratio(average, SHORT_RATE), ">=",
                  SHORT_AVERAGE)
    outcome.check("short10", "429s", backoff, "<=", SHORT_429)


async def scenario_headers(plan: Plan, outcome: Outcome) -> None:
    w = plan.window
    duration = plan.windows(2 if plan.quick else 3)
    folder = make_folder(plan.root / "headers")
    sites = [with_pages(site, duration + SLACK) for site in shipped_sites("headers")]
    farm = write_farm(folder / "headers.toml", "the headers farm with more pages", sites)
    outcome.heading = (f"headers: 3 sites announcing 50 requests per 10 s in 3 header styles; rampup on for "
                       f"{fmt(duration)} s")
    run = await trial(plan, folder, farm, rampup_args(write_settings(folder / "crawlpace.toml", plan)),
                      duration + SLACK, plot_path(plan, "headers"))
    outcome.noticed(run)
    outcome.figures["crawl"] = trial_figures(run)
    rows = []
    for spec in sites:
        name = str(spec["name"])
        site = run.site(name, duration)
        capacity = site_capacity(spec)
        goodput = site.rate(0, duration)
        late = site.refused(w, duration)
        rows.append([name, str(spec.get("style", "")), fmt(capacity), fmt(site.span), fmt(goodput),
                     fmt(ratio(goodput, capacity)), fmt(site.refused(0, duration)), fmt(late),
                     fmt(site.stats.get("violations"))])
        outcome.figures[name] = round_all({
            "capacity": capacity, "span": site.span, "goodput": goodput,
            "goodput_over_capacity": ratio(goodput, capacity), "backoff": site.refused(0, duration),
            "backoff_after_window": late, "totals": site_totals(site)})
        outcome.check(name, "goodput / capacity", ratio(goodput, capacity), ">=", HEADERS_GOODPUT)
        outcome.check(name, "429s after W", late, "==", 0)
    outcome.table = table(["site", "style", "capacity/s", "span s", "200s/s", "/capacity", "429s",
                           "429s after W", "violations"], rows)


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


async def scenario_overload(plan: Plan, outcome: Outcome) -> None:
    w = plan.window
    seconds = QUICK_SWEEP_SECONDS if plan.quick else SWEEP_SECONDS
    duration = plan.windows(2 if plan.quick else 3)
    folder = make_folder(plan.root / "overload")
    spec = {"name": "busy", "profile": "overload", "latency": 0.05, "per_inflight": 0.02, "limit": 4}
    capacity = site_capacity(spec)
    outcome.heading = (f"overload: one site, 50 ms + 20 ms per other request in flight, 503 past 4 in "
                       f"flight (capacity {capacity:.1f}/s); fixed 1-{SWEEP[-1]} in flight for "
                       f"{fmt(seconds)} s each, then rampup on for {fmt(duration)} s")
    sweep_farm = write_farm(folder / "overload-fixed.toml", "one overload site",
                            [with_pages(spec, seconds + SLACK)])
    fixed_settings = write_settings(folder / "fixed.toml", plan, {"delay_per_slot": 0.0})
    rows = []
    sweep: dict[int, dict[str, Any]] = {}
    for slots in SWEEP:
        plan.say(f"overload: {slots} in flight")
        run = await trial(plan, folder / f"fixed-{slots}", sweep_farm,
                          ["--per-host", str(slots), "--delay", "0", "--concurrency", str(CONCURRENCY),
                           "--config", str(fixed_settings)], seconds + SLACK)
        outcome.noticed(run)
        site = run.site("busy", seconds)
        goodput = site.rate(0, seconds)
        latency = median(run.latencies(site))
        sweep[slots] = round_all({"goodput": goodput, "median_latency": latency, "span": site.span,
                                  "backoff": site.refused(0, seconds), "totals": site_totals(site)})
        rows.append([f"fixed {slots}", fmt(site.span), fmt(goodput), fmt(ratio(goodput, capacity)),
                     fmt(site.refused(0, seconds)), fmt(None if latency is None else 1000 * latency, 1),
                     fmt(site.stats.get("peak_inflight"))])
    goodputs = {slots: figures["goodput"] for slots, figures in sweep.items()
                if figures["goodput"] is not None}
    best_slots = max(goodputs, key=lambda slots: goodputs[slots]) if goodputs else None
    best = None if best_slots is None else goodputs[best_slots]
    unloaded = sweep[1]["median_latency"] if 1 in sweep else None

    plan.say("overload: rampup")
    rampup_farm = write_farm(folder / "overload.toml", "one overload site",
                             [with_pages(spec, duration + SLACK)])
    run = await trial(plan, folder / "rampup", rampup_farm,
                      rampup_args(write_settings(folder / "crawlpace.toml", plan)), duration + SLACK,
                      plot_path(plan, "overload"))
    outcome.noticed(run)
    site = run.site("busy", duration)
    goodput = site.rate(w, duration)
    latency = median(run.latencies(site, start=w))
    rows.append(["rampup, after W", fmt(site.span), fmt(goodput), fmt(ratio(goodput, capacity)),
                 fmt(site.refused(w, duration)), fmt(None if latency is None else 1000 * latency, 1),
                 fmt(site.stats.get("peak_inflight"))])
    whole = site.rate(0, duration)
    whole_latency = median(run.latencies(site))
    rows.append(["rampup, whole run", fmt(site.span), fmt(whole), fmt(ratio(whole, capacity)),
                 fmt(site.refused(0, duration)),
                 fmt(None if whole_latency is None else 1000 * whole_latency, 1),
                 fmt(site.stats.get("peak_inflight"))])
    outcome.table = [*table(["run", "span s", "200s/s", "/capacity", "503s", "median latency ms",
                             "peak in flight"], rows),
                     f"best fixed: {best_slots} in flight, {fmt(best)}/s; unloaded latency (1 in flight): "
                     f"{fmt(None if unloaded is None else 1000 * unloaded, 1)} ms"]
    outcome.figures = round_all({
        "capacity": capacity, "sweep_seconds": seconds, "sweep": {str(k): v for k, v in sweep.items()},
        "best_fixed_in_flight": best_slots, "best_fixed_goodput": best, "unloaded_latency": unloaded,
        "rampup_goodput_after_window": goodput, "rampup_goodput_whole_run": whole,
        "rampup_median_latency_after_window": latency, "rampup_over_best_fixed": ratio(goodput, best),
        "rampup_latency_over_unloaded": ratio(latency, unloaded), "rampup_totals": site_totals(site),
        "crawl": trial_figures(run)})
    outcome.check("busy", "rampup goodput after W / best fixed", ratio(goodput, best), ">=", OVERLOAD_SHARE)
    outcome.check("busy", "rampup median latency / unloaded", ratio(latency, unloaded), "<=",
                  OVERLOAD_LATENCY)


def usable_capacity(spec: dict[str, Any], factor: float, capacity: float | None) -> float | None:
    """What a crawler may take from a site without more than doubling its latency.

    For an ``overload`` site that is the rate at the most requests in flight whose
    latency stays within OVERLOAD_LATENCY x the latency alone (the rule of the overload
    scenario); for any other site, its capacity.
    """
    if spec.get("base") != "overload" or capacity is None:
        return capacity
    alone, step = float(spec["latency"]), float(spec["per_inflight"])
    limit = max(round(int(spec["limit"]) * factor), 1)
    inflight = max(1, min(limit, math.floor(1 + (OVERLOAD_LATENCY - 1) * alone / step)))
    return min(capacity, inflight / (alone + step * (inflight - 1)))


async def scenario_shifting(plan: Plan, outcome: Outcome) -> None:
    if plan.quick:
        plan = dataclasses.replace(plan, window=QUICK_SHIFT_WINDOW)
    w = plan.window
    changes = [[plan.windows(at), factor] for at, factor in SHIFTS]
    duration = changes[-1][0] + plan.windows(SHIFT_INTERVALS)
    folder = make_folder(plan.root / "shifting")
    sites = [with_pages({**site, "changes": changes}, duration + SLACK) for site in shipped_sites("shifting")]
    farm = write_farm(folder / "shifting.toml", f"the shifting farm with changes {changes}", sites)
    allowed = plan.target[1] + SHIFT_SPARE
    outcome.heading = (f"shifting: limits x{changes[0][1]:g} at {fmt(changes[0][0])} s and "
                       f"x{changes[1][1]:g} at {fmt(changes[1][0])} s from each site's first request; "
                       f"rampup on for {fmt(duration)} s; per W-long interval k after each change: "
                       f"429+503 and goodput/capacity")
    run = await trial(plan, folder, farm, rampup_args(write_settings(folder / "crawlpace.toml", plan)),
                      duration + SLACK, plot_path(plan, "shifting"))
    outcome.noticed(run)
    outcome.figures["crawl"] = trial_figures(run)
    headers = ["site", "change", "at s", "capacity/s", "usable/s"]
    for k in range(SHIFT_INTERVALS):
        headers += [f"k={k} 429+503", f"k={k} /usable"]
    rows = []
    for spec in sites:
        name = str(spec["name"])
        site = run.site(name, duration)
        seen = site.changes()
        per_change = []
        for index, (scheduled, factor) in enumerate(changes):
            at = seen[index] if index < len(seen) else float(scheduled)
            capacity = site.capacity_at(at + 0.5)
            usable = usable_capacity(spec, factor, capacity)
            row = [name, f"x{factor:g}", fmt(at, 1), fmt(capacity), fmt(usable)]
            intervals = []
            for k in range(SHIFT_INTERVALS):
                start, end = at + k * w, at + (k + 1) * w
                whole = round(end) <= site.span
                backoff = site.refused(start, end) if whole else None
                served = ratio(site.ok(start, end), usable * (end - start)) \
                    if whole and usable is not None else None
                intervals.append({"k": k, "backoff": backoff, "goodput_over_capacity": served})
                row += [fmt(backoff), fmt(served)]
            rows.append(row)
            per_change.append({"scheduled": scheduled, "at": round(at, 3), "factor": factor,
                               "intervals": [round_all(item) for item in intervals]})
            last = intervals[-1]
            subject = f"{name}@{fmt(scheduled)}s"
            outcome.check(subject, f"429+503 in interval k={SHIFT_INTERVALS - 1}", last["backoff"], "<=",
                          allowed)
            outcome.check(subject, f"goodput/capacity in interval k={SHIFT_INTERVALS - 1}",
                          last["goodput_over_capacity"], ">=", SHIFT_GOODPUT)
        outcome.figures[name] = {"span": site.span, "changes": per_change, "totals": site_totals(site)}
    outcome.table = table(headers, rows)


Scenario = Callable[[Plan, Outcome], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {
    "ratelimits": scenario_ratelimits,
    "short": scenario_short,
    "headers": scenario_headers,
    "overload": scenario_overload,
    "shifting": scenario_shifting,
}


# -- running and reporting --------------------------------------------------------------------------


async def run_scenario(plan: Plan, name: str, gate: asyncio.Semaphore) -> Outcome:
    outcome = Outcome(name, name)
    async with gate:
        plan.say(f"{name}: started")
        started = time.monotonic()
        try:
            await SCENARIOS[name](plan, outcome)
        except Exception as exc:  # one broken scenario must not hide the others' figures
            outcome.error = f"{type(exc).__name__}: {exc}"
            if plan.progress:
                traceback.print_exc(file=sys.stderr)
        outcome.seconds = time.monotonic() - started
        plan.say(f"{name}: done in {outcome.seconds:.0f} s{' (failed to run)' if outcome.error else ''}")
    return outcome


async def run_all(plan: Plan, names: Sequence[str], jobs: int) -> list[Outcome]:
    gate = asyncio.Semaphore(jobs)
    return list(await asyncio.gather(*(run_scenario(plan, name, gate) for name in names)))


def prepare_plot_dir(path: Path) -> None:
    """Create the folder; a new one gets a .gitignore, so that its pictures stay out of commits."""
    if not path.exists():
        path.mkdir(parents=True)
        (path / ".gitignore").write_text("# Written by bench/rampup.py: plots are not committed.\n*\n",
                                         encoding="utf-8")


def report(plan: Plan, outcomes: list[Outcome], started: float, jobs: int, as_json: bool) -> None:
    for outcome in outcomes:
        print()
        print(f"== {outcome.heading}  [{outcome.seconds:.0f} s]")
        if outcome.error:
            print(f"   could not run: {outcome.error}")
        for line in outcome.table:
            print(f"   {line}")
        for note in outcome.notes:
            print(f"   note: {note}")
        plot = plot_path(plan, outcome.name)
        if plot is not None and plot.exists():
            print(f"   plot: {plot}")
    criteria = [criterion for outcome in outcomes for criterion in outcome.criteria]
    failed = [criterion for criterion in criteria if not criterion.passed]
    broken = [outcome.name for outcome in outcomes if outcome.error]
    low, high = plan.target
    print()
    print(f"criteria (W = {fmt(plan.window)} s, backoff target {fmt(low)}..{fmt(high)} per window):")
    for criterion in criteria:
        print(f"  {criterion.line()}")
    for name in broken:
        print(f"  FAIL  {name:<10} the scenario did not run to its end")
    print()
    print(f"{len(criteria) - len(failed)} of {len(criteria)} criteria pass"
          + (f"; {len(broken)} scenario(s) could not run: {', '.join(broken)}" if broken else ""))
    if failed:
        print("FAILED:")
        for criterion in failed:
            print(f"  {criterion.scenario}/{criterion.subject}: {criterion.name} = "
                  f"{fmt(criterion.value, 3)}, wanted {criterion.op} {fmt(criterion.bound, 3)}")
    seconds = time.monotonic() - started
    print(f"whole benchmark: {seconds:.1f} s ({jobs} scenario(s) at a time)")
    if as_json:
        print(json.dumps({
            "benchmark": "rampup",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "crawlpace": crawlpace_version(),
            "quick": plan.quick,
            "window": plan.window,
            "target": list(plan.target),
            "jobs": jobs,
            "scenarios": {outcome.name: {"figures": outcome.figures, "error": outcome.error,
                                         "notes": outcome.notes,
                                         "seconds": round(outcome.seconds, 1),
                                         "criteria": [c.as_dict() for c in outcome.criteria]}
                          for outcome in outcomes},
            "criteria": [criterion.as_dict() for criterion in criteria],
            "passed": len(criteria) - len(failed),
            "failed": len(failed),
            "errors": broken,
            "all_passed": not failed and not broken,
            "seconds": round(seconds, 1),
        }, sort_keys=True))


def crawlpace_version() -> str | None:
    with contextlib.suppress(PackageNotFoundError):
        return version("crawlpace")
    return None


def parse_target(text: str) -> tuple[float, float]:
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number or LOW,HIGH") from None
    if len(values) not in (1, 2) or any(v < 0 for v in values) or values[0] > values[-1]:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number >= 0 or LOW,HIGH with LOW <= HIGH")
    return values[0], values[-1]


def parse_only(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown scenario(s) {', '.join(unknown) or text!r}; "
                                         f"choose from {', '.join(SCENARIOS)}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help=f"W = {QUICK_WINDOW:g} s, shorter runs, all scenarios at once (about 75 s)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--only", type=parse_only, default=list(SCENARIOS),
                        help="comma-separated scenarios among: " + ", ".join(SCENARIOS))
    parser.add_argument("--plot-dir", default=str(HERE / "out" / "rampup"),
                        help="folder for one PNG per scenario ('' for none; default: bench/out/rampup)")
    parser.add_argument("--target", type=parse_target, default=(1.0, 1.0),
                        help="rampup_backoff_target written to the settings: N or LOW,HIGH (default 1)")
    parser.add_argument("--jobs", type=int, default=0,
                        help="scenarios run at once (default 1; with --quick all of them)")
    parser.add_argument("--workdir", default=None,
                        help="keep every farm's and crawl's files here (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.jobs < 0:
        parser.error("--jobs must be 1 or more")
    return args


def benchmark(args: argparse.Namespace) -> None:
    names: list[str] = args.only
    jobs: int = args.jobs or (len(names) if args.quick else 1)
    plot_dir = Path(args.plot_dir).resolve() if args.plot_dir else None
    if plot_dir is not None:
        prepare_plot_dir(plot_dir)
    window = QUICK_WINDOW if args.quick else WINDOW
    started = time.monotonic()
    print(f"rampup: {', '.join(names)}; W = {window:g} s, backoff target {fmt(args.target[0])}.."
          f"{fmt(args.target[1])} per window{', quick' if args.quick else ''}; "
          f"Python {platform.python_version()}", flush=True)
    with contextlib.ExitStack() as stack:
        if args.workdir:
            root = Path(args.workdir).resolve() / dt.datetime.now().strftime("rampup-%Y%m%d-%H%M%S")
            root.mkdir(parents=True)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rampup-")))
        plan = Plan(quick=args.quick, window=window, target=args.target, root=root, plot_dir=plot_dir,
                    grace=QUICK_GRACE if args.quick else GRACE, progress=not args.json)
        outcomes = asyncio.run(run_all(plan, names, jobs))
    report(plan, outcomes, started, jobs, args.json)


def main(argv: list[str] | None = None) -> None:
    benchmark(parse_args(argv))


if __name__ == "__main__":
    main()
