"""crawlpace for Scrapy: seed 001's throttling as a Scrapy add-on (Scrapy 2.13 to 2.19).

Enable it in the project's settings::

    ADDONS = {"crawlpace.scrapy.Addon": 100}

and use the settings of seed 001 (``THROTTLING_SCOPES``, ``BACKOFF_*``, ...).
The add-on replaces the scheduler with :class:`ThrottlingScheduler`, adds
:class:`ThrottlingMiddleware` and :class:`ThrottlingExtension`, and turns
Scrapy's own per-slot delays and AutoThrottle off. The names seed 001
imports from ``scrapy.throttling`` are importable from here too, so its
examples work with one changed import line. See docs/scrapy.md.
"""

from __future__ import annotations

import typing as _typing

from .._responses._feedback import update_scope_backoff
from .._scoping._manager import ThrottlingManager, ThrottlingManagerProtocol
from .._scoping._scopes import add_scope, scope_cache
from ..policy.scope import ThrottlingScopeManager, ThrottlingScopeManagerProtocol
from ..policy.signals import ScopeFeedback
from ._addon import MIDDLEWARE_PRIORITY, Addon
from ._compat import MAX_SCRAPY, MIN_SCRAPY
from ._extension import ThrottlingExtension
from ._middleware import RequestRefused, ThrottlingMiddleware
from ._scheduler import ThrottlingScheduler
from ._tickets import APPLIED_SCOPES_KEY

if _typing.TYPE_CHECKING:
    from ._shared import SharedScheduler

__all__ = [
    "APPLIED_SCOPES_KEY",
    "MAX_SCRAPY",
    "MIDDLEWARE_PRIORITY",
    "MIN_SCRAPY",
    "Addon",
    "RequestRefused",
    "ScopeFeedback",
    "SharedScheduler",
    "ThrottlingExtension",
    "ThrottlingManager",
    "ThrottlingManagerProtocol",
    "ThrottlingMiddleware",
    "ThrottlingScheduler",
    "ThrottlingScopeManager",
    "ThrottlingScopeManagerProtocol",
    "add_scope",
    "scope_cache",
    "update_scope_backoff",
]


def __getattr__(name: str) -> _typing.Any:
    """``SharedScheduler`` is imported when first asked for (Scrapy loads it by its path).

    It brings the shared frontier and the Redis client, about 100 modules and
    12,000 objects that a crawl on the memory store never uses, and that every
    full pass of Python's garbage collector would otherwise walk.
    """
    if name == "SharedScheduler":
        from ._shared import SharedScheduler

        return SharedScheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
