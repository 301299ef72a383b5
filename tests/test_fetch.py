"""The crawl's HTTP layer on real loopback servers: pages, limits, and failures as the throttler sees them."""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from crawlpace.crawl._fetch import AiohttpFetcher, FetchError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[str]:
    """A raw TCP server on 127.0.0.2 running ``handler`` per connection; yields its base URL."""
    tasks: set[asyncio.Task[None]] = set()

    def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(handler(reader, writer))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    listening = await asyncio.start_server(accept, "127.0.0.2", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.2:{port}"
    finally:
        listening.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await listening.wait_closed()


def answering(head: bytes, body: bytes, *, seen: list[bytes] | None = None) -> Handler:
    """A handler answering every request on the connection with ``head`` and ``body``."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                if seen is not None:
                    seen.append(request)
                writer.write(head + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
    return handle


def fetcher(timeout: float = 5.0) -> AiohttpFetcher:
    return AiohttpFetcher(user_agent="crawlpace-test/1", timeout=timeout, max_connections=10,
                          trust_env=False, clock=time.monotonic)


async def test_a_page_comes_back_with_status_headers_body_and_latency() -> None:
    seen: list[bytes] = []
    body = b"<html>hello</html>"
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nRetry-After: 3\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    async with server(answering(head, body, seen=seen)) as base:
        http = fetcher()
        try:
            first = await http.get(f"{base}/a", 1000)
            second = await http.get(f"{base}/b", 1000)
        finally:
            await http.aclose()
    assert (first.status, first.status_code, first.body, first.error) == (200, 200, body, None)
    assert first.headers is not None
    assert first.headers["retry-after"] == "3"
    assert first.latency is not None
    assert 0 <= first.latency < 5
    assert second.body == body
    assert len(seen) == 2
    assert b"user-agent: crawlpace-test/1" in seen[0].lower()
    assert seen[0].startswith(b"GET /a HTTP/1.1")


async def test_one_connection_per_host_is_kept_alive_and_reused() -> None:
    connections = 0
    body = b"x" * 10
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"
    inner = answering(head, body)

    async def counting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await inner(reader, writer)

    async with server(counting) as base:
        http = fetcher()
        try:
            for n in range(5):
                page = await http.get(f"{base}/page/{n}", 100)
                assert page.status == 200
        finally:
            await http.aclose()
    assert connections == 1


async def test_redirects_are_not_followed_and_the_location_is_given() -> None:
    head = b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n"
    async with server(answering(head, b"")) as base:
        http = fetcher()
        try:
            page = await http.get(f"{base}/start", 100)
        finally:
            await http.aclose()
    assert (page.status, page.location, page.error) == (302, "/elsewhere", None)


@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
async def test_the_body_is_cut_at_the_limit(framing: str) -> None:
    body = bytes(range(256)) * 40  # 10,240 bytes
    if framing == "length":
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
        payload = body
    elif framing == "chunked":
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        payload = b"".join(b"%x\r\n%s\r\n" % (1024, body[i:i + 1024]) for i in range(0, len(body), 1024))
        payload += b"0\r\n\r\n"
    else:
        head = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
        payload = body

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(head + payload)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()  # the end of the body is the end of the connection

    async with server(once if framing == "close" else answering(head, payload)) as base:
        http = fetcher()
        try:
            cut = await http.get(f"{base}/big", 3000)
            whole = await http.get(f"{base}/big", 1_000_000)
        finally:
            await http.aclose()
    assert cut.body == body[:3000]
    assert whole.body == body


async def test_a_compressed_body_is_limited_after_unpacking() -> None:
    plain = b"a" * 200_000
    packed = gzip.compress(plain)
    head = (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed))
    async with server(answering(head, packed)) as base:
        http = fetcher()
        try:
            page = await http.get(f"{base}/z", 5000)
        finally:
            await http.aclose()
    assert len(packed) < 5000
    assert page.body == plain[:5000]


async def test_a_refused_connection_is_an_oserror_the_throttler_backs_off_on() -> None:
    async with server(answering(b"", b"")) as base:
        pass  # closed again: nothing listens on its port now
    http = fetcher()
    try:
        page = await http.get(f"{base}/", 100)
    finally:
        await http.aclose()
    assert page.status is None
    assert page.latency is None
    assert isinstance(page.error, FetchError)
    assert isinstance(page.error, ConnectionError)
    assert isinstance(page.error.__cause__, OSError)


async def test_a_server_that_hangs_up_gives_a_connection_error_with_the_cause() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
        finally:
            writer.close()

    async with server(hang_up) as base:
        http = fetcher()
        try:
            page = await http.get(f"{base}/", 100)
        finally:
            await http.aclose()
    assert isinstance(page.error, FetchError)
    assert isinstance(page.error, ConnectionError)
    assert page.error.__cause__ is not None
    assert type(page.error.__cause__).__name__ in str(page.error)


async def test_a_silent_server_times_out_as_a_timeout_error() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await asyncio.sleep(30)
        finally:
            writer.close()

    async with server(silent) as base:
        http = fetcher(timeout=0.2)
        try:
            page = await http.get(f"{base}/", 100)
        finally:
            await http.aclose()
    assert isinstance(page.error, TimeoutError)


async def test_an_unusable_url_is_a_value_error_not_a_backoff() -> None:
    http = fetcher()
    try:
        page = await http.get("http://[::1/", 100)
    finally:
        await http.aclose()
    assert isinstance(page.error, ValueError)
    assert not isinstance(page.error, OSError)
