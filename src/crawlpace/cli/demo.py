"""``crawlpace demo``: crawl the built-in simulator farm and show how each site was treated.

The demo needs no network and no Redis. It starts the ``mixed`` farm (one
simulated site per behaviour profile, each on its own loopback address),
crawls every page of it with the default settings plus rampup through a real
:class:`~crawlpace.crawl.CrawlJob`, and then prints the same run twice: as the
crawler saw it (answers per host) and as the sites saw it (goodput against
capacity, refusals, broken rules). It writes the results, the sites' figures
and a plot of each site's request rate over time into one directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..sim._report import render_table, totals
from ._options import add_json_option

if TYPE_CHECKING:
    from ..crawl import CrawlSummary
    from ..sim import Farm

# The crawl needs aiohttp and the plot matplotlib (the 'cli' extra): they are imported
# when the demo runs, so that the command line and its help work without them.

__all__ = ["DemoResult", "add_parser", "run", "run_demo"]

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
                "site_totals": totals(self.sites), "out_dir": str(self.out_dir),
                "plot": None if self.plot is None else str(self.plot)}


def _page_urls(farm: Farm, pages: int | None) -> list[str]:
    """Every site's pages, first pages of every site first, so all sites start at once."""
    most = max(site.app.pages for site in farm.sites)
    count = most if pages is None else min(pages, most)
    return [f"{site.url}/page/{number}" for number in range(1, count + 1) for site in farm.sites
            if number <= site.app.pages]


async def _demo(quick: bool, out_dir: Path, show: bool) -> tuple[CrawlSummary, dict[str, dict[str, Any]]]:
    from .._config import Settings
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
                     summary=job.summary.as_dict(), sites=join_sites(sites))
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


def render(result: DemoResult) -> str:
    """The demo's report for a terminal: both sides of the crawl and where the files are."""
    from ..crawl._display import render_summary

    site_totals = totals(result.sites)
    lines = [
        f"crawlpace demo: {result.summary.urls} pages on {len(result.sites)} simulated sites, "
        f"{result.seconds:.1f}s, default settings with rampup (each site's rate found from its answers)"
        + (", the breaker's pause cut to 5 s (--quick)" if result.quick else ""),
        "",
        "As the crawler saw it:",
        render_summary(result.summary),
        "",
        "As the sites saw it (goodput: 200s per second while the site was being crawled):",
        render_table(result.sites),
        "",
        f"{site_totals['violations']} broken rules (requests inside a Retry-After or closer than a "
        f"Crawl-delay), {site_totals['throttled']} refusals (429/503).",
        f"Files in {result.out_dir}/: report.html (one row per site, both sides joined, with plots), "
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
