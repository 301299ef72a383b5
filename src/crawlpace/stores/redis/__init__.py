"""The shared store: admission state in Redis or Valkey, for many workers on many machines.

Selected by URL (``redis://``, ``rediss://``, ``unix://``, ``valkey://``; a
Redis Cluster with ``cluster=1``); crawlpace's options ride in the query
string (``_redis_options.py``). Needs the ``redis`` extra. See ``docs/redis.md``.

* Admission is two Lua scripts called by SHA: ``acquire`` admits a request to
  all of its scopes or to none, ``release`` gives its slots back. Both read
  ``now`` from the server's ``TIME``, so the workers' clocks never have to
  agree. Calls made in one turn of the loop share one batch script call,
  written at once even while earlier batches wait for their replies
  (``connection.py``); a release is not awaited but leaves at the loop's
  next turn, with the worker's next call if it makes one (``_redis_release.py``).
  What each call sends, and how its reply reads, is in ``_redis_admit.py`` and
  ``_redis_release.py``.
* Slots are leases, renewed while their requests run (``connection.py``);
  a worker killed with SIGKILL stops renewing and its slots come back. On a
  busy plain scope a worker keeps a few as an allotment and admits from it
  locally (``_allot.py``).
* The adaptive policy is computed in Python by the same code as the memory
  store, kept in a bounded cache (``_shared_policy.py``) and written back
  under a version (``_writeback.py``) in the compact layout of
  ``policy/state.py``.
* What must hold for every worker at once is decided in the scripts: the
  breaker's half-open probe and the quota's token bucket.
* Unreachable server: fail closed or the memory fallback (``_outage.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import random
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..._clock import Clock
from ..._exceptions import ConfigError, ScopeGivenUp, StoreUnreachable
from ..._redact import redact
from ..._settings._config import Settings
from ...policy.admission import Demand
from .._policies import PolicyFactory
from ..base import Blocked, Lease, Outcome, ScopeSnapshot
from . import _cluster, _fallback, _keys
from ._allot import Allotments
from ._lua import load_scripts
from ._offset import OffsetBound
from ._outage import Outage
from ._pending import PendingRelease
from ._redis_admit import (
    acquire_call,
    blocked,
    door_open,
    granted,
    known_versions,
    learn_versions,
    pass_doors,
    quota_known,
    sooner,
    uncharged,
)
from ._redis_lease import RedisLease
from ._redis_options import TimeSource, read_options
from ._redis_parts import RedisParts
from ._redis_release import ReleaseSender, release_call
from ._redis_snapshot import fetch_snapshot
from ._script_args import ACQUIRE
from ._shared_policy import SharedPolicies
from ._writeback import WRITE_TRIES, PolicyWriter
from .connection import LeaseRenewer, RedisConnection, parse_url

__all__ = ["RedisLease", "RedisStore", "TimeSource", "parse_url"]

logger = logging.getLogger(__name__)

# Seconds between two readings of the server's clock in "synced" mode.
_SYNC_EVERY = 1.0
#: Seconds apart two writes of a scope reach a site together: a sibling written closer than this
#: before a write cannot have been answered, and a refusal read, in between (``lua/look.lua``).
#: A site lets a request in flight as its refusal leaves pass (the simulator forgives 50 ms).
TOGETHER = 0.05
#: Seconds a write waits before it looks again while a sibling written before it is still out:
#: about a loaded fleet's round trip to the store, so looking again costs it little more.
LOOK_AGAIN = 0.02

try:  # the driver is optional: the ``redis`` extra
    from redis.exceptions import ResponseError
except ImportError:  # pragma: no cover - exercised only without the extra
    ResponseError = None  # type: ignore[assignment,misc]

_SCRIPTS = load_scripts("crawlpace.stores",
                        ("acquire", "release", "rollback", "allot", "hold", "look", "stamp"),
                        clocked=("acquire", "release", "allot", "hold", "look", "stamp"))


def _refusal(lease: Lease, outcome: Outcome) -> bool:
    """Whether ``outcome`` is a backoff answer for some scope of ``lease`` (its first cut reads the count)."""
    feedback = outcome.feedback or (outcome.plain_feedback(),) * len(lease.demands)
    return any(signal is not None and signal.backoff for signal in feedback)


def _ends_episode(lease: Lease, outcome: Outcome, policies: SharedPolicies) -> bool:
    """Whether ``outcome`` is an accepted answer for a scope of ``lease`` whose rampup is in an
    overshoot episode (as this worker knows it): its answer may end the episode and fit a rate to
    the cycle's accepted answers, which only the server counts over every worker."""
    feedback = outcome.feedback or (outcome.plain_feedback(),) * len(lease.demands)
    for (name, _use), signal in zip(lease.demands, feedback, strict=True):
        if signal is not None and signal.accepted and policies.stored(name):
            rampup = policies.policy(name).rampup
            if rampup is not None and rampup.in_episode():
                return True
    return False


