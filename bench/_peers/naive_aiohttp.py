"""A naive aiohttp crawler, the baseline of ``bench/crawl_efficiency.py``.

Run it as ``python bench/_peers/naive_aiohttp.py URLS.txt OUT.jsonl``.

It is what a quick script usually does: a fixed number of workers (8) take the URLs in
file order; a 429, a 503 or any exception (a timeout included) makes the worker sleep
one second and send the same URL again, at most three times. It reads no robots.txt
and pays no attention to ``Retry-After``, ``Crawl-delay`` or rate-limit headers. Each
URL's final answer is written as one JSON line ``{"url", "status", "attempts",
"error"}`` as soon as it is known (and flushed), so a run cut short keeps what it did.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import aiohttp

WORKERS = 8
RETRIES = 3
PAUSE = 1.0
TIMEOUT = 10.0
RETRY_STATUSES = frozenset({429, 503})


async def fetch(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    """One URL, with up to ``RETRIES`` resends after a pause."""
    status: int | None = None
    error: str | None = None
    attempts = 0
    while True:
        attempts += 1
        try:
            async with session.get(url) as response:
                await response.read()
                status, error = response.status, None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            status, error = None, f"{type(exc).__name__}: {exc}"
        if (status is not None and status not in RETRY_STATUSES) or attempts > RETRIES:
            return {"url": url, "status": status, "attempts": attempts, "error": error}
        await asyncio.sleep(PAUSE)


async def worker(session: aiohttp.ClientSession, queue: asyncio.Queue[str], out: TextIO) -> None:
    while True:
        try:
            url = queue.get_nowait()
        except asyncio.QueueEmpty:
            return
        result = await fetch(session, url)
        out.write(json.dumps(result) + "\n")
        out.flush()


async def main(urls: list[str], output: Path) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)
    timeout = aiohttp.ClientTimeout(total=TIMEOUT)
    with output.open("w", encoding="utf-8") as out:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(worker(session, queue, out) for _ in range(WORKERS)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: naive_aiohttp.py URLS.txt OUT.jsonl")
    lines = Path(sys.argv[1]).read_text(encoding="utf-8").split()
    asyncio.run(main([line for line in lines if line], Path(sys.argv[2])))
