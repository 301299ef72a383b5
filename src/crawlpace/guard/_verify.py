"""Confirm that a client calling itself an allow-listed crawler really is one.

A ``User-Agent`` costs nothing to copy, so the guard trusts an allow-listed
name only once the client's address is confirmed, in one of two ways:

- the address is in IP ranges the owner supplies (the search engines publish
  theirs as files), or
- a reverse DNS lookup of the address gives a host name under one of the
  crawler's documented domains (``crawl-66-249-66-1.googlebot.com``), and a
  forward lookup of that name gives the same address back. The second step is
  what makes it hold: anybody may point the reverse record of an address they
  own at ``googlebot.com``, but only Google controls what names under
  ``googlebot.com`` resolve to.

Lookups are asynchronous, bounded by a time limit, and cached per (name,
address) both ways, so a crawler costs two lookups a day, not two per
request. Concurrent requests from one address share one lookup. A check that
fails or runs out of time only means the request is counted like any other.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol

from ._address import Network, parse_networks

__all__ = ["BOT_DOMAINS", "BotVerifier", "Resolver", "SystemResolver", "load_ranges"]

_log = logging.getLogger(__name__)

#: The domains each search crawler's own documentation gives for its reverse DNS names.
BOT_DOMAINS: Mapping[str, tuple[str, ...]] = {
    "googlebot": ("googlebot.com", "google.com"),
    "bingbot": ("search.msn.com",),
    "applebot": ("applebot.apple.com",),
}


class Resolver(Protocol):
    """DNS lookups the verifier needs; inject a fake one in tests."""

    async def reverse(self, address: str) -> str | None:
        """The host name of ``address`` (its PTR record), or ``None``."""

    async def forward(self, host: str) -> Iterable[str]:
        """The addresses ``host`` resolves to (A and AAAA)."""


class SystemResolver:
    """Lookups through the system resolver, run off the event loop by asyncio."""

    async def reverse(self, address: str) -> str | None:
        """The host name of ``address``, or ``None`` when it has none."""
        loop = asyncio.get_running_loop()
        try:
            host, _port = await loop.getnameinfo((address, 0), socket.NI_NAMEREQD)
        except (OSError, UnicodeError):
            return None
        return host

    async def forward(self, host: str) -> Iterable[str]:
        """The addresses of ``host``; empty when it does not resolve."""
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return ()
        return {str(info[4][0]) for info in infos}


def load_ranges(source: str | Path | Iterable[str]) -> tuple[Network, ...]:
    """Read IP ranges: a list of CIDR strings, or a file of them.

    A file is either JSON as the search engines publish it (``{"prefixes":
    [{"ipv4Prefix": "66.249.64.0/27"}, {"ipv6Prefix": ...}]}``) or text with
    one range per line (``#`` starts a comment).

    Raises:
        ValueError: naming the file and the entry that is not a range.
        OSError: when the file cannot be read.
    """
    if not isinstance(source, str | Path):
        return parse_networks(source, "bot_ranges")
    path = Path(source)
    text = path.read_text("utf-8")
    if text.lstrip().startswith("{"):
        try:
            prefixes = json.loads(text).get("prefixes", [])
            entries = [str(value) for item in prefixes for key, value in item.items()
                       if key in ("ipv4Prefix", "ipv6Prefix")]
        except (ValueError, AttributeError, TypeError) as exc:
            raise ValueError(f"bot_ranges: {path} is not a ranges file of the published JSON shape "
                             f"({{\"prefixes\": [{{\"ipv4Prefix\": ...}}]}}): {exc}") from None
    else:
        entries = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        entries = [entry for entry in entries if entry]
    return parse_networks(entries, f"bot_ranges ({path})")


#: Seconds between two looks at whether a ranges file changed.
RANGES_LOOK_EVERY = 60.0


def _stamp(path: Path) -> tuple[float, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime, info.st_size


def _under(host: str, domains: tuple[str, ...]) -> bool:
    host = host.lower().rstrip(".")
    return any(host.endswith("." + domain) for domain in domains)


def _same(address: str, candidates: Iterable[str]) -> bool:
    try:
        wanted = ipaddress.ip_address(address)
        return any(ipaddress.ip_address(str(candidate).split("%", 1)[0]) == wanted
                   for candidate in candidates)
    except ValueError:
        return False


class BotVerifier:
    """Confirm allow-listed crawlers by IP range or by reverse-then-forward DNS.

    Args:
        names: the allow-listed names (user-agent substrings, any case).
        domains: documented reverse-DNS domains per name (lower case keys);
            :data:`BOT_DOMAINS` by default.
        ranges: IP ranges per name: a file path or a list of CIDR strings.
            The key ``"*"`` applies to every name. A name with ranges is
            confirmed by them alone: reverse DNS is off for it. Files are
            read again when they change (looked at once a minute).
        resolver: the DNS lookups; the system's by default.
        timeout: seconds the two lookups may take together.
        ttl: seconds a confirmation is remembered.
        failure_ttl: seconds a failed check is remembered (shorter: DNS may
            have been down).
        max_entries: the most (name, address) pairs remembered.
        clock: the time source of the cache.

    Raises:
        ValueError: when a name has neither domains nor ranges (it could never
            be confirmed), or a range or setting is malformed.
    """

    def __init__(self, names: Iterable[str], *, domains: Mapping[str, Iterable[str]] | None = None,
                 ranges: Mapping[str, str | Path | Iterable[str]] | None = None,
                 resolver: Resolver | None = None, timeout: float = 2.0, ttl: float = 86400.0,
                 failure_ttl: float = 300.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        for label, value in (("verify_timeout", timeout), ("ttl", ttl), ("failure_ttl", failure_ttl)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{label} must be a positive number of seconds, got {value!r}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive integer, got {max_entries!r}")
        known = {key.lower(): tuple(d.lower().strip(".") for d in value)
                 for key, value in (BOT_DOMAINS if domains is None else domains).items()}
        self._sources = {key.lower(): value for key, value in (ranges or {}).items()}
        # Files of ranges are read again when they change (``crawlpace guard ranges`` replaced one).
        self._files = {key: Path(value) for key, value in self._sources.items()
                       if isinstance(value, str | Path)}
        self._stamps = {key: _stamp(path) for key, path in self._files.items()}
        self._next_look = 0.0
        loaded = {key: load_ranges(value) for key, value in self._sources.items()}
        everyone = loaded.pop("*", ())
        self._domains: dict[str, tuple[str, ...]] = {}
        self._ranges: dict[str, tuple[Network, ...]] = {}
        for name in names:
            key = name.lower()
            self._domains[key] = known.get(key, ())
            self._ranges[key] = loaded.get(key, ()) + everyone
            if not self._domains[key] and not self._ranges[key]:
                raise ValueError(f"allow: {name!r} can never be confirmed: give its documented reverse-DNS "
                                 f"domains in bot_domains={{{key!r}: [...]}} or its IP ranges in "
                                 f"bot_ranges={{{key!r}: 'ranges.json'}}, or remove it from allow")
        self._resolver: Resolver = resolver if resolver is not None else SystemResolver()
        self._timeout = float(timeout)
        self._ttl = float(ttl)
        self._failure_ttl = float(failure_ttl)
        self._max = max_entries
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str], tuple[bool, float]] = OrderedDict()
        self._pending: dict[tuple[str, str], asyncio.Future[bool]] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """The allow-listed names, lower case."""
        return tuple(self._domains)

    def claimed(self, user_agent: str) -> str | None:
        """The allow-listed name a user agent contains, if any."""
        agent = user_agent.lower()
        return next((name for name in self._domains if name in agent), None)

    async def verify(self, name: str, address: str) -> bool:
        """Whether ``address`` belongs to the crawler ``name`` (cached).

        Never raises: a lookup that fails or runs out of time is a ``False``.
        """
        name = name.lower()
        key = (name, address)
        now = self._clock()
        if self._files and now >= self._next_look:
            self._next_look = now + RANGES_LOOK_EVERY
            self._reread()
        cached = self._cache.get(key)
        if cached is not None and cached[1] > now:
            self._cache.move_to_end(key)
            return cached[0]
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            verdict = await self._check(name, address)
        except BaseException:
            future.cancel()
            raise
        else:
            future.set_result(verdict)
            self._remember(key, verdict)
        finally:
            del self._pending[key]
        return verdict

    def _reread(self) -> None:
        """Read the ranges files again if one changed; keep the old ranges if the new file is bad."""
        stamps = {key: _stamp(path) for key, path in self._files.items()}
        if stamps == self._stamps:
            return
        try:
            loaded = {key: load_ranges(value) for key, value in self._sources.items()}
        except (OSError, ValueError) as exc:
            _log.warning("guard: a bot_ranges file changed but cannot be read (%s); keeping the ranges "
                         "read before", exc)
            return
        self._stamps = stamps
        everyone = loaded.pop("*", ())
        for name in self._ranges:
            self._ranges[name] = loaded.get(name, ()) + everyone
        self._cache.clear()
        _log.warning("guard: bot_ranges files read again: %s", ", ".join(
            f"{name} {len(ranges)} ranges" for name, ranges in self._ranges.items()))

    def _remember(self, key: tuple[str, str], verdict: bool) -> None:
        self._cache[key] = (verdict, self._clock() + (self._ttl if verdict else self._failure_ttl))
        self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)

    async def _check(self, name: str, address: str) -> bool:
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            _log.info("guard: %s claimed from an unreadable address %r: not confirmed", name, address[:64])
            return False
        if any(parsed.version == net.version and parsed in net for net in self._ranges[name]):
            _log.debug("guard: %s at %s confirmed by the owner's ranges", name, address)
            return True
        domains = self._domains[name]
        if self._ranges[name] or not domains:
            # The owner's ranges are the whole truth for this name: no DNS lookup can add to them.
            _log.info("guard: %s claimed from %s, outside its ranges: counted like any client", name, address)
            return False
        try:
            async with asyncio.timeout(self._timeout):
                host = await self._resolver.reverse(address)
                host = host.rstrip(".") if host else None
                if host is None or not _under(host, domains):
                    reason = f"reverse DNS gives {host!r}, not under {', '.join(domains)}"
                    verdict = False
                else:
                    verdict = _same(address, await self._resolver.forward(host))
                    reason = f"{host} does not resolve back to it"
        except TimeoutError:
            verdict, reason = False, f"DNS took longer than {self._timeout:g} s"
        except Exception as exc:  # a resolver's own failure is a failed check, never a crash
            verdict, reason = False, f"DNS failed: {exc!r}"
        if verdict:
            _log.debug("guard: %s at %s confirmed by DNS (%s)", name, address, host)
        else:
            _log.info("guard: %s claimed from %s, not confirmed (%s): counted like any client",
                      name, address, reason)
        return verdict

    def __repr__(self) -> str:
        return f"<BotVerifier names={list(self._domains)} cached={len(self._cache)}>"
