"""Local allotments: a few slots of a busy plain scope, held by one worker and admitted from locally.

Deciding one admission in Redis costs a script call, however cheap the rule
it applies. On a scope whose limits do not move and leave room (no delay, no
per-slot delay, no quota, no breaker pause, no learning policy, at least
:data:`MIN_CONCURRENCY` slots), an admission is only slot bookkeeping: a
worker may as well keep the slot a finished request gave back and reuse it
for its next request, as a quota server hands out a lease of capacity
instead of answering every request.

How it stays safe:

* **Never over a limit.** Every member of an allotment is a lease in the
  scope's lease set, admitted once by ``acquire.lua`` with every check, so it
  counts as held for every worker, and it is renewed (and expires with a dead
  worker) like any lease. A worker uses a member for one request at a time.
* **Never hogging.** A worker keeps at most ``concurrency //
  MIN_CONCURRENCY`` members (:data:`MOST` at most), only the slots its own
  requests just used; it gives all but one back after :data:`TRIM_AFTER`
  seconds without use, the last after :data:`IDLE_AFTER`, and all at each
  refresh that finds the scope more than half full.
* **No late learning.** An answer that is more than a count (a refusal, a
  Retry-After, a failure, anything the policy learns from) goes to Redis at
  once by the usual release and drops the allotment. After
  :data:`REFRESH_SENDS` local admissions of a scope (and at least
  :data:`REFRESH_EVERY` seconds), or :data:`REFRESH_MOST` seconds, the
  worker's next admission of the scope waits for ``allot.lua``, which adds
  the counts, renews the members and says whether the allotment may stay: not when another worker wrote the
  scope's policy since (a refusal it got, a Crawl-Delay), nor when the scope
  holds a delay, a hold or a breaker pause, or was given up.

Which side owns what: the Python side decides when a scope may have an
allotment (:func:`allottable`, :func:`plain_answer`, the same rule the
release uses to send nothing but counts) and how many members; ``allot.lua``
owns the shared checks (the version, the hash's limits, the half-full rule)
and the counts' arithmetic, as ``release.lua`` does for a single release.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from ...policy._shared_rules import LATENCY_WEIGHT  # the mean release.lua keeps
from ...policy.admission import Demand
from ...policy.scope import ScopePolicy
from ...policy.signals import ScopeFeedback
from ..base import Outcome
from ._redis_lease import RedisLease
from ._redis_parts import RedisParts
from ._shared_policy import SharedPolicies

__all__ = ["IDLE_AFTER", "MIN_CONCURRENCY", "MOST", "REFRESH_EVERY", "REFRESH_MOST", "REFRESH_SENDS",
           "TRIM_AFTER", "Allotment", "Allotments",
           "allottable", "plain_answer"]

logger = logging.getLogger(__name__)

#: The fewest slots a scope needs for a worker to hold an allotment of it (one member per this many).
MIN_CONCURRENCY = 4
#: Members one worker holds at most in one scope.
MOST = 8
#: A refresh (counts sent, members renewed, the policy checked) comes before the next local admission
#: once REFRESH_EVERY seconds passed and REFRESH_SENDS admissions were made since the last one, or
#: REFRESH_MOST seconds passed: a worker sends at most REFRESH_SENDS requests of a scope (or what it
#: sends in REFRESH_EVERY, if more) on what it last heard from Redis, and waits at most REFRESH_MOST.
#: (Refreshing every scope every 50 ms cost Redis as much as a peer's check per admission at 8 workers.)
REFRESH_EVERY, REFRESH_SENDS, REFRESH_MOST = 0.05, 16, 0.5
#: Seconds without a local admission after which an allotment keeps one member, and then none.
#: (With the whole allotment given back after 0.1 s, a worker that comes back to each of its scopes
#: less often, a broad crawl's pace, paid a give-back per admission and never had an allotment.)
TRIM_AFTER, IDLE_AFTER = 0.1, 0.5
#: Seconds a scope gets no new allotment after one was dropped by a refresh.
COOLDOWN = 1.0
_OK = ScopeFeedback(status=200)


def plain_answer(policies: SharedPolicies, name: str, policy: ScopePolicy,
                 signal: ScopeFeedback | None) -> bool:
    """Whether a release's answer for ``name`` only counts: nothing to write back, nothing learned.

    The one rule for both the release (which then sends counts alone) and an
    allotment (which then keeps the slot): a release without an outcome on a
    scope without a stored breaker, or an answer the policy would only count
    in its breaker's window (this worker's own).
    """
    if signal is None:
        return not policies.gated(name)
    return policy.counts_only(signal) and (policy.breaker is not None or not policy.config.breaker.enabled)


def allottable(policy: ScopePolicy) -> bool:
    """Whether a scope with ``policy`` may be admitted from an allotment: fixed limits that leave room."""
    limits = policy.limits
    return (limits.concurrency >= MIN_CONCURRENCY and limits.delay == 0.0 and limits.delay_per_slot == 0.0
            and limits.floor == 0.0 and policy.counts_only(_OK))


@dataclass(slots=True)
class Allotment:
    """One worker's allotment of one scope: its members, and the counts not sent yet.

    Attributes:
        version: the scope's policy version when the allotment was formed.
        free: members (lease ids) not in use.
        busy: members admitted to a request that has not been released.
        refreshed: this worker's clock at the last refresh.
        used: this worker's clock at the last local admission or release.
    """

    version: int
    refreshed: float
    used: float
    free: list[str] = field(default_factory=list)
    busy: set[str] = field(default_factory=set)
    sends: int = 0
    last_send: str = ""  # the latest local send (server time, as the scripts take it)
    responses: int = 0
    errors: int = 0
    last_latency: str = ""
    latencies: int = 0
    mean_step: float = 0.0  # the mean's added term after n = ``latencies`` (a stored mean is times (1-w)^n)
    mean_first: float = 0.0  # the mean of these values alone (no stored mean yet)

    def count(self, outcome: Outcome) -> None:
        """Add ``outcome`` to the counts sent with the next refresh (as a release would count it)."""
        if outcome.error is not None:
            self.errors += 1
        elif outcome.status is not None:
            self.responses += 1
        latency = outcome.latency
        if latency is not None and latency >= 0.0:
            self.last_latency = repr(latency)
            self.mean_step += LATENCY_WEIGHT * (latency - self.mean_step)
            self.mean_first = latency if not self.latencies else self.mean_first + LATENCY_WEIGHT * (
                latency - self.mean_first)
            self.latencies += 1

    def counts(self) -> list[str]:
        """The refresh's count arguments (ARGV 5 to 12 of ``allot.lua``); the counts start again."""
        args = [str(self.sends), self.last_send, str(self.responses), str(self.errors), self.last_latency,
                str(self.latencies), repr(self.mean_step), repr(self.mean_first)]
        self.sends = self.responses = self.errors = self.latencies = 0
        self.last_latency, self.mean_step, self.mean_first = "", 0.0, 0.0
        return args


