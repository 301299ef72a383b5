"""``crawlpace dashboard``: the live dashboard of a fleet of workers sharing a store.

It reads what ``crawlpace status`` reads (each scope's state, the workers and
the shared frontier) once a second, and serves the page on 127.0.0.1 unless
told otherwise (then a token is needed). It never takes a slot or a URL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .._clock import AsyncioClock
from .._exceptions import StoreUnreachable
from .._settings._config import Settings
from ..observe._dashboard import HostNote, robots_forbid
from ..observe._names import read_site_names
from ..observe._server import check_bind
from ..stores import Store, open_store
from ._options import add_store_options, store_url
from ._signals import stop_on_signals
from .status import EXIT_NO_STORE, TIMEOUT, shown

__all__ = ["DEFAULT_PORT", "add_parser", "run"]

#: The port served unless ``--port`` says otherwise.
DEFAULT_PORT = 8765
#: Seconds between two reads of the fleet's stored robots.txt answers (a SCAN).
ROBOTS_EVERY = 10


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Declare the ``dashboard`` subcommand and its options."""
    cmd = sub.add_parser(
        "dashboard", parents=[common], help="serve a live web page of a fleet sharing a Redis store",
        description="Serve a web page showing every scope, worker and the frontier of a fleet that shares "
                    "a Redis/Valkey store, updated every second. Exit status: 0 after Ctrl-C, 2 when the "
                    "store cannot be read, 5 when the page cannot be served.")
    add_store_options(cmd, store_help="the store the workers share (the same URL as their --store)",
                      namespace_help="the crawl job's namespace (default: crawlpace)")
    cmd.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to serve (default {DEFAULT_PORT})")
    cmd.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1; "
                     "any other needs --token)")
    cmd.add_argument("--token", default=None, help="access token (default: $CRAWLPACE_DASHBOARD_TOKEN)")
    cmd.add_argument("--top-scopes", type=int, default=50, metavar="N", help="scopes shown (default 50)")
    cmd.add_argument("--config", help="the workers' crawlpace TOML settings file")
    cmd.add_argument("--sites", metavar="SOURCE",
                     help="name the sites on the page and in /metrics (crawlpace_scope_info): a crawlpace "
                          "sim control address (http://127.0.0.1:PORT/sites) or a JSON file of scope -> name")


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace dashboard`` with parsed arguments; return the exit status."""
    settings = Settings.from_toml(args.config) if args.config else Settings()
    token = args.token if args.token is not None else os.environ.get("CRAWLPACE_DASHBOARD_TOKEN")
    check_bind(args.host, token, "--host")
    names = read_site_names(args.sites, "--sites") if args.sites else {}
    return asyncio.run(_serve(store_url(args.store, args.namespace), settings, args, token or None, names))


async def _serve(url: str, settings: Settings, args: argparse.Namespace, token: str | None,
                 names: Mapping[str, str]) -> int:
    from ..observe import Recorder, Sampler, ThrottlerCollector, store_reader
    from ..observe._dashboard import dashboard_routes
    from ..observe._metrics import FleetCollector
    from ..observe._server import HttpServer
    from .status import _reason, _store_errors

    shown_url = shown(url)
    errors: tuple[type[Exception], ...] = (TimeoutError, StoreUnreachable, *_store_errors())
    try:
        store: Store = open_store(url, settings, AsyncioClock(), random.Random())
    except errors as exc:
        print(f"crawlpace dashboard: cannot open the store {shown_url}: {shown(str(exc))}", file=sys.stderr)
        return EXIT_NO_STORE
    try:
        if not store.shared:
            print(f"crawlpace dashboard: {shown_url} is a memory store, which holds no fleet state; give the "
                  "Redis URL the workers share, or watch one crawl with crawlpace crawl --dashboard PORT",
                  file=sys.stderr)
            return EXIT_NO_STORE
        try:
            await asyncio.wait_for(store.scopes(), TIMEOUT)
        except errors as exc:
            reason = _reason(exc) if str(exc).strip() else f"no answer within {TIMEOUT:g}s"
            print(f"crawlpace dashboard: cannot read the store {shown_url}: {reason}", file=sys.stderr)
            return EXIT_NO_STORE
        from prometheus_client import CollectorRegistry

        from ..frontier._shared import SharedFrontier

        frontier = SharedFrontier(url, worker="crawlpace-dashboard")
        sampler = Sampler(store_reader(store), max_scopes=args.top_scopes)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ThrottlerCollector(Recorder(), sampler, top_n=args.top_scopes, fleet=True,
                                             site_names=names))
        # The frontier's latest figures: read for each page load and once a second for /metrics,
        # whose scrape must not wait for Redis.
        latest: dict[str, Any] = {}
        registry.register(FleetCollector(lambda: latest.get("frontier")))

        async def fleet() -> tuple[Mapping[str, float], Mapping[str, Any] | None]:
            try:
                counts = await asyncio.wait_for(frontier.counts(), TIMEOUT)
            except errors:
                return {}, None
            data = counts.as_dict()
            latest["frontier"] = dict(data)
            return data.pop("workers"), (data if counts.enqueued else None)

        # Hosts whose robots.txt the fleet could not fetch: read every ROBOTS_EVERY seconds.
        forbidden: dict[str, HostNote] = {}

        async def read_robots() -> None:
            try:
                copies = await asyncio.wait_for(frontier.robots_copies(), TIMEOUT)
            except errors:
                return
            forbidden.clear()
            for origin, copy in copies.items():
                note = robots_forbid(origin, copy.status, copy.why)
                host = urlsplit(origin).hostname
                if note is not None and host:
                    forbidden[host] = HostNote(note)

        async def refresh() -> None:
            for round_ in itertools.count():
                if round_ % ROBOTS_EVERY == 0:
                    await read_robots()
                await fleet()
                await asyncio.sleep(1.0)

        server = HttpServer(dashboard_routes(sampler, mode="fleet", source=shown_url, fleet=fleet,
                                             registry=registry, names=names, hosts=lambda: forbidden),
                            host=args.host, port=args.port, token=token, what="--port",
                            public=frozenset({"/dashboard.js", "/dashboard.css"}))
        await server.start()
        stopped = asyncio.Event()
        with stop_on_signals(stopped.set):
            # The address is printed once Ctrl-C is ours: a script that stops the dashboard as soon as it
            # reads the line must not meet asyncio's own handler (a traceback, not exit status 0).
            print(f"crawlpace dashboard: {server.url} (Ctrl-C stops)", flush=True)
            sampler.start()
            refreshing = asyncio.get_running_loop().create_task(refresh())
            try:
                await stopped.wait()
            finally:
                refreshing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await refreshing
                await sampler.stop(final=False)
                await server.aclose()
                await frontier.aclose()
        return 0
    finally:
        with contextlib.suppress(*errors):
            await store.aclose()
