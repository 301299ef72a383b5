"""``crawlpace demo``: crawl the built-in simulator farm and show how each site was treated.

The demo needs no network and no Redis. It starts the ``mixed`` farm (one
simulated site per behaviour profile, each on its own loopback address),
crawls every page of it with the default settings plus rampup through a real
:class:`~crawlpace.crawl.CrawlJob`, and then prints one row per site joining
both sides of the run: what the crawler fetched from that host, and what the
site saw (goodput against capacity, refusals, broken rules). It writes the results, the sites' figures
and a plot of each site's request rate over time into one directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..observe._report import join_sites
from ..sim._report import totals
from ._options import add_json_option

if TYPE_CHECKING:
    from ..crawl import CrawlSummary
    from ..crawl._tallies import ScopeTally
    from ..sim import Farm

# The crawl needs aiohttp and the plot matplotlib (the 'cli' extra): they are imported
# when the demo runs, so that the command line and its help work without them.

__all__ = ["DemoResult", "add_parser", "joined_rows", "run", "run_demo", "verdict"]

#: Pages crawled per site with ``--quick``.
QUICK_PAGES = 5
#: Seconds after which the demo stops the crawl, whatever is left.
TIME_LIMIT = 110.0
#: With ``--quick``, the dead site is given up sooner than the defaults would
#: (a 60 s breaker pause and backoff delays up to 300 s), so the run is short.
QUICK_SETTINGS = {"BREAKER_PAUSE": 5.0, "BACKOFF_MAX_DELAY": 5.0}
#: The defaults, with rampup on for every site: each is crawled as fast as it allows.
DEMO_SETTINGS = {"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}}


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Declare the ``demo`` subcommand and its options."""
    demo = sub.add_parser(
        "demo", parents=[common], help="crawl the built-in simulated sites and show how each was treated",
        description="Start the built-in 'mixed' farm of simulated sites on loopback, crawl it with the "
                    "default settings plus rampup, and report the run from both sides. No network, no "
                    "Redis.")
    demo.add_argument("--quick", action="store_true",
                      help=f"crawl {QUICK_PAGES} pages per site and give the dead site up sooner")
    add_json_option(demo)
    demo.add_argument("--out-dir", default="crawlpace-demo",
                      help="directory for results.jsonl, sites.json and rates.png (default: %(default)s)")
    demo.add_argument("--no-plot", action="store_true", help="skip the PNG")


@dataclass
class DemoResult:
    """What the demo measured: the crawl's summary and the sites' figures."""

    summary: CrawlSummary
    sites: dict[str, dict[str, Any]]
    seconds: float
    out_dir: Path
    plot: Path | None
    plot_wanted: bool = True
    quick: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict, without the timelines."""
        sites = {name: {key: value for key, value in figures.items() if key != "timeline"}
                 for name, figures in self.sites.items()}
        return {"seconds": round(self.seconds, 3), "crawl": self.summary.as_dict(), "sites": sites,
                "as_expected": verdict(self)[0],
                "site_totals": totals(self.sites), "out_dir": str(self.out_dir),
                "plot": None if self.plot is None else str(self.plot)}


def _page_urls(farm: Farm, pages: int | None) -> list[str]:
    """Every site's pages, first pages of every site first, so all sites start at once."""
    most = max(site.app.pages for site in farm.sites)
    count = most if pages is None else min(pages, most)
    return [f"{site.url}/page/{number}" for number in range(1, count + 1) for site in farm.sites
            if number <= site.app.pages]


async def _demo(quick: bool, out_dir: Path, show: bool) -> tuple[CrawlSummary, dict[str, dict[str, Any]]]:
    from .._settings._config import Settings
    from ..crawl import CrawlJob, CrawlOptions
    from ..observe import Monitor
    from ..observe._report import join_sites, write_report
    from ..sim import Farm
    from .crawl import run_job

    async with Farm.builtin("mixed") as farm:
        options = CrawlOptions(output=out_dir / "results.jsonl", state=out_dir / "results.state",
                               trust_env=False, timeout=5.0)
        settings = {**DEMO_SETTINGS, **QUICK_SETTINGS} if quick else DEMO_SETTINGS
        job = CrawlJob(Settings.from_scrapy(settings), options)
        monitor = Monitor(job.throttler)
        await monitor.start()
        try:
            await run_job(job, _page_urls(farm, QUICK_PAGES if quick else None), show=show, transient=True,
                          time_limit=TIME_LIMIT)
        finally:
            await monitor.aclose()
        job.summary.interrupted = job.stopping
        sites = farm.stats(timeline=True)
        # One row per site: the crawler's figures (by host) joined with the site's own (by name).
        write_report(out_dir / "report.html", monitor.sampler, job.settings, title="crawlpace demo",
                     summary=job.summary.as_dict(), sites=join_sites(sites), hosts=job.summary.scopes)
        return job.summary, sites


