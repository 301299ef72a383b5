"""The crawl job behind ``crawlpace crawl`` and ``crawlpace demo``.

:class:`CrawlJob` fetches a list of URLs with aiohttp, every request admitted by
a :class:`~crawlpace.Throttler`, robots.txt obeyed, redirects and retries
throttled like any request, and writes one JSON line per URL; its journal
lets a stopped or crashed crawl resume without losing a URL.
"""

from __future__ import annotations

from ._job import CrawlJob, CrawlSummary, ScopeTally
from ._options import DEFAULT_USER_AGENT, CrawlOptions

__all__ = ["DEFAULT_USER_AGENT", "CrawlJob", "CrawlOptions", "CrawlSummary", "ScopeTally"]
