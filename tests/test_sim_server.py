"""The simulator's HTTP/1.1 server, on real loopback sockets and through its pure parser."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlpace.sim import PageApp, SimServer, serve
from crawlpace.sim._asgi import Receive, Scope, Send, respond
from crawlpace.sim._http import BadRequest, encode_response, parse_head
from crawlpace.sim._server import check_loopback

HOST = "127.0.0.2"


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Describe the request back as JSON."""
    message = await receive()
    client = scope["client"]
    body = json.dumps({
        "method": scope["method"], "path": scope["path"], "raw_path": scope["raw_path"].decode(),
        "query": scope["query_string"].decode(), "client_port": client[1] if client else None,
        "server": list(scope["server"]), "http_version": scope["http_version"],
        "headers": {name.decode(): value.decode() for name, value in scope["headers"]},
        "first_message": message["type"], "asgi": scope["asgi"]["version"],
    }).encode()
    await respond(send, 200, body, content_type="application/json", headers=[(b"x-app", b"echo")])


async def failing(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("boom")


async def silent(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})


@pytest.fixture
async def server() -> AsyncIterator[SimServer]:
    async with SimServer(echo, HOST, 0) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    # trust_env=False: no proxy from the environment may ever see these requests.
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        yield http


async def raw_exchange(port: int, data: bytes, host: str = HOST) -> bytes:
    """Send raw bytes, then read until the server hangs up; a reset ends the read too."""
    reader, writer = await asyncio.open_connection(host, port)
    received = b""
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(3.0):
            while chunk := await reader.read(65536):
                received += chunk
    except ConnectionError:
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return received


# --- binding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "127.255.0.9"])
def test_loopback_addresses_are_accepted(host: str) -> None:
    assert check_loopback(host) == host


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "10.0.0.1", "localhost", "::1", "", "::",
                                  "128.0.0.1", "127.0.0.1:80"])
async def test_other_hosts_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match="loopback only"):
        SimServer(echo, host)
    with pytest.raises(ValueError, match="loopback only"):
        await serve(echo, host, 0)


def test_bad_numbers_are_refused() -> None:
    with pytest.raises(ValueError, match="port"):
        SimServer(echo, HOST, 70000)
    with pytest.raises(ValueError, match="read_timeout"):
        SimServer(echo, HOST, read_timeout=0)
    with pytest.raises(ValueError, match="max_header_bytes"):
        SimServer(echo, HOST, max_header_bytes=10)


async def test_port_zero_picks_a_free_port_and_close_is_idempotent() -> None:
    server = SimServer(echo, HOST)
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.port
    await server.start()
    assert server.serving
    assert server.port > 0
    assert server.url == f"http://{HOST}:{server.port}"
    with pytest.raises(RuntimeError, match="already started"):
        await server.start()
    await server.close()
    await server.close()
    with pytest.raises(ConnectionRefusedError):  # nobody listens any more
        await asyncio.open_connection(HOST, server.port)


# --- requests through httpx ------------------------------------------------------------------------


async def test_scope_is_built_from_the_request(server: SimServer, client: httpx.AsyncClient) -> None:
    response = await client.get(f"{server.url}/some%20where/?a=1&b=%20", headers={"X-Test": "Yes"})
    assert response.status_code == 200
    seen = response.json()
    assert seen["method"] == "GET"
    assert seen["path"] == "/some where/"
    assert seen["raw_path"] == "/some%20where/"
    assert seen["query"] == "a=1&b=%20"
    assert seen["server"] == [HOST, server.port]
    assert seen["headers"]["x-test"] == "Yes"
    assert seen["first_message"] == "http.request"
    assert seen["http_version"] == "1.1"
    assert seen["asgi"] == "3.0"
    assert response.headers["content-length"] == str(len(response.content))
    assert response.headers["x-app"] == "echo"
    assert "date" in response.headers


async def test_connections_are_kept_alive(server: SimServer, client: httpx.AsyncClient) -> None:
    ports = {(await client.get(f"{server.url}/{n}")).json()["client_port"] for n in range(5)}
    assert len(ports) == 1


async def test_head_has_the_length_but_no_body(server: SimServer, client: httpx.AsyncClient) -> None:
    got = await client.get(f"{server.url}/x")
    head = await client.head(f"{server.url}/x")
    assert head.status_code == 200
    assert head.content == b""
    # The echo differs only by the method name: "HEAD" is one letter longer than "GET".
    assert int(head.headers["content-length"]) == len(got.content) + 1
    again = await client.get(f"{server.url}/x")  # the connection is still in step
    assert again.json()["client_port"] == got.json()["client_port"]


