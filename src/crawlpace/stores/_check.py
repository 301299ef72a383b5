"""Store URLs that fail at once and clearly: their shape before anything opens, the server at start-up.

Two checks, both meant for start-up:

- :func:`check_url` reads a Redis store URL without connecting. A URL with
  one slash (``redis:/host:6379``), no host, a port that is not a number, a
  database that is not a number, or an option neither crawlpace nor redis-py
  knows (``?namspace=x``) is a :class:`~crawlpace.ConfigError` naming the URL
  (password hidden), the problem and the fix. Without this, redis-py would
  quietly connect to localhost:6379 or fail on the first request with
  ``unexpected keyword argument``.
- :func:`reach` asks the store one cheap question within a time limit, and
  turns "connection refused", "wrong password" and silence into a
  :class:`~crawlpace.StoreUnreachable` that says which of them it was. While
  a crawl runs the store fails closed (requests wait for the server); at
  start-up, waiting forever on a typo helps no one.
"""

from __future__ import annotations

import asyncio
import difflib
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from .._exceptions import StoreUnreachable
from .._redact import redact
from .base import Store

__all__ = ["CRAWLPACE_OPTIONS", "DEFAULT_REACH_TIMEOUT", "DEFAULT_SOCKET_TIMEOUT", "REDIS_OPTIONS",
           "check_url", "reach", "with_timeouts"]

#: Options of a store URL that crawlpace reads itself (see docs/redis.md).
CRAWLPACE_OPTIONS = frozenset({"namespace", "lease", "time", "cluster", "fallback", "fallback_workers",
                               "policy_cache", "allot"})
#: Options of a store URL handed to redis-py's connection (its documented URL options).
REDIS_OPTIONS = frozenset({
    "db", "username", "password", "client_name", "protocol", "timeout", "socket_timeout",
    "socket_connect_timeout", "socket_keepalive", "retry_on_timeout", "max_connections",
    "health_check_interval", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
    "ssl_password", "ssl_check_hostname", "ssl_min_version", "ssl_ciphers"})
#: Seconds :func:`reach` gives the store to answer at start-up.
DEFAULT_REACH_TIMEOUT = 10.0
#: Tries :func:`reach` makes when the connection fails (not for a refused password or TLS),
#: this many seconds apart: one dropped connection must not stop a worker.
_ATTEMPTS = 3
_PAUSE = 0.5
#: Seconds a connection to the store may stay silent (connecting, or awaiting a reply)
#: before it counts as broken; redis-py's default is to wait forever.
DEFAULT_SOCKET_TIMEOUT = 5.0

_SCHEMES = frozenset({"redis", "rediss", "valkey", "valkeys", "unix"})


def check_url(url: str) -> list[str]:
    """The problems of a Redis store URL's shape and options, one line each (empty: none found).

    Nothing is connected to. Cluster-specific rules are checked elsewhere.
    """
    shown = redact(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed "[", for one
        return [f"store {shown!r}: cannot be read as a URL ({exc}); write it as redis://host:port/db"]
    scheme = parts.scheme
    if scheme not in _SCHEMES:
        return []
    problems: list[str] = []
    example = "unix:///path/to/redis.sock" if scheme == "unix" else f"{scheme}://127.0.0.1:6379/0"
    if not url.startswith(f"{scheme}://"):
        problems.append(f"store {shown!r}: a store URL starts with '{scheme}://' (two slashes), "
                        f"e.g. {example}")
    elif scheme == "unix":
        if not parts.path:
            problems.append(f"store {shown!r}: name the socket file, e.g. {example}")
    elif "," not in parts.netloc:  # several hosts name a cluster, checked by its own rules
        if not parts.hostname:
            problems.append(f"store {shown!r}: name the server's host, e.g. {example}")
        try:
            parts.port  # noqa: B018 - reading it validates it
        except ValueError:
            port = parts.netloc.rpartition("@")[2].rpartition(":")[2]
            problems.append(f"store {shown!r}: the port {port!r} is not a number from 0 to 65535; "
                            f"e.g. {example}")
        database = parts.path.strip("/")
        if database and not database.isdigit():
            problems.append(f"store {shown!r}: the database {database!r} is not a number; "
                            f"give /0 to /15 after the host, e.g. {example}")
    known = CRAWLPACE_OPTIONS | REDIS_OPTIONS
    for key, _value in parse_qsl(parts.query, keep_blank_values=True):
        if key in known:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problems.append(f"store {shown!r}: unknown option {key!r}; {hint}crawlpace's options: "
                        f"{', '.join(sorted(CRAWLPACE_OPTIONS))} (redis-py's: db, username, password, "
                        "ssl_*, socket_*, ...)")
    return problems


def with_timeouts(url: str) -> str:
    """``url`` with ``socket_timeout`` and ``socket_connect_timeout`` added unless it sets them.

    Without them a connection left half-open by the network (a partition, a
    NAT that forgot it) would hold a worker forever; with them the read fails
    after :data:`DEFAULT_SOCKET_TIMEOUT` seconds and the store's usual
    unreachable handling (fail closed, retry, recover) takes over.
    """
    parts = urlsplit(url)
    have = {key for key, _ in parse_qsl(parts.query, keep_blank_values=True)}
    extra = [f"{key}={DEFAULT_SOCKET_TIMEOUT:g}" for key in ("socket_timeout", "socket_connect_timeout")
             if key not in have]
    if not extra:
        return url
    query = "&".join(filter(None, [parts.query, *extra]))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


async def reach(store: Store, url: str | None = None, *, within: float = DEFAULT_REACH_TIMEOUT) -> None:
    """Make sure a shared store answers now; a no-op for a store local to the process.

    A failed connection is tried twice more, half a second apart; a refused
    password or a TLS failure is reported at once.

    Args:
        store: the store to ask.
        url: its URL, for the message (its password is hidden); by default
            the store's own ``url``.
        within: seconds to wait for an answer.

    Raises:
        StoreUnreachable: the store refused the connection, the credentials,
            or gave no answer within ``within`` seconds.
    """
    if not store.shared:
        return
    shown = redact(url if url is not None else getattr(store, "url", type(store).__name__))
    deadline = asyncio.get_running_loop().time() + within
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            async with asyncio.timeout_at(deadline):
                await store.snapshot("crawlpace-start-up-check")
            return
        except TimeoutError:
            raise StoreUnreachable(f"store {shown}: no answer within {within:g} s; check the host and port, "
                                   "and that a firewall lets the connection through") from None
        except Exception as caught:  # the driver's errors: translated here, at the boundary
            exc = caught
            if isinstance(caught, StoreUnreachable):
                if caught.__cause__ is None or not isinstance(caught.__cause__, Exception):
                    raise
                exc = caught.__cause__  # a read the store translated already: judged by the driver's error
            reason = redact(" ".join(str(exc).split()).rstrip(".") or type(exc).__name__)
            lowered = reason.lower()
            if "password" in lowered or "auth" in lowered or "noperm" in lowered:
                hint = "check the user name and password in the URL (the user:password part before the host)"
            elif "ssl" in lowered or "certificate" in lowered or "tls" in lowered:
                hint = "check the TLS options (ssl_ca_certs=..., rediss:// only for a TLS port)"
            elif attempt < _ATTEMPTS:  # a connection that broke once: ask again before giving up
                await asyncio.sleep(_PAUSE)
                continue
            else:
                hint = "check that the server runs and that the URL's host and port are right"
            raise StoreUnreachable(f"store {shown}: cannot be reached: {reason}; {hint}") from exc
