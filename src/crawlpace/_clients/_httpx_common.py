"""What the httpx transports, asynchronous and synchronous, share."""

from __future__ import annotations

import contextlib
from typing import Any, Generic, TypeVar

import httpx

from .._settings._config import Settings

__all__ = ["ATTEMPTS_EXTENSION", "SCOPES_EXTENSION", "TRANSPORT_KWARGS", "ThrottlerHolder", "discard_async",
           "discard_sync", "pool_limits", "replayable", "split_client_kwargs"]

T = TypeVar("T")

#: The ``request.extensions`` key that gives a request explicit throttling scopes.
SCOPES_EXTENSION = "crawlpace_scopes"
#: The ``response.extensions`` key telling how many times the request was sent.
ATTEMPTS_EXTENSION = "crawlpace_attempts"

# AsyncClient arguments that configure the default transport; with a custom
# transport httpx ignores them (or, for ``proxy``, mounts a transport of its own
# that would bypass the throttler), so throttled_client() builds the inner
# transport with them.
TRANSPORT_KWARGS = frozenset({"verify", "cert", "http1", "http2", "limits", "proxy"})


def pool_limits(settings: Settings) -> httpx.Limits:
    """The connection pool of a default inner transport: room for every request the throttler lets fly.

    httpx keeps at most 20 idle connections by default. A throttler that lets
    ``CONCURRENT_REQUESTS`` (64, say) requests fly across many hosts would then
    close connections as fast as it opens them, and a request on a new
    connection reaches its site later than its permit said (see
    :mod:`crawlpace._clients._last_look`). So the pool keeps as many idle connections
    as requests may be in flight, and allows at least as many in all.
    """
    total = settings.concurrent_requests
    return httpx.Limits(max_connections=max(100, total), max_keepalive_connections=max(20, total))


def split_client_kwargs(factory: str, transport: str, throttler: str,
                        client_kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Take the inner transport and its options out of a client factory's keyword arguments.

    Args:
        factory: the factory's name, for messages.
        transport: the name of the throttling transport class, for messages.
        throttler: the name of the throttler class, for messages.
        client_kwargs: the factory's keyword arguments; what is taken is removed.

    Returns:
        ``transport=`` (or ``None``), and the options of a default inner transport.

    Raises:
        TypeError: for ``mounts=`` (a mounted transport would bypass the
            throttler), or for transport options beside ``transport=``.
    """
    if "mounts" in client_kwargs:
        raise TypeError(f"{factory}() does not take mounts=: requests sent through a mounted transport "
                        f"would not be throttled; wrap each one in a {transport} sharing one {throttler} "
                        "and build the client yourself")
    inner = client_kwargs.pop("transport", None)
    options = {name: client_kwargs.pop(name) for name in TRANSPORT_KWARGS & client_kwargs.keys()}
    if inner is not None and options:
        raise TypeError(f"{', '.join(sorted(options))} configure the default transport; with "
                        "transport= set them on that transport instead")
    return inner, options


def replayable(request: httpx.Request) -> bool:
    """Whether the request's body can be sent a second time.

    Bodies given as bytes, text, form data or JSON (and requests without a
    body, or whose body was read with ``aread()``) are held in memory as an
    :class:`httpx.ByteStream`. Any other stream, such as an async generator,
    may be consumed by the first send.
    """
    return isinstance(request.stream, httpx.ByteStream)


async def discard_async(response: httpx.Response) -> None:
    with contextlib.suppress(httpx.TransportError):
        await response.aclose()


def discard_sync(response: httpx.Response) -> None:
    with contextlib.suppress(httpx.TransportError):
        response.close()


class ThrottlerHolder(Generic[T]):
    """The read-only figures both transports show: their throttler, retries and who owns it."""

    _throttler: T
    _retries: int
    _owns_throttler: bool

    @property
    def throttler(self) -> T:
        """The throttler every request waits for."""
        return self._throttler

    @property
    def retries(self) -> int:
        """How many times a backoff outcome is retried."""
        return self._retries

    @property
    def owns_throttler(self) -> bool:
        """True when the transport created its throttler, and so closes it when it closes."""
        return self._owns_throttler
