"""Throttling scopes: which limits a request counts against.

By default a request has one scope, its URL's host (lower-cased and IDNA
encoded, port dropped), so ``books.toscrape.com`` and ``toscrape.com`` are
throttled apart. A request may name its own scopes in ``meta["throttling_scopes"]``
as a string, a set of strings, or a dict mapping each scope to the quota the
request is expected to use. A *throttling manager* can compute scopes in any
other way; :func:`scope_cache` and :func:`add_scope` help writing one.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable, Mapping, Set
from typing import Any, Protocol, TypeAlias, TypeVar, runtime_checkable
from urllib.parse import urlsplit

from .._exceptions import ScopeError
from .._settings._config_checks import import_object
from ..policy.admission import Demand  # defined in the pure core, where the stores read it

__all__ = [
    "Demand",
    "RequestLike",
    "ScopesSpec",
    "add_scope",
    "host_scope",
    "import_object",
    "normalize_scopes",
    "scope_cache",
]

#: What a request or a manager may give as scopes.
ScopesSpec: TypeAlias = str | Iterable[str] | Mapping[str, float]
META_KEY = "throttling_scopes"


@runtime_checkable
class RequestLike(Protocol):
    """Anything with a ``url``; a ``meta`` mapping is optional."""

    @property
    def url(self) -> str: ...


Request: TypeAlias = str | RequestLike


def request_url(request: Request) -> str:
    """Return the URL of a request given as a string or an object with ``url``."""
    return request if isinstance(request, str) else request.url


@functools.lru_cache(maxsize=8192)
def host_scope(url: str) -> str:
    """Return the default scope of ``url``: its host, lower-cased, IDNA-encoded.

    Raises:
        ScopeError: when the URL has no host.
    """
    try:
        host = urlsplit(url).hostname
    except ValueError as exc:
        raise ScopeError(f"cannot read a host from URL {url!r} ({exc}); "
                         "give the request explicit throttling_scopes") from exc
    if not host:
        raise ScopeError(f"URL {url!r} has no host; give the request explicit throttling_scopes")
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        # Not a name IDNA accepts; the lower-cased text still identifies the host.
        return host


def normalize_scopes(spec: object) -> tuple[Demand, ...]:
    """Turn any accepted scopes form into ``((scope, expected_use), ...)``.

    Raises:
        ScopeError: when the form is not accepted, empty, or has a bad quota use.
    """
    if isinstance(spec, str):
        if not spec:
            raise ScopeError("throttling_scopes: an empty string is not a scope name")
        return ((spec, 1.0),)
    if isinstance(spec, Mapping):
        demands: list[Demand] = []
        for scope, use in spec.items():
            _check_name(scope)
            if isinstance(use, bool) or not isinstance(use, int | float) or not math.isfinite(use) \
                    or use < 0:
                raise ScopeError(f"throttling_scopes[{scope!r}]: expected quota use must be a "
                                 f"finite number >= 0, got {use!r}")
            demands.append((scope, float(use)))
    elif isinstance(spec, Iterable) and not isinstance(spec, bytes):
        demands = []
        # A set has no order of its own; sorting keeps runs repeatable whatever
        # the hash seed (lists and tuples keep the caller's order).
        names = sorted(spec, key=str) if isinstance(spec, Set) else spec
        for scope in names:
            _check_name(scope)
            demands.append((scope, 1.0))
    else:
        raise ScopeError(f"throttling_scopes: expected a string, a set of strings or a dict of "
                         f"scope -> expected quota use, got {spec!r} ({type(spec).__name__})")
    if not demands:
        raise ScopeError("throttling_scopes: a request needs at least one scope")
    if len(demands) > 1:
        merged: dict[str, float] = {}
        for scope, use in demands:
            merged[scope] = merged.get(scope, 0.0) + use
        demands = list(merged.items())
    return tuple(demands)


def _check_name(scope: object) -> None:
    if not isinstance(scope, str) or not scope:
        raise ScopeError(f"throttling_scopes: scope names must be non-empty strings, got {scope!r}")


def add_scope(scopes: ScopesSpec, scope: str, expected_use: float | None = None) -> ScopesSpec:
    """Return ``scopes`` with ``scope`` added, without changing the argument.

    Without ``expected_use`` the result keeps the plain-names form when it can
    (a string becomes a set). With it, the result is a dict and the other
    scopes keep their uses (1.0 for names given without one).
    """
    if isinstance(scopes, Mapping):
        merged = dict(scopes)
        merged[scope] = 1.0 if expected_use is None else expected_use
        return merged
    names = [scopes] if isinstance(scopes, str) else list(scopes)
    if expected_use is None:
        return {*names, scope}
    result = dict.fromkeys(names, 1.0)
    result[scope] = expected_use
    return result


def default_scopes(request: Any) -> ScopesSpec:
    """The default manager's answer, computed without awaiting."""
    meta = getattr(request, "meta", None)
    if meta:
        spec = meta.get(META_KEY)
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return host_scope(request_url(request))



