"""Everything that watches one throttler, started and stopped together.

A :class:`Monitor` attaches a :class:`Recorder` to the throttler, samples it
with a :class:`Sampler`, and, as asked, serves Prometheus metrics, serves the
dashboard, and runs an alert command. ``crawlpace crawl`` and the Scrapy
add-on use it; a ``Throttler`` user can too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._alerts import CommandAlert
from ._dashboard import dashboard_routes
from ._metrics import CrawlFigures, ThrottlerCollector, metrics_text
from ._recorder import Recorder
from ._sampler import Sampler, throttler_reader
from ._server import Handler, HttpServer, Request, Response, ServeError

__all__ = ["Monitor", "MonitorOptions"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MonitorOptions:
    """What to watch and serve.

    Attributes:
        metrics_port: serve ``/metrics`` on this port (0: any free one).
        metrics_host: the metrics server's address.
        dashboard_port: serve the dashboard on this port (0: any free one).
        dashboard_host: the dashboard's address (a token is needed beyond loopback).
        token: the dashboard's token.
        top_n: scopes with their own label in metrics and rows on the dashboard.
        interval: seconds between samples.
        on_give_up: shell command run when a scope is given up or its breaker opens.
        linger: at the end, the servers stay up at most this many seconds, until
            whoever watched during the run (a Prometheus scraping ``/metrics``, a
            dashboard page open) has read the final figures; nobody watching,
            they close at once (``crawlpace crawl --linger``: 30 s).
    """

    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    dashboard_port: int | None = None
    dashboard_host: str = "127.0.0.1"
    token: str | None = None
    top_n: int = 50
    interval: float = 1.0
    on_give_up: str | None = None
    linger: float = 0.0

    def __post_init__(self) -> None:
        for name in ("metrics_port", "dashboard_port"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and 0 <= value <= 65535):
                raise ServeError(f"{name}: {value!r} is not a port; use a number from 1 to 65535")
        if self.top_n < 1:
            raise ServeError(f"top_n: {self.top_n!r} is below 1; use e.g. 50")
        if not (self.linger >= 0):
            raise ServeError(f"linger: {self.linger!r} is not a number of seconds; use e.g. 30, or 0")


class _Watch:
    """When a server's readers last came: to let them read the final figures before it closes."""

    def __init__(self) -> None:
        self.last = -1.0
        self.read = asyncio.Event()

    def wrap(self, handler: Handler) -> Handler:
        async def counted(request: Request) -> Response:
            response = await handler(request)
            self.last = time.monotonic()
            self.read.set()
            return response
        return counted

    @property
    def watched(self) -> bool:
        return self.last >= 0


