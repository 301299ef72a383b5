"""The HTTP/1.1 wire format, as far as the simulator speaks it: pure functions on bytes.

:func:`parse_head` reads a request line and its headers, :func:`encode_response`
writes a whole response with its framing headers. Neither touches a socket, so
the odd inputs a server meets can be tried here directly. Lines must end in
CRLF; a request whose head ends in bare LF never completes and runs into the
server's read timeout.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import unquote_to_bytes, urlsplit

from ._asgi import Headers

__all__ = [
    "END_OF_HEAD",
    "MAX_BODY_BYTES",
    "BadRequest",
    "RequestHead",
    "encode_response",
    "error_response",
    "parse_head",
]

#: The largest request body that is read and thrown away; a longer one gets 413.
MAX_BODY_BYTES = 64 * 1024
#: The blank line that ends a request head.
END_OF_HEAD = b"\r\n\r\n"

_REQUEST_LINE = re.compile(rb"([A-Z]+) ([!-~]+) HTTP/([0-9])\.([0-9])")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_METHODS = ("GET", "HEAD")
# Framing headers are the server's business: whatever the application says is replaced.
_FRAMING = frozenset({b"content-length", b"connection", b"transfer-encoding", b"keep-alive"})
_SERVER = b"crawlpace-sim"


class BadRequest(Exception):
    """A request the server answers with an error status and then hangs up on.

    Attributes:
        status: the status code to answer with.
        reason: a short explanation, sent as the body.
        headers: extra response headers (``Allow`` for a 405).
    """

    def __init__(self, status: int, reason: str, headers: Headers | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers: Headers = headers or []


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A parsed request line and header block.

    Attributes:
        method: ``GET`` or ``HEAD``.
        http_version: ``"1.0"`` or ``"1.1"``.
        raw_path: the path as sent, still percent-encoded.
        path: the path percent-decoded as UTF-8.
        query_string: the bytes after ``?``, still encoded.
        headers: header pairs with lower-case names, in the order sent.
        keep_alive: whether the connection may carry another request afterwards.
        body_length: the announced body size in bytes, to be read and discarded.
    """

    method: str
    http_version: str
    raw_path: bytes
    path: str
    query_string: bytes
    headers: Headers
    keep_alive: bool
    body_length: int


def _target(raw: bytes) -> tuple[bytes, bytes]:
    """Split a request target into path and query; absolute URLs are reduced to their path."""
    if raw.startswith((b"http://", b"https://")):
        try:
            parts = urlsplit(raw)
        except ValueError as exc:  # a malformed authority, such as an unclosed "["
            raise BadRequest(400, "malformed absolute request target") from exc
        return parts.path or b"/", parts.query
    if not raw.startswith(b"/"):
        raise BadRequest(400, "the request target must be a path starting with '/'")
    path, _, query = raw.partition(b"?")
    return path, query.partition(b"#")[0]


def _body_length(headers: Headers) -> int:
    if any(name == b"transfer-encoding" for name, _ in headers):
        raise BadRequest(501, "request bodies in Transfer-Encoding are not supported")
    values = {value for name, value in headers if name == b"content-length"}
    if not values:
        return 0
    if len(values) > 1 or not all(value.isdigit() for value in values):
        raise BadRequest(400, "malformed Content-Length")
    length = int(values.pop())
    if length > MAX_BODY_BYTES:
        raise BadRequest(413, f"request bodies are limited to {MAX_BODY_BYTES} bytes")
    return length


def parse_head(data: bytes) -> RequestHead:
    """Parse a request line and its headers.

    Args:
        data: everything up to and including the blank line that ends the head.

    Returns:
        The parsed head.

    Raises:
        BadRequest: with 400 for malformed syntax, 505 for an HTTP version
            other than 1.0 and 1.1, 405 for a method other than GET and HEAD,
            413 or 501 for a body the server will not read.
    """
    lines = data.removesuffix(END_OF_HEAD).split(b"\r\n")
    match = _REQUEST_LINE.fullmatch(lines[0])
    if match is None:
        raise BadRequest(400, "malformed request line")
    method, raw_target, major, minor = match.groups()
    if (major, minor) not in ((b"1", b"0"), (b"1", b"1")):
        raise BadRequest(505, "only HTTP/1.0 and HTTP/1.1 are served")
    headers: Headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None:  # also catches obsolete line folding
            raise BadRequest(400, "malformed header line")
        headers.append((name.lower(), value.strip(b" \t")))
    if method.decode("ascii") not in _METHODS:
        raise BadRequest(405, "only GET and HEAD are served", [(b"allow", b"GET, HEAD")])
    raw_path, query = _target(raw_target)
    tokens = {token.strip().lower() for name, value in headers if name == b"connection"
              for token in value.split(b",")}
    version = f"{major.decode()}.{minor.decode()}"
    keep_alive = b"close" not in tokens if version == "1.1" else b"keep-alive" in tokens
    return RequestHead(method=method.decode("ascii"), http_version=version, raw_path=raw_path,
                       path=unquote_to_bytes(raw_path).decode("utf-8", errors="replace"),
                       query_string=query, headers=headers, keep_alive=keep_alive,
                       body_length=_body_length(headers))


def encode_response(status: int, headers: Iterable[tuple[bytes, bytes]], body: bytes, *,
                    head_only: bool, keep_alive: bool, http_version: str) -> bytes:
    """Serialise a whole response, replacing the application's framing headers with the server's.

    Args:
        status: the status code.
        headers: the application's header pairs, lower-case names.
        body: the whole body.
        head_only: leave the body out but keep its ``Content-Length`` (a HEAD request).
        keep_alive: whether the connection stays open afterwards.
        http_version: the request's version; an HTTP/1.0 client that keeps the
            connection open is told so explicitly.

    Returns:
        The bytes to write.
    """
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    lines = [f"HTTP/1.1 {status} {phrase}".encode("latin-1")]
    own = [(name, value) for name, value in headers if name not in _FRAMING]
    names = {name for name, _ in own}
    if b"date" not in names:
        own.append((b"date", email.utils.formatdate(usegmt=True).encode("ascii")))
    if b"server" not in names:
        own.append((b"server", _SERVER))
    bodiless = status in (204, 304) or 100 <= status < 200
    if not bodiless:
        own.append((b"content-length", str(len(body)).encode("ascii")))
    if not keep_alive:
        own.append((b"connection", b"close"))
    elif http_version == "1.0":
        own.append((b"connection", b"keep-alive"))
    lines.extend(name + b": " + value for name, value in own)
    payload = b"" if head_only or bodiless else body
    return b"\r\n".join(lines) + END_OF_HEAD + payload


def error_response(status: int) -> tuple[int, Headers, bytes]:
    """A plain-text response for an error status, as status, headers and body."""
    body = f"{status} {HTTPStatus(status).phrase}\n".encode("ascii")
    return status, [(b"content-type", b"text/plain; charset=utf-8")], body
