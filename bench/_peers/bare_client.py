"""A bare HTTP client fetching a URL list, the ceiling of ``bench/broad.py``.

Run it as ``python bench/_peers/bare_client.py aiohttp|httpx URLS.txt OUT.jsonl [--concurrency 64]
[--per-host 2] [--uvloop]``.

It does only what any crawler must: ``--concurrency`` workers take the URLs in file order,
at most ``--per-host`` requests are in flight to one host, each body is read in full and
one JSON line ``{"url", "status", "bytes"}`` is written per URL (one ``write`` per line,
no flush per line: the operating system gets the lines as Python's buffer fills). No
throttling, no retries, no robots.txt, no journal: the cost of the HTTP library and the
event loop alone.

* ``aiohttp``: one ``ClientSession`` whose ``TCPConnector(limit=concurrency,
  limit_per_host=per_host)`` keeps a pool per host and enforces the per-host cap.
* ``httpx``: one ``AsyncClient`` with ``max_connections=concurrency``; the per-host cap is
  an ``asyncio.Semaphore`` per host, since httpx has no such setting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import defaultdict
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

TIMEOUT = 10.0


async def run_aiohttp(urls: list[str], out: TextIO, concurrency: int, per_host: int) -> None:
    import aiohttp

    queue = iter(urls)
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=per_host)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as session:

        async def worker() -> None:
            for url in queue:
                try:
                    async with session.get(url, allow_redirects=False) as response:
                        body = await response.read()
                        status: int | None = response.status
                except (aiohttp.ClientError, TimeoutError, OSError):
                    status, body = None, b""
                out.write(json.dumps({"url": url, "status": status, "bytes": len(body)}) + "\n")

        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def run_httpx(urls: list[str], out: TextIO, concurrency: int, per_host: int) -> None:
    import httpx

    queue = iter(urls)
    hosts: defaultdict[str, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(per_host))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=TIMEOUT) as client:

        async def worker() -> None:
            for url in queue:
                async with hosts[urlsplit(url).netloc]:
                    try:
                        response = await client.get(url)
                        status: int | None = response.status_code
                        size = len(response.content)
                    except (httpx.HTTPError, OSError):
                        status, size = None, 0
                out.write(json.dumps({"url": url, "status": status, "bytes": size}) + "\n")

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("client", choices=("aiohttp", "httpx"))
    parser.add_argument("urls", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    urls = [line for line in args.urls.read_text(encoding="utf-8").split() if line]
    run = run_aiohttp if args.client == "aiohttp" else run_httpx
    with args.output.open("w", encoding="utf-8") as out:
        if args.uvloop:
            import uvloop

            uvloop.run(run(urls, out, args.concurrency, args.per_host))
        else:
            asyncio.run(run(urls, out, args.concurrency, args.per_host))


if __name__ == "__main__":
    main()
