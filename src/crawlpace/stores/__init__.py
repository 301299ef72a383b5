"""State stores: where admission state lives (``memory://`` now, Redis later)."""

from __future__ import annotations

import random
from urllib.parse import urlsplit

from .._clock import Clock
from .._config import Settings
from .._exceptions import ConfigError
from .base import Blocked, Lease, Outcome, ScopeSnapshot, Store
from .memory import MemoryStore

__all__ = ["Blocked", "Lease", "MemoryStore", "Outcome", "ScopeSnapshot", "Store", "open_store"]


def open_store(url: str, settings: Settings, clock: Clock, rng: random.Random) -> Store:
    """Create the store a URL names.

    ``memory://`` (or an empty string) gives the embedded in-process store.

    Raises:
        ConfigError: for a scheme this version cannot serve.
    """
    scheme = urlsplit(url).scheme if url else "memory"
    if scheme == "memory":
        return MemoryStore(settings, clock, rng)
    if scheme in {"redis", "rediss", "unix", "valkey", "valkeys"}:
        raise ConfigError([f"store {url!r}: the Redis/Valkey store is not part of this version "
                           "yet; use 'memory://' for now"])
    raise ConfigError([f"store {url!r}: unknown scheme {scheme!r}; use 'memory://'"])
