"""crawlpace: decide when each request may be sent, per scope, as fast as allowed.

The public names live here; everything else is an implementation detail.
"""

import typing as _typing

from ._clock import AsyncioClock, Clock, TimerHandle
from ._exceptions import (
    ConfigError,
    CrawlpaceError,
    PermitError,
    PolicyFormatError,
    QuotaError,
    RobotsDisallowed,
    ScopeError,
    ScopeGivenUp,
    StateFormatError,
    StoreUnreachable,
    ThrottlerClosed,
)
from ._jitter import Jitter
from ._responses._blocks import BlockRules
from ._responses._feedback import update_scope_backoff
from ._responses._headers import ServerHint, parse_hints
from ._robotstxt._robots import crawl_delay
from ._scoping._manager import ThrottlingManager, ThrottlingManagerProtocol
from ._scoping._resolver import Resolver
from ._scoping._scopes import (
    add_scope,
    host_scope,
    normalize_scopes,
    scope_cache,
)
from ._scoping._server_scopes import (
    DomainScopes,
    HostAndDomainScopes,
    HostAndIpScopes,
    IpScopes,
    ServerScopes,
)
from ._settings._config import (
    AutoThrottleConfig,
    BackoffConfig,
    BreakerConfig,
    ScopeConfig,
    Settings,
    parse_jitter,
)
from ._throttle._observer import ThrottleObserver
from ._throttle._permit import NotReady, Permit
from ._throttle._stats import ScopeStats
from ._throttle._sync import SyncPermit, SyncThrottler
from ._throttle._throttler import Throttler
from .policy.admission import Limits
from .policy.rampup import RampupStats
from .policy.scope import ThrottlingScopeManager, ThrottlingScopeManagerProtocol
from .policy.signals import ScopeFeedback

if _typing.TYPE_CHECKING:
    __version__: str
else:
    def __getattr__(name: str) -> str:
        # The version is read from the installed metadata on first use only:
        # importlib.metadata costs more to import than the rest of the core.
        if name != "__version__":
            raise AttributeError(f"module 'crawlpace' has no attribute {name!r}")
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("crawlpace")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            value = "0+unknown"
        globals()["__version__"] = value
        return value

__all__ = [
    "AsyncioClock",
    "AutoThrottleConfig",
    "BackoffConfig",
    "BlockRules",
    "BreakerConfig",
    "Clock",
    "ConfigError",
    "CrawlpaceError",
    "DomainScopes",
    "HostAndDomainScopes",
    "HostAndIpScopes",
    "IpScopes",
    "Jitter",
    "Limits",
    "NotReady",
    "Permit",
    "PermitError",
    "PolicyFormatError",
    "QuotaError",
    "RampupStats",
    "Resolver",
    "RobotsDisallowed",
    "ScopeConfig",
    "ScopeError",
    "ScopeFeedback",
    "ScopeGivenUp",
    "ScopeStats",
    "ServerHint",
    "ServerScopes",
    "Settings",
    "StateFormatError",
    "StoreUnreachable",
    "SyncPermit",
    "SyncThrottler",
    "ThrottleObserver",
    "Throttler",
    "ThrottlerClosed",
    "ThrottlingManager",
    "ThrottlingManagerProtocol",
    "ThrottlingScopeManager",
    "ThrottlingScopeManagerProtocol",
    "TimerHandle",
    "__version__",
    "add_scope",
    "crawl_delay",
    "host_scope",
    "normalize_scopes",
    "parse_hints",
    "parse_jitter",
    "scope_cache",
    "update_scope_backoff",
]
