"""Warm start: what a crawl learned of each scope, kept for the next crawl.

Every crawl used to start from nothing: a site crawled yesterday at 20
requests a second was met again at rampup's first rate. This module keeps,
per scope, the plain numbers the policies learned (rampup's rate and the rate
that was refused, the latency baseline, the delay AutoThrottle settled on,
robots.txt's Crawl-delay) with the time they were learned, and turns them into
a head start for a new scope's policy.

Old knowledge is trusted less. A record of age ``a`` is trusted with
``trust = FRESH_TRUST * 0.5 ** (a / HALF_LIFE)``: a rampup scope starts at
``trust`` times the learned rate (70 % of it when fresh, 35 % after a day,
never below its configured start), and rampup's start phase doubles from
there every second, so a site whose limit did not move is back at its rate
within a round trip or two. An AutoThrottle scope starts at the learned delay
divided by ``trust`` (never above ``AUTOTHROTTLE_START_DELAY``). A server that
now refuses that rate is backed off as usual, and the next snapshot replaces
the record.

Records live in a SQLite file (``crawlpace crawl --learned FILE``, the TOML
key ``learned``, the Scrapy setting ``CRAWLPACE_LEARNED``) or, given a Redis
URL, in the store's namespace under keys that expire after ``ttl`` seconds,
so that the next job of a fleet starts warm.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from .._settings._config import AutoThrottleConfig, ScopeConfig
from ._stats import ScopeStats

__all__ = ["FRESH_TRUST", "HALF_LIFE", "LearnedFile", "LearnedRedis", "LearnedScope", "LearnedSink",
           "WarmStart", "open_learned", "snapshot", "warm_start"]

_log = logging.getLogger(__name__)

#: Seconds after which a record is trusted half as much.
HALF_LIFE = 86400.0
#: The share of a fresh record's rate a scope starts at.
FRESH_TRUST = 0.7
#: Seconds a record is kept in Redis after its last update.
REDIS_TTL = 30 * 86400


@dataclass(frozen=True, slots=True)
class LearnedScope:
    """What one scope's policies had learned when the record was taken.

    Attributes:
        rate: rampup's rate (its ceiling once it has one), requests per second.
        refused_rate: the send rate when the server last pushed back.
        latency: the latency baseline (rampup's), or the mean latency, in seconds.
        delay: the delay in force (what AutoThrottle settled on), in seconds.
        crawl_delay: robots.txt's Crawl-delay, if any.
        learned_at: POSIX time of the record.
    """

    rate: float | None = None
    refused_rate: float | None = None
    latency: float | None = None
    delay: float | None = None
    crawl_delay: float | None = None
    learned_at: float = 0.0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> LearnedScope | None:
        """Read a record; None (with a log line) when it is not one."""
        try:
            data = json.loads(text)
            values = {field.name: data.get(field.name) for field in dataclasses.fields(cls)}
            for name, value in values.items():
                if value is not None and not (isinstance(value, int | float) and not isinstance(value, bool)
                                              and math.isfinite(value) and value >= 0):
                    raise ValueError(f"{name} = {value!r}")
            values["learned_at"] = float(values["learned_at"] or 0.0)
            return cls(**values)
        except (ValueError, TypeError, AttributeError) as exc:
            _log.warning("ignoring an unreadable learned record (%s)", exc)
            return None


def snapshot(stats: Iterable[ScopeStats], wall_now: float) -> dict[str, LearnedScope]:
    """Records for the scopes in ``stats`` that sent anything."""
    out: dict[str, LearnedScope] = {}
    for stat in stats:
        if stat.sends == 0:
            continue
        rampup = stat.rampup
        rate = refused = latency = None
        if rampup is not None:
            rate = rampup.ceiling if rampup.ceiling is not None else rampup.rate
            refused = rampup.last_pushback_rate
            latency = rampup.baseline_latency
        out[stat.scope] = LearnedScope(rate=rate, refused_rate=refused,
                                       latency=latency if latency is not None else stat.mean_latency,
                                       delay=stat.delay, crawl_delay=stat.crawl_delay, learned_at=wall_now)
    return out


@dataclass(frozen=True, slots=True)
class WarmStart:
    """Learned records, and how much to trust them, for the policies of new scopes.

    Attributes:
        records: scope name to its record.
        wall_now: POSIX time the records are judged at.
        half_life: seconds after which a record is trusted half as much.
    """

    records: Mapping[str, LearnedScope]
    wall_now: float
    half_life: float = HALF_LIFE

    def trust(self, record: LearnedScope) -> float:
        """How much of a learned rate to start at: :data:`FRESH_TRUST` when fresh, halving every half-life."""
        age = max(self.wall_now - record.learned_at, 0.0)
        return float(FRESH_TRUST * 0.5 ** (age / self.half_life))

    def config_for(self, scope: str, config: ScopeConfig) -> ScopeConfig:
        """``config`` with rampup's starting rate raised to what the scope's record allows."""
        record = self.records.get(scope)
        if record is None or not config.rampup or not record.rate:
            return config
        rate = record.rate
        if record.refused_rate:
            rate = min(rate, record.refused_rate)
        start = rate * self.trust(record)
        cold = 1.0 / config.delay if config.delay > 0.0 else math.inf
        if start <= cold:
            return config
        _log.debug("scope %s: warm start at %.3g/s (learned %.3g/s)", scope, start, rate)
        delay = 1.0 / start
        return dataclasses.replace(config, delay=delay, delay_per_slot=min(config.delay_per_slot, delay))

    def autothrottle_for(self, scope: str, config: ScopeConfig,
                         autothrottle: AutoThrottleConfig) -> AutoThrottleConfig:
        """AutoThrottle's settings with its start delay lowered toward the scope's learned delay."""
        record = self.records.get(scope)
        if record is None or config.rampup or not autothrottle.enabled or record.delay is None:
            return autothrottle
        start = max(record.delay / self.trust(record), config.delay)
        if start >= autothrottle.start_delay:
            return autothrottle
        return dataclasses.replace(autothrottle, start_delay=start)


class LearnedSink(Protocol):
    """Where records are read from and written to."""

    def load(self) -> dict[str, LearnedScope]:
        """Every record kept."""

    def save(self, records: Mapping[str, LearnedScope]) -> None:
        """Add or replace records."""

    def close(self) -> None:
        """Free the connection."""


class LearnedFile:
    """Records in a SQLite file, one row per scope.

    Args:
        path: the file; created when missing.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS learned (scope TEXT PRIMARY KEY, record TEXT NOT NULL)")
        self._db.commit()

    def load(self) -> dict[str, LearnedScope]:
        out: dict[str, LearnedScope] = {}
        for scope, text in self._db.execute("SELECT scope, record FROM learned"):
            record = LearnedScope.from_json(text)
            if record is not None:
                out[scope] = record
        return out

    def save(self, records: Mapping[str, LearnedScope]) -> None:
        if records:
            self._db.executemany("INSERT OR REPLACE INTO learned (scope, record) VALUES (?, ?)",
                                 [(scope, record.to_json()) for scope, record in records.items()])
            self._db.commit()

    def close(self) -> None:
        self._db.close()

    def __repr__(self) -> str:
        return f"<LearnedFile {str(self.path)!r}>"


class LearnedRedis:
    """Records in Redis, ``{namespace}:learned:{scope}``, each expiring ``ttl`` seconds after its update.

    Args:
        url: a ``redis://`` URL; its ``namespace`` option (default
            ``crawlpace``) prefixes the keys, as for the store.
        ttl: seconds a record outlives its last update.
    """

    def __init__(self, url: str, *, ttl: int = REDIS_TTL) -> None:
        import redis

        # Imported here: the Redis package brings redis-py, which a crawl without Redis never needs.
        from ..stores.redis._keys import learned_prefix
        from ..stores.redis.connection import parse_url

        # crawlpace's own options (namespace, ...) come off; redis-py's (password, username,
        # ssl_ca_certs, db...) stay with the URL, as for the store.
        plain, ours = parse_url(url)
        self._url = url
        self.namespace = ours.get("namespace", "crawlpace")
        self.ttl = ttl
        self._client: Any = redis.Redis.from_url(plain)
        self._prefix = learned_prefix(self.namespace)

    def load(self) -> dict[str, LearnedScope]:
        import redis

        try:
            return self._load()
        except redis.RedisError as exc:  # a message, not a traceback: exit 2 as for the store
            from .._exceptions import StoreUnreachable
            from .._redact import redact

            raise StoreUnreachable(f"learned {redact(self._url)}: cannot be read: "
                                   f"{redact(' '.join(str(exc).split()))}") from exc

    def _load(self) -> dict[str, LearnedScope]:
        from ..stores.redis._keys import glob_escape

        out: dict[str, LearnedScope] = {}
        # Escaped: a namespace "job[1]" must not read the records of "job1".
        mine = self._prefix.encode()
        keys = [key for key in self._client.scan_iter(match=glob_escape(self._prefix) + "*", count=1000)
                if key.startswith(mine)]
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            for key, text in zip(chunk, self._client.mget(chunk), strict=True):
                record = None if text is None else LearnedScope.from_json(text)
                if record is not None:
                    out[key.decode("utf-8", "replace")[len(self._prefix):]] = record
        return out

    def save(self, records: Mapping[str, LearnedScope]) -> None:
        if not records:
            return
        pipe = self._client.pipeline(transaction=False)
        for scope, record in records.items():
            pipe.set(self._prefix + scope, record.to_json(), ex=self.ttl)
        pipe.execute()

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"<LearnedRedis namespace={self.namespace!r}>"


def open_learned(target: str) -> LearnedSink:
    """A SQLite file path, or a ``redis://``/``rediss://``/``unix://`` URL."""
    if urlsplit(target).scheme in ("redis", "rediss", "unix"):
        return LearnedRedis(target)
    return LearnedFile(target)


def warm_start(sink: LearnedSink, wall_now: float | None = None) -> WarmStart:
    """The records of ``sink`` as a :class:`WarmStart` judged now."""
    return WarmStart(sink.load(), time.time() if wall_now is None else wall_now)