async def test_unknown_paths_are_404(client: httpx.AsyncClient) -> None:
    async with SimServer(PageApp(pages=3, links=2), HOST) as pages:
        assert (await client.get(f"{pages.url}/page/3")).status_code == 200
        for path in ("/page/4", "/page/0", "/nothing", "/page/1/extra"):
            assert (await client.get(pages.url + path)).status_code == 404


async def test_other_methods_get_405(server: SimServer, client: httpx.AsyncClient) -> None:
    response = await client.post(f"{server.url}/", content=b"data")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD"
    assert response.headers["connection"] == "close"


async def test_an_application_error_is_a_500(client: httpx.AsyncClient,
                                             caplog: pytest.LogCaptureFixture) -> None:
    async with SimServer(failing, HOST) as broken:
        response = await client.get(f"{broken.url}/")
        assert response.status_code == 500
        assert (await client.get(f"{broken.url}/")).status_code == 500  # the server goes on
    assert any(record.levelno == logging.ERROR and record.exc_info for record in caplog.records)


async def test_an_incomplete_response_is_a_500(client: httpx.AsyncClient) -> None:
    async with SimServer(silent, HOST) as server:
        assert (await client.get(f"{server.url}/")).status_code == 500


# --- raw sockets -----------------------------------------------------------------------------------


