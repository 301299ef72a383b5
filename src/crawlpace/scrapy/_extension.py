"""The extension: the crawl's start and end, robots.txt parses, periodic stats.

* When the spider opens, the throttler starts (if the scheduler has not
  started it) and the spider's deprecated ``download_delay`` and
  ``max_concurrent_requests`` attributes are neutralised, since crawlpace
  applies them itself.
* Every ``LOGSTATS_INTERVAL`` seconds, and when the spider closes, the
  busiest scopes' limits go into the stats collector.
* On Scrapy 2.18 and later, each ``robots_parsed`` signal hands over the
  Crawl-Delay that Scrapy's own robots.txt parser read, for the user agent
  Scrapy obeys (the middleware also reads it from the raw response, which is
  how older Scrapy versions get it).
* When the spider closes, every permit still held is released and the
  throttler is closed.
* With ``CRAWLPACE_LEARNED``, what the crawl learns of each scope is written
  every few seconds and when the spider closes, for the next crawl's warm start.
* A scope given up sends :data:`crawlpace.scrapy.signals.scope_given_up`.
  With ``CRAWLPACE_METRICS_PORT`` (Prometheus metrics) or
  ``CRAWLPACE_ON_GIVE_UP`` (an alert command) set, a
  :class:`~crawlpace.observe.Monitor` watches the throttler, and a breaker
  seen open sends :data:`~crawlpace.scrapy.signals.breaker_opened`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals

from .._exceptions import ConfigError
from . import signals as crawlpace_signals
from ._compat import HAS_ROBOTS_PARSED
from ._runtime import Runtime, runtime_of

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from ..observe import Monitor, MonitorOptions

__all__ = ["ThrottlingExtension"]

logger = logging.getLogger("crawlpace.scrapy")


class ThrottlingExtension:
    """Connects the runtime to the crawl's signals. Added by the add-on."""

    def __init__(self, runtime: Runtime, interval: float = 60.0, watch: MonitorOptions | None = None,
                 crawler: Crawler | None = None) -> None:
        self.runtime = runtime
        self.interval = interval
        self.watch = watch
        self.crawler = crawler
        self.monitor: Monitor | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ThrottlingExtension:
        """Build the extension and connect its signal handlers."""
        interval = crawler.settings.getfloat("LOGSTATS_INTERVAL", 60.0)
        extension = cls(runtime_of(crawler), interval, watch_options(crawler.settings), crawler)
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.start_watching, signal=signals.spider_opened)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        extension.runtime.on_give_up(extension._send_given_up)
        if HAS_ROBOTS_PARSED:
            crawler.signals.connect(extension.robots_parsed, signal=signals.robots_parsed)
        return extension

    def spider_opened(self, spider: Spider) -> None:
        """Start the throttler and the periodic stats; neutralise the spider's own delay."""
        runtime = self.runtime
        runtime.open()
        # Scrapy 2.13 reads these attributes for every new download slot, on top of the settings.
        if hasattr(spider, "download_delay"):
            spider.download_delay = 0
        if hasattr(spider, "max_concurrent_requests"):
            spider.max_concurrent_requests = runtime.config.settings.concurrent_requests
        if self.interval > 0 and runtime.config.stats_scopes:
            runtime.spawn(self._publish_every())
        if runtime.config.learner is not None:
            runtime.config.learner.start(runtime.throttler)

    async def _publish_every(self) -> None:
        clock = self.runtime.config.clock
        while not self.runtime.closed:
            await clock.sleep(self.interval)
            try:
                await self.runtime.publish_scope_stats()
            except Exception:  # stats must never stop a crawl
                logger.exception("could not publish the per-scope throttling stats")

    async def spider_closed(self, spider: Spider, reason: str = "") -> None:
        """Release what is held, publish the final stats, close the throttler."""
        monitor, self.monitor = self.monitor, None
        if monitor is not None:
            await monitor.aclose()
        learner = self.runtime.config.learner
        if learner is not None:
            await learner.close(self.runtime.throttler)
        await self.runtime.aclose()

    async def start_watching(self, spider: Spider) -> None:
        """Start the monitor (metrics server, alert command) when the settings ask for one."""
        if self.watch is None:
            return
        from ..observe import Monitor, ServeError

        monitor = Monitor(self.runtime.open(), self.watch)
        monitor.sampler.on_breaker_open(self._send_breaker_opened)
        try:
            await monitor.start()
        except ServeError as exc:
            logger.error("crawlpace.scrapy: %s; the crawl stops", str(exc).replace("--metrics-port",
                                                                                   "CRAWLPACE_METRICS_PORT"))
            if self.crawler is not None and self.crawler.engine is not None:
                self.crawler.engine.close_spider(spider, "crawlpace_metrics_unavailable")
            return
        self.monitor = monitor
        if monitor.metrics_server is not None:
            logger.info("crawlpace metrics at http://%s:%d/metrics", monitor.metrics_server.host,
                        monitor.metrics_server.port)

    def _send_given_up(self, scope: str) -> None:
        if self.crawler is not None:
            self.crawler.signals.send_catch_log(
                signal=crawlpace_signals.scope_given_up, scope=scope,
                reason="the circuit breaker gave it up after repeated failures")

    def _send_breaker_opened(self, scope: str, reason: str) -> None:
        if self.crawler is not None:
            self.crawler.signals.send_catch_log(signal=crawlpace_signals.breaker_opened, scope=scope,
                                                reason=reason)

    async def robots_parsed(self, robotparser: Any, request: Any = None, **kwargs: Any) -> None:
        """Apply the Crawl-Delay Scrapy's robots.txt parser read (Scrapy 2.18+)."""
        runtime = self.runtime
        if not runtime.config.robots or request is None:
            return
        reader = getattr(robotparser, "crawl_delay", None)
        if not callable(reader):
            return
        try:
            delay = reader(runtime.config.robots_user_agent)
        except Exception:  # a custom parser failing must not stop the crawl
            logger.warning("the robots.txt parser %r failed to give a Crawl-Delay", robotparser,
                           exc_info=True)
            return
        if delay is not None:
            delays = runtime.crawl_delays
            await delays.apply(delays.targets(request.url), float(delay))


