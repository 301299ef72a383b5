"""The user agent crawlpace's own crawls send, in one place.

It lives apart from :mod:`crawlpace.crawl` so that the command line can name
it in its help without importing the crawl's HTTP client.
"""

from __future__ import annotations

from . import __version__

__all__ = ["DEFAULT_USER_AGENT"]

#: ``crawlpace/<version>``: what ``crawlpace crawl`` sends unless told otherwise.
DEFAULT_USER_AGENT = f"crawlpace/{__version__}"
