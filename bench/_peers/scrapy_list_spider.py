"""A Scrapy spider that fetches a fixed list of URLs, for ``bench/crawl_efficiency.py``.

Run it as::

    python -m scrapy runspider bench/_peers/scrapy_list_spider.py -a urls=URLS.txt -a out=OUT.jsonl

It follows no links: every line of ``URLS.txt`` is requested once (plus Scrapy's own
retries), and one item ``{"url", "status", "error"}`` is yielded per URL when its
final answer (or final failure) is in. The spider also writes each item to
``OUT.jsonl`` itself, one flushed line at a time (no feed export, which would lose
what it buffered if the benchmark has to kill Scrapy at its time limit). The settings are the benchmark's peer
configuration: AutoThrottle on with its defaults, 8 requests in flight per domain,
retries on 429 and 503 among the usual codes, robots.txt obeyed, and the same
10 s timeout as ``crawlpace crawl``.

The benchmark's other Scrapy set-ups start the same spider with some of these settings
overridden on the command line, ``-s NAME=VALUE``, which Scrapy ranks above a spider's
``custom_settings``::

    # scrapy-at4: AutoThrottle aiming at 4 requests in flight per site instead of 1
    ... -s AUTOTHROTTLE_TARGET_CONCURRENCY=4
    # scrapy-fixed: no AutoThrottle; one request at a time per site, 1 s apart (randomised by
    # Scrapy's default to 0.5-1.5 s)
    ... -s AUTOTHROTTLE_ENABLED=False -s DOWNLOAD_DELAY=1.0 -s CONCURRENT_REQUESTS_PER_DOMAIN=1
    # scrapy-crawlpace: crawlpace's add-on with rampup on for every host, starting from the
    # add-on's defaults (the spider's AutoThrottle and 8 per domain would become its limits)
    ... -s 'ADDONS={"crawlpace.scrapy.Addon": 100}' -s 'THROTTLING_SCOPE_DEFAULTS={"rampup": true}' \
        -s AUTOTHROTTLE_ENABLED=False -s CONCURRENT_REQUESTS_PER_DOMAIN=1
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from scrapy import Request, Spider
from scrapy.http import Response
from twisted.python.failure import Failure

#: What the benchmark sets (its ``-s`` options override these); everything else is Scrapy's default.
SETTINGS: dict[str, Any] = {
    "AUTOTHROTTLE_ENABLED": True,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "RETRY_ENABLED": True,
    # Scrapy's default list, which already holds 429 and 503; kept explicit here.
    "RETRY_HTTP_CODES": [500, 502, 503, 504, 522, 524, 408, 429],
    "RETRY_TIMES": 2,
    "ROBOTSTXT_OBEY": True,
    "DOWNLOAD_TIMEOUT": 10,
    "LOG_LEVEL": "WARNING",
    # Let the callback see final non-2xx answers too (after the retries), so that every
    # URL gets an item with its final status. It changes nothing about what is sent.
    "HTTPERROR_ALLOW_ALL": True,
    # No listening telnet port in a benchmark.
    "TELNETCONSOLE_ENABLED": False,
}


class ListSpider(Spider):
    """GET every URL of a file; yield its final status."""

    name = "crawl_efficiency_list"
    custom_settings = SETTINGS

    def __init__(self, urls: str = "", out: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not urls or not out:
            raise ValueError("pass the URL file with -a urls=FILE and the output with -a out=FILE")
        lines = Path(urls).read_text(encoding="utf-8").split()
        self.start_urls = [line for line in lines if line]
        # Line-buffered, so every item is on disk at once; closed in closed().
        self._out = Path(out).open("w", encoding="utf-8", buffering=1)  # noqa: SIM115

    def record(self, url: str | None, status: int | None, error: str | None) -> dict[str, Any]:
        item = {"url": url, "status": status, "error": error}
        self._out.write(json.dumps(item) + "\n")
        return item

    def closed(self, reason: str) -> None:
        self._out.close()

    async def start(self) -> AsyncIterator[Any]:
        for url in self.start_urls:
            yield Request(url, callback=self.parse, errback=self.failed, dont_filter=True)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield self.record(response.request.url if response.request else response.url, response.status, None)

    def failed(self, failure: Failure) -> Iterator[dict[str, Any]]:
        request = getattr(failure, "request", None)
        url = request.url if isinstance(request, Request) else None
        kind = failure.type.__name__ if failure.type else "?"
        yield self.record(url, None, f"{kind}: {failure.getErrorMessage()}")
