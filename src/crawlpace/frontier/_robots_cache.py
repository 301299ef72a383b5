"""The robots.txt cache, kept here under its old name for the crawl's modules.

It moved down a layer, to :mod:`crawlpace._robotstxt._robots_cache`, so that the httpx
client (``crawlpace.http``, ``robots_txt=True``) keeps its rules the same way
without importing the crawl's frontier.
"""

from __future__ import annotations

from .._robotstxt._robots_cache import DEFAULT_LIMIT, DEFAULT_RETRY_TTL, DEFAULT_TTL, RobotsCache, Settled

__all__ = ["DEFAULT_LIMIT", "DEFAULT_RETRY_TTL", "DEFAULT_TTL", "RobotsCache", "Settled"]
