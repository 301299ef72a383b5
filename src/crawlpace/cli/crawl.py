"""``crawlpace crawl``: fetch a list of URLs politely, one JSON line per URL."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from .._exceptions import ConfigError, StoreUnreachable
from .._responses._blocks import parse_block_rules
from .._scoping._server_scopes import manager_path
from .._settings._config import CrawlConfig, Settings
from .._user_agent import DEFAULT_USER_AGENT
from ..stores import REDIS_SCHEMES, reach
from ..stores._policies import with_rampup
from ._loop import LOOPS, run_on
from ._options import URL_FORMS, add_json_option, add_store_options, store_url
from ._signals import stop_on_signals

if TYPE_CHECKING:
    from ..crawl import CrawlJob, CrawlSummary
    from ..observe import Monitor

# The crawl itself needs aiohttp (the 'cli' extra); it is imported when a crawl runs,
# so that the command line and its help work without it.

__all__ = ["ADAPTIVE_CONCURRENCY", "EXIT_INCOMPLETE", "EXIT_INTERRUPTED", "QUICK_URLS", "adaptive",
           "add_parser", "build_settings", "read_urls", "run", "run_job", "store_url"]

#: Exit status when some URL got no final answer.
EXIT_INCOMPLETE = 1
#: Exit status after Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130
#: Requests in flight over all hosts when the crawl is adaptive and ``--concurrency`` is not given.
ADAPTIVE_CONCURRENCY = 256
#: URLs crawled at most with ``--quick``.
QUICK_URLS = 100


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Declare the ``crawl`` subcommand and its options."""
    crawl = sub.add_parser(
        "crawl", parents=[common], help="fetch a list of URLs as fast as each site allows",
        description="Fetch every URL of a list through the throttler and write one JSON line per URL. "
                    "Exit status: 0 when every URL got a final answer, 1 when some did not, 130 when "
                    "interrupted, 2 when the store cannot be reached at start-up, 3 for invalid settings.")
    crawl.add_argument("urls", nargs="?", help="file of URLs, one per line ('-' for standard input); "
                       "leave it out to work from the shared frontier of --redis (crawlpace enqueue)")
    crawl.add_argument("-o", "--output", required=True, help="JSON Lines file for the results")
    crawl.add_argument("--config", help="crawlpace TOML settings file; its [crawl] table may hold this "
                       "command's options (deadline, timeout, retries...), which the flags override")
    crawl.add_argument("--resume", action="store_true",
                       help="continue the crawl recorded next to --output after a crash or Ctrl-C")
    crawl.add_argument("--rampup", action="store_true",
                       help="turn rampup on for every host, even with --delay, --per-host or --config "
                            "(without any of those three, rampup is on anyway)")
    crawl.add_argument("--concurrency", type=int, help="requests in flight at once over all hosts "
                       f"(CONCURRENT_REQUESTS, default 16; {ADAPTIVE_CONCURRENCY} when adaptive without "
                       "--config)")
    crawl.add_argument("--per-host", type=int, help="requests in flight at once per host "
                       "(CONCURRENT_REQUESTS_PER_DOMAIN, default 1)")
    crawl.add_argument("--delay", type=float, help="seconds between requests to one host (DOWNLOAD_DELAY, "
                       "default 1)")
    # The crawl's own options default to None: a value from the settings file's [crawl] table, else
    # CrawlOptions' default, applies to a flag not given (crawl_options()).
    crawl.add_argument("--user-agent", default=None, help=f"user agent (default: {DEFAULT_USER_AGENT})")
    crawl.add_argument("--retries", type=int, default=None, help="resends after a backoff answer or a "
                       "transient failure: 5xx, timeout, reset connection (default 3)")
    crawl.add_argument("--timeout", type=float, default=None, help="seconds to connect and per read "
                       "(default 10)")
    crawl.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                       help="seconds one whole request may take, headers and body; past it the request "
                            "counts as a timeout (backoff, retry). Stops a server that trickles its answer "
                            "a byte at a time within --timeout (default 300)")
    crawl.add_argument("--scope-by", choices=("host", "domain", "ip"), default=None,
                       help="what one budget covers: each host (default), its registrable domain, or the "
                            "server address it resolves to; with domain or ip a request holds its host's "
                            "scope as well, so hosts on one server share the server's budget")
    crawl.add_argument("--learned", metavar="FILE", help="keep what the crawl learns of each site (rampup's "
                       "rate, latency, delays) in this SQLite file, or a redis:// URL, and start the next "
                       "crawl from it (the settings file's 'learned')")
    crawl.add_argument("--block-on-match", action="append", default=[], metavar="REGEX[:STATUS]",
                       help="count a response whose body matches REGEX (with STATUS only, when given, "
                            "e.g. 'captcha:200') as a soft block: backed off like a 429 and resent; "
                            "repeatable, added to the settings file's block_rules")
    crawl.add_argument("--block-defaults", action=argparse.BooleanOptionalAction, default=None,
                       help="also count the well-known challenge pages (Cloudflare's 'Just a moment...', "
                            "Imperva, DataDome, HUMAN, Sucuri) as soft blocks (the default); "
                            "--no-block-defaults: only your rules (the settings file's block_defaults)")
    crawl.add_argument("--robots", action=argparse.BooleanOptionalAction, default=None,
                       help="fetch and obey robots.txt (the default); --no-robots: neither fetch nor obey it")
    crawl.add_argument("--state", help="journal file (default: OUTPUT.state)")
    crawl.add_argument("--quiet", action="store_true", help="no live display")
    crawl.add_argument("--quick", action="store_true", help=f"crawl only the first {QUICK_URLS} URLs")
    add_json_option(crawl)
    add_store_options(crawl, default="memory://",
                      store_help="where the limits live: memory:// (default) or a Redis/Valkey URL shared "
                                 f"with other workers ({URL_FORMS})",
                      namespace_help="keeps this crawl job's keys apart in a shared store "
                                     "(default: crawlpace)")
    crawl.add_argument("--loop", choices=LOOPS, default="auto", help="event loop: uvloop when installed "
                       "(auto, the default; faster on broad crawls), or asyncio, or uvloop")
    crawl.add_argument("--visibility", type=float, default=None, help="with the shared frontier: seconds "
                       "before a killed worker's URLs are handed out again (default 30)")
    crawl.add_argument("--wait-for-urls", type=float, default=None, metavar="SECONDS",
                       help="with the shared frontier: wait up to SECONDS for URLs when the frontier is "
                            "empty at start, instead of ending at once (default 0)")
    watch = crawl.add_argument_group("watching the crawl (docs/observability.md)")
    watch.add_argument("--metrics-port", type=int, metavar="PORT",
                       help="serve Prometheus metrics at http://HOST:PORT/metrics while crawling")
    watch.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                       help="address of the metrics server (default 127.0.0.1)")
    watch.add_argument("--dashboard", type=int, metavar="PORT",
                       help="serve the live dashboard at http://HOST:PORT/ while crawling")
    watch.add_argument("--dashboard-host", default="127.0.0.1", metavar="HOST",
                       help="address of the dashboard (default 127.0.0.1; elsewhere --token is needed)")
    watch.add_argument("--token", default=None, help="the dashboard's access token (default: "
                       "$CRAWLPACE_DASHBOARD_TOKEN); needed when --dashboard-host is not loopback")
    watch.add_argument("--top-scopes", type=int, default=50, metavar="N",
                       help="scopes with their own metrics label and dashboard row; the rest are "
                            "counted as scope=\"other\" (default 50)")
    watch.add_argument("--linger", type=float, default=30.0, metavar="SECONDS",
                       help="after the crawl, keep the metrics and dashboard servers up until whoever "
                            "read them during the crawl has read the final figures, at most SECONDS "
                            "(default 30; nobody reading: they close at once)")
    watch.add_argument("--report", metavar="FILE.html", help="write a self-contained HTML run report")
    watch.add_argument("--report-sites", metavar="URL", help="with --report and a crawl of crawlpace sim: "
                       "its live figures address (http://127.0.0.1:PORT/stats), to join each host's row with "
                       "what the site saw")
    watch.add_argument("--sites", metavar="SOURCE",
                       help="name the sites on the dashboard, in the metrics (crawlpace_scope_info) and in "
                            "the report: a crawlpace sim control address (http://127.0.0.1:PORT/sites) or a "
                            "JSON file of scope -> name")
    watch.add_argument("--on-give-up", metavar="CMD", help="run this shell command when a site is given up "
                       "or its circuit breaker opens (CRAWLPACE_EVENT, CRAWLPACE_SCOPE and "
                       "CRAWLPACE_REASON are set)")


