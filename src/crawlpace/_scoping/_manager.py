"""Throttling managers: the hooks that decide a request's scopes and read its response.

A manager has a request side (:meth:`ThrottlingManager.get_scopes`, answered
by :mod:`crawlpace._scoping._scopes`) and a response side (``get_response_backoff``
and ``get_response_delay``, answered by :mod:`crawlpace._responses._feedback`). It lives
in a module of its own so that both sides can be imported by it without
importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from .._exceptions import ConfigError
from .._responses._feedback import default_response_backoff, default_response_delay
from ..policy.scope_manager import load_scope_manager  # the stores load scope managers too
from ._scopes import ScopesSpec, default_scopes, import_object

__all__ = ["ThrottlingManager", "ThrottlingManagerProtocol", "load_manager", "load_scope_manager",
           "scopes_without_await"]


@runtime_checkable
class ThrottlingManagerProtocol(Protocol):
    """Decides the scopes of each request (``THROTTLING_MANAGER``)."""

    async def get_scopes(self, request: Any) -> ScopesSpec:
        """Return the scopes ``request`` counts against."""


class ThrottlingManager:
    """The default manager: ``meta["throttling_scopes"]`` if set, else the host.

    Subclass it to change how requests map to scopes (:meth:`get_scopes`) or
    how responses count as feedback (:meth:`get_response_backoff`,
    :meth:`get_response_delay`); call ``super()`` for the default behaviour.
    """

    async def get_scopes(self, request: Any) -> ScopesSpec:
        """Return the request's own scopes, or its URL's host."""
        return default_scopes(request)

    async def get_response_backoff(self, response: Any) -> dict[str, Any]:
        """Return the feedback ``response`` gives each scope of its request.

        The result maps each scope to a :class:`~crawlpace.ScopeFeedback`;
        change entries with :func:`~crawlpace.update_scope_backoff`. By default
        a scope backs off on its ``BACKOFF_HTTP_CODES``, counts a 5xx as an
        error for its circuit breaker, and waits what
        :meth:`get_response_delay` returns.
        """
        return default_response_backoff(response, await self.get_response_delay(response))

    async def get_response_delay(self, response: Any) -> float | None:
        """Return the seconds ``response`` asks the client to wait, if any.

        By default: ``Retry-After``, or the time until the rate-limit budget the
        headers announce refills when it is spent.
        """
        return default_response_delay(response)


def scopes_without_await(manager: object) -> Callable[[Any], ScopesSpec] | None:
    """How ``manager`` gives a request's scopes without awaiting, or ``None`` when it must be awaited.

    The default manager answers from ``meta`` or the host. A manager with a
    plain ``scopes_nowait(request)`` method (the Scrapy add-on wraps seed
    001's synchronous ``get_request_scopes`` managers so) answers through it.
    Anything else is asked with ``await manager.get_scopes(request)``.
    """
    if type(manager) is ThrottlingManager:
        return default_scopes
    nowait = getattr(manager, "scopes_nowait", None)
    return nowait if callable(nowait) else None


def load_manager(path: str) -> ThrottlingManagerProtocol:
    """Import ``THROTTLING_MANAGER``: a class (instantiated without arguments) or an instance.

    Raises:
        ConfigError: when the path cannot be imported or names no manager.
    """
    try:
        target = import_object(path)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError([f"THROTTLING_MANAGER: cannot import {path!r} ({exc}); "
                           "give the import path of a class with an async get_scopes()"]) from exc
    try:
        manager = target() if isinstance(target, type) else target
    except TypeError as exc:
        raise ConfigError([f"THROTTLING_MANAGER: cannot create {path!r} without arguments ({exc}); "
                           "give a class whose __init__ takes none, or an instance"]) from exc
    if not isinstance(manager, ThrottlingManagerProtocol):
        raise ConfigError([f"THROTTLING_MANAGER: {path!r} has no get_scopes(request) method; "
                           "see docs/concepts/scopes.md"])
    return manager