def run_demo(*, quick: bool = False, out_dir: str | Path = "crawlpace-demo", plot: bool = True,
             show: bool = False) -> DemoResult:
    """Run the demo and return what it measured.

    Args:
        quick: crawl only the first few pages of each site.
        out_dir: the directory for the files; its previous demo files are replaced.
        plot: draw ``rates.png`` (needs matplotlib).
        show: show the live view (needs rich and a terminal).
    """
    from ..sim import PlotUnavailable, write_plot

    folder = Path(out_dir)
    if folder.exists():
        for name in ("results.jsonl", "results.state", "results.state-wal", "results.state-shm",
                     "sites.json", "rates.png", "report.html"):
            with contextlib.suppress(FileNotFoundError):
                (folder / name).unlink()
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    summary, sites = asyncio.run(_demo(quick, folder, show))
    seconds = time.monotonic() - started
    (folder / "sites.json").write_text(json.dumps(sites, indent=1) + "\n", encoding="utf-8")
    picture: Path | None = None
    if plot:
        try:
            write_plot(sites, folder / "rates.png", title="crawlpace demo: each site's request rate")
            picture = folder / "rates.png"
        except PlotUnavailable:
            picture = None
    return DemoResult(summary, sites, seconds, folder, picture, plot, quick)


#: The joined table's columns: the site, then the crawler's figures, then the site's own.
_COLUMNS = ("site", "host", "limit kind", "pages", "fetched", "requests", "429+503", "broken rules",
            "goodput/s", "capacity/s", "ratio", "note")


def _note(figures: Mapping[str, Any], tally: ScopeTally | None) -> str:
    """What a reader should know about a row whose pages did not all come back."""
    left = 0 if tally is None else tally.done - tally.outcomes.get("ok", 0)
    if figures.get("profile") == "dead":
        return "down on purpose: given up, as designed" if left else "down on purpose"
    if left:
        return ", ".join(f"{kind} {count}" for kind, count in sorted(tally.outcomes.items())
                         if kind != "ok") if tally is not None else ""
    return ""


def joined_rows(result: DemoResult) -> list[tuple[str, ...]]:
    """One row per simulated site: its name, its host, what the crawler got and what it saw."""
    rows: list[tuple[str, ...]] = []
    for host, figures in sorted(join_sites(result.sites).items(), key=lambda item: item[1]["site"]):
        tally = result.summary.scopes.get(host)
        ratio = figures.get("goodput_ratio")
        capacity = figures.get("capacity")
        rows.append((str(figures["site"]), host, str(figures.get("profile", "")),
                     str(0 if tally is None else tally.done),
                     str(0 if tally is None else tally.outcomes.get("ok", 0)), str(figures["requests"]),
                     str(figures["throttled"]), str(figures["violations"]), f"{figures['goodput']:.2f}",
                     "-" if capacity is None else f"{capacity:.2f}", "-" if ratio is None else f"{ratio:.0%}",
                     _note(figures, tally)))
    return rows


def _layout(rows: list[tuple[str, ...]]) -> str:
    table = [_COLUMNS, *rows]
    widths = [max(len(row[index]) for row in table) for index in range(len(_COLUMNS))]
    lines = []
    for number, row in enumerate(table):
        lines.append("  ".join(cell.ljust(width) if index in (0, 1, 2, 11) else cell.rjust(width)
                               for index, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip())
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def verdict(result: DemoResult) -> tuple[bool, str]:
    """Whether every page that could be fetched was, and the closing line that says so.

    A site that is down on purpose (the ``dead`` profile) is given up as designed:
    its pages left over are expected, not a sign the demo went wrong.
    """
    summary = result.summary
    expected = sum(tally.done - tally.outcomes.get("ok", 0)
                   for host, tally in summary.scopes.items()
                   if join_sites(result.sites).get(host, {}).get("profile") == "dead")
    fetched = summary.outcomes.get("ok", 0)
    if summary.interrupted:
        return False, f"interrupted: {fetched} of {summary.urls} pages fetched"
    if fetched + expected >= summary.urls:
        tail = (f"; the other {expected} belong to a site that is down on purpose, given up as designed"
                if expected else "")
        return True, (f"as expected: {fetched} of {summary.urls} pages fetched{tail}; "
                      f"{summary.requests} requests in {summary.seconds:.1f}s")
    return False, (f"incomplete: {fetched} of {summary.urls} pages fetched, {summary.unfinished} URLs "
                   f"left unanswered; {summary.requests} requests in {summary.seconds:.1f}s")


def render(result: DemoResult) -> str:
    """The demo's report for a terminal: one row per site, both sides joined, and the files."""
    site_totals = totals(result.sites)
    lines = [
        f"crawlpace demo: {result.summary.urls} pages on {len(result.sites)} simulated sites, "
        f"{result.seconds:.1f}s, default settings with rampup (each site's rate found from its answers)"
        + (", the breaker's pause cut to 5 s (--quick)" if result.quick else ""),
        "",
        "Each site: what the crawler fetched and what the site saw (goodput: 200s per second while it "
        "was crawled; capacity: its hidden limit):",
        _layout(joined_rows(result)),
        "",
        verdict(result)[1],
        f"{site_totals['violations']} broken rules (requests inside a Retry-After or closer than a "
        f"Crawl-delay), {site_totals['throttled']} refusals (429/503) in {site_totals['requests']} requests.",
        f"Files in {result.out_dir}/: report.html (one row per site, with plots), "
        "results.jsonl (one line per page), sites.json (the sites' figures)"
        + (", rates.png (request rate over time per site)" if result.plot else
           "" if not result.plot_wanted else "; no plot (install matplotlib: pip install 'crawlpace[plot]')"),
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace demo`` with parsed arguments; return the exit status."""
    show = not args.json and sys.stdout.isatty()
    result = run_demo(quick=args.quick, out_dir=args.out_dir, plot=not args.no_plot, show=show)
    print(render(result))
    if args.json:
        print(json.dumps(result.as_dict(), sort_keys=True))
    return 0