M = TypeVar("M")
GetScopes: TypeAlias = Callable[[M, Any], Coroutine[Any, Any, ScopesSpec]]

_CACHE_SIZE = 10_000


class _ScopeCache:
    """One manager instance's cache: requests by identity, URL strings by value."""

    __slots__ = ("by_identity", "by_value")

    def __init__(self) -> None:
        self.by_identity: dict[int, tuple[weakref.ref[Any], ScopesSpec]] = {}
        self.by_value: OrderedDict[Any, ScopesSpec] = OrderedDict()

    def get(self, request: Any) -> ScopesSpec | None:
        entry = self.by_identity.get(id(request))
        if entry is not None and entry[0]() is request:
            return entry[1]
        try:
            cached = self.by_value.get(request)
        except TypeError:  # unhashable and not weakly referenceable: no cache
            return None
        if cached is not None:
            self.by_value.move_to_end(request)
        return cached

    def put(self, request: Any, scopes: ScopesSpec) -> None:
        key = id(request)
        try:
            ref = weakref.ref(request, functools.partial(self._forget, key=key))
        except TypeError:
            try:
                self.by_value[request] = scopes
            except TypeError:
                return
            if len(self.by_value) > _CACHE_SIZE:
                self.by_value.popitem(last=False)
        else:
            self.by_identity[key] = (ref, scopes)

    def _forget(self, ref: weakref.ref[Any], key: int) -> None:
        entry = self.by_identity.get(key)
        if entry is not None and entry[0] is ref:
            del self.by_identity[key]


def scope_cache(method: GetScopes[M]) -> GetScopes[M]:
    """Cache what a manager's ``get_scopes`` returns for each request.

    Each manager instance has its own cache. A request object is recognised by
    identity and held through a weak reference, so the cache never keeps a
    request alive and works for unhashable requests too; requests given as
    plain URL strings (or other objects that cannot be weakly referenced) are
    cached by value, up to the 10,000 most recent. A retried or redirected
    request object keeps the scopes it was first given.
    """
    caches: weakref.WeakKeyDictionary[Any, _ScopeCache] = weakref.WeakKeyDictionary()
    by_id: dict[int, _ScopeCache] = {}  # managers that cannot be weakly referenced

    def cache_of(manager: Any) -> _ScopeCache:
        try:
            cache = caches.get(manager)
            if cache is None:
                cache = caches[manager] = _ScopeCache()
        except TypeError:
            cache = by_id.setdefault(id(manager), _ScopeCache())
        return cache

    @functools.wraps(method)
    async def wrapper(self: M, request: Any) -> ScopesSpec:
        cache = cache_of(self)
        cached = cache.get(request)
        if cached is not None:
            return cached
        scopes = await method(self, request)
        cache.put(request, scopes)
        return scopes

    return wrapper
