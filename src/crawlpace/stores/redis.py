"""The shared store: admission state in Redis or Valkey, for many workers on many machines.

Selected by URL: ``redis://[:password@]host:port/db``, ``rediss://`` (TLS) or
``unix:///path/to/socket``, with crawlpace's own options in the query string
(``namespace``, ``lease``, ``time``, ``cluster``, ``fallback``, ``fallback_workers``);
every other query option goes to redis-py. ``cluster=1`` talks to a Redis Cluster through the nodes the
URL names (``redis://h1:7000,h2:7000/0?cluster=1``; see ``_cluster.py``).
Needs the ``redis`` extra (redis-py with hiredis).

How it divides the work (see ``docs/redis.md``):

* Admission is two Lua scripts, loaded once and called by SHA: ``acquire``
  admits a request to all of its scopes or to none, and ``release`` gives its
  slots back. Each is one round trip, and reads ``now`` from the server's
  ``TIME``, so the workers' clocks never have to agree.
* Slots are leases: a sorted set of lease ids scored by their expiry in
  server time, purged on every acquire. A worker renews its leases while its
  requests run; one killed with SIGKILL stops renewing, and its slots come
  back within the lease time.
* The adaptive policy (backoff, Retry-After holds, AutoThrottle, rampup, the
  breaker) is computed in Python by the same code as the memory store, and
  written back with the release, guarded by a version: when another worker
  wrote first, the outcome is applied again to the newer policy.
* What must hold for every worker at once is decided in the scripts: the
  breaker's half-open probe (one lease at a time, recorded in the scope's
  hash) and the quota's token bucket (consumed at acquire, reconciled with
  the actual use at release).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import math
import os
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._clock import Clock
from .._config import Settings
from .._exceptions import ConfigError, QuotaError, ScopeGivenUp
from .._redact import redact
from .._scopes import Demand
from ..policy.scope import ScopePolicy
from ..policy.signals import ScopeFeedback
from . import _cluster, _fallback
from ._check import with_timeouts
from ._lua import load_scripts
from ._pending import PendingRelease, ReleaseQueue
from ._policies import PolicyFactory, PolicyFormatError, dump_policy, load_policy
from ._snapshot import describe
from .base import Blocked, Lease, Outcome, ScopeSnapshot

__all__ = ["RedisLease", "RedisStore", "TimeSource"]

logger = logging.getLogger(__name__)

#: Where ``now`` comes from: the server's ``TIME`` inside each script (the
#: default), one ``TIME`` call per second passed in (for services that refuse
#: ``TIME`` in scripts), or this worker's own clock (tests, one machine).
TimeSource = Literal["server", "synced", "local"]
_TIME_SOURCES = ("server", "synced", "local")

_DEFAULT_LEASE = 30.0
# Seconds between two readings of the server's clock in "synced" mode.
_SYNC_EVERY = 1.0
# Waits between two attempts while the server cannot be reached.
_RETRY_FIRST, _RETRY_MAX = 0.1, 5.0
# Write-backs tried before an outcome's lesson is dropped (many workers racing).
_WRITE_TRIES = 8

try:  # the driver is optional: the ``redis`` extra
    import redis.asyncio as aioredis
    from redis.exceptions import ClusterError, ResponseError, SlotNotCoveredError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError:  # pragma: no cover - exercised only without the extra
    aioredis = None  # type: ignore[assignment]

_SCRIPTS = load_scripts("crawlpace.stores", ("acquire", "release", "rollback"),
                        clocked=("acquire", "release"))


@dataclass(slots=True)
class RedisLease(Lease):
    """A lease held in the shared store.

    Attributes:
        lease_id: the member of each scope's lease set.
        server_granted_at: the server's clock at admission.
        server_slot_ready: per scope, the server time the slot may send again.
        sends: per scope, the mean gap between sends and the last send, as the
            store counted them over every worker.
    """

    lease_id: str = ""
    server_granted_at: float = 0.0
    server_slot_ready: tuple[float, ...] = ()
    sends: tuple[tuple[float | None, float], ...] = field(default_factory=tuple)


@dataclass(slots=True)
class _Cached:
    """What this worker last knew of a scope's shared policy."""

    version: int
    blob: bytes | None  # None: the scope has no stored policy yet
    policy: ScopePolicy | None = None  # read from ``blob`` when first needed, then kept


