"""crawlpace: decide when each request may be sent, per scope, as fast as allowed.

The public names live here; everything else is an implementation detail.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from ._clock import AsyncioClock, Clock, TimerHandle
from ._config import AutoThrottleConfig, BackoffConfig, ScopeConfig, Settings, parse_jitter
from ._exceptions import ConfigError, CrawlpaceError, PermitError, ScopeError, ThrottlerClosed
from ._jitter import Jitter
from ._permit import NotReady, Permit
from ._scopes import (
    ThrottlingManager,
    ThrottlingManagerProtocol,
    add_scope,
    host_scope,
    normalize_scopes,
    scope_cache,
)
from ._stats import ScopeStats
from ._throttler import Throttler

try:
    __version__ = _version("crawlpace")
except _PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "AsyncioClock",
    "AutoThrottleConfig",
    "BackoffConfig",
    "Clock",
    "ConfigError",
    "CrawlpaceError",
    "Jitter",
    "NotReady",
    "Permit",
    "PermitError",
    "ScopeConfig",
    "ScopeError",
    "ScopeStats",
    "Settings",
    "Throttler",
    "ThrottlerClosed",
    "ThrottlingManager",
    "ThrottlingManagerProtocol",
    "TimerHandle",
    "__version__",
    "add_scope",
    "host_scope",
    "normalize_scopes",
    "parse_jitter",
    "scope_cache",
]
