"""Scopes per server: the resolved address or the registrable domain instead of (or beside) the host.

Fifty virtual hosts on one shared server each get a budget of their own when
scopes are hosts, so the server sees fifty times the pace. A
:class:`ServerScopes` manager keys requests by what they really share:

- ``by="ip"``: the server's address, resolved asynchronously and cached for
  the record's TTL (:class:`~crawlpace._scoping._resolver.Resolver`); a name that does
  not resolve falls back to its host scope, with a log line;
- ``by="domain"``: the registrable domain (``books.toscrape.com`` and
  ``toscrape.com`` are both ``toscrape.com``), from the Public Suffix List
  snapshot that ``tldextract`` ships (no network access);
- ``by="host"``: the default host scope, for completeness.

With ``with_host=True`` a request holds its host scope *and* its server
scope, and waits until both allow it: each host keeps its own limits (and
its robots.txt Crawl-delay), and the server's budget caps them together.

A request's own ``meta["throttling_scopes"]`` still wins, as with the
default manager. ``THROTTLING_MANAGER = "crawlpace.IpScopes"`` (or
``DomainScopes``, ``HostAndIpScopes``, ``HostAndDomainScopes``) picks one from
the settings; ``crawlpace crawl --scope-by ip|domain`` does the same.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, ClassVar, Literal

from .._exceptions import ConfigError
from ._manager import ThrottlingManager
from ._resolver import Resolver
from ._scopes import META_KEY, ScopesSpec, default_scopes, host_scope, request_url

__all__ = ["SCOPE_BY", "DomainScopes", "HostAndDomainScopes", "HostAndIpScopes", "IpScopes", "ServerScopes",
           "manager_path", "registrable_domain"]

_log = logging.getLogger(__name__)

ScopeBy = Literal["host", "domain", "ip"]
#: The accepted values of ``--scope-by``.
SCOPE_BY: tuple[str, ...] = ("host", "domain", "ip")


@functools.lru_cache(maxsize=1)
def _extractor() -> Any:
    try:
        import tldextract
    except ImportError as exc:
        raise ConfigError(["scope by domain needs tldextract: pip install 'crawlpace[dns]'"]) from exc
    # The bundled snapshot of the Public Suffix List: no download, no cache directory.
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


@functools.lru_cache(maxsize=65536)
def registrable_domain(host: str) -> str:
    """The registrable domain of ``host`` (``a.b.example.co.uk`` -> ``example.co.uk``).

    IP addresses and names without a public suffix (``localhost``) are their
    own domain.
    """
    parts = _extractor()(host)
    domain = getattr(parts, "top_domain_under_public_suffix", None)
    if domain is None:  # tldextract before 5.3
        domain = parts.registered_domain
    return str(domain) if domain else host


class ServerScopes(ThrottlingManager):
    """A throttling manager that scopes requests by server address or registrable domain.

    Args:
        by: ``"ip"``, ``"domain"`` or ``"host"``.
        with_host: hold the host scope as well as the server's.
        resolver: the resolver for ``by="ip"`` (one is made when omitted).

    Raises:
        ConfigError: when ``by`` is not one of :data:`SCOPE_BY`.
    """

    #: Defaults of the subclasses that settings name by import path (built without arguments).
    default_by: ClassVar[str] = "ip"
    default_with_host: ClassVar[bool] = False

    def __init__(self, by: str | None = None, *, with_host: bool | None = None,
                 resolver: Resolver | None = None) -> None:
        by = self.default_by if by is None else by
        if by not in SCOPE_BY:
            raise ConfigError([f"scope by: {by!r} is not one of {', '.join(SCOPE_BY)}; use e.g. 'ip'"])
        self.by = by
        self.with_host = self.default_with_host if with_host is None else with_host
        self.resolver = resolver
        if resolver is None and by == "ip":
            self.resolver = Resolver()
        if by == "domain":
            _extractor()  # fail now, not at the first request, when tldextract is missing

    async def server_scope(self, host: str) -> str:
        """The server scope of ``host`` (the host itself when it cannot be resolved)."""
        if self.by == "domain":
            return registrable_domain(host)
        if self.by == "ip":
            assert self.resolver is not None
            address = await self.resolver.address(host)
            return host if address is None else address
        return host

    async def get_scopes(self, request: Any) -> ScopesSpec:
        """The request's own scopes if it names any, else its server's (and its host's)."""
        meta = getattr(request, "meta", None)
        if meta and meta.get(META_KEY) is not None:
            return default_scopes(request)
        host = host_scope(request_url(request))
        server = await self.server_scope(host)
        if self.with_host and server != host:
            return [host, server]
        return server

    def __repr__(self) -> str:
        return f"<{type(self).__name__} by={self.by} with_host={self.with_host}>"


class IpScopes(ServerScopes):
    """One scope per server address (what Scrapy's ``CONCURRENT_REQUESTS_PER_IP`` keys on)."""

    default_by = "ip"


class DomainScopes(ServerScopes):
    """One scope per registrable domain."""

    default_by = "domain"


class HostAndIpScopes(ServerScopes):
    """Each request holds its host scope and its server address's scope."""

    default_by = "ip"
    default_with_host = True


class HostAndDomainScopes(ServerScopes):
    """Each request holds its host scope and its registrable domain's scope."""

    default_by = "domain"
    default_with_host = True


def manager_path(by: str, *, with_host: bool) -> str | None:
    """The import path of the manager for ``--scope-by``; None for plain host scopes."""
    if by == "host":
        return None
    name = {("ip", False): "IpScopes", ("domain", False): "DomainScopes",
            ("ip", True): "HostAndIpScopes", ("domain", True): "HostAndDomainScopes"}[(by, with_host)]
    return f"crawlpace.{name}"