def build_settings(args: argparse.Namespace) -> Settings:
    """The settings file (or defaults) with the command line's overrides applied.

    Raises:
        ConfigError: naming the option and the value for an invalid override.
    """
    settings = Settings.from_toml(args.config) if args.config else Settings()
    defaults = settings.scope_defaults
    changes: dict[str, Any] = {}
    if args.per_host is not None:
        changes["concurrency"] = args.per_host
    if args.delay is not None:
        changes["delay"] = args.delay
        changes["delay_per_slot"] = min(defaults.delay_per_slot, args.delay) if args.delay else 0.0
    rampup = adaptive(args, settings)
    try:
        if changes:
            defaults = dataclasses.replace(defaults, **changes)
        scopes = settings.scopes
        if rampup:
            rampup_on = with_rampup(dataclasses.replace(settings, scope_defaults=defaults))
            defaults, scopes = rampup_on.scope_defaults, rampup_on.scopes
        total = args.concurrency if args.concurrency is not None else settings.concurrent_requests
        if args.concurrency is None and rampup and not throttling_file(args, settings):
            # Each host's own slots are rampup's to set (at most rampup_max_concurrency); a
            # crawl-wide cap of 16 would hold back every host once a few slow ones fill it.
            total = max(total, ADAPTIVE_CONCURRENCY)
        extra: dict[str, Any] = {}
        block_on = getattr(args, "block_on_match", None) or []
        if block_on:
            extra["block_rules"] = (*settings.block_rules, *parse_block_rules("--block-on-match", block_on))
        block_defaults = getattr(args, "block_defaults", None)
        if block_defaults is not None:
            extra["block_defaults"] = block_defaults
        scope_by = getattr(args, "scope_by", None)
        path = None if scope_by is None else manager_path(scope_by, with_host=True)
        if path is not None and settings.manager is not None and settings.manager != path:
            raise ConfigError([f"--scope-by {scope_by}: the settings file already names the manager "
                               f"{settings.manager!r}; drop one of the two"])
        if path is not None:
            extra["manager"] = path
        if getattr(args, "learned", None):
            extra["learned"] = args.learned
        return dataclasses.replace(settings, concurrent_requests=total, scope_defaults=defaults,
                                   scopes=scopes, **extra)
    except ConfigError as exc:
        flags = {"concurrency": "--per-host", "delay": "--delay", "concurrent_requests": "--concurrency"}
        raise ConfigError([_name_flag(problem, flags) for problem in exc.problems]) from None