def _pause(policy: ScopePolicy, now: float) -> str:
    """The breaker's pause as the release script stores it (call after ``policy.gate(now, ...)``).

    The end of the pause while open, ``"h"`` while half-open (the stored end
    stays, and so does a recorded probe), ``""`` when closed, given up or off.
    """
    breaker = policy.breaker
    if breaker is None:
        return ""
    if breaker.state == "open":
        until = breaker.snapshot(now).open_until
        return "" if until is None else repr(until)
    return "h" if breaker.state == "half_open" else ""


def _quota_args(policy: ScopePolicy, name: str, use: float) -> list[str]:
    """The acquire script's quota values for one scope: the use, the bucket's capacity and rate.

    Raises:
        QuotaError: when ``use`` exceeds the whole quota (it could never be sent).
    """
    quota = policy.quota
    if quota is None or use <= 0.0:
        return [repr(use), "", ""]
    if not quota.fits(use):
        raise QuotaError(f"a request expects to use {use:g} quota units of scope {name!r}, whose whole "
                         f"quota is {quota.quota:g} per {quota.window:g}s, so it can never be sent; lower "
                         "its expected use or raise the scope's quota")
    return [repr(use), repr(quota.capacity), repr(quota.rate)]


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """Split crawlpace's options (namespace, lease, time, cluster, fallback...) off a store URL."""
    parts = urlsplit(url)
    ours: dict[str, str] = {}
    theirs = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in {"namespace", "lease", "time", "cluster", "fallback", "fallback_workers"}:
            ours[key] = value
        else:
            theirs.append((key, value))
    scheme = {"valkey": "redis", "valkeys": "rediss"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(theirs), parts.fragment)), ours