class Allotments:
    """A shared store's allotments, by scope name.

    Args:
        submit: queues a script call on the store's connection (returns the reply's future).
        down: the errors that mean the server is unreachable.
        keys_of: a scope's keys (the hash and the lease set are the first two).
        policies: the store's policy cache.
        drop: stops renewing a lease id (a member given back).
        now: this worker's clock.
        server_now: the server's clock, as this worker follows it.
        sleep: this worker's sleep.
        now_text: the scripts' ``now`` argument ("" for the server's own clock).
        lease: the lease seconds, as the scripts take them.
        idle: the idle seconds, as the scripts take them.
    """

    def __init__(self, parts: RedisParts) -> None:
        self._submit, self._down, self._keys_of, self._policies = parts.submit, parts.down, parts.keys_of, \
            parts.policies
        self._drop, self._now, self._server_now = parts.stop_renewing, parts.now, parts.server_now
        self._sleep, self._now_text = parts.sleep, parts.now_text
        self._lease, self._idle = parts.lease_arg, parts.idle_arg
        self.scopes: dict[str, Allotment] = {}
        self._cooldown: dict[str, float] = {}
        self._keeper: asyncio.Task[None] | None = None
        self._replies: set[asyncio.Future[Any]] = set()
        # Members whose give-back could not reach the server, by scope, and until when they matter.
        self._orphans: dict[str, list[str]] = {}
        self._orphans_until: dict[str, float] = {}
        self._orphans_at = 0.0
        #: Admissions decided locally, and refreshes sent (for tests and benches).
        self.local = self.refreshes = 0

    def __len__(self) -> int:
        return len(self.scopes)

    def admit(self, demand: Demand) -> RedisLease | None:
        """A lease on a free member of the scope of ``demand``; ``None``: none free, or a refresh due."""
        allot = self.scopes.get(demand[0])
        if allot is None or not allot.free:
            return None
        now = self._now()
        elapsed = now - allot.refreshed
        if elapsed >= REFRESH_EVERY and (allot.sends >= REFRESH_SENDS or elapsed >= REFRESH_MOST):
            return None
        member = allot.free.pop()
        allot.busy.add(member)
        allot.sends += 1
        allot.used = now
        self.local += 1
        server = self._server_now()
        allot.last_send = repr(server)
        return RedisLease((demand,), (now,), now, (0,), lease_id=member, server_granted_at=server,
                          server_slot_ready=(server,), sends=((None, server),))

    def due(self, name: str) -> bool:
        """Whether ``name`` has free members waiting for a refresh before the next local admission."""
        allot = self.scopes.get(name)
        if allot is None or not allot.free:
            return False
        elapsed = self._now() - allot.refreshed
        return elapsed >= REFRESH_EVERY and (allot.sends >= REFRESH_SENDS or elapsed >= REFRESH_MOST)

    def keep(self, lease: RedisLease, outcome: Outcome) -> bool:
        """Keep ``lease``'s slot in its scope's allotment if its answer only counts; else drop the allotment.

        Returns:
            True when the slot stays with this worker (nothing to send now);
            False when the caller must release it the usual way.
        """
        name, _use = lease.demands[0]
        policies = self._policies()
        policy = policies.policy(name)
        signal = outcome.feedback[0] if outcome.feedback else outcome.plain_feedback()
        allot = self.scopes.get(name)
        member = lease.lease_id
        if not plain_answer(policies, name, policy, signal):
            if allot is not None:  # learned something: Redis hears of it now, and the allotment goes
                allot.busy.discard(member)
                self.drop(name)
            return False
        now = self._now()
        if allot is not None and member in allot.busy:
            allot.busy.remove(member)
        elif (allottable(policy) and lease.server_slot_ready[0] <= lease.server_granted_at
              and now >= self._cooldown.get(name, 0.0)):
            if allot is None:
                # The time to the first refresh counts from this lease's admission (Redis last asked).
                allot = self.scopes[name] = Allotment(policies.entry(name).version, lease.granted_at, now)
                self._start()
            if len(allot.free) + len(allot.busy) >= min(MOST, policy.limits.concurrency // MIN_CONCURRENCY):
                self._send_counts(name, allot)
                return False
        else:
            if allot is not None:
                if allottable(policy):
                    self._send_counts(name, allot)
                else:  # the limits this worker just read no longer allow an allotment
                    self.drop(name)
            return False
        allot.free.append(member)
        allot.used = now
        if signal is not None:
            allot.count(outcome)
            if policy.breaker is not None and signal.status is not None:
                policy.breaker.on_outcome(self._server_now(), failed=False, sent_at=lease.server_granted_at)
        return True

    def _call(self, name: str, allot: Allotment, give: list[str], keep: list[str]) -> asyncio.Future[Any]:
        keys = list(self._keys_of(name)[:2])
        args = [self._now_text(), self._lease, self._idle, str(allot.version), *allot.counts(),
                str(len(give)), *give, *keep]
        self.refreshes += 1
        return self._submit("allot", keys, args)

    def _send_counts(self, name: str, allot: Allotment) -> None:
        """Send the counts not sent yet ahead of a release going the usual way (they keep their order)."""
        if allot.sends or allot.responses or allot.errors or allot.latencies:
            self._given(self._call(name, allot, [], []))

    async def refresh(self, name: str) -> None:
        """Send the counts of ``name``'s allotment, renew its free members, and drop it if Redis says so."""
        allot = self.scopes.get(name)
        if allot is None:
            return
        allot.refreshed = self._now()
        kept = list(allot.free)
        try:
            reply = await self._call(name, allot, [], kept)
        except Exception as exc:  # unreachable, or a script error: the usual path takes over (and reports it)
            logger.debug("scope %s: allotment not refreshed (%s); dropped", name, exc)
            self._forget(name, allot)
            return
        if self.scopes.get(name) is not allot:
            return
        lost = [m.decode() if isinstance(m, bytes) else str(m) for m in reply[1:]]
        for member in lost:  # its lease expired (this worker stalled past it): no longer held
            logger.warning("scope %s: allotted slot %s had expired; allotment dropped", name, member)
            allot.busy.discard(member)
            if member in allot.free:
                allot.free.remove(member)
            self._drop(member)
        if reply[0] not in (b"1", "1") or lost:
            self._cooldown[name] = self._now() + COOLDOWN
            self.drop(name)

    def drop(self, name: str) -> None:
        """Give the free members of ``name`` back with the counts, without waiting (busy ones: later)."""
        allot = self.scopes.pop(name, None)
        if allot is None:
            return
        free, allot.free = allot.free, []
        for member in free:
            self._drop(member)
        self._given(self._call(name, allot, free, []), name, free)

    def _given(self, reply: asyncio.Future[Any], name: str = "", members: list[str] | None = None,
               until: float | None = None) -> None:
        """Follow a call not waited for (a give-back, counts); members not given back are tried again."""
        self._replies.add(reply)
        reply.add_done_callback(functools.partial(self._given_back, name, members or [], until))

    def _given_back(self, name: str, members: list[str], until: float | None,
                    reply: asyncio.Future[Any]) -> None:
        self._replies.discard(reply)
        if not reply.cancelled() and reply.exception() is not None:
            logger.debug("scope %s: slots not given back (%s); tried again", name, reply.exception())
            self._orphan(name, members, until)

    def _forget(self, name: str, allot: Allotment) -> None:
        """The server is away: stop using ``name``'s allotment; its free members go back once it answers."""
        if self.scopes.get(name) is allot:
            del self.scopes[name]
        for member in allot.free:
            self._drop(member)
        self._orphan(name, allot.free)
        allot.free = []

    def _orphan(self, name: str, members: list[str], until: float | None = None) -> None:
        """Keep ``members`` to give back when the server answers (a release that failed is, too, in
        ``_pending.py``): a server restarted with its data would hold them until their leases ran out."""
        if not members:
            return
        self._orphans.setdefault(name, []).extend(members)
        until = self._now() + float(self._lease) if until is None else until
        self._orphans_until[name] = min(until, self._orphans_until.get(name, until))
        self._start()

    def _retry_orphans(self, now: float) -> None:
        """Send again the give-backs that failed, while their leases could still be held."""
        self._orphans_at = now + REFRESH_MOST
        orphans, self._orphans = self._orphans, {}
        for name, members in orphans.items():
            until = self._orphans_until.pop(name, now)
            if now < until:
                self._given(self._call(name, Allotment(0, now, now), members, []), name, members, until)

    def drop_all(self) -> None:
        """Give every allotment back (a flush, or the store closing)."""
        for name in list(self.scopes):
            self.drop(name)

    def _start(self) -> None:
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.get_running_loop().create_task(self._keep())

    async def _keep(self) -> None:
        """While allotments exist: give idle ones back, refresh the others' counts now and then."""
        while self.scopes or self._orphans:
            await self._sleep(REFRESH_EVERY)
            now = self._now()
            if self._orphans and now >= self._orphans_at:
                self._retry_orphans(now)
            due = []
            for name, allot in list(self.scopes.items()):
                idle = now - allot.used
                if not allot.busy and idle >= IDLE_AFTER:
                    self.drop(name)
                    continue
                if idle >= TRIM_AFTER and len(allot.free) + len(allot.busy) > 1 and allot.free:
                    extra = allot.free[:len(allot.free) - (0 if allot.busy else 1)]
                    del allot.free[:len(extra)]
                    for member in extra:
                        self._drop(member)
                    self._given(self._call(name, allot, extra, []))
                if now - allot.refreshed >= REFRESH_MOST and (allot.sends or allot.responses
                                                                or allot.errors):
                    due.append(name)
            if due:
                await asyncio.gather(*(self.refresh(name) for name in due))
            if self._cooldown:
                self._cooldown = {name: t for name, t in self._cooldown.items() if t > now}

    async def aclose(self) -> None:
        """Give every allotment back and stop the keeper."""
        self.drop_all()
        if self._replies:
            await asyncio.gather(*self._replies, return_exceptions=True)
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
            self._keeper = None
