"""``THROTTLING_MANAGER`` in the add-on: an import path, a class or an instance, async or not.

Seed 001's first examples define managers with a plain, synchronous
``get_request_scopes(request)``; crawlpace's managers have an async
``get_scopes``. :func:`load_manager` accepts both and wraps the first kind in
:class:`RequestScopesManager`, whose ``scopes_nowait`` lets the throttler and
the scheduler have the scopes without an await
(:func:`crawlpace._scoping._manager.scopes_without_await`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._exceptions import ConfigError
from .._scoping._manager import ThrottlingManager, ThrottlingManagerProtocol
from .._scoping._scopes import import_object

__all__ = ["RequestScopesManager", "load_manager"]


def _has_scopes_method(obj: object) -> bool:
    return callable(getattr(obj, "get_scopes", None)) or callable(getattr(obj, "get_request_scopes", None))


class RequestScopesManager(ThrottlingManager):
    """Lets a manager with only a plain ``get_request_scopes(request)`` serve as one.

    Seed 001's first examples define such managers; the rest of the add-on
    expects the async ``get_scopes``. The other hooks are the default ones.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def scopes_nowait(self, request: Any) -> Any:
        """The scopes, computed without awaiting."""
        return self.inner.get_request_scopes(request)

    async def get_scopes(self, request: Any) -> Any:
        """Ask the wrapped manager."""
        return self.inner.get_request_scopes(request)

    def __repr__(self) -> str:
        return f"<RequestScopesManager of {self.inner!r}>"


def load_manager(value: object, build: Callable[[type[Any]], Any]) -> ThrottlingManagerProtocol:
    """Turn ``THROTTLING_MANAGER`` (an import path, a class or an instance) into a manager.

    Args:
        value: the setting's value.
        build: creates an instance of a class (Scrapy's ``build_from_crawler``,
            so that a manager may have ``from_crawler``).

    Raises:
        ConfigError: naming the setting when the value is none of those.
    """
    target = value
    if isinstance(value, str):
        try:
            target = import_object(value)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError([f"THROTTLING_MANAGER: cannot import {value!r} ({exc}); give the import "
                               "path of a class with an async get_scopes(request)"]) from exc
    if isinstance(target, type):
        try:
            target = build(target)
        except TypeError as exc:
            raise ConfigError([f"THROTTLING_MANAGER: cannot create {value!r} ({exc}); give a class whose "
                               "__init__ takes no arguments or that has from_crawler(crawler)"]) from exc
    if not _has_scopes_method(target):
        raise ConfigError([f"THROTTLING_MANAGER: {value!r} has no get_scopes(request) method; give a "
                           "subclass of crawlpace.scrapy.ThrottlingManager, or a class with "
                           "get_request_scopes(request)"])
    if not callable(getattr(target, "get_scopes", None)):
        return RequestScopesManager(target)
    return target  # type: ignore[return-value]
