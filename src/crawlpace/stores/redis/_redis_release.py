"""The shared store's releases: sent without waiting, sent again after an outage, their write-backs settled.

A release gives slots back and carries what the outcome taught the policy.
Nothing the releasing task does next depends on the server's answer (which
scopes were given up is known locally), so a release is queued on the
connection and not awaited: it leaves at the loop's next turn with the
calls made in that turn, typically the same task's next acquire, and does not
wait for the reply of a batch already out (``connection.py`` pipelines the
batches). A lone task thus pays one round trip per admission, not two, and
every guarantee stays: calls of one connection reach the server in the order
they were made (the release before the acquire that follows it), a release
that finds the server unreachable is kept and sent again (``_pending.py``),
and a worker that dies before sending it frees the slot when the lease
expires, as a worker dying mid-request always did.

The reply is handled when it comes: write-backs that landed are recorded at
once; those another worker beat are applied again in a background task, as
are releases that met a script error (sent again the awaited way).
:meth:`ReleaseSender.flush` waits for all of it; :meth:`ReleaseSender.sent` only for
the releases queued so far to reach the server (what a refusal's counts need).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ..._redact import redact
from ...policy._shared_rules import LATENCY_WEIGHT
from ...policy.signals import ScopeFeedback
from .._policies import PolicyFactory, is_fresh
from ..base import Outcome
from . import _cluster
from ._allot import plain_answer
from ._outage import Outage
from ._pending import PendingRelease, ReleaseQueue
from ._redis_lease import RedisLease
from ._redis_parts import RedisParts
from ._script_args import RELEASE
from ._shared_policy import SharedPolicies
from ._writeback import Lesson, Pending, PolicyWriter
from .connection import RedisConnection

__all__ = ["ReleaseSender", "release_call"]

logger = logging.getLogger(__name__)


# A scope's release values when nothing is written back, and when no quota is charged.
_NO_WRITE, _NO_CHARGE = [""] * 11, [""] * 3


def release_call(lease: RedisLease, outcome: Outcome, now: float, idle: str, policies: SharedPolicies,
                 factory: PolicyFactory, writer: PolicyWriter,
                 keys_of: Callable[[str], tuple[str, str, str, str]], *, full: bool
                 ) -> tuple[list[str], list[Any], Pending, list[str]]:
    """Apply ``outcome`` to this worker's policies and build the release script call that carries it.

    The common answer (one that only the scope's breaker window hears of)
    writes nothing back; an outcome that changed what the scope admits, or a
    first lesson a new policy would not know, carries a version-guarded
    write-back (``lua/release.lua`` documents the 19 values per scope).
    Unless ``full`` (a cluster, which splits the arguments by scope), the
    empty values at the end are left out: the usual release sends 5 values
    for its scope instead of 19, and each costs the server about a field read.

    Returns:
        The keys, the arguments, the write-backs awaiting their reply (scope
        index -> feedback, generation and the time it was applied at), and the scopes given up.
    """
    feedback: tuple[ScopeFeedback | None, ...] = outcome.feedback or (
        outcome.plain_feedback(),) * len(lease.demands)
    generations = lease.generations or (0,) * len(lease.demands)
    given_up: list[str] = []
    pending: Pending = {}
    args: list[Any] = ["", lease.lease_id, idle, str(len(lease.demands))]
    keys: list[str] = []
    handover: float | None = None  # a mean gap for the store to take (one scope only)
    for index, ((name, use), signal, generation) in enumerate(
            zip(lease.demands, feedback, generations, strict=True)):
        keys += keys_of(name)
        # Response, error, latency: counted only for a release with an outcome.
        counts = ["0", "0", ""]
        if signal is not None:
            # "2": an answer the scope accepted, which the server also counts as such ("acc").
            answered = outcome.error is None and outcome.status is not None
            counts = [("2" if signal.accepted else "1") if answered else "0",
                      "0" if outcome.error is None else "1",
                      repr(outcome.latency) if outcome.latency is not None and outcome.latency >= 0.0
                      else ""]
        write = _NO_WRITE
        policy = policies.policy(name)
        quota = policy.quota
        charge = _NO_CHARGE
        if quota is not None and signal is not None and signal.consumed_quota is not None:
            charge = [repr(quota.capacity), repr(quota.rate), repr(signal.consumed_quota - use)]
        if signal is not None and plain_answer(policies, name, policy, signal):
            # The common answer: only the breaker's window (this worker's own) hears of it.
            if policy.breaker is not None and signal.status is not None:
                policy.breaker.on_outcome(now, failed=False, sent_at=lease.server_granted_at)
        elif signal is not None or policies.gated(name):
            stored = policies.stored(name)
            before = policy.summary()
            own = policy.rampup is not None and policy.rampup.own_mean()
            leases = policies.entry(name).leases  # (before this outcome's: a redo reads it with them)
            policy, version = writer.apply(name, now, signal, generation, lease, index, use)
            if policy.given_up:
                given_up.append(name)
            # Write only what matters: a change, or a first lesson a new policy would not know.
            if policy.summary() != before if stored else not is_fresh(policy, factory):
                rampup = policy.rampup
                # The quick start is over: the store's mean gap (every new gap weighed by a
                # quarter all through the start) lags the start's quick gaps, which this copy
                # weighed more, as one process does. The store takes this mean, or the fleet's
                # first cuts measured 2/s where one process measured 3.5/s.
                gap = (rampup.mean_gap if own and rampup is not None and not rampup.own_mean() else None)
                # While this worker redoes the scope's lost write-backs, an answer joins that redo's
                # next write (PolicyWriter.joins): its own, guarded by the version this copy was
                # read at, would race the redo's and mostly lose (bench/results/fleetwb1.md).
                lesson = Lesson(signal, generation, now, lease, index, use, leases)
                if gap is not None or not writer.joins(name, lesson):
                    _blob, values = policies.writeback(policy, now)
                    write = [str(version), *values]
                    pending[index] = (signal, generation, now, leases)
                    handover = gap if gap is not None else handover
        # A refusal that holds the scope ("3") keeps its hold even if another worker writes first.
        free = "3" if pending.get(index) and signal is not None and (
            signal.backoff or (signal.hold is not None and signal.hold > 0.0)) else "1"
        args += [repr(lease.server_slot_ready[index]), free, *counts]
        if full or write is not _NO_WRITE or charge is not _NO_CHARGE or index < len(lease.demands) - 1:
            args += [*write, *charge]
    if not full:
        while args[-1] == "":  # a latency, or a quota's values, that are not there
            args.pop()
        if (len(lease.demands) == 1 and not pending and lease.server_slot_ready[0] <= lease.server_granted_at
                and policy.limits.rest <= 0.0):
            # No slot to rest (neither a per-slot delay nor a rest after the answer) and no policy to
            # write: the script touches only the hash and the lease set.
            del keys[2:]
    if handover is not None and len(lease.demands) == 1:
        # The script's tail value after the scope's whole 19 (lua/release.lua: "mean_gap").
        args += [""] * (_cluster.RELEASE_HEAD + _cluster.RELEASE_EACH - len(args))
        args.append(repr(handover))
    return keys, args, pending, given_up


class ReleaseSender:
    """Sends releases for one shared store.

    Args:
        url: the store's URL (for log lines; the password is hidden).
        connection: the store's connection.
        writer: records and redoes the write-backs.
        outage: told when the server answered.
        slots: the cluster's two-phase admission (releases then go one by one, awaited), or ``None``.
        run: calls a script the store's awaited way (``name, keys, args``).
        now_arg: the scripts' ``now`` argument.
        connect: opens the connection if needed.
        now: this worker's clock.
        sleep: this worker's sleep.
    """

    def __init__(self, parts: RedisParts, connection: RedisConnection, writer: PolicyWriter, outage: Outage,
                 slots: _cluster.SlotAdmission | None) -> None:
        self._url = parts.url
        self._conn = connection
        self._writer = writer
        self._outage = outage
        self._slots = slots
        self._run = parts.run
        self._now_arg = parts.now_arg
        self._now = parts.now
        self._connect = parts.connect
        self._down = connection.down
        self._settling: set[asyncio.Task[None]] = set()
        #: The replies of the releases queued on the connection and not answered yet.
        self._replies: set[asyncio.Future[Any]] = set()
        #: Releases that could not reach the server, sent again when it answers.
        self.unreleased = ReleaseQueue(self._resend, self._down, parts.now, parts.sleep)

    def send_nowait(self, item: PendingRelease) -> bool:
        """Queue a release at once when nothing stands before it; False if :meth:`send` must do it.

        The usual case: connected, no older release waiting for the server, not
        a cluster, and the server's own time (the release's first argument stays "").
        """
        if self.unreleased or self._slots is not None or not self._conn.connected:
            return False
        _lease, keys, args, _pending = item.payload
        try:
            reply = self._conn.submit("release", keys, args)
        except self._down as exc:
            self._failed(item, exc)
            return True
        self._track(item, reply)
        return True

    async def send(self, item: PendingRelease) -> None:
        """Send a release: queued to leave with the calls of the loop's next turn (awaited on a cluster)."""
        _lease, keys, args, _pending = item.payload
        try:
            if self.unreleased:
                await self.unreleased.flush()  # older releases first: they free slots too
            if self._slots is not None:
                await self._send_now(item)
                return
            args[0] = await self._now_arg()
            if not self._conn.connected:
                await self._connect()
            reply = self._conn.submit("release", keys, args)
            self._track(item, reply)
        except self._down as exc:
            self._failed(item, exc)

    def _track(self, item: PendingRelease, reply: asyncio.Future[Any]) -> None:
        self._replies.add(reply)
        reply.add_done_callback(self._replies.discard)
        reply.add_done_callback(functools.partial(self._answered, item))
        reply.add_done_callback(functools.partial(self._timed, self._now()))

    def _timed(self, queued: float, reply: asyncio.Future[Any]) -> None:
        """A release queued at ``queued`` was answered: its lease was held in the store until then.

        A queued release rides with this worker's next call; on a loaded fleet of 4 its reply came
        0.14-0.21 s (median) after the crawl released, and the store counted the lease in flight
        all that while (bench/results/fleetheld3.md)."""
        if reply.cancelled() or reply.exception() is not None:
            return
        writer = self._writer
        writer.release_after += LATENCY_WEIGHT * (max(0.0, self._now() - queued) - writer.release_after)

    def abandon(self, lease_id: str, keys: list[str], scopes: int, idle: str, expires: float) -> None:
        """Take back a lease an acquire may have been granted without this worker hearing of it.

        The server can run an acquire and go away before its reply is read;
        the lease would then hold its slots until it expires. A release with no
        outcome (sent the way releases after an outage are: it frees the lease
        only if it is there, and counts nothing) waits for the server with the
        other unsent releases.
        """
        args: list[Any] = ["", lease_id, idle, str(scopes)]
        for _ in range(scopes):  # no slot to rest, free if held, nothing counted, nothing written
            args += ["0", "2", "0", "0", *[""] * (_cluster.RELEASE_EACH - 4)]
        self.unreleased.add(PendingRelease(lease_id, expires, (None, keys, args, {})))

    async def sent(self) -> None:
        """Wait until the releases queued so far have reached the server and been answered.

        Not for their write-backs to settle, nor for releases queued meanwhile: the server's
        counts (accepted answers, leases in flight) are the release script's own, and the
        redone write-backs of a busy fleet, which :meth:`flush` waits for, follow one another
        for seconds. A refusal's release that waited for them held its lease (the start's
        only slot) and its ``Retry-After`` from the fleet for 4-6 s.
        """
        pending = [reply for reply in self._replies if not reply.done()]
        if pending:
            await asyncio.wait(pending)

    async def flush(self) -> None:
        """Wait until every release sent has been answered and settled."""
        while True:
            await self._conn.drain()
            if not self._settling:
                return
            await asyncio.gather(*self._settling, return_exceptions=True)

    async def aclose(self) -> None:
        """Stop the timer of releases waiting for the server (they expire with their leases)."""
        await self.unreleased.aclose()

    def _failed(self, item: PendingRelease, exc: BaseException) -> None:
        logger.warning("Redis store %s unreachable at release (%s): the release is sent again when "
                       "the server answers (until its lease would have expired)", redact(self._url), exc)
        self.unreleased.add(item)

    def _answered(self, item: PendingRelease, reply: asyncio.Future[Any]) -> None:
        """A queued release's reply: record its write-backs, or keep it to send again."""
        if reply.cancelled():
            return
        exc = reply.exception()
        if exc is None:
            self._outage.reachable()
            lease, _keys, args, pending = item.payload
            if pending:
                beaten = self._writer.record(lease, reply.result(), pending, args)
                if beaten:  # another worker wrote first: apply the outcome again
                    self._background(self._writer.redo(lease, beaten, pending))
        elif isinstance(exc, self._down):
            self._failed(item, exc)
        else:  # a script error (the server refusing TIME, say): the store's awaited path handles it
            self._background(self._send_now(item))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._settling.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._settling.discard(task)
        if task.cancelled() or (exc := task.exception()) is None:
            return
        if isinstance(exc, self._down):
            logger.warning("Redis store %s unreachable while settling a release (%s); its slots come back "
                           "when the lease expires", redact(self._url), exc)
        else:
            logger.error("a release could not be settled: %r", exc)

    async def _resend(self, item: PendingRelease) -> None:
        """Send a release that failed: its outcome counts only where its lease is still held."""
        _lease, _keys, args, _pending = item.payload
        for index in range(int(args[_cluster.RELEASE_HEAD - 1])):
            args[RELEASE.at(index, "free")] = "2"
        await self._send_now(item)

    async def _send_now(self, item: PendingRelease) -> None:
        """Send one release and wait for it (a cluster, or one sent again), then settle its write-backs."""
        lease, keys, args, pending = item.payload
        args[0] = await self._now_arg()
        if self._slots is not None:
            reply = await self._slots.release(keys, args)
        else:
            reply = await self._run("release", keys, args)
        self._outage.reachable()
        await self._writer.settle(lease, reply, pending, args)
