"""State stores: where admission state lives (``memory://`` in this process, or Redis/Valkey)."""

from __future__ import annotations

import random
from urllib.parse import urlsplit

from .._clock import Clock
from .._exceptions import ConfigError
from .._settings._config import Settings
from ._check import check_url, reach
from ._policies import PolicyFactory
from .base import Blocked, Lease, Outcome, ScopeSnapshot, Store
from .memory import MemoryStore

#: URL schemes served by the Redis store (Valkey speaks the same protocol).
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "valkey", "valkeys"})

__all__ = ["REDIS_SCHEMES", "Blocked", "Lease", "MemoryStore", "Outcome", "PolicyFactory", "ScopeSnapshot",
           "Store", "check_url", "open_store", "reach"]


def open_store(url: str, settings: Settings, clock: Clock, rng: random.Random) -> Store:
    """Create the store a URL names.

    ``memory://`` (or an empty string) gives the embedded in-process store;
    ``redis://``, ``rediss://``, ``unix://`` (and ``valkey://``) the shared
    :class:`~crawlpace.stores.redis.RedisStore`. A Redis Cluster is named by
    the ``cluster=1`` option and one or more of its nodes:
    ``redis://10.0.0.5:7000,10.0.0.6:7000/0?cluster=1``.

    Raises:
        ConfigError: for a scheme this version cannot serve.
    """
    try:
        scheme = urlsplit(url).scheme if url else "memory"
    except ValueError as exc:
        raise ConfigError([f"store {url!r}: cannot be read as a URL ({exc}); write it as "
                           "redis://host:port/db or memory://"]) from None
    if scheme == "memory":
        return MemoryStore(settings, clock, rng)
    if scheme in REDIS_SCHEMES:
        from .redis import RedisStore  # the driver is optional: import it only when asked for

        problems = check_url(url)
        if problems:
            raise ConfigError(problems)

        return RedisStore(url, settings, clock, rng)
    raise ConfigError([f"store {url!r}: unknown scheme {scheme!r}; use 'memory://', 'redis://host:port/db', "
                       "'rediss://...' (TLS), 'unix:///path/to/redis.sock' or, for a Redis Cluster, "
                       "'redis://host:port,host:port/0?cluster=1'"])
