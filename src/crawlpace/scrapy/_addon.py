"""The add-on: one line in ``ADDONS`` puts a Scrapy crawl under crawlpace's throttling.

``update_settings`` reads seed 001's settings (checking all of them, so that
an invalid value stops the crawl before the first request, with the core's
message), then rewires the crawl:

* ``SCHEDULER`` becomes :class:`~crawlpace.scrapy.ThrottlingScheduler`
  (unless ``CRAWLPACE_SCHEDULER = False``);
* :class:`~crawlpace.scrapy.ThrottlingMiddleware` joins the downloader
  middlewares at 950 and :class:`~crawlpace.scrapy.ThrottlingExtension` the
  extensions;
* Scrapy's own throttling is neutralised, so that no delay is applied twice:
  its per-slot ``DOWNLOAD_DELAY`` becomes 0, its per-slot concurrency no
  lower than ``CONCURRENT_REQUESTS``, ``DOWNLOAD_SLOTS`` empty and its
  AutoThrottle extension off (crawlpace runs AutoThrottle per scope).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import scrapy
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.utils.misc import build_from_crawler

from .._exceptions import ConfigError, StoreUnreachable
from ._compat import MAX_SCRAPY, MIN_SCRAPY, SCRAPY_VERSION
from ._extension import ThrottlingExtension, watch_options
from ._middleware import ThrottlingMiddleware
from ._reported import mark_reported
from ._runtime import Runtime
from ._settings import AddonConfig, read_config
from ._store_check import check_store

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

__all__ = ["MIDDLEWARE_PRIORITY", "Addon"]

logger = logging.getLogger("crawlpace.scrapy")

#: Where the throttling middleware sits: after the HTTP cache (900), before the download handlers.
MIDDLEWARE_PRIORITY = 950
# Above every priority Scrapy gives names (cmdline is 40): Scrapy's own
# throttling knobs must stay neutral whoever set them, since crawlpace has
# already read the values they were given.
_OVERRIDE = SETTINGS_PRIORITIES["cmdline"] + 60


class Addon:
    """Throttle a Scrapy crawl with crawlpace: enable it with ``ADDONS``.

    Example::

        # settings.py
        ADDONS = {"crawlpace.scrapy.Addon": 100}
        CONCURRENT_REQUESTS_PER_DOMAIN = 2
        DOWNLOAD_DELAY = 0.5
        THROTTLING_SCOPES = {"api.example.com": {"concurrency": 8, "delay": 0.1}}

    Raises:
        ConfigError: from ``update_settings``, listing every invalid setting;
            the crawl does not start.
        StoreUnreachable: from ``update_settings``, when ``CRAWLPACE_STORE``
            names a Redis that does not answer (unless its URL has
            ``fallback=memory``); the crawl does not start.
    """

    def __init__(self, crawler: Crawler | None = None) -> None:
        self.crawler = crawler
        self.config: AddonConfig | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Addon:
        """Scrapy builds add-ons with their crawler."""
        return cls(crawler)

    def update_settings(self, settings: BaseSettings) -> None:
        """Read and check the throttling settings, then rewire the crawl."""
        if SCRAPY_VERSION[:2] < MIN_SCRAPY:
            raise ConfigError([f"ADDONS: crawlpace.scrapy needs Scrapy {MIN_SCRAPY[0]}.{MIN_SCRAPY[1]} or "
                               f"later, found {scrapy.__version__}; upgrade Scrapy"])
        crawler = self.crawler
        spider = getattr(crawler, "spider", None) or getattr(crawler, "spidercls", None)
        try:
            config = read_config(settings, lambda cls: _build(cls, crawler), spider=spider)
            watch_options(settings)  # CRAWLPACE_METRICS_PORT and CRAWLPACE_ON_GIVE_UP, checked now
        except ConfigError as exc:
            logger.error("crawlpace.scrapy: invalid settings, the crawl cannot start:\n%s", exc)
            mark_reported(exc)  # said in full: Scrapy's traceback of it would only repeat it
            raise
        try:
            check_store(config)
        except StoreUnreachable as exc:
            logger.error("crawlpace.scrapy: %s; the crawl cannot start", exc)
            mark_reported(exc)  # said in full: Scrapy's traceback of it would only repeat it
            raise
        self.config = config
        if crawler is not None:
            Runtime.register(crawler, config)
        if SCRAPY_VERSION[:2] > MAX_SCRAPY:
            logger.info("crawlpace.scrapy is tested with Scrapy up to %d.%d; this is %s",
                        *MAX_SCRAPY, scrapy.__version__)
        apply_overrides(settings, config)


def _build(cls: type[Any], crawler: Crawler | None) -> Any:
    if crawler is None:
        return cls()
    return build_from_crawler(cls, crawler)


def apply_overrides(settings: BaseSettings, config: AddonConfig) -> None:
    """Plug the add-on's components in and neutralise Scrapy's own throttling."""
    if config.use_scheduler:
        settings.set("SCHEDULER", config.scheduler_path, priority=_OVERRIDE)
    settings.set_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", ThrottlingMiddleware,
                                            MIDDLEWARE_PRIORITY)
    settings.set_in_component_priority_dict("EXTENSIONS", ThrottlingExtension, 0)
    cap = config.settings.concurrent_requests
    for name, value in (("DOWNLOAD_DELAY", 0), ("CONCURRENT_REQUESTS_PER_DOMAIN", cap),
                        ("CONCURRENT_REQUESTS_PER_IP", 0), ("AUTOTHROTTLE_ENABLED", False),
                        ("DOWNLOAD_SLOTS", {})):
        settings.set(name, value, priority=_OVERRIDE)
    # crawlpace consumed seed 001's jitter setting; Scrapy 2.19 would warn that it is deprecated.
    if "RANDOMIZE_DOWNLOAD_DELAY" in settings and (settings.getpriority("RANDOMIZE_DOWNLOAD_DELAY") or 0) > 0:
        del settings["RANDOMIZE_DOWNLOAD_DELAY"]