def _sent_ahead(what: str) -> Callable[[asyncio.Future[Any]], None]:
    """The callback of a call sent ahead and not awaited (a refusal's hold, a Crawl-delay write's
    note): its failure is only logged, since the release after it carries what matters (the hold),
    or the next admission waits a delay after this one's all the same (the note)."""
    def sent(reply: asyncio.Future[Any]) -> None:
        if not reply.cancelled() and (exc := reply.exception()) is not None:
            logger.debug("%s did not reach the server ahead of its release: %r", what, exc)
    return sent


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
        policy_cache: scope policies this worker keeps at most (the URL's
            ``policy_cache``; least recently used go first).

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
                 time: TimeSource | None = None, cluster: bool | None = None,
                 policy_cache: int | None = None) -> None:
        if ResponseError is None:  # pragma: no cover - exercised only without the extra
            raise ConfigError([f"store {url!r}: the Redis store needs redis-py; "
                               "install crawlpace[redis]"])
        options = read_options(url, namespace=namespace, lease=lease, time=time, cluster=cluster,
                               policy_cache=policy_cache)
        # The URL connected to keeps its password; the one shown (``url``) has it masked.
        self._url, self.namespace, self.lease = options.url, options.namespace, options.lease
        self.cluster, self.fallback_workers = options.cluster, options.fallback_workers
        self.time: TimeSource = options.time
        self._settings = settings
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._factory = PolicyFactory(settings)
        self._policies = SharedPolicies(self._factory, options.policy_cache)
        self._prefix = _keys.prefix(self.namespace)
        longest = max([settings.robotstxt_max_delay, settings.scope_defaults.backoff.max_delay,
                       settings.scope_defaults.window,
                       *(cfg.backoff.max_delay for cfg in settings.scopes.values()),
                       *(cfg.window for cfg in settings.scopes.values())])
        # Idle scopes expire, but not before any delay they hold could have run out.
        self.idle = int(max(3600.0, 10.0 * longest))
        self._lease_arg, self._idle_arg = repr(self.lease), str(self.idle)  # as the scripts take them
        self._conn = RedisConnection(self._url, _SCRIPTS, cluster=self.cluster, at_once=("release",))
        self._down = self._conn.down
        self._offset = 0.0  # server time minus this worker's clock
        self._offset_high = OffsetBound()  # an offset surely not below the truth (a Crawl-delay write's note)
        self._synced_at = -math.inf
        self._renewer = LeaseRenewer(self._conn, clock.sleep, lambda: self._server_now() + self.lease,
                                     self.lease / 3.0, lambda scope: self._keys(scope)[1])
        self._held = self._renewer.held  # lease id -> scope names, for renewal
        parts = RedisParts(url=self._url, keys_of=self._keys, policies=lambda: self._policies, run=self._run,
                           submit=self._conn.submit, down=self._down, fetch_blob=self._fetch_blob,
                           connect=self._connect, now=clock.now, server_now=self._server_now,
                           now_arg=self._now_arg, now_text=self._now_text, sleep=clock.sleep,
                           stop_renewing=self._renewer.drop, idle=self.idle, idle_arg=self._idle_arg,
                           lease_arg=self._lease_arg)
        self._writer = PolicyWriter(self._policies, parts)
        self._ids = itertools.count()
        self._worker = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        # While the server is unreachable, admissions go to a memory store instead (fallback=memory), if set.
        self._outage = Outage(self._url, clock, _fallback.open_fallback(
            settings, self.fallback_workers, clock, self._rng) if options.fallback else None,
            self.fallback_workers)
        self._fallback = self._outage.fallback
        self._slots: _cluster.SlotAdmission | None = None
        if self.cluster:
            self._slots = _cluster.SlotAdmission(self._run, self._now_arg, self._clock.now, self._held,
                                                 self._renewer.start)
        self._releases = ReleaseSender(parts, self._conn, self._writer, self._outage, self._slots)
        self._unreleased = self._releases.unreleased
        # Slots of busy plain scopes kept by this worker between requests (``_allot.py``; ``allot=0``: none).
        self._allotting = options.allot and not self.cluster
        self._allot = Allotments(parts)
        self._holds: set[asyncio.Future[Any]] = set()  # refusals' holds on their way (_hold_first)
        # Crawl-delay scopes: the local time before which this worker's admitted request may not be
        # written (the latest write any worker noted, plus the delay; write_after).
        self._write_after: dict[str, float] = {}
        self._stamps: dict[str, asyncio.Future[Any]] = {}  # their writes' notes on their way (wrote)
        # Scopes that have held (a refusal's Retry-After reached the store): every write of them looks,
        # and is noted (held_for, lua/look.lua). Few: only scopes that refused with a hold.
        self._noting: set[str] = set()
        # Per scope, the quickest accepted answer this worker measured (seconds): a sibling of a guarded
        # scope still out this long plus TOGETHER after its write is overdue (held_for, lua/look.lua).
        self._answer_floor: dict[str, float] = {}

    @property
    def url(self) -> str:
        """The server's URL as crawlpace reads it, with any password masked (``redis://:***@host``).

        The store connects with the real one, which it keeps to itself.
        """
        return redact(self._url)

    def __repr__(self) -> str:
        return (f"<RedisStore {self.url} namespace={self.namespace!r} leases={len(self._held)} "
                f"policies={len(self._policies)}/{self._policies.limit}>")

    @property
    def connection(self) -> RedisConnection:
        """The connection this store talks through; other components may share it (the guard's brake)."""
        return self._conn

    # -- keys and time ----------------------------------------------------------

    def _keys(self, scope: str) -> tuple[str, str, str, str]:
        # One hash tag per scope: every key of a scope lives in one cluster slot.
        return _keys.scope_keys(self._prefix, scope)

    def _server_now(self) -> float:
        return self._clock.now() + self._offset

    def _write_time(self) -> float:
        """Now on the server's clock, never behind it: with ``time=server`` the least offset the
        replies allow (:class:`OffsetBound`), else :meth:`_server_now` (the worker's own clock or
        a synced one, whose error the replies' lag does not enter)."""
        now = self._clock.now()
        if self.time == "server":
            high = self._offset_high.high(now)
            if math.isfinite(high):
                return now + high
        return now + self._offset

    def _local(self, server_time: float) -> float:
        return server_time - self._offset

    def _now_text(self) -> str:
        return "" if self.time == "server" else repr(self._server_now())

    async def _now_arg(self) -> str:
        if self.time == "server":
            return ""
        if self.time == "synced" and self._clock.now() - self._synced_at >= _SYNC_EVERY:
            await self._sync()
        return repr(self._server_now())

    async def _sync(self) -> None:
        client = await self._conn.client()
        before = self._clock.now()
        seconds, micros = await client.time()
        after = self._clock.now()
        self._offset = seconds + micros / 1e6 - (before + after) / 2.0
        self._synced_at = after

    def _heard(self, server_now: float, sent: float) -> None:
        """Follow the server's clock from a reply's ``now`` (server mode)."""
        if self.time == "server":
            read = self._clock.now()
            self._offset = server_now - (sent + read) / 2.0
            self._offset_high.heard(server_now, sent, read)

    # -- connection ---------------------------------------------------------------

    async def _connect(self) -> None:
        if self._conn.connected:
            return
        await self._conn.client()
        if self.time != "local" and self._synced_at == -math.inf:
            # Snapshots and Crawl-Delays may come before the first script reply sets the offset.
            await self._sync()

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        await self._connect()
        try:
            return await self._conn.call(name, keys, args)
        except ResponseError as exc:
            return await self._refused(exc, name, keys, args)

    async def _refused(self, exc: Exception, name: str, keys: list[str], args: list[Any]) -> Any:
        """A script call failed with ``exc``: once more with the time passed in, if TIME was refused."""
        if (self.time == "server" and name != "rollback" and "TIME" in str(exc).upper()
                and "ARGV" not in str(exc)):
            logger.warning("the Redis server refuses TIME inside scripts (%s); reading its clock "
                           "once a second instead", exc)
            self.time = "synced"
            args = [await self._now_arg(), *args[1:]]
            return await self._conn.call(name, keys, args)
        raise exc

    # -- the Store interface ------------------------------------------------------------

    async def acquire(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """Admit ``demands`` in every scope at once, or return why not."""
        if self._outage.skip():  # still down, most likely: the fallback answers without a try
            assert self._fallback is not None
            return self._fallback.acquire_nowait(demands)
        if self._allot.scopes and len(demands) == 1:  # a free slot of this worker's allotment, if any
            lease = self._allot.admit(demands[0])
            if lease is None and self._allot.due(demands[0][0]):
                await self._allot.refresh(demands[0][0])
                lease = self._allot.admit(demands[0])
            if lease is not None:
                return lease
        policies = self._policies
        lease_id = ""
        try:
            # (Each step is skipped when there is nothing to do: an await costs even when it does not wait.)
            if not self._conn.connected:
                await self._connect()
            if self._unreleased:
                await self._unreleased.flush()  # a slot a failed release still holds may be the one needed
            if self._writer.due(demands):
                await self._writer.refresh_due(demands)
            now_arg = "" if self.time == "server" else await self._now_arg()
            lease_id = f"{self._worker}-{next(self._ids)}"
            known = quota_known(policies, demands)
            keys, args = acquire_call(policies, self._keys, self._rng, demands, now_arg, lease_id,
                                      self._lease_arg, self._idle_arg, full=self.cluster)
            if self._slots is not None and self._slots.spans(keys, len(ACQUIRE.keys)):
                reply, sent = await self._slots.acquire([name for name, _ in demands], keys, args)
            elif self.cluster:
                sent = self._clock.now()
                reply = await self._run("acquire", keys, args)
            else:  # connected above: straight into the next batch (each await layer costs)
                sent = self._clock.now()
                try:
                    reply = await self._conn.submit("acquire", keys, args)
                except ResponseError as exc:
                    reply = await self._refused(exc, "acquire", keys, args)
        except self._down as exc:
            if lease_id:
                self._releases.abandon(lease_id, [key for name, _ in demands for key in self._keys(name)],
                                       len(demands), self._idle_arg, self._clock.now() + self.lease)
            return self._outage.unreachable(exc, demands)
        self._outage.reachable()
        status, server_now = int(reply[0]), float(reply[1])
        self._heard(server_now, sent)
        if status == 2:
            name = demands[int(reply[2]) - 1][0]
            policy = policies.policy(name)
            raise ScopeGivenUp(name, policy.breaker.reason if policy.breaker else "")
        if status == 0:
            waits = blocked(demands, reply, server_now, self._local)
            return sooner(waits, policies, self._clock.now(), server_now)
        got = granted(reply, len(demands))
        # The lease is granted from here on: renew it before anything else can fail.
        self._renewer.hold(lease_id, (demands[0][0],) if len(demands) == 1 else tuple(n for n, _ in demands))
        await learn_versions(policies, demands, got, known_versions(args, len(demands)), self._fetch_blob,
                             self._down)
        demands = uncharged(policies, demands, known)
        if any(door_open(policies, name) for name, _use in demands):
            got = await pass_doors(self._writer, demands, got, self._down)
        for name, _use in demands:
            policies.sent(name, server_now)  # out until released (rampup's stragglers)
        if got.written:
            self._note_written(demands, got.written, server_now)
        return RedisLease(demands, tuple([self._local(t) for t in got.slot_ready]), self._local(server_now),
                          got.generations, lease_id=lease_id, server_granted_at=server_now,
                          server_slot_ready=got.slot_ready, sends=got.sends, inflight=got.inflight,
                          spacings=got.spacings)

    async def release(self, lease: Lease, outcome: Outcome) -> tuple[str, ...]:
        """Give the slots of ``lease`` back and apply ``outcome`` to the shared policies."""
        if not isinstance(lease, RedisLease):
            if self._fallback is not None:  # granted by the fallback while the server was away
                return self._fallback.release_nowait(lease, outcome)
            raise TypeError("a RedisStore can only release its own leases")
        latency = outcome.latency if outcome.ok else None
        floors = self._answer_floor
        for name, _use in lease.demands:
            self._policies.answered(name, lease.server_granted_at)
            if latency is not None and latency < floors.get(name, math.inf):
                floors[name] = latency  # (held_for: when a sibling's answer is overdue)
        if len(lease.demands) == 1 and self._allotting and self._allot.keep(lease, outcome):
            return ()  # the slot stays in this worker's allotment; the counts go with its next refresh
        self._renewer.drop(lease.lease_id)
        if self._stamps:
            await self._stamped(lease)
        refused = _refusal(lease, outcome)
        if refused:
            # The counts' read goes at the loop's next turn; the hold is written before this task
            # yields, ahead of every callback the loop has queued (_hold_first).
            counts = asyncio.ensure_future(self._at_answer(lease, inflight=bool(lease.inflight)))
            try:
                await self._hold_first(lease, outcome)
            except BaseException:  # cancelled: the counts are not wanted either
                counts.cancel()
                raise
            lease = await counts
        elif _ends_episode(lease, outcome, self._policies):
            lease = await self._at_answer(lease, inflight=False)
        keys, args, pending, given_up = release_call(lease, outcome, self._server_now(), self._idle_arg,
                                                     self._policies, self._factory, self._writer, self._keys,
                                                     full=self.cluster)
        item = PendingRelease(lease.lease_id, self._clock.now() + self.lease, (lease, keys, args, pending))
        if self.time != "server" or not self._releases.send_nowait(item):
            await self._releases.send(item)
        return tuple(given_up)

    async def flush(self) -> None:
        """Wait until every release this worker made has reached the server and been settled.

        A release returns before the server has answered it: it rides with the
        worker's next call (``_redis_release.py``). What this worker does next
        sees it anyway; another worker may need this to see it at once (tests).
        """
        self._allot.drop_all()  # what this worker holds idle goes back too
        if self._holds:
            await asyncio.gather(*self._holds, return_exceptions=True)
        await self._releases.flush()

    async def set_crawl_delay(self, scope: str, delay: float | None) -> None:
        """Apply a robots.txt Crawl-Delay to ``scope`` for every worker."""
        settings = self._settings
        if not settings.robotstxt_obey:
            return
        await self._connect()
        for _ in range(WRITE_TRIES):
            policy = self._policies.policy(scope)
            version = self._policies.entry(scope).version
            now = self._server_now()
            policy.set_crawl_delay(delay, max_delay=settings.robotstxt_max_delay,
                                   explicit=settings.is_explicit(scope), now=now)
            if await self._writer.write(scope, version, policy, now):
                return
        logger.warning("scope %s: Crawl-Delay not stored: other workers kept writing first", scope)

    async def snapshot(self, scope: str) -> ScopeSnapshot | None:
        """Describe ``scope`` as every worker sees it.

        Raises:
            StoreUnreachable: the server cannot be reached (the driver's error chained).
        """
        try:
            return await self._snapshot(scope)
        except self._down as exc:
            raise self._unreachable(exc) from exc

    async def _snapshot(self, scope: str) -> ScopeSnapshot | None:
        await self._connect()
        await self.flush()  # what this worker sent is part of the picture
        return await fetch_snapshot(await self._conn.client(), scope, self._keys(scope), self._factory,
                                    self._server_now())

    async def scopes(self) -> list[str]:
        """List the scopes with state in this namespace.

        Raises:
            StoreUnreachable: the server cannot be reached (the driver's error chained).
        """
        try:
            await self._connect()
            return await _keys.list_scopes(await self._conn.client(), self._prefix)
        except self._down as exc:
            raise self._unreachable(exc) from exc

    def _unreachable(self, exc: Exception) -> StoreUnreachable:
        """The documented error for a read the server did not answer (the URL without its password)."""
        reason = redact(" ".join(str(exc).split()) or type(exc).__name__)
        return StoreUnreachable(f"store {self.url}: cannot be reached: {reason}; reads fail while "
                                "it is away (admissions wait for it)")

    async def purge(self) -> int:
        """Delete every key of this store's namespace (every worker's state); return how many.

        Meant for a job that is over: workers still running lose their leases and what they learned.
        """
        try:
            await self._connect()
            await self.flush()
            self._policies = self._writer.policies = SharedPolicies(self._factory, self._policies.limit)
            return await _keys.purge(await self._conn.client(), self.namespace)
        except self._down as exc:
            raise self._unreachable(exc) from exc

    async def aclose(self) -> None:
        """Send what is queued, stop renewing leases and close the connections."""
        with contextlib.suppress(Exception):
            await self.flush()
        unshared = self._writer.unshared
        if unshared:
            logger.info("%d outcomes were not shared with other workers, who kept writing the same scopes "
                        "first; their slots were freed all the same (see docs/observability.md)", unshared)
        await self._allot.aclose()
        await self._releases.aclose()
        await self._renewer.aclose()
        await self._conn.aclose()

    async def held_for(self, scopes: tuple[str, ...], lease_id: str = "", siblings: bool = True) -> float:
        """Seconds until this write's turn after the hold the server keeps on ``scopes`` (0.0: none held).

        The last look before a request is written (``crawl/_fetch.py``): a lease granted
        before another worker's refusal reached the server does not see its hold. Each
        write a hold catches takes a turn after it (``lua/look.lua``), as an admission
        would: the first at the hold's end, the next one the scope's delay later, and the
        server's admissions after them; all of them at the hold's end would reach the site
        together, a burst right after it asked for quiet. A scope paced by a Crawl-delay is
        not asked about: its one slot leaves no other request in flight to hold, and the
        round trip would lag this write behind its grant more than the next one's (the
        fleet's spacing at the site is the spacing of its grants).

        A guarded scope (one that has held, or is still in its start: :meth:`holding`) keeps a
        note of each write (``lease_id``, the request's lease), and a write waits while a
        sibling is overdue: still out though written more than :data:`TOGETHER` plus the scope's
        answer time (the quickest accepted answer this worker measured) before it. Its answer
        may be a refusal whose hold has not landed yet (the refused worker reads it tens of
        milliseconds late on a loaded machine). The reply then says :data:`LOOK_AGAIN`, and the
        last look asks again after it, a few times at most (``crawl/_fetch.py``, ``RELOOKS``).
        A sibling not yet overdue is not waited for: a site answering in 300 ms keeps its
        requests in flight side by side. With ``siblings`` False the look waits out holds only
        (``lua/look.lua`` is asked to look again after 0 s, which is no wait) and notes the write:
        the last look's final one, once it has waited for its siblings as often as it may, so that
        a write never goes on a wait for a sibling alone (that sibling's refusal may have landed
        meanwhile: traced, bench/results/retry4.md).

        The wait is counted on the server's clock (``time=server``, the default): this
        worker's estimate of it (from replies read late on a loaded machine) may run ahead
        of it by more than a site's tolerance, and the write would then land inside the hold.
        """
        if self._outage.skip():
            return 0.0
        scopes = tuple(name for name in scopes if self._policies.policy(name).crawl_delay is None)
        if not scopes:
            return 0.0
        # One call for every scope (their keys share a slot only off a cluster; there, one each).
        groups = [scopes] if not self.cluster else [(name,) for name in scopes]
        try:
            now = await self._now_arg()
            head = [now, lease_id, repr(TOGETHER), self._idle_arg, repr(LOOK_AGAIN if siblings else 0.0)]
            sent = self._clock.now()
            replies = [await self._conn.call_eager(
                "look", [key for name in group for key in self._look_keys(name)],
                head + [arg for name in group for arg in self._guard_args(name)]) for group in groups]
        except self._down:
            return 0.0
        for group, reply in zip(groups, replies, strict=True):
            flags = reply[3].decode() if isinstance(reply[3], bytes) else str(reply[3])
            self._noting.update(name for name, flag in zip(group, flags, strict=False) if flag == "1")
        wait = max(max(float(reply[1]) for reply in replies), 0.0)
        if wait == 0.0 and siblings:
            # The write leaves only now, as late after the look as its reply was read: a sibling
            # the look found not yet overdue may be by the time this write reaches the site (a
            # loaded worker reads replies 40-100 ms late). Look again.
            # (The round trip bounds the lateness; the next look notes the write anew.)
            late = self._clock.now() - sent
            margin = min((float(reply[2]) for reply in replies if reply[2] not in ("", b"")),
                         default=math.inf)
            if late > margin:
                wait = LOOK_AGAIN
        return wait

    def _look_keys(self, scope: str) -> tuple[str, str, str]:
        """The keys ``lua/look.lua`` reads of ``scope``: its hash, lease set and writes set."""
        keys = self._keys(scope)
        return keys[0], keys[1], _keys.writes_key(self._prefix, scope)

    def holding(self, scopes: tuple[str, ...]) -> bool:
        """Whether a write of ``scopes`` must look at the store even when it follows its admission
        at once: one of them is guarded (:meth:`held_for` notes its writes and holds a write while
        a sibling is overdue). A scope is guarded once it has held (a refusal's hold reached the
        store, as this worker heard it from its own refusal or a look's reply; a spent header
        budget's hold does not count: no refusal) and while its rampup is in its start, where the
        first hold comes: the climb probes above anything the site has shown, and a sibling's
        refusal is then the likeliest. A set look-up and this worker's copy of the policy."""
        noting = self._noting
        return any(name in noting or self._starting(name) for name in scopes)

    def _starting(self, scope: str) -> bool:
        """Whether the scope is guarded for its first hold: this worker's copy of its policy is a
        rampup still in its start, and the site answers within :data:`TOGETHER` (the quickest
        accepted answer this worker measured; before any, it may: a first hold comes among a
        site's first pages, traced). On such a site a sibling is overdue soon after its write,
        and a refusal read late is the only way into a hold. A slower site is left as it was
        until it holds: a look's round trip on each write holds a slot that much longer, and at
        a load of 35-85 that cost 20-40 % of the pace of sites answering in 0.1-0.4 s (retry3.md)."""
        floor = self._answer_floor.get(scope)
        if floor is not None and floor >= TOGETHER:
            return False
        rampup = self._policies.policy(scope).rampup
        return rampup is not None and rampup.phase == "start"

    def _guard_args(self, scope: str) -> tuple[str, str]:
        """``lua/look.lua``'s two values for ``scope``: "1" to guard it though it has not held
        (:meth:`holding`), and its answer time, the quickest accepted answer this worker measured
        ("" before any: a sibling is then overdue :data:`TOGETHER` after its write)."""
        floor = self._answer_floor.get(scope)
        return "1" if self._starting(scope) else "", "" if floor is None else repr(floor)

    def _note_written(self, demands: tuple[Demand, ...], written: tuple[float | None, ...],
                      server_now: float) -> None:
        """Keep, for the admitted request's write, each Crawl-delay scope's latest write plus its delay.

        Counted from the reply's own ``now`` and read now, not through this worker's estimate of the
        server's clock (on a loaded machine it errs by tens of milliseconds, the sites' tolerance):
        the reply is read after the server wrote it, so the wait is never short.
        """
        read = self._clock.now()
        for (name, _use), at in zip(demands, written, strict=True):
            if at is not None:
                delay = self._policies.policy(name).crawl_delay
                if delay is not None:
                    self._write_after[name] = read + (at + delay - server_now)

    def write_after(self, scopes: tuple[str, ...]) -> float:
        """The time (this worker's clock) before which the request just admitted for ``scopes`` may
        not be written: a Crawl-delay after the latest write of them any worker noted (:meth:`wrote`,
        read with the admission). ``-inf`` for none.

        The store admits a Crawl-delay scope's requests a delay apart, one at a time; a write lags
        its admission, more for one worker than for the next, and the site saw two requests closer
        than the delay. Holding the next admission a delay after the previous write would add every
        write's lag to the pace; the next write waits instead, only as long as the previous one
        lagged more than it. No round trip: the admission's reply brought the time.
        """
        after = -math.inf
        if self._write_after:
            for name in scopes:
                after = max(after, self._write_after.pop(name, -math.inf))
        return after

    async def _stamped(self, lease: RedisLease) -> None:
        """Wait until the note of the lease's write (:meth:`wrote`) reached the server: its release
        frees the scope's one slot, and the next admission must find the note (a failure is
        logged by :meth:`_keep`; the release goes all the same)."""
        for name, _use in lease.demands:
            stamp = self._stamps.pop(name, None)
            if stamp is not None and not stamp.done():
                await asyncio.wait([stamp])

    def wrote(self, scopes: tuple[str, ...]) -> None:
        """Note, for every worker, that a request of ``scopes`` is being written now.

        Only scopes paced by a Crawl-delay are noted (``lua/stamp.lua``): the next admission's
        reply carries the time, and its write keeps the delay after it (:meth:`write_after`).
        Not awaited: the note leaves at the loop's next turn with the write's time, and the
        request's release waits for it, so the next admission finds it.
        """
        if self._outage.skip() or not self._conn.connected:
            return
        paced = [name for name in scopes if self._policies.policy(name).crawl_delay is not None]
        if not paced:
            return
        groups = [paced] if not self.cluster else [[name] for name in paced]
        # The write's own time on the server's clock, as this worker estimates it: the server's time
        # when the note arrives would add the note's queueing (100 ms and more on a loaded worker)
        # to every next write that waits for it. Never behind the server's clock: the midpoint
        # estimate ran up to 69 ms behind on a loaded fleet (replies read late), and the next write
        # kept the delay after a time earlier than this one's (_offset.py).
        now = repr(self._write_time())
        for group in groups:
            keys = [self._keys(name)[0] for name in group]
            reply = asyncio.ensure_future(self._conn.call_now("stamp", keys, [now]))
            for name in group:
                self._stamps[name] = reply
            self._keep(reply, "a Crawl-delay write's note")

    async def _hold_first(self, lease: RedisLease, outcome: Outcome) -> None:
        """Take a refusal's hold (``Retry-After``) to the server before its release reads the counts.

        The release carries the hold as well, but it comes after a round trip or more (this
        worker's earlier releases, then the counts); meanwhile another worker was admitted and
        wrote into the hold. The call goes on a connection of its own, ahead of any batch call in
        flight, and is awaited here, in the releasing task: its command is written before the task
        first yields. Sent as a task of its own, it waited for every callback the loop had queued
        before it: a median 1 ms, but 66-78 ms for one hold in ten and up to 3.6 s in a fleet of 8
        at a load of 15-30, while the other workers' writes went into the hold (traced,
        bench/results/fleetholds1.md). Its failure is only logged: the release carries the hold.
        The hold's length is the policy's (``ScopePolicy.hold_for``), its end the server's time
        (``lua/hold.lua``; both scripts keep the later end).
        """
        if self.cluster or not self._conn.connected:
            return  # (a cluster's scopes may span slots; the release carries the hold)
        feedback = outcome.feedback or (outcome.plain_feedback(),) * len(lease.demands)
        keys: list[str] = []
        args: list[Any] = [""]
        for (name, _use), signal in zip(lease.demands, feedback, strict=True):
            if signal is not None and signal.hold is not None and signal.hold > 0.0:
                keys.append(self._keys(name)[0])
                args.append(repr(self._policies.policy(name).hold_for(signal.hold)))
        if not keys:
            return
        # Its writes are noted from now on (lua/look.lua): every write of it looks.
        self._noting.update(name for (name, _use), signal in zip(lease.demands, feedback, strict=True)
                            if signal is not None and signal.hold is not None and signal.hold > 0.0)
        try:
            if self.time != "server":
                args[0] = await self._now_arg()
        except self._down:
            return
        # On a connection of its own, at once: queued, it waited for the batch in flight to be
        # answered and read (a round trip and a turn of a loaded loop), while other workers wrote.
        try:
            await self._conn.call_eager("hold", keys, args)
        except Exception as exc:  # whatever it was: the release after it carries the hold
            logger.debug("a refusal's hold did not reach the server ahead of its release: %r", exc)

    def _keep(self, reply: asyncio.Future[Any], what: str) -> None:
        """Keep a call sent ahead until it is answered (a task nothing refers to may be collected
        before it ran), and log its failure."""
        self._holds.add(reply)
        reply.add_done_callback(self._holds.discard)
        reply.add_done_callback(_sent_ahead(what))

    async def _at_answer(self, lease: RedisLease, *, inflight: bool) -> RedisLease:
        """``lease`` with each scope's accepted answers over every worker as its answer came (this
        one not included), and with ``inflight``, its requests in flight then, itself included.

        The backoff's first cut reads the requests in flight (Little's law: the round trip over
        the requests in flight is the rate that was sent), and the memory store counts them at
        the answer: a burst of eight answered in 40 ms was sent at 200 a second, whatever the
        first of them saw at its admission. Rampup's overshoot fit reads the accepted answers
        (``Rampup.sync_accepted``). The lease set's sends out then give the requests a refusal
        met (``Rampup.met_at_send``), which the shared record of sends out does not know.
        Read for a refusal, or an answer that may end an overshoot episode, only; what the lease
        holds stands when the server does not answer.
        """
        try:
            await self._releases.sent()  # this worker's answers before this one, released first
            now = self._server_now()
            client = await self._conn.client()
            # One round trip for every read (it was two a scope, each a wait on a loaded fleet).
            async with client.pipeline(transaction=False) as pipe:
                for name, _use in lease.demands:
                    keys = self._keys(name)
                    # The leases held (an expiry past now), scored by their expiry: a lease's send
                    # is that less the lease's seconds (renewed, its last renewal's time).
                    pipe.zrangebyscore(keys[1], f"({now!r}", "+inf", withscores=True)
                    pipe.hget(keys[0], "acc")
                replies = await pipe.execute()
        except self._down:
            return lease
        accepted = tuple(int(reply or 0) for reply in replies[1::2])
        held = [[score - self.lease for _member, score in reply] for reply in replies[0::2]]
        # The sends out over every worker, as the release script settles each (its lease taken
        # out of the set): the shared record of sends out hears of an end only through a
        # write-back of the stored policy, which a plain answer does not make.
        lease = replace(lease, out=tuple(tuple(sorted(sends)) for sends in held))
        if inflight:
            lease = replace(lease, inflight=tuple(max(len(sends), 1) for sends in held))
        return replace(lease, accepted=accepted)

    async def _fetch_blob(self, name: str) -> bytes | None:
        client = await self._conn.client()
        blob: bytes | None = await client.get(self._keys(name)[3])
        return blob