#: The flags that override a key of the settings file's [crawl] table: option name -> flag.
CRAWL_FLAGS = {"deadline": "--deadline", "timeout": "--timeout", "retries": "--retries",
               "user_agent": "--user-agent", "robots": "--robots", "visibility": "--visibility",
               "wait_for_urls": "--wait-for-urls"}


def crawl_options(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """The crawl's own options: each flag given, else the settings file's ``[crawl]`` value, else
    left out (``CrawlOptions``' default)."""
    options = settings.crawl.given()
    for name in CRAWL_FLAGS:
        value = getattr(args, name)
        if value is not None:
            options[name] = value
    return options


def adaptive(args: argparse.Namespace, settings: Settings | None = None) -> bool:
    """Whether every host gets rampup: asked for with ``--rampup``, or the default when no
    throttling option (``--delay``, ``--per-host``, a ``--config`` that sets throttling) fixes
    the limits.

    Rampup starts each host at the polite default (one request in flight, about one per
    second) and climbs from there while the site answers without pushback.
    """
    fixed = args.delay is not None or args.per_host is not None or throttling_file(args, settings)
    return bool(args.rampup) or not fixed


def throttling_file(args: argparse.Namespace, settings: Settings | None) -> bool:
    """Whether ``--config`` gives throttling settings: a file with only a ``[crawl]`` table does not."""
    if not args.config:
        return False
    return settings is None or dataclasses.replace(settings, crawl=CrawlConfig()) != Settings()


def _name_flag(problem: str, flags: dict[str, str]) -> str:
    for key, flag in flags.items():
        if f".{key}:" in problem or problem.startswith(f"{key}:") or f".{key} " in problem:
            return f"{flag}: {problem}"
    return problem


def read_urls(source: str, limit: int | None) -> Iterator[str]:
    """The lines of a URL file ('-': standard input), the first ``limit`` of them when given."""
    handle: TextIO
    with contextlib.ExitStack() as stack:
        if source == "-":
            handle = sys.stdin
        else:
            handle = stack.enter_context(Path(source).open(encoding="utf-8", errors="replace"))
        for count, line in enumerate(handle):
            if limit is not None and count >= limit:
                break
            yield line


async def run_job(job: CrawlJob, urls: Iterable[str] | None, *, show: bool, transient: bool = False,
                  time_limit: float | None = None) -> CrawlSummary:
    """Run ``job`` with Ctrl-C and SIGTERM stopping it, and the live view when ``show``.

    Args:
        job: the crawl.
        urls: its input.
        show: refresh the live view (rich) twice a second while it runs.
        transient: clear the live view at the end instead of leaving its last frame.
        time_limit: seconds after which the job is stopped, if any.
    """
    loop = asyncio.get_running_loop()
    # Fail now, with the reason, rather than wait forever on a store that never answers.
    try:
        await reach(job.throttler.store, job.options.store)
    except StoreUnreachable:
        await job.throttler.aclose()
        raise
    with stop_on_signals(job.stop):
        limit = None if time_limit is None else loop.call_later(time_limit, job.stop)
        runner = asyncio.ensure_future(job.run(urls))
        try:
            if show:
                from rich.live import Live

                from ..crawl._display import live_view

                started = time.monotonic()
                with Live(refresh_per_second=4, transient=transient, redirect_stderr=False) as live:
                    while not runner.done():
                        live.update(live_view(job, await job.throttler.stats(), started))
                        await asyncio.wait({runner}, timeout=0.5)
            return await runner
        finally:
            if limit is not None:
                limit.cancel()


def _site_figures(url: str) -> dict[str, dict[str, Any]] | None:
    """A simulator's figures, keyed by host for the report; ``None`` (and a line) when unreadable."""
    import urllib.request

    from ..observe._report import join_sites

    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            data = json.loads(answer.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        print(f"--report-sites: cannot read {url} ({exc}); the report shows the crawler's side only",
              file=sys.stderr)
        return None
    if not isinstance(data, dict):
        print(f"--report-sites: {url} did not answer with the simulator's figures; the report shows the "
              "crawler's side only", file=sys.stderr)
        return None
    return join_sites({str(name): figures for name, figures in data.items() if isinstance(figures, dict)})


def _site_names(args: argparse.Namespace) -> dict[str, str]:
    """The sites' names (``--sites``; else the names in ``--report-sites``, if it can be read).

    Raises:
        ConfigError: when ``--sites`` cannot be read or names no site.
    """
    from ..observe._names import read_site_names

    if args.sites:
        return read_site_names(args.sites, "--sites")
    if args.report_sites and (args.metrics_port is not None or args.dashboard is not None):
        try:
            return read_site_names(args.report_sites, "--report-sites")
        except ConfigError as exc:
            print(f"{exc}; the dashboard and metrics show the scopes without names", file=sys.stderr)
    return {}


def _monitor(job: CrawlJob, args: argparse.Namespace, names: dict[str, str]) -> Monitor | None:
    """The monitor the watching options ask for, or ``None``."""
    asked = (args.metrics_port, args.dashboard, args.report, args.on_give_up)
    if all(value is None for value in asked):
        return None
    from ..observe import CrawlFigures, Monitor, MonitorOptions

    token = args.token if args.token is not None else os.environ.get("CRAWLPACE_DASHBOARD_TOKEN")
    options = MonitorOptions(metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                             dashboard_port=args.dashboard, dashboard_host=args.dashboard_host,
                             token=token or None, top_n=args.top_scopes, on_give_up=args.on_give_up,
                             linger=args.linger)
    summary = job.summary
    figures = CrawlFigures(outcomes=lambda: summary.outcomes,
                           queued=lambda: max(summary.urls - sum(summary.outcomes.values()), 0),
                           retries=lambda: summary.retries,
                           queued_by_scope=job.scheduler.scope_sizes, hosts=lambda: summary.scopes,
                           received_bytes=lambda: summary.bytes)
    return Monitor(job.throttler, options, crawl=figures, site_names=names)


async def _watched(job: CrawlJob, urls: Iterable[str] | None, *, show: bool,
                   monitor: Monitor | None) -> CrawlSummary:
    """:func:`run_job` with the monitor's servers up for the crawl's duration."""
    if monitor is None:
        return await run_job(job, urls, show=show)
    await monitor.start()
    for server in monitor.servers:
        print(f"{server.what}: {server.url}", file=sys.stderr)
    try:
        return await run_job(job, urls, show=show)
    finally:
        await monitor.aclose()


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace crawl`` with parsed arguments; return the exit status."""
    from ..crawl import CrawlJob, CrawlOptions
    from ..crawl._display import render_summary

    settings = build_settings(args)
    try:
        options = CrawlOptions(
            output=Path(args.output), state=Path(args.state) if args.state else None, resume=args.resume,
            store=store_url(args.store, args.namespace), **crawl_options(args, settings))
    except ConfigError as exc:  # a bad value from a flag: name the flag (the file's were checked with it)
        given = {name: flag for name, flag in CRAWL_FLAGS.items() if getattr(args, name) is not None}
        raise ConfigError([_name_flag(problem, given) for problem in exc.problems]) from None
    shared = args.urls is None
    if shared and args.resume:
        raise ConfigError(["--resume: a shared-frontier worker has nothing to resume (the frontier keeps "
                           "what is left); start it again without --resume"])
    if shared and urlsplit(options.store).scheme not in REDIS_SCHEMES:
        raise ConfigError(["urls: no URL file given; give a file of URLs, one per line, or '-', or "
                           "--redis URL to work from the shared frontier filled by crawlpace enqueue"])
    if not shared and args.urls != "-" and not Path(args.urls).is_file():
        raise FileNotFoundError(f"no URL file {args.urls!r}; give a file of URLs, one per line, or '-'")
    names = _site_names(args)
    show = not (args.quiet or args.json) and sys.stdout.isatty()
    if show:
        import rich  # noqa: F401 - fail before the crawl leaves a journal behind, not after
    urls: Iterable[str] | None = None
    if shared:
        from ..crawl._shared_job import SharedCrawlJob

        job: CrawlJob = SharedCrawlJob(settings, options)
    else:
        urls = read_urls(args.urls, QUICK_URLS if args.quick else None)
        job = CrawlJob(settings, options)
    monitor = _monitor(job, args, names)
    summary = run_on(args.loop, _watched(job, urls, show=show, monitor=monitor))
    if args.report:
        from .._settings._effective import store_label
        from ..observe._report import write_report

        assert monitor is not None
        sites = _site_figures(args.report_sites) if args.report_sites else None
        write_report(Path(args.report), monitor.sampler, settings, summary=summary.as_dict(), sites=sites,
                     title=f"crawlpace crawl {args.urls or '(shared frontier)'}",
                     store=store_label(options.store), site_names=names, hosts=summary.scopes)
        print(f"report: {args.report}")
    print(render_summary(summary))
    if args.json:
        print(json.dumps({"output": str(options.output), **summary.as_dict()}, sort_keys=True))
    if job.write_error is not None:
        why = job.write_error.strerror or job.write_error
        then = ("the URLs not written went back to the frontier" if shared
                else f"make room, then run again with --resume to continue from {options.state_path}")
        print(f"crawlpace crawl: cannot write to {options.output} ({why}); {then}", file=sys.stderr)
        return EXIT_INCOMPLETE
    if summary.interrupted and shared:
        print("stopped; the URLs not answered here went back to the shared frontier", file=sys.stderr)
        return EXIT_INTERRUPTED
    if summary.interrupted:
        print(f"stopped; run again with --resume to continue from {options.state_path}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0 if summary.complete else EXIT_INCOMPLETE