async def test_malformed_request_line_is_400(server: SimServer) -> None:
    received = await raw_exchange(server.port, b"GARBAGE\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"\r\nconnection: close\r\n" in received


async def test_oversized_headers_get_431_or_a_hang_up(server: SimServer) -> None:
    request = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    received = await raw_exchange(server.port, request)
    assert received == b"" or received.startswith(b"HTTP/1.1 431 ")
    assert (await raw_exchange(server.port, b"GET / HTTP/1.0\r\n\r\n")).startswith(b"HTTP/1.1 200 ")


async def test_connection_close_is_honoured(server: SimServer) -> None:
    two = b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"
    received = await raw_exchange(server.port, two)
    assert received.count(b"HTTP/1.1 200 ") == 1
    assert b"\r\nconnection: close\r\n" in received


async def test_http_10_closes_unless_asked_to_keep_alive(server: SimServer) -> None:
    received = await raw_exchange(server.port, b"GET /a HTTP/1.0\r\n\r\nGET /b HTTP/1.0\r\n\r\n")
    assert received.count(b"HTTP/1.1 200 ") == 1
    kept = (b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
            b"GET /b HTTP/1.0\r\nConnection: close\r\n\r\n")
    received = await raw_exchange(server.port, kept)
    assert received.count(b"HTTP/1.1 200 ") == 2
    assert b"\r\nconnection: keep-alive\r\n" in received


async def test_pipelined_requests_with_bodies_stay_in_step(server: SimServer) -> None:
    data = (b"GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
            b"GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    received = await raw_exchange(server.port, data)
    assert received.count(b"HTTP/1.1 200 ") == 2
    assert b'"path": "/a"' in received
    assert b'"path": "/b"' in received


async def test_a_client_leaving_mid_request_is_harmless(server: SimServer, client: httpx.AsyncClient,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="crawlpace.sim")
    partials = (b"GET / HTTP/1.1\r\nHost: x\r\n", b"GET /a HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", b"")
    for partial in partials:
        _reader, writer = await asyncio.open_connection(HOST, server.port)
        writer.write(partial)
        await writer.drain()
        writer.close()
        await writer.wait_closed()
    await asyncio.sleep(0.05)  # let the server notice the hang-ups
    assert (await client.get(f"{server.url}/after")).status_code == 200
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert any("left" in record.getMessage() or "lost" in record.getMessage() for record in caplog.records)


async def test_a_client_leaving_while_the_app_works_is_harmless(client: httpx.AsyncClient,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    finished = asyncio.Event()

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(0.05)
        await respond(send, 200, b"x" * 200_000)  # more than a socket buffer takes at once
        finished.set()

    async with SimServer(slow, HOST) as server:
        for _ in range(3):
            _reader, writer = await asyncio.open_connection(HOST, server.port)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        async with asyncio.timeout(2.0):
            await finished.wait()
        await asyncio.sleep(0.05)  # let the writes to the departed clients fail
        assert (await client.get(f"{server.url}/")).status_code == 200
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


async def test_idle_connections_time_out() -> None:
    async with SimServer(echo, HOST, read_timeout=0.1) as server:
        reader, writer = await asyncio.open_connection(HOST, server.port)
        async with asyncio.timeout(2.0):
            assert await reader.read() == b""  # the server hung up
        writer.close()
        await writer.wait_closed()


async def test_closing_drops_idle_keep_alive_connections(client: httpx.AsyncClient,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    server = await serve(echo, HOST, 0)
    reader, writer = await asyncio.open_connection(HOST, server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
    async with asyncio.timeout(2.0):
        await server.close()
    writer.close()
    await writer.wait_closed()
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


# --- the parser ------------------------------------------------------------------------------------


def test_parse_head_reads_a_plain_request() -> None:
    head = parse_head(b"GET /p%C3%A9/x?q=1#frag HTTP/1.1\r\nHost: a\r\nX-Y:  spaced \t\r\n\r\n")
    assert head.method == "GET"
    assert head.http_version == "1.1"
    assert head.raw_path == b"/p%C3%A9/x"
    assert head.path == "/p\u00e9/x"
    assert head.query_string == b"q=1"
    assert head.headers == [(b"host", b"a"), (b"x-y", b"spaced")]
    assert head.keep_alive
    assert head.body_length == 0


def test_parse_head_reduces_an_absolute_target() -> None:
    head = parse_head(b"HEAD http://127.0.0.2:8000/page/2?x=y HTTP/1.1\r\n\r\n")
    assert head.method == "HEAD"
    assert head.raw_path == b"/page/2"
    assert head.query_string == b"x=y"


@pytest.mark.parametrize(("data", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET / HTTP/2.0\r\n\r\n", 505),
    (b"POST / HTTP/1.1\r\n\r\n", 405),
    (b"get / HTTP/1.1\r\n\r\n", 400),
    (b"GET nopath HTTP/1.1\r\n\r\n", 400),
    (b"GET http://[oops/ HTTP/1.1\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nNo colon here\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nBad Name: b\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
    (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
])
def test_parse_head_refuses(data: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_head(data)
    assert caught.value.status == status


def test_parse_head_keep_alive_rules() -> None:
    assert not parse_head(b"GET / HTTP/1.1\r\nConnection: Keep-Alive, CLOSE\r\n\r\n").keep_alive
    assert not parse_head(b"GET / HTTP/1.0\r\n\r\n").keep_alive
    assert parse_head(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive


@given(st.binary(max_size=300))
def test_parse_head_never_fails_otherwise(data: bytes) -> None:
    for candidate in (data + b"\r\n\r\n", b"GET /" + data + b" HTTP/1.1\r\n\r\n",
                      b"GET / HTTP/1.1\r\n" + data + b"\r\n\r\n"):
        with contextlib.suppress(BadRequest):
            parse_head(candidate)


def test_encode_response_owns_the_framing() -> None:
    app_headers = [(b"content-length", b"999"), (b"connection", b"upgrade"), (b"x-a", b"1")]
    data = encode_response(200, app_headers, b"hello", head_only=False, keep_alive=True, http_version="1.1")
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 OK"
    assert b"content-length: 5" in lines
    assert b"x-a: 1" in lines
    assert not any(line.startswith(b"connection:") for line in lines)
    assert body == b"hello"


def test_encode_response_for_head_no_content_and_http_10() -> None:
    head_only = encode_response(200, [], b"hello", head_only=True, keep_alive=False, http_version="1.1")
    assert head_only.endswith(b"content-length: 5\r\nconnection: close\r\n\r\n")
    empty = encode_response(204, [], b"ignored", head_only=False, keep_alive=True, http_version="1.0")
    assert b"content-length" not in empty
    assert empty.endswith(b"connection: keep-alive\r\n\r\n")
    odd = encode_response(299, [(b"server", b"mine")], b"", head_only=False, keep_alive=True,
                          http_version="1.1")
    assert odd.startswith(b"HTTP/1.1 299 \r\n")
    assert odd.count(b"server:") == 1


async def test_a_site_dates_a_request_from_its_first_bytes() -> None:
    """A head that takes 0.2 s to come in arrived when it began: the server's reading is not the crawler's."""
    from crawlpace.sim import CrawlDelaySite

    site = CrawlDelaySite(delay=0.3, tolerance=0.05, pages=3)
    async with SimServer(site, HOST) as running:
        reader, writer = await asyncio.open_connection(HOST, running.port)
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            writer.write(b"GET /page/1 HTTP/1.1\r\nHost: x\r\n")
            await writer.drain()
            await asyncio.sleep(0.2)  # the rest of the head dribbles in
            writer.write(b"\r\n")
            head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
            length = int(head.split("content-length:", 1)[1].split("\r\n", 1)[0])
            await reader.readexactly(length)
            await asyncio.sleep(max(started + 0.31 - loop.time(), 0.0))  # the crawl delay from the first send
            writer.write(b"GET /page/2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            await writer.drain()
            await reader.read()
        finally:
            writer.close()
    figures = site.stats.as_dict()
    assert figures["requests"] == 2
    # Timed from the end of the first head (0.2 s late), the second request would be 0.19 s early.
    assert figures["violations"] == 0, figures["violation_kinds"]
