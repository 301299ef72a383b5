"""A public path kept for "connection": everything here comes from ``crawlpace.stores.redis.connection``."""

from __future__ import annotations

from .redis.connection import (
    DOWN,
    RETRY_FIRST,
    RETRY_MAX,
    LeaseRenewer,
    RedisConnection,
    Retry,
    cluster_flag,
    have_driver,
    load_scripts,
    parse_url,
    unreachable,
)

__all__ = [
    "DOWN",
    "RETRY_FIRST",
    "RETRY_MAX",
    "LeaseRenewer",
    "RedisConnection",
    "Retry",
    "cluster_flag",
    "have_driver",
    "load_scripts",
    "parse_url",
    "unreachable",
]
