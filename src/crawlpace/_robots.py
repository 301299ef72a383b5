"""Reading the Crawl-Delay a site's robots.txt asks of a crawler.

The throttling core takes the parsed value (:meth:`Throttler.set_crawl_delay`);
this module turns robots.txt text into that value with protego, the parser
Scrapy uses. Fetching and caching robots.txt belong to the crawl command.
"""

from __future__ import annotations

import logging
import math

from protego import Protego

__all__ = ["MAX_ROBOTS_BYTES", "crawl_delay"]

logger = logging.getLogger(__name__)

#: Bytes of robots.txt that are read; Google reads 500 KiB and ignores the rest.
MAX_ROBOTS_BYTES = 500 * 1024


def crawl_delay(robots_txt: str | bytes, user_agent: str) -> float | None:
    """Return the Crawl-Delay that ``robots_txt`` sets for ``user_agent``, if any.

    Broken input never raises: undecodable bytes are replaced, text past
    :data:`MAX_ROBOTS_BYTES` is dropped, and a file the parser rejects, or a
    negative or non-finite delay, counts as no Crawl-Delay (with a warning).
    """
    if isinstance(robots_txt, bytes):
        robots_txt = robots_txt[:MAX_ROBOTS_BYTES].decode("utf-8", errors="replace")
    elif len(robots_txt) > MAX_ROBOTS_BYTES:
        robots_txt = robots_txt[:MAX_ROBOTS_BYTES]
    try:
        delay = Protego.parse(robots_txt).crawl_delay(user_agent)
    except Exception as exc:  # a parser bug must not stop a crawl: treat as "no rules"
        logger.warning("robots.txt could not be parsed (%s); ignoring its Crawl-Delay", exc)
        return None
    if delay is None:
        return None
    try:
        value = float(delay)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value) or value < 0.0:
        logger.warning("robots.txt Crawl-Delay %r is not a usable number of seconds; ignoring it", delay)
        return None
    return value
