"""A small asyncio HTTP/1.1 server for the dashboard and the metrics endpoint.

It runs on the crawl's own event loop (no thread reads the counters while the
loop writes them), answers GET requests only, closes each connection after
one answer, and checks a token on every request when one is set. Binding to
an address other than loopback without a token is refused.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

from .._exceptions import CrawlpaceError

__all__ = ["Handler", "HttpServer", "Request", "Response", "ServeError", "check_bind", "is_loopback"]

logger = logging.getLogger(__name__)

# Bytes of request line and headers read at most; anything longer is refused.
MAX_HEAD = 16 * 1024
# Seconds a client may take to send its request.
READ_TIMEOUT = 10.0


class ServeError(CrawlpaceError):
    """A server could not start: the port is in use, or the bind is unsafe."""


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed GET request."""

    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Response:
    """What a handler answers."""

    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 500: "Internal Server Error"}


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and addresses in 127.0.0.0/8 or ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, what: str) -> None:
    """Refuse to serve the crawl's state beyond loopback without a token.

    Raises:
        ServeError: when ``host`` is not loopback and ``token`` is empty.
    """
    if not is_loopback(host) and not token:
        raise ServeError(f"{what}: binding to {host} lets anyone on the network read the crawl's "
                         "state; give a token (--token or CRAWLPACE_DASHBOARD_TOKEN) or bind to 127.0.0.1")


class HttpServer:
    """Serves ``routes`` (path -> handler) on ``host:port``.

    Args:
        routes: handlers by exact path.
        host: the address to bind; loopback unless a token is given.
        port: the port (0: any free one; read :attr:`port` after start).
        token: when set, every request must carry it as ``?token=`` or an
            ``Authorization: Bearer`` header.
        what: how error messages name this server (``--dashboard``...).
        public: paths served without the token (static assets holding no data).
        guard_remote: refuse a non-loopback ``host`` without a token (off for
            the metrics endpoint, which scrapers read without one).

    Raises:
        ServeError: when ``host`` is not loopback and no token is given.
    """

    def __init__(self, routes: Mapping[str, Handler], *, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, what: str = "the server",
                 public: frozenset[str] = frozenset(), guard_remote: bool = True) -> None:
        if guard_remote:
            check_bind(host, token, what)
        self._routes = dict(routes)
        self.host = host
        self._port = port
        self._token = token
        self.what = what
        self._public = public
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (the one asked for until :meth:`start`)."""
        return self._port

    @property
    def url(self) -> str:
        """The base URL, with the token when one is set."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        query = f"?token={self._token}" if self._token else ""
        return f"http://{host}:{self._port}/{query}"

    async def start(self) -> None:
        """Bind and listen.

        Raises:
            ServeError: when the address cannot be bound (in use, not local...).
        """
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self._port)
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise ServeError(f"{self.what}: cannot listen on {self.host}:{self._port} ({reason}); "
                             "choose another port or address") from None
        sockets = self._server.sockets
        if sockets:
            self._port = int(sockets[0].getsockname()[1])
        logger.info("%s listening on http://%s:%d/", self.what, self.host, self._port)

    async def aclose(self) -> None:
        """Stop listening and close the server."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            response = await self._answer(head)
            reason = _REASONS.get(response.status, "OK")
            lines = [f"HTTP/1.1 {response.status} {reason}",
                     f"Content-Type: {response.content_type}",
                     f"Content-Length: {len(response.body)}",
                     "Cache-Control: no-store", "X-Content-Type-Options: nosniff", "Connection: close"]
            lines += [f"{key}: {value}" for key, value in response.headers.items()]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _answer(self, head: bytes) -> Response:
        if len(head) > MAX_HEAD:
            return Response(b"request too large\n", status=400)
        try:
            text = head.decode("latin-1")
            request_line, *header_lines = text.split("\r\n")
            method, target, _version = request_line.split(" ", 2)
        except ValueError:
            return Response(b"bad request\n", status=400)
        if method != "GET":
            return Response(b"only GET is served\n", status=405)
        headers = {}
        for line in header_lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        parts = urlsplit(target)
        request = Request(parts.path, dict(parse_qsl(parts.query)), headers)
        if self._token and parts.path not in self._public and not self._authorized(request):
            return Response(b"a token is needed: add ?token=... to the address\n", status=401)
        handler = self._routes.get(parts.path)
        if handler is None:
            return Response(b"not found\n", status=404)
        try:
            return await handler(request)
        except Exception:
            logger.exception("%s: answering %s failed", self.what, parts.path)
            return Response(b"internal error\n", status=500)

    def _authorized(self, request: Request) -> bool:
        assert self._token is not None
        given = request.query.get("token", "")
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        return hmac.compare_digest(given.encode(), self._token.encode())
