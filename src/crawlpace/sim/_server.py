"""A small HTTP/1.1 server on asyncio streams that runs one ASGI 3 application.

It understands just enough of HTTP for a crawler to talk to a simulated site:
GET and HEAD, persistent connections (the default in HTTP/1.1, opt-in with
``Connection: keep-alive`` in HTTP/1.0), ``Connection: close``, and request
bodies only to skip them. Each response is buffered whole and sent with a
``Content-Length``; there is no chunked encoding, no TLS, and requests sent
back to back on one connection are answered one after the other. The bytes on
the wire are handled by :mod:`._http`; this module runs connections and the
application.

The server listens on one explicit IPv4 address inside 127.0.0.0/8 and nowhere
else: the simulator must never be reachable from another machine, so any other
host is refused with :class:`ValueError` before a socket is opened.

Misbehaving clients are expected, not exceptional. A client that goes away
mid-request, sends a malformed head or lets the read timeout run out costs a
DEBUG log line and its connection, never an ERROR or a traceback. Only an
exception raised by the application itself is logged at ERROR, and answered
with 500, except :class:`ResetConnection`, with which a site asks for the
connection to be reset without an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import SupportsIndex

from ._asgi import LATE_KEY, RECEIVED_KEY, ASGIApp, Headers, Message, ResetConnection, Scope
from ._http import END_OF_HEAD, BadRequest, RequestHead, encode_response, error_response, parse_head

__all__ = ["MAX_HEADER_BYTES", "READ_TIMEOUT", "SimServer", "check_loopback", "serve"]

_log = logging.getLogger(__name__)

#: The most bytes a request line plus its headers may take.
MAX_HEADER_BYTES = 16 * 1024
#: Seconds a connection may stay silent while a request (or the next one) is awaited.
READ_TIMEOUT = 10.0

_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")


#: Seconds between two beats of :class:`_Lateness`: how finely a stall of the server's loop is seen.
BEAT = 0.01


class _Lateness:
    """How late the event loop ran as a request was read: a heartbeat (shared by a loop's servers).

    A request's bytes are read when the loop gets to them. If the server's
    process was starved of CPU, or its loop busy with other sites' requests,
    that reading comes late, and a request sent on time looks, against the
    next one read promptly, as if it came too soon. The beat due before the
    bytes came runs about as late (to within :data:`BEAT`): either it is still
    overdue when the bytes are read (:meth:`late`), or it ran just before, and
    its stall ends at the reading (:meth:`late_at`). The sites widen their
    tolerance by that much for this request (:data:`~crawlpace.sim._asgi.LATE_KEY`).
    """

    def __init__(self) -> None:
        self.due = time.monotonic() + BEAT
        self.stall = (0.0, 0.0)  # the last beat that ran late: (when it was due, when it ran)
        self.users = 0
        self._task: asyncio.Task[None] | None = None

    def late(self, now: float) -> float:
        """Seconds the loop is behind at ``now`` (0.0 while it keeps time)."""
        return max(0.0, now - self.due) if self._task is not None else 0.0

    def late_at(self, received: float) -> float:
        """Seconds of the last stall before a reading at ``received``, if it ended right then."""
        start, end = self.stall
        return received - start if start < received and end >= received - BEAT else 0.0

    def use(self) -> None:
        self.users += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._beat())

    async def release(self) -> None:
        self.users -= 1
        task = self._task
        if self.users <= 0 and task is not None:
            self._task = None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _beat(self) -> None:
        while True:
            self.due = due = time.monotonic() + BEAT
            await asyncio.sleep(BEAT)
            woke = time.monotonic()
            if woke - due > BEAT:
                self.stall = (due, woke)


_LATENESS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Lateness] = weakref.WeakKeyDictionary()


class _TimedReader(asyncio.StreamReader):
    """A stream reader that notes when the first bytes of each request came in.

    The time is taken as the event loop hands the socket's data over, before
    the head is parsed and the application runs: a site judging a crawler's
    pace should not count the server's own delays in reading and dispatching.
    How late the loop was running then is noted with it (:class:`_Lateness`).
    """

    received: float | None = None
    late: float = 0.0
    lateness: _Lateness | None = None

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        if self.received is None and data:
            self.received = now = time.monotonic()
            self.late = 0.0 if self.lateness is None else self.lateness.late(now)
        super().feed_data(data)

    def take_received(self) -> tuple[float, float]:
        """When the request just read began to arrive, and how late the loop was then; starts the
        watch for the next one."""
        received = time.monotonic() if self.received is None else self.received
        late = self.late if self.lateness is None else max(self.late, self.lateness.late_at(received))
        # Bytes of a next request may already wait behind this one: they came no later than now.
        self.received = time.monotonic() if len(self._buffer) else None  # type: ignore[attr-defined]
        self.late = 0.0
        return received, late


def check_loopback(host: str) -> str:
    """Accept only a literal IPv4 address in 127.0.0.0/8.

    Args:
        host: the address to listen on.

    Returns:
        The address in canonical form.

    Raises:
        ValueError: for a name (even ``localhost``), an IPv6 address or any
            address outside 127.0.0.0/8.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if not isinstance(address, ipaddress.IPv4Address) or address not in _LOOPBACK:
        raise ValueError(f"the simulator listens on loopback only: host must be an IPv4 address in "
                         f"127.0.0.0/8 such as '127.0.0.1', got {host!r}")
    return str(address)


@dataclass(slots=True)
class _Response:
    """What the application sent, gathered before anything is written."""

    status: int = 500
    headers: Headers | None = None
    body: bytearray | None = None
    complete: bool = False


class _Exchange:
    """The receive and send callables for one request, collecting the response."""

    def __init__(self) -> None:
        self.response = _Response()
        self.done = asyncio.Event()
        self._delivered = False

    async def receive(self) -> Message:
        if not self._delivered:
            self._delivered = True
            return {"type": "http.request", "body": b"", "more_body": False}
        # Nothing else will arrive: report the end once the response is out.
        await self.done.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        response = self.response
        kind = message.get("type")
        if kind == "http.response.start":
            if response.headers is not None:
                raise RuntimeError("http.response.start sent twice")
            response.status = int(message["status"])
            response.headers = [(bytes(name).lower(), bytes(value)) for name, value in
                                message.get("headers") or ()]
            response.body = bytearray()
        elif kind == "http.response.body":
            if response.body is None or response.complete:
                raise RuntimeError("http.response.body sent before the start or after the end")
            response.body += bytes(message.get("body") or b"")
            if not message.get("more_body", False):
                response.complete = True
                self.done.set()
        else:
            raise RuntimeError(f"unexpected ASGI message type {kind!r}")


class SimServer:
    """Serve one ASGI application over HTTP/1.1 on a loopback address.

    Use ``async with SimServer(app, "127.0.0.2") as server:`` or call
    :meth:`start` and :meth:`close`. :attr:`port` is the bound port, useful
    when 0 asked for a free one.

    Args:
        app: the ASGI 3 application; it receives ``http`` scopes only.
        host: an IPv4 address in 127.0.0.0/8; nothing else is ever bound.
        port: the TCP port, 0 for a free one.
        read_timeout: seconds to wait for a request head or body before the
            connection is dropped (also how long an idle connection is kept).
        max_header_bytes: the largest request head accepted; a longer one is
            answered with 431 and the connection closed.

    Raises:
        ValueError: for a host outside 127.0.0.0/8 or an invalid number.
    """

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *,
                 read_timeout: float = READ_TIMEOUT, max_header_bytes: int = MAX_HEADER_BYTES) -> None:
        self.app = app
        self.host = check_loopback(host)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an integer from 0 to 65535, got {port!r}")
        if not read_timeout > 0:
            raise ValueError(f"read_timeout must be positive, got {read_timeout!r}")
        if (isinstance(max_header_bytes, bool) or not isinstance(max_header_bytes, int)
                or max_header_bytes < 256):
            raise ValueError(f"max_header_bytes must be an integer of at least 256, got {max_header_bytes!r}")
        self._requested_port = port
        self._read_timeout = float(read_timeout)
        self._max_header = max_header_bytes
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._lateness: _Lateness | None = None

    @property
    def port(self) -> int:
        """The bound port.

        Raises:
            RuntimeError: before :meth:`start`.
        """
        if self._port is None:
            raise RuntimeError("the server is not started")
        return self._port

    @property
    def url(self) -> str:
        """The base URL, such as ``http://127.0.0.2:8080``."""
        return f"http://{self.host}:{self.port}"

    @property
    def serving(self) -> bool:
        """Whether the server is listening."""
        return self._server is not None

    async def start(self) -> None:
        """Bind the socket and start accepting connections.

        Raises:
            OSError: when the address cannot be bound (the port is taken, or
                the host is not configured on this machine).
            RuntimeError: when already started.
        """
        if self._server is not None:
            raise RuntimeError("the server is already started")
        loop = asyncio.get_running_loop()
        lateness = _LATENESS.get(loop)
        if lateness is None or lateness.users <= 0:
            lateness = _LATENESS[loop] = _Lateness()
        lateness.use()
        self._lateness = lateness

        def protocol() -> asyncio.StreamReaderProtocol:
            # What asyncio.start_server builds, with a reader that notes arrival times.
            reader = _TimedReader(limit=self._max_header, loop=loop)
            reader.lateness = lateness
            return asyncio.StreamReaderProtocol(reader, self._accept)

        try:
            self._server = await loop.create_server(protocol, self.host, self._requested_port)
        except BaseException:
            self._lateness = None
            await lateness.release()
            raise
        self._port = int(self._server.sockets[0].getsockname()[1])
        _log.debug("serving on %s", self.url)

    async def close(self) -> None:
        """Stop listening and drop every open connection; safe to call twice."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        lateness, self._lateness = self._lateness, None
        if lateness is not None:
            await lateness.release()
            if lateness.users <= 0 and _LATENESS.get(asyncio.get_running_loop()) is lateness:
                del _LATENESS[asyncio.get_running_loop()]
        _log.debug("stopped serving on %s:%s", self.host, self._port)

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A task of our own, not asyncio's, so that closing can cancel and await it quietly.
        task = asyncio.get_running_loop().create_task(self._connection(reader, writer))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        try:
            while await self._exchange(reader, writer, client):
                pass
        except asyncio.CancelledError:
            _log.debug("connection from %s dropped: the server is closing", client)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError) as exc:
            _log.debug("connection from %s lost: %r", client, exc)
        except Exception:  # the last line of defence for one connection; the server goes on
            _log.exception("connection from %s failed", client)
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _read_head(self, reader: asyncio.StreamReader) -> bytes | None:
        """Read one request head; None when the client closed between requests."""
        try:
            async with asyncio.timeout(self._read_timeout):
                return await reader.readuntil(END_OF_HEAD)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                _log.debug("client left mid-request after %d bytes", len(exc.partial))
            return None
        except asyncio.LimitOverrunError as exc:
            raise BadRequest(431, f"request heads are limited to {self._max_header} bytes") from exc

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        client: tuple[str, int] | None) -> bool:
        """Serve one request; return whether the connection stays open."""
        try:
            data = await self._read_head(reader)
            if data is None:
                return False
            received, late = (reader.take_received() if isinstance(reader, _TimedReader)
                              else (time.monotonic(), 0.0))
            head = parse_head(data)
            if head.body_length:
                async with asyncio.timeout(self._read_timeout):
                    await reader.readexactly(head.body_length)
        except BadRequest as exc:
            _log.debug("refusing a request from %s with %d: %s", client, exc.status, exc.reason)
            body = f"{exc.reason}\n".encode()
            await self._write(writer, encode_response(
                exc.status, [(b"content-type", b"text/plain; charset=utf-8"), *exc.headers], body,
                head_only=False, keep_alive=False, http_version="1.1"))
            return False
        answer = await self._run(head, client, received, late)
        if answer is None:
            _log.debug("%s %s %s -> connection reset", client, head.method, head.path)
            writer.transport.abort()
            return False
        status, headers, body = answer
        _log.debug("%s %s %s -> %d", client, head.method, head.path, status)
        await self._write(writer, encode_response(status, headers, body, head_only=head.method == "HEAD",
                                                   keep_alive=head.keep_alive,
                                                   http_version=head.http_version))
        return head.keep_alive

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    def _scope(self, head: RequestHead, client: tuple[str, int] | None, received: float,
               late: float) -> Scope:
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": head.http_version,
            "method": head.method,
            "scheme": "http",
            "path": head.path,
            "raw_path": head.raw_path,
            "query_string": head.query_string,
            "root_path": "",
            "headers": list(head.headers),
            "client": client,
            "server": (self.host, self.port),
            RECEIVED_KEY: received,
            LATE_KEY: late,
        }

    async def _run(self, head: RequestHead, client: tuple[str, int] | None,
                   received: float, late: float) -> tuple[int, Headers, bytes] | None:
        """Run the application on one request; return its whole response, None to reset."""
        exchange = _Exchange()
        try:
            await self.app(self._scope(head, client, received, late), exchange.receive, exchange.send)
        except ResetConnection:
            return None
        except Exception:
            _log.exception("the application failed on %s %s", head.method, head.path)
            return error_response(500)
        finally:
            exchange.done.set()
        response = exchange.response
        if not response.complete or response.headers is None or response.body is None:
            _log.error("the application returned without a complete response to %s %s",
                       head.method, head.path)
            return error_response(500)
        return response.status, response.headers, bytes(response.body)


async def serve(app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *,
                read_timeout: float = READ_TIMEOUT) -> SimServer:
    """Start serving ``app`` and return the running server; close it when done.

    Args:
        app: the ASGI 3 application.
        host: an IPv4 address in 127.0.0.0/8.
        port: the TCP port, 0 for a free one.
        read_timeout: see :class:`SimServer`.

    Returns:
        The started server; its :attr:`~SimServer.port` is the bound port.

    Raises:
        ValueError: for a host outside 127.0.0.0/8.
        OSError: when the address cannot be bound.
    """
    server = SimServer(app, host, port, read_timeout=read_timeout)
    await server.start()
    return server