def watch_options(settings: BaseSettings) -> MonitorOptions | None:
    """The monitor ``CRAWLPACE_METRICS_PORT`` and ``CRAWLPACE_ON_GIVE_UP`` ask for, or ``None``.

    Raises:
        ConfigError: naming the setting, its value and the fix.
    """
    port = settings.get("CRAWLPACE_METRICS_PORT")
    command = settings.get("CRAWLPACE_ON_GIVE_UP")
    if port in (None, "") and not command:
        return None
    from ..observe import MonitorOptions

    problems = []
    number: int | None = None
    if port not in (None, ""):
        try:
            number = int(port)
        except (TypeError, ValueError):
            number = -1
        if not 0 <= number <= 65535 or isinstance(port, bool):
            problems.append(f"CRAWLPACE_METRICS_PORT: {port!r} is not a port; use a number from 1 to 65535")
    host = settings.get("CRAWLPACE_METRICS_HOST") or "127.0.0.1"
    top = settings.getint("CRAWLPACE_METRICS_TOP_SCOPES", 50)
    if top < 1:
        problems.append(f"CRAWLPACE_METRICS_TOP_SCOPES: {top!r} is below 1; use e.g. 50")
    if command is not None and not isinstance(command, str):
        problems.append(f"CRAWLPACE_ON_GIVE_UP: expected a shell command line, got {command!r}")
    if problems:
        raise ConfigError(problems)
    return MonitorOptions(metrics_port=number, metrics_host=str(host), top_n=top,
                          on_give_up=command or None)
