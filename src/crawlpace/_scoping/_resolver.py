"""An asynchronous resolver from host names to one server address, cached for the record's TTL.

Per-server scopes (:mod:`crawlpace._scoping._server_scopes`) need to know which
machine a host name leads to, for every request, without blocking the event
loop and without a DNS query each time. :class:`Resolver` asks once per host,
keeps the answer for the record's TTL (bounded below and above, since a TTL
of 0 would mean a query per request and a day-long one would miss a move),
and lets concurrent callers for one host share a single query.

A host may have several addresses (round-robin DNS, IPv4 and IPv6). The
scope needs one stable name for the server, so the resolver picks the lowest
IPv4 address, or the lowest IPv6 address when there is no IPv4 one: the same
answer gives the same key whatever order the records came in.

Lookups go through ``aiodns`` (c-ares, which reports TTLs and reads
``/etc/hosts``) when it is installed, and through the event loop's
``getaddrinfo`` otherwise, whose answers carry no TTL (:data:`DEFAULT_TTL`
is used). A failed lookup gives ``None`` with a log line, and is remembered
for :data:`NEGATIVE_TTL` seconds so that a dead name is not asked again for
every request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

__all__ = ["DEFAULT_TTL", "NEGATIVE_TTL", "Lookup", "Resolver", "pick_address"]

_log = logging.getLogger(__name__)

#: Seconds an answer without a TTL of its own is kept.
DEFAULT_TTL = 300.0
#: Seconds a failed lookup is remembered.
NEGATIVE_TTL = 30.0

#: Resolves one host name to ``[(address, ttl_seconds), ...]``; raises ``OSError`` on failure.
Lookup = Callable[[str], Awaitable[Sequence[tuple[str, float]]]]


def pick_address(addresses: Sequence[str]) -> str | None:
    """The address that names the server: the lowest IPv4 one, else the lowest IPv6 one."""
    parsed = []
    for text in addresses:
        try:
            parsed.append(ipaddress.ip_address(text.split("%", 1)[0]))
        except ValueError:
            continue
    v4 = sorted(address for address in parsed if address.version == 4)
    v6 = sorted(address for address in parsed if address.version == 6)
    chosen = v4[0] if v4 else v6[0] if v6 else None
    return None if chosen is None else str(chosen)


async def _aiodns_lookup(resolver: object, host: str) -> list[tuple[str, float]]:
    try:
        result = await resolver.getaddrinfo(host, port=None)  # type: ignore[attr-defined]
    except Exception as exc:  # aiodns.error.DNSError and c-ares failures
        raise OSError(f"lookup of {host!r} failed: {exc}") from exc
    found: list[tuple[str, float]] = []
    for node in getattr(result, "nodes", ()):
        addr = node.addr[0]
        text = addr.decode("ascii") if isinstance(addr, bytes) else str(addr)
        found.append((text, float(node.ttl)))
    return found


async def _loop_lookup(host: str) -> list[tuple[str, float]]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [(str(info[4][0]), DEFAULT_TTL) for info in infos]


def default_lookup() -> Lookup:
    """``aiodns`` when installed (TTLs, asynchronous), the loop's ``getaddrinfo`` otherwise."""
    try:
        import aiodns
    except ImportError:
        return _loop_lookup
    state: dict[str, object] = {}

    async def lookup(host: str) -> list[tuple[str, float]]:
        # One c-ares channel per event loop (a channel is bound to the loop that made it).
        loop = asyncio.get_running_loop()
        if state.get("loop") is not loop:
            state["loop"], state["resolver"] = loop, aiodns.DNSResolver()
        return await _aiodns_lookup(state["resolver"], host)

    return lookup


class Resolver:
    """Host name to server address, asynchronously, with a TTL cache.

    Args:
        lookup: the query to run on a miss (see :data:`Lookup`); by default
            :func:`default_lookup`.
        min_ttl: seconds an answer is kept at least, whatever its TTL.
        max_ttl: seconds an answer is kept at most.
        negative_ttl: seconds a failed lookup is remembered.
        max_entries: hosts kept at most; the least recently used go first.
        clock: monotonic seconds, for expiry.
    """

    def __init__(self, *, lookup: Lookup | None = None, min_ttl: float = 30.0, max_ttl: float = 3600.0,
                 negative_ttl: float = NEGATIVE_TTL, max_entries: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0.0 <= min_ttl <= max_ttl or negative_ttl < 0.0 or max_entries < 1:
            raise ValueError(f"need 0 <= min_ttl <= max_ttl, negative_ttl >= 0 and max_entries >= 1, got "
                             f"{min_ttl!r}, {max_ttl!r}, {negative_ttl!r}, {max_entries!r}")
        self._lookup = lookup if lookup is not None else default_lookup()
        self.min_ttl, self.max_ttl, self.negative_ttl = min_ttl, max_ttl, negative_ttl
        self.max_entries = max_entries
        self.clock = clock
        self._cache: OrderedDict[str, tuple[str | None, float]] = OrderedDict()
        self._pending: dict[str, asyncio.Future[str | None]] = {}
        self.lookups = 0
        self.failures = 0

    def cached(self, host: str) -> tuple[bool, str | None]:
        """``(True, address)`` when a live answer for ``host`` is cached (address None: failed)."""
        entry = self._cache.get(host)
        if entry is None:
            return False, None
        if self.clock() >= entry[1]:
            del self._cache[host]
            return False, None
        self._cache.move_to_end(host)
        return True, entry[0]

    async def address(self, host: str) -> str | None:
        """The server address of ``host``; None when it cannot be resolved (logged).

        An IP literal is its own address and is never looked up.
        """
        literal = pick_address([host.strip("[]")])
        if literal is not None:
            return literal
        hit, address = self.cached(host)
        if hit:
            return address
        pending = self._pending.get(host)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._pending[host] = future
        try:
            address = await self._resolve(host)
            future.set_result(address)
        except BaseException as exc:  # cancelled: let the waiters ask again
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            del self._pending[host]
        return address

    async def _resolve(self, host: str) -> str | None:
        self.lookups += 1
        try:
            answers = await self._lookup(host)
        except OSError as exc:
            answers, why = [], str(exc)
        else:
            why = "no address in the answer"
        address = pick_address([text for text, _ttl in answers])
        if address is None:
            self.failures += 1
            _log.warning("cannot resolve %r (%s); its requests are throttled under the host name for "
                         "the next %gs", host, why, self.negative_ttl)
            self._remember(host, None, self.negative_ttl)
            return None
        ttls = [ttl for _text, ttl in answers if ttl > 0]
        ttl = min(ttls) if ttls else self.min_ttl
        self._remember(host, address, min(max(ttl, self.min_ttl), self.max_ttl))
        return address

    def _remember(self, host: str, address: str | None, ttl: float) -> None:
        self._cache[host] = (address, self.clock() + ttl)
        self._cache.move_to_end(host)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)

    def __repr__(self) -> str:
        return f"<Resolver hosts={len(self._cache)} lookups={self.lookups} failures={self.failures}>"
