"""Which URLs a crawl can fetch at all: refused up front, with the reason, instead of failing later.

The crawl command, its shared frontier and its scheduler fetch over HTTP only.
A URL of another scheme (``ftp://``, ``mailto:``, ``file://``), one without a
scheme (``example.com/page``) or one without a host is refused before
anything is sent for it, robots.txt included, and written as ``failed`` with
a reason that says what to change.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ._exceptions import ScopeError
from ._scopes import host_scope

__all__ = ["FETCHABLE_SCHEMES", "fetchable_scope"]

#: The schemes the crawl fetches.
FETCHABLE_SCHEMES = frozenset({"http", "https"})


def fetchable_scope(url: str) -> str:
    """The host scope of ``url`` if the crawl can fetch it.

    Raises:
        ScopeError: the URL has no http(s) scheme, or no host.
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
    return host_scope(url)