class Monitor:
    """Watches ``throttler``: counters, samples, servers and alerts.

    Args:
        throttler: the :class:`~crawlpace.Throttler` to watch.
        options: what to serve.
        crawl: a crawl's own figures (URL outcomes, queued URLs, retries), for
            the metrics.
        site_names: scope -> site name, where known (:func:`read_site_names`):
            the dashboard shows them beside the scopes, the metrics export them
            as ``crawlpace_scope_info``.
    """

    def __init__(self, throttler: Any, options: MonitorOptions | None = None, *,
                 crawl: CrawlFigures | None = None, site_names: Mapping[str, str] | None = None) -> None:
        self.options = options = options if options is not None else MonitorOptions()
        self.site_names = dict(site_names or {})
        self.recorder = Recorder()
        throttler.observe(self.recorder)
        self.sampler = Sampler(throttler_reader(throttler, self.recorder), recorder=self.recorder,
                               max_scopes=options.top_n, scope_reader=throttler.scope_stats)
        # A breaker opens only after failures: look at the failing scopes right away, so that a
        # breaker open for less than a sampling interval is still seen.
        self._checking: dict[str, None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.recorder.on_failure(self._after_failure)
        self.registry: Any = None
        self.alert = CommandAlert(options.on_give_up) if options.on_give_up else None
        if self.alert is not None:
            self.recorder.on_give_up(self.alert.give_up)
            self.sampler.on_breaker_open(self._breaker_open)
        self.servers: list[HttpServer] = []
        if options.metrics_port is not None or options.dashboard_port is not None:
            from prometheus_client import CollectorRegistry

            self.registry = CollectorRegistry(auto_describe=False)
            self.registry.register(ThrottlerCollector(self.recorder, self.sampler, top_n=options.top_n,
                                                      crawl=crawl, fleet=False,
                                                      site_names=self.site_names))
        self._watches: list[_Watch] = []
        if options.metrics_port is not None:
            registry = self.registry

            async def metrics(request: Request) -> Response:
                body, content_type = metrics_text(registry, request.headers.get("accept", ""))
                return Response(body, content_type)
            watch = _Watch()
            self._watches.append(watch)
            self.metrics_server: HttpServer | None = HttpServer(
                {"/metrics": watch.wrap(metrics), "/": watch.wrap(metrics)}, host=options.metrics_host,
                port=options.metrics_port, what="--metrics-port", guard_remote=False)
            self.servers.append(self.metrics_server)
        else:
            self.metrics_server = None
        if options.dashboard_port is not None:
            routes = dashboard_routes(self.sampler, registry=self.registry, crawl=crawl,
                                      names=self.site_names)
            watch = _Watch()
            self._watches.append(watch)
            routes["/api/state"] = watch.wrap(routes["/api/state"])
            self.dashboard: HttpServer | None = HttpServer(
                routes, host=options.dashboard_host, port=options.dashboard_port, token=options.token,
                what="--dashboard", public=frozenset({"/dashboard.js", "/dashboard.css"}))
            self.servers.append(self.dashboard)
        else:
            self.dashboard = None

    def _after_failure(self, scopes: tuple[str, ...]) -> None:
        if not self.sampler.has_breaker_listeners:
            return
        for name in scopes:
            if name in self._checking:
                continue
            self._checking[name] = None
            task = asyncio.get_running_loop().create_task(self._check(name))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _check(self, name: str) -> None:
        try:
            await self.sampler.check(name)
        except Exception as exc:
            logger.debug("could not read scope %s after a failure: %s", name, exc)
        finally:
            self._checking.pop(name, None)

    def _breaker_open(self, scope: str, reason: str) -> None:
        if self.alert is not None and reason != "the circuit breaker is given up":
            self.alert.breaker_open(scope, reason)

    async def start(self) -> None:
        """Start sampling and every server.

        Raises:
            ServeError: when a server cannot listen (the others are closed again).
        """
        try:
            for server in self.servers:
                await server.start()
        except ServeError:
            await self.aclose(final_sample=False)
            raise
        self.sampler.start(self.options.interval)

    async def aclose(self, *, final_sample: bool = True) -> None:
        """Stop sampling (taking a last sample), let watchers read it, stop the servers, wait for alerts."""
        for task in list(self._tasks):
            await task
        await self.sampler.stop(final=final_sample)
        if final_sample:
            await self._let_watchers_read()
        for server in self.servers:
            await server.aclose()
        if self.alert is not None:
            await self.alert.aclose()

    async def _let_watchers_read(self) -> None:
        """Wait (at most ``linger`` s) until each server read during the run has been read once more.

        Without this the last seconds of a crawl never reach Prometheus: the
        process would exit between two scrapes.
        """
        watching = [watch for watch in self._watches if watch.watched]
        if not watching or self.options.linger <= 0:
            return
        for watch in watching:
            watch.read.clear()
        logger.info("the crawl is over; serving the final figures until they are read (%gs at most)",
                    self.options.linger)
        waits = [asyncio.ensure_future(watch.read.wait()) for watch in watching]
        _done, pending = await asyncio.wait(waits, timeout=self.options.linger)
        for task in pending:
            task.cancel()
