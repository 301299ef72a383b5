"""crawlpace's httpx wrapper used as a library user would, for ``bench/crawl_efficiency.py``.

Run it as ``python bench/_peers/library_httpx.py URLS.txt OUT.jsonl defaults|gradual|rampup``.

Every URL is one ``await client.get(url)`` on a ``crawlpace.http.throttled_client`` with
8 slots per host, no delay (``CONCURRENT_REQUESTS_PER_DOMAIN = 8``, ``DOWNLOAD_DELAY = 0``,
``DOWNLOAD_DELAY_PER_SLOT = 0``), ``CONCURRENT_REQUESTS = 64``, the wrapper's own 3
resends of a backoff answer, a 10 s timeout; with ``gradual``, gradual slots on
(``THROTTLING_GRADUAL_SLOTS = True``: each host's slots open 1, 2, 4, 8 as its answers come
back well, and close again on a refusal); with ``rampup``, rampup on for every host
(``THROTTLING_SCOPE_DEFAULTS = {"rampup": true}``). All URLs are started at once; the
throttler decides when each goes. The client obeys robots.txt (``robots_txt=True``): it
reads each site's file before the first page, applies its Crawl-delay and refuses what it
disallows (such a URL's line has the error). A transient failure that is not a backoff
answer (a 500, say) is sent again by this script, up to 3 times, the way a careful caller
would. Each URL's final answer is one
JSON line ``{"url", "status", "attempts", "error"}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import httpx

from crawlpace import CrawlpaceError
from crawlpace.http import throttled_client

TIMEOUT = 10.0
RESENDS = 3
SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 64,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "DOWNLOAD_DELAY": 0.0,
    "DOWNLOAD_DELAY_PER_SLOT": 0.0,
}


async def fetch(client: httpx.AsyncClient, url: str, out: TextIO) -> None:
    status: int | None = None
    error: str | None = None
    attempts = 0
    while attempts <= RESENDS:
        attempts += 1
        try:
            response = await client.get(url)
            status, error = response.status_code, None
        except httpx.HTTPError as exc:
            status, error = None, f"{type(exc).__name__}: {exc}"
        except CrawlpaceError as exc:  # the breaker gave the site up: nothing more to try
            status, error = None, f"{type(exc).__name__}: {exc}"
            break
        if status is not None and status < 500:
            break
    out.write(json.dumps({"url": url, "status": status, "attempts": attempts, "error": error}) + "\n")
    out.flush()


async def main(urls: list[str], output: Path, mode: str) -> None:
    settings = dict(SETTINGS)
    if mode == "rampup":
        settings["THROTTLING_SCOPE_DEFAULTS"] = {"rampup": True}
    elif mode == "gradual":
        settings["THROTTLING_GRADUAL_SLOTS"] = True
    with output.open("w", encoding="utf-8") as out:
        async with throttled_client(settings, timeout=TIMEOUT, trust_env=False, robots_txt=True) as client:
            await asyncio.gather(*(fetch(client, url, out) for url in urls))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in ("defaults", "gradual", "rampup"):
        sys.exit("usage: library_httpx.py URLS.txt OUT.jsonl defaults|gradual|rampup")
    lines = Path(sys.argv[1]).read_text(encoding="utf-8").split()
    asyncio.run(main([line for line in lines if line], Path(sys.argv[2]), sys.argv[3]))
