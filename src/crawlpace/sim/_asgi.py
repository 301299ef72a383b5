"""The few ASGI 3 shapes the simulator passes around, and a one-shot response helper.

Kept apart so the server, the sites and the control endpoint agree on one set
of type aliases without importing each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

__all__ = ["LATE_KEY", "RECEIVED_KEY", "ASGIApp", "Headers", "Message", "Receive", "ResetConnection", "Scope",
           "Send", "header", "respond"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

#: The ASGI scope key where :class:`~crawlpace.sim.SimServer` puts the ``time.monotonic()``
#: reading taken when the request's first bytes were read, before the head was parsed.
RECEIVED_KEY = "crawlpace.received"
#: Where it puts how late its event loop was running at that reading (seconds, 0.0 when on time):
#: the request may have come in that much earlier, while the server's process was stalled.
LATE_KEY = "crawlpace.received_late"


class ResetConnection(Exception):
    """Raised by a simulated site to have the server reset the connection instead of answering.

    :class:`~crawlpace.sim.SimServer` aborts the TCP connection, so the client
    sees a reset with no response; any other ASGI server answers 500.
    """


def header(headers: Iterable[tuple[bytes, bytes]] | None, name: bytes) -> str | None:
    """Find the first value of one header among ASGI header pairs.

    Args:
        headers: the pairs from a scope or a ``http.response.start`` message.
        name: the lower-case header name.

    Returns:
        The value decoded as Latin-1, or None when the header is absent.
    """
    for key, value in headers or ():
        if bytes(key).lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def respond(send: Send, status: int, body: bytes, *,
                  content_type: str = "text/plain; charset=utf-8",
                  headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """Send a whole response in one start message and one body message.

    Args:
        send: the ASGI send callable.
        status: the HTTP status code.
        body: the complete body.
        content_type: the ``Content-Type`` value.
        headers: further header pairs, lower-case names.
    """
    head: Headers = [(b"content-type", content_type.encode("latin-1")),
                     (b"content-length", str(len(body)).encode("ascii")), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})
