"""The shared store's own options, read from its URL (and keyword arguments), checked at start-up."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, cast

from ..._exceptions import ConfigError
from . import _cluster, _fallback, _keys
from ._shared_policy import DEFAULT_LIMIT
from .connection import parse_url

__all__ = ["DEFAULT_LEASE", "StoreOptions", "TimeSource", "read_options"]

#: Where ``now`` comes from: the server's ``TIME`` inside each script (the
#: default), one ``TIME`` call per second passed in (for services that refuse
#: ``TIME`` in scripts), or this worker's own clock (tests, one machine).
TimeSource = Literal["server", "synced", "local"]
_TIME_SOURCES = ("server", "synced", "local")

#: Seconds a slot stays held without renewal.
DEFAULT_LEASE = 30.0


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Everything the store URL and the keyword arguments decided (see ``docs/redis.md``, "The URL")."""

    url: str  # for redis-py: crawlpace's options taken out
    namespace: str
    lease: float
    time: TimeSource
    cluster: bool
    fallback: bool
    fallback_workers: int
    policy_cache: int
    allot: bool = True


def read_options(url: str, *, namespace: str | None = None, lease: float | None = None,
                 time: TimeSource | None = None, cluster: bool | None = None,
                 policy_cache: int | None = None) -> StoreOptions:
    """Read and check the store's options; the URL's win over the keyword arguments.

    Raises:
        ConfigError: naming each bad option, its value and the fix.
    """
    plain, options = parse_url(url)
    problems = []
    space = namespace or options.get("namespace") or "crawlpace"
    lease_text = options.get("lease")
    try:
        seconds = float(lease_text) if lease_text is not None else lease or DEFAULT_LEASE
    except ValueError:
        seconds = DEFAULT_LEASE
        problems.append(f"store {url!r}: lease={lease_text!r} is not a number of seconds; give e.g. lease=30")
    if not (math.isfinite(seconds) and seconds > 0.0):
        problems.append(f"store {url!r}: lease={seconds!r} must be a positive number of seconds")
    source = time or options.get("time") or "server"
    if source not in _TIME_SOURCES:
        problems.append(f"store {url!r}: time={source!r} is not one of {', '.join(_TIME_SOURCES)}")
    on = _cluster.is_on(options.get("cluster")) if cluster is None else cluster
    if on is None:
        problems.append(f"store {url!r}: cluster={options.get('cluster')!r} is not a flag; "
                        "give cluster=1 (or leave it out)")
    problems += _cluster.check_url(plain, bool(on), space)
    problems += _keys.check_namespace(space)
    fallback, workers, wrong = _fallback.parse_options(url, options.get("fallback"),
                                                       options.get("fallback_workers"))
    problems += wrong
    cache_text = options.get("policy_cache")
    limit = policy_cache if policy_cache is not None else DEFAULT_LIMIT
    if cache_text is not None:
        limit = int(cache_text) if cache_text.isdigit() else 0
    if limit < 1:
        problems.append(f"store {url!r}: policy_cache={cache_text or policy_cache!r} is not a whole "
                        f"number >= 1; give e.g. policy_cache={DEFAULT_LIMIT}")
    allot = _cluster.is_on(options.get("allot", "1"))
    if allot is None:
        problems.append(f"store {url!r}: allot={options.get('allot')!r} is not a flag; give allot=0 to admit "
                        "every request in Redis (or leave it out)")
    if problems:
        raise ConfigError(problems)
    return StoreOptions(plain, space, seconds, cast(TimeSource, source), bool(on), fallback, workers, limit,
                        bool(allot))
