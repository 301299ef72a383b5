"""Which URLs a crawl can fetch at all: refused up front, with the reason, instead of failing later.

The crawl command, its shared frontier and its scheduler fetch over HTTP only.
A URL of another scheme (``ftp://``, ``mailto:``, ``file://``), one without a
scheme (``example.com/page``), one without a host, one with a port out of
range or a numeric host that is no IPv4 address (``999.1.1.1``) is refused before
anything is sent for it, robots.txt included, and written as ``failed`` with
a reason that says what to change.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from .._exceptions import ScopeError
from ._scopes import host_scope

__all__ = ["FETCHABLE_SCHEMES", "fetchable_scope"]

#: The schemes the crawl fetches.
FETCHABLE_SCHEMES = frozenset({"http", "https"})


def fetchable_scope(url: str) -> str:
    """The host scope of ``url`` if the crawl can fetch it.

    Raises:
        ScopeError: the URL has no http(s) scheme, or no host, or a port out
            of range, or a numeric host that is no IPv4 address.
    """
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:
        raise ScopeError(f"URL {url!r} cannot be read ({exc}); give a URL such as https://example.com/"
                         ) from exc
    if scheme not in FETCHABLE_SCHEMES:
        if not scheme:
            raise ScopeError(f"URL {url!r} has no scheme; write it with http:// or https:// in front")
        raise ScopeError(f"URL {url!r}: {scheme}:// is not crawled; only http:// and https:// URLs are "
                         "fetched")
    scope = host_scope(url)
    _check_address(url)
    return scope


def _check_address(url: str) -> None:
    """Refuse a port out of range and a numeric host that is no IPv4 address: no resume would mend them.

    A host whose last label is a number (``999.1.1.1``, ``1.2.3.4.5``,
    ``12345678901``, ``0x7f.1``) is an IPv4 address to URL parsers, and must be
    one written in the usual four decimal parts, which is what the HTTP layer
    connects to; anything else would only fail at connection time, be retried
    as a passing fault and come back on every resume.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as exc:
        raise ScopeError(f"URL {url!r} has an invalid port ({exc}); give a port from 1 to 65535") from exc
    if port == 0:
        raise ScopeError(f"URL {url!r} has port 0, which nothing listens on; give a port from 1 to 65535")
    host = parts.hostname or ""
    last = host.rstrip(".").rsplit(".", 1)[-1]  # "127.0.0.1." too: the HTTP layer refuses the dot
    if host and ":" not in host and (last.isdigit() or last.lower().startswith("0x")):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ScopeError(f"URL {url!r}: {host!r} reads as a numeric address but is no IPv4 address "
                             "(four numbers 0-255, e.g. 192.0.2.1); correct the host") from None