class RedisStore:
    """Admission state in a Redis (or Valkey) server, shared by every worker that uses it.

    Args:
        url: the server, e.g. ``redis://127.0.0.1:6379/0``; crawlpace's own
            options may ride in its query string (see the keyword arguments).
        settings: the limits of every scope (every worker should use the same).
        clock: this worker's clock; the store converts the server's times to it.
        rng: the random source for jitter.
        namespace: keeps one crawl job's keys apart from another's.
        lease: seconds a slot stays held without renewal; a dead worker's
            slots come back after at most this long.
        time: where ``now`` comes from (see :data:`TimeSource`).
        cluster: talk to a Redis Cluster (the URL's ``cluster=1``): scripts
            run per hash slot, and a request whose scopes span slots is
            admitted in two phases (see ``docs/redis.md``).

    The URL's ``fallback=memory`` (and ``fallback_workers``) admits by a
    cautious local memory store while the server is unreachable (see
    ``_fallback.py``); without it the store fails closed. Releases that
    cannot reach the server are sent again when it answers (``_pending.py``).

    Raises:
        ConfigError: for a bad option or a missing driver.
    """

    shared = True

    def __init__(self, url: str, settings: Settings, clock: Clock, rng: random.Random | None = None, *,
                 namespace: str | None = None, lease: float | None = None,
                 time: TimeSource | None = None, cluster: bool | None = None) -> None:
        if aioredis is None:  # pragma: no cover - exercised only without the extra
            raise ConfigError([f"store {url!r}: the Redis store needs redis-py; "
                               "install crawlpace[redis]"])
        self.url, options = parse_url(url)
        problems = []
        self.namespace = namespace or options.get("namespace") or "crawlpace"
        lease_text = options.get("lease")
        try:
            self.lease = float(lease_text) if lease_text is not None else lease or _DEFAULT_LEASE
        except ValueError:
            self.lease = _DEFAULT_LEASE
            problems.append(f"store {url!r}: lease={lease_text!r} is not a number of seconds; "
                            "give e.g. lease=30")
        if not (math.isfinite(self.lease) and self.lease > 0.0):
            problems.append(f"store {url!r}: lease={self.lease!r} must be a positive number of seconds")
        source = time or options.get("time") or "server"
        if source not in _TIME_SOURCES:
            problems.append(f"store {url!r}: time={source!r} is not one of {', '.join(_TIME_SOURCES)}")
        on = _cluster.is_on(options.get("cluster")) if cluster is None else cluster
        if on is None:
            problems.append(f"store {url!r}: cluster={options.get('cluster')!r} is not a flag; "
                            "give cluster=1 (or leave it out)")
        self.cluster = bool(on)
        problems += _cluster.check_url(self.url, self.cluster, self.namespace)
        fallback, self.fallback_workers, wrong = _fallback.parse_options(
            url, options.get("fallback"), options.get("fallback_workers"))
        problems += wrong
        if problems:
            raise ConfigError(problems)
        self.time: TimeSource = source  # type: ignore[assignment]
        self._settings = settings
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._factory = PolicyFactory(settings)
        self._allowed = self._factory.allowed()
        self._prefix = f"cp:{self.namespace}:"
        longest = max([settings.robotstxt_max_delay, settings.scope_defaults.backoff.max_delay,
                       settings.scope_defaults.window,
                       *(cfg.backoff.max_delay for cfg in settings.scopes.values()),
                       *(cfg.window for cfg in settings.scopes.values())])
        # Idle scopes expire, but not before any delay they hold could have run out.
        self.idle = int(max(3600.0, 10.0 * longest))
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._offset = 0.0  # server time minus this worker's clock
        self._synced_at = -math.inf
        self._cache: dict[str, _Cached] = {}
        self._held: dict[str, tuple[str, ...]] = {}  # lease id -> scope names, for renewal
        self._renewer: asyncio.Task[None] | None = None
        self._ids = itertools.count()
        self._worker = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._down_since: float | None = None
        self._retry = _RETRY_FIRST
        self._next_try = -math.inf  # while down, when to try the server again
        # While the server is unreachable, admissions go here instead (fallback=memory), if set.
        self._fallback = _fallback.open_fallback(settings, self.fallback_workers, clock, self._rng) \
            if fallback else None
        # What counts as "the server cannot be reached", for failing closed.
        self._down: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
        self._slots: _cluster.SlotAdmission | None = None
        self._connecting = asyncio.Lock()
        if self.cluster:
            self._down += (ClusterError, SlotNotCoveredError)  # a node down, slots moving
        self._unreleased = ReleaseQueue(self._resend_release, self._down, self._clock.now, self._clock.sleep)
        if self.cluster:
            self._slots = _cluster.SlotAdmission(self._run, self._now_arg, self._clock.now, self._held,
                                                 self._start_renewer)

    # -- keys and time ----------------------------------------------------------

    def _keys(self, scope: str) -> tuple[str, str, str, str]:
        # One hash tag per scope: every key of a scope lives in one cluster slot.
        base = f"{self._prefix}{{{scope}}}"
        return f"{base}:a", f"{base}:l", f"{base}:r", f"{base}:p"

    def _server_now(self) -> float:
        return self._clock.now() + self._offset

    def _local(self, server_time: float) -> float:
        return server_time - self._offset

    async def _now_arg(self) -> str:
        if self.time == "server":
            return ""
        if self.time == "synced" and self._clock.now() - self._synced_at >= _SYNC_EVERY:
            await self._sync()
        return repr(self._server_now())

    async def _sync(self) -> None:
        before = self._clock.now()
        seconds, micros = await self._client.time()
        after = self._clock.now()
        self._offset = seconds + micros / 1e6 - (before + after) / 2.0
        self._synced_at = after

    def _heard(self, server_now: float, sent: float) -> None:
        """Follow the server's clock from a reply's ``now`` (server mode)."""
        if self.time == "server":
            self._offset = server_now - (sent + self._clock.now()) / 2.0

    # -- connection ---------------------------------------------------------------

    async def _connect(self) -> None:
        if self._client is not None:
            return
        if self.cluster:
            if not await self._open_cluster():
                return
        else:
            self._client = aioredis.from_url(with_timeouts(self.url), decode_responses=False)
            self._scripts = {name: self._client.register_script(src) for name, src in _SCRIPTS.items()}
        if self.time != "local":
            # Snapshots and Crawl-Delays may come before the first script reply sets the offset.
            await self._sync()

    async def _open_cluster(self) -> bool:
        """Connect to the cluster unless a concurrent caller did (connecting awaits); True if this one did."""
        async with self._connecting:
            if self._client is not None:
                return False
            client = await _cluster.connect(self.url)
            self._scripts = {name: client.register_script(src) for name, src in _SCRIPTS.items()}
            self._client = client
            return True

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        await self._connect()
        try:
            return await self._scripts[name](keys=keys, args=args)
        except ResponseError as exc:
            if (self.time == "server" and name != "rollback" and "TIME" in str(exc).upper()
                    and "ARGV" not in str(exc)):
                logger.warning("the Redis server refuses TIME inside scripts (%s); reading its clock "
                               "once a second instead", exc)
                self.time = "synced"
                args = [await self._now_arg(), *args[1:]]
                return await self._scripts[name](keys=keys, args=args)
            raise

    def _unreachable(self, exc: Exception, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """Fail closed (nothing is admitted while the server cannot be reached), or fall back."""
        now = self._clock.now()
        if self._down_since is None:
            self._down_since = now
            if self._fallback is None:
                logger.warning("Redis store %s unreachable (%s): holding every request until it answers",
                               redact(self.url), exc)
            else:
                logger.warning("Redis store %s unreachable (%s): admitting by the memory fallback (one "
                               "slot per scope, delays x%d) until it answers", redact(self.url), exc,
                               self.fallback_workers)
        else:
            logger.debug("Redis store still unreachable after %.1fs: %s", now - self._down_since, exc)
        wait = self._retry
        self._retry = min(self._retry * 2.0, _RETRY_MAX)
        self._next_try = now + wait
        if self._fallback is not None:
            return self._fallback.acquire_nowait(demands)
        return Blocked(now + wait, tuple((name, now + wait) for name, _ in demands))

    def _reachable(self) -> None:
        if self._down_since is not None:
            back = "; back to the shared state from the memory fallback" if self._fallback is not None else ""
            logger.warning("Redis store %s answers again after %.1fs%s", redact(self.url),
                           self._clock.now() - self._down_since, back)
            self._down_since = None
        self._retry = _RETRY_FIRST

    # -- policies -----------------------------------------------------------------

    def _policy(self, scope: str) -> ScopePolicy:
        """This worker's copy of the scope's policy as last known (a fresh one if none)."""
        cached = self._cache.get(scope)
        if cached is None:
            cached = self._cache[scope] = _Cached(0, None)
        if cached.policy is None:
            if cached.blob is None:
                cached.policy = self._factory.new(scope)
            else:
                try:
                    cached.policy = load_policy(cached.blob, self._allowed)
                except PolicyFormatError as exc:
                    logger.warning("scope %s: %s; starting from a fresh policy", scope, exc)
                    cached.policy = self._factory.new(scope)
        return cached.policy

    def _writeback(self, policy: ScopePolicy, now: float) -> tuple[bytes, list[Any]]:
        """The stored form of ``policy``, and the release script's write-back values for it."""
        limits = policy.limits
        hold = policy.gate(now, 0.0)
        # A breaker waiting for its probe's answer: look again shortly.
        hold = now + 1.0 if hold is None else hold
        blob = dump_policy(policy)
        return blob, [blob, str(limits.concurrency), repr(limits.delay), repr(limits.delay_per_slot),
                      repr(limits.floor), repr(hold if hold > now else -1.0), str(policy.generation),
                      "1" if policy.given_up else "0", _pause(policy, now)]

    # -- the Store interface ------------------------------------------------------------

    async def acquire(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """Admit ``demands`` in every scope at once, or return why not."""
        if self._fallback is not None and self._down_since is not None and self._clock.now() < self._next_try:
            return self._fallback.acquire_nowait(demands)  # still down, most likely: not worth a try yet
        try:
            await self._connect()
            await self._unreleased.flush()  # a slot a failed release still holds may be the one needed
            await self._refresh_due(demands)
            args: list[Any] = [await self._now_arg(), "", self.lease, self.idle, len(demands)]
            keys: list[str] = []
            for name, use in demands:
                keys += list(self._keys(name)[:3])
                policy = self._policy(name)
                limits = policy.limits
                jitter = policy.jitter
                factor = jitter.factor(self._rng) if jitter.enabled else 1.0
                args += [limits.concurrency, repr(limits.delay), repr(limits.delay_per_slot),
                         repr(limits.floor), repr(factor), *_quota_args(policy, name, use)]
            lease_id = f"{self._worker}-{next(self._ids)}"
            args[1] = lease_id
            if self._slots is not None and self._slots.spans(keys, 3):
                reply, sent = await self._slots.acquire([name for name, _ in demands], keys, args)
            else:
                sent = self._clock.now()
                reply = await self._run("acquire", keys, args)
        except self._down as exc:
            return self._unreachable(exc, demands)
        self._reachable()
        status, server_now = int(reply[0]), float(reply[1])
        self._heard(server_now, sent)
        n = len(demands)
        if status == 2:
            name = demands[int(reply[2]) - 1][0]
            policy = self._policy(name)
            raise ScopeGivenUp(name, policy.breaker.reason if policy.breaker else "")
        if status == 0:
            waiting: list[tuple[str, float | None]] = []
            for (name, _use), value in zip(demands, reply[2:2 + n], strict=True):
                at = float(value)
                if at < 0:
                    waiting.append((name, None))
                elif at > server_now:
                    waiting.append((name, self._local(at)))
            if not waiting:  # ready by the time the reply was read: ask again at once
                now_local = self._local(server_now)
                return Blocked(now_local, tuple((name, now_local) for name, _ in demands))
            times = [t for _, t in waiting]
            latest = None if None in times else max(t for t in times if t is not None)
            return Blocked(latest, tuple(waiting))
        slot_ready = tuple(float(v) for v in reply[2:2 + n])
        generations = tuple(int(v) for v in reply[2 + n:2 + 2 * n])
        versions = [int(v) for v in reply[2 + 2 * n:2 + 3 * n]]
        sends = tuple((None if v in (b"", "") else float(v), float(w))
                      for v, w in zip(reply[2 + 3 * n:2 + 4 * n], reply[2 + 4 * n:2 + 5 * n], strict=True))
        for (name, _use), version in zip(demands, versions, strict=True):
            cached = self._cache.get(name)
            if cached is None or cached.version != version:
                self._cache[name] = _Cached(version, await self._fetch_blob(name) if version else None)
        self._held[lease_id] = tuple(name for name, _ in demands)
        self._start_renewer()
        return RedisLease(demands, tuple(self._local(t) for t in slot_ready), self._local(server_now),
                          generations, lease_id=lease_id, server_granted_at=server_now,
                          server_slot_ready=slot_ready, sends=sends)

    async def release(self, lease: Lease, outcome: Outcome) -> tuple[str, ...]:
        """Give the slots of ``lease`` back and apply ``outcome`` to the shared policies."""
        if not isinstance(lease, RedisLease):
            if self._fallback is not None:  # granted by the fallback while the server was away
                return self._fallback.release_nowait(lease, outcome)
            raise TypeError("a RedisStore can only release its own leases")
        self._held.pop(lease.lease_id, None)
        feedback: tuple[ScopeFeedback | None, ...] = outcome.feedback or (
            outcome.plain_feedback(),) * len(lease.demands)
        generations = lease.generations or (0,) * len(lease.demands)
        now = self._server_now()
        given_up: list[str] = []
        pending: dict[int, tuple[ScopeFeedback | None, int]] = {}
        args: list[Any] = ["", lease.lease_id, self.idle, len(lease.demands)]
        keys: list[str] = []
        for index, ((name, use), signal, generation) in enumerate(
                zip(lease.demands, feedback, generations, strict=True)):
            keys += list(self._keys(name))
            # Response, error, latency: counted only for a release with an outcome.
            counts = ["0", "0", ""]
            if signal is not None:
                counts = ["1" if outcome.error is None and outcome.status is not None else "0",
                          "0" if outcome.error is None else "1",
                          repr(outcome.latency) if outcome.latency is not None and outcome.latency >= 0.0
                          else ""]
            write = [""] * 10  # no write-back
            quota = self._policy(name).quota
            charge = [""] * 3
            if quota is not None and signal is not None and signal.consumed_quota is not None:
                charge = [repr(quota.capacity), repr(quota.rate), repr(signal.consumed_quota - use)]
            if signal is not None or self._policy_is_gated(name):
                stored = name in self._cache and self._cache[name].blob is not None
                before = self._policy(name).summary()
                policy, version = self._apply(name, now, signal, generation, lease, index, use)
                if policy.given_up:
                    given_up.append(name)
                if not stored or policy.summary() != before:  # nothing that matters: nothing to write
                    _blob, values = self._writeback(policy, now)
                    write = [str(version), *values]
                    pending[index] = (signal, generation)
            args += [repr(lease.server_slot_ready[index]), "1", *counts, *write, *charge]
        item = PendingRelease(lease.lease_id, self._clock.now() + self.lease, (lease, keys, args, pending))
        try:
            await self._unreleased.flush()  # older releases first: they free slots too
            await self._send_release(item)
        except self._down as exc:
            logger.warning("Redis store %s unreachable at release (%s): the release is sent again when "
                           "the server answers (until its lease would have expired)", redact(self.url), exc)
            self._unreleased.add(item)
        return tuple(given_up)

    async def _resend_release(self, item: PendingRelease) -> None:
        """Send a release that failed: its outcome counts only where its lease is still held."""
        _lease, _keys, args, _pending = item.payload
        for index in range(int(args[_cluster.RELEASE_HEAD - 1])):
            args[_cluster.RELEASE_HEAD + _cluster.RELEASE_EACH * index + 1] = "2"
        await self._send_release(item)

    async def _send_release(self, item: PendingRelease) -> None:
        """Send one release (again, for one that failed) and settle its write-backs."""
        lease, keys, args, pending = item.payload
        args[0] = await self._now_arg()
        if self._slots is not None:
            reply = await self._slots.release(keys, args)
        else:
            reply = await self._run("release", keys, args)
        self._reachable()
        await self._settle(lease, reply, pending, args)

    async def set_crawl_delay(self, scope: str, delay: float | None) -> None:
        """Apply a robots.txt Crawl-Delay to ``scope`` for every worker."""
        settings = self._settings
        if not settings.robotstxt_obey:
            return
        await self._connect()
        for _ in range(_WRITE_TRIES):
            policy = self._policy(scope)
            version = self._cache[scope].version
            now = self._server_now()
            policy.set_crawl_delay(delay, max_delay=settings.robotstxt_max_delay,
                                   explicit=settings.is_explicit(scope), now=now)
            if await self._write_only(scope, version, policy, now):
                return
        logger.warning("scope %s: Crawl-Delay not stored: other workers kept writing first", scope)

    async def snapshot(self, scope: str) -> ScopeSnapshot | None:
        """Describe ``scope`` as every worker sees it."""
        await self._connect()
        admission, leases, resting_key, policy_key = self._keys(scope)
        now = self._server_now()
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.hgetall(admission)
            pipe.zcount(leases, f"({now}", "+inf")
            pipe.zcount(resting_key, f"({now}", "+inf")
            pipe.get(policy_key)
            fields, inflight, resting, blob = await pipe.execute()
        if not fields:
            return None
        values = {key.decode(): value.decode() for key, value in fields.items()}
        policy = self._factory.new(scope)
        if blob is not None:
            with contextlib.suppress(PolicyFormatError):
                policy = load_policy(blob, self._allowed)

        def number(key: str, default: float = -math.inf) -> float:
            text = values.get(key)
            return float(text) if text not in (None, "") else default

        concurrency = int(number("conc", policy.limits.concurrency))
        ready: float | None = max(number("next"), number("hold"))
        if inflight >= concurrency:
            ready = None
        latency = number("lat", math.nan)
        mean = number("mlat", math.nan)
        snap = describe(scope, policy, now,
                        concurrency=concurrency, delay=number("delay", policy.limits.delay),
                        delay_per_slot=number("pslot", policy.limits.delay_per_slot),
                        inflight=int(inflight), resting=int(resting),
                        # "rb": reservations rolled back after other sends (Redis Cluster); never sent.
                        sends=int(number("sends", 0) - number("rb", 0)),
                        responses=int(number("resp", 0)), errors=int(number("errs", 0)),
                        ready_at=ready, last_latency=None if math.isnan(latency) else latency,
                        mean_latency=None if math.isnan(mean) else mean)
        quota = policy.quota
        if quota is None:
            return snap
        # The shared bucket, not this worker's copy: the credit "qc" as of "qa" (none: full).
        credit, settled = number("qc", math.nan), number("qa", math.nan)
        remaining = quota.capacity
        if not (math.isnan(credit) or math.isnan(settled)):
            refill = quota.rate * (now - settled)
            remaining = credit if now <= settled else min(quota.capacity, credit + refill)
        return dataclasses.replace(snap, quota_remaining=remaining)

    async def scopes(self) -> list[str]:
        """List the scopes with state in this namespace."""
        await self._connect()
        start, end = len(self._prefix) + 1, -len("}:a")
        names = []
        async for key in self._client.scan_iter(match=f"{self._prefix}{{*}}:a", count=1000):
            text = key.decode() if isinstance(key, bytes) else key
            names.append(text[start:end])
        return names

    async def aclose(self) -> None:
        """Stop renewing leases and close the connections."""
        await self._unreleased.aclose()
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- helpers ------------------------------------------------------------------

    def _policy_is_gated(self, name: str) -> bool:
        cached = self._cache.get(name)
        return cached is not None and cached.blob is not None and self._policy(name).breaker is not None

    def _apply(self, name: str, now: float, signal: ScopeFeedback | None, generation: int,
               lease: RedisLease, index: int, use: float) -> tuple[ScopePolicy, int]:
        """The scope's policy after ``signal``, and the version it was computed from."""
        policy = self._policy(name)
        version = self._cache[name].version
        if policy.rampup is not None and lease.sends:
            gap, last = lease.sends[index]
            policy.rampup.sync_sends(gap, last)
        policy.on_outcome(now, signal, generation=generation, sent_at=lease.server_granted_at,
                          expected_use=use)
        return policy, version

    async def _settle(self, lease: RedisLease, reply: Any,
                      pending: dict[int, tuple[ScopeFeedback | None, int]], args: list[Any]) -> None:
        """Record the write-backs that landed; redo those another worker beat."""
        for index, result in enumerate(reply[1:]):
            if index not in pending:
                continue
            name, use = lease.demands[index]
            base = _cluster.RELEASE_HEAD + _cluster.RELEASE_EACH * index
            version = int(args[base + 5])
            if result in (b"ok", "ok"):
                cached = self._cache[name]
                cached.version, cached.blob = version + 1, args[base + 6]
                continue
            # Another worker wrote first: apply this outcome to the newer policy.
            signal, generation = pending[index]
            for _ in range(_WRITE_TRIES):
                current = int(result)
                self._cache[name] = _Cached(current, await self._fetch_blob(name))
                now = self._server_now()
                policy, version = self._apply(name, now, signal, generation, lease, index, use)
                if await self._write_only(name, version, policy, now):
                    break
            else:
                logger.warning("scope %s: an outcome was not shared: other workers kept writing first", name)

    async def _write_only(self, name: str, version: int, policy: ScopePolicy, now: float) -> bool:
        """Write ``policy`` back if the stored version is still ``version``."""
        blob, values = self._writeback(policy, now)
        args = [await self._now_arg(), "", self.idle, 1, "0", "", "0", "0", "", str(version), *values,
                "", "", ""]
        reply = await self._run("release", list(self._keys(name)), args)
        if reply[1] in (b"ok", "ok"):
            cached = self._cache[name]
            cached.version, cached.blob = version + 1, blob
            return True
        self._cache[name] = _Cached(int(reply[1]), await self._fetch_blob(name))
        return False

    async def _fetch_blob(self, name: str) -> bytes | None:
        blob: bytes | None = await self._client.get(self._keys(name)[3])
        return blob

    async def _refresh_due(self, demands: tuple[Demand, ...]) -> None:
        """Write back the limits of policies whose time-driven change is due (a backoff wearing off)."""
        now = self._server_now()
        for name, _use in demands:
            cached = self._cache.get(name)
            if cached is None or cached.blob is None:
                continue
            policy = self._policy(name)
            if now < policy.wake_at:
                continue
            if policy.refresh(now):
                await self._write_only(name, cached.version, policy, now)

    def _start_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_forever())

    async def _renew_forever(self) -> None:
        """Push the expiry of every held lease forward while its request runs."""
        while self._held:
            await self._clock.sleep(self.lease / 3.0)
            expiry = self._server_now() + self.lease
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for lease_id, names in list(self._held.items()):
                        for name in names:
                            pipe.zadd(self._keys(name)[1], {lease_id: expiry}, xx=True)
                    await pipe.execute()
            except self._down as exc:
                logger.warning("could not renew leases in %s: %s", redact(self.url), exc)
