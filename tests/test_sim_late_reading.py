"""A site does not blame a crawler for its own server reading a request late (``sim/_server.py``).

On a loaded machine the simulator's event loop can get to a request's bytes a
good while after they came in; a Crawl-delay site then saw a punctual request
land too close to the next one read on time, and counted a violation for the
crawler (measured: first pages read 81-113 ms after their write while the
crawl's writes were the delay apart to the millisecond). A real server on
loopback, a raw client, and a loop blocked on purpose to play the stall.
"""

from __future__ import annotations

import asyncio
import time

from crawlpace.sim import CrawlDelaySite, SimServer

HOST = "127.0.0.2"
GET = b"GET /page/%d HTTP/1.1\r\nHost: x\r\n\r\n"


async def answer(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await reader.readexactly(length)


async def test_a_request_the_server_read_late_is_not_counted_too_soon_after() -> None:
    site = CrawlDelaySite(delay=0.2, pages=4, tolerance=0.05)
    async with SimServer(site, HOST) as server:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        try:
            await asyncio.sleep(0.03)  # the server's heartbeat is running
            writer.write(GET % 1)
            await writer.drain()
            sent = time.monotonic()
            time.sleep(0.15)  # noqa: ASYNC251 -- the stall: the server (this loop) reads /page/1 late
            await answer(reader)
            await asyncio.sleep(sent + 0.21 - time.monotonic())
            writer.write(GET % 2)  # 0.21 s after /page/1: punctual, but read 0.06 s after it
            await writer.drain()
            await answer(reader)
            assert not site.stats.violations
            writer.write(GET % 3)  # at once after /page/2, no stall: too soon, and counted
            await writer.drain()
            await answer(reader)
            assert site.stats.violations["crawl_delay"] == 1
        finally:
            writer.close()
            await writer.wait_closed()
