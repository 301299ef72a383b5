"""Writing what a worker learned back to the shared store, guarded by the policy's version.

A release carries the write-back of each scope whose policy changed in a way
other workers must see; ``release.lua`` does it only if the stored version is
still the one the change was computed from. When another worker wrote first,
:class:`PolicyWriter` reads the newer policy, applies the same outcome to it
and tries again (a few times: many workers racing on one scope). Backoff
cannot compound this way: an outcome from an older generation is ignored by
the policy itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ...policy.admission import Demand
from ...policy.scope import ScopePolicy
from ...policy.signals import ScopeFeedback
from ._redis_lease import RedisLease
from ._redis_parts import RedisParts
from ._script_args import RELEASE
from ._shared_policy import Cached, SharedPolicies

__all__ = ["WRITE_TRIES", "Lesson", "Lost", "PolicyWriter", "lost"]

logger = logging.getLogger(__name__)

# The write-backs of a release awaiting their reply: scope index -> the feedback, the generation it
# was sent under, the server time its answer was applied at (a redo applies it at that time), and the
# worker's lease times before it (a redo reads its count with them, as the first apply did).
Pending = dict[int, tuple[ScopeFeedback | None, int, float, tuple[float, float, float]]]

#: Write-backs tried before an outcome's lesson is dropped (many workers racing).
WRITE_TRIES = 8

Run = Callable[[str, list[str], list[Any]], Awaitable[Any]]


@dataclass(slots=True, frozen=True)
class Lost:
    """A write-back another worker beat: the policy stored instead, as ``release.lua`` read it.

    The version and the blob come from the same script step, so they always match (a worker
    read the blob with a ``GET`` of its own after the reply: one more round trip, 0.2-1.1 a
    request on a fleet's errors and bucket sites, and a blob that could be newer than the
    version beside it, bench/results/calls2.md).
    """

    version: int
    blob: bytes | None  # None: no policy stored


def lost(result: Any) -> Lost:
    """Read a lost write-back's result in a release reply: ``{version, blob}`` (``release.lua``)."""
    version, blob = result
    return Lost(int(version), blob if blob is None or isinstance(blob, bytes) else str(blob).encode())


@dataclass(slots=True, frozen=True)
class Lesson:
    """An outcome whose write-back lost: what applying it again to a newer policy takes."""

    signal: ScopeFeedback | None
    generation: int
    answered: float  # the server time its answer was applied at
    lease: RedisLease
    index: int  # the scope's place in the lease
    use: float
    leases: tuple[float, float, float] | None = None  # the worker's lease times before it (Cached.leases)

    @property
    def plain(self) -> bool:
        """Whether the outcome is a plain accepted answer: no refusal, hold or failure.

        Only these join another write (:meth:`PolicyWriter.joins`), or are dropped when
        other workers keep writing first; a refusal or a failure is tried as long again.
        """
        signal = self.signal
        return signal is not None and signal.accepted and not (signal.hold is not None and signal.hold > 0.0)


class PolicyWriter:
    """Applies outcomes to this worker's copies of the policies, and writes them back.

    Args:
        policies: the bounded cache of policies.
        run: calls a script (``name, keys, args``).
        now_arg: the scripts' ``now`` argument.
        server_now: the server's time as this worker estimates it.
        keys: a scope's four keys.
        idle: seconds a scope's keys live without use.
    """

    def __init__(self, policies: SharedPolicies, parts: RedisParts) -> None:
        self.policies = policies
        self._run = parts.run
        self._now_arg = parts.now_arg
        self._server_now = parts.server_now
        self._keys = parts.keys_of
        self.idle = parts.idle
        #: Outcomes not written back because other workers kept updating the scope first.
        self.unshared = 0
        #: Outcomes applied again after their write-back lost (each counted once per write tried).
        self.redone = 0
        #: Lost outcomes that changed nothing other workers must see once applied to the newer policy.
        self.absorbed = 0
        #: New outcomes written with a running redo of their scope, not on their own (:meth:`joins`).
        self.joined = 0
        #: Per scope being redone: the lost outcomes its redo writes next (see :meth:`redo`).
        self._redoing: dict[str, list[Lesson]] = {}
        #: The mean seconds from a release's call to its reply (ReleaseSender: it rides with this
        #: worker's next call): the store holds the lease that much past the answer's apply.
        self.release_after = 0.0

    def apply(self, name: str, now: float, signal: ScopeFeedback | None, generation: int,
              lease: RedisLease, index: int, use: float, *, again: bool = False,
              leases: tuple[float, float, float] | None = None) -> tuple[ScopePolicy, int]:
        """The scope's policy after ``signal``, and the version it was computed from (also for an
        outcome applied ``again``, to a newer stored policy, after its first write-back lost, with
        ``leases``, the worker's lease times it was first applied with)."""
        policy = self.policies.policy(name)
        version = self.policies.entry(name).version
        if policy.rampup is not None:
            # This worker's own lease times (Rampup.note_lease): a copy read from the store has none.
            # (A redo's, as before its outcome: with its own refusal's lease noted, a redo read the
            # refusal's count of 8 as 7, and capped a cap of 6 refused at 8 leases at 6 where the
            # first apply and main capped it at 7.)
            policy.rampup.set_lease_times(self.policies.entry(name).leases if leases is None else leases)
        door = False
        if policy.rampup is not None and lease.sends:
            own, cached = lease.sends[index], self.policies.entry(name)
            # The answer to this worker's send through the start's door, its latest send: rampup
            # excuses a refusal of the scope's latest send there, so for a refusal that send stays
            # the latest (the scope is not taken to be sending still, see SharedPolicies.sends_at).
            # Any other answer: the door is behind the scope (one process forgets it at its next
            # send).
            door = own[1] == cached.door_sent and cached.seen <= own[1]
            refused = door and signal is not None and signal.backoff
            gap, last = own if refused else self.policies.sends_at(name, now, *own)
            policy.rampup.sync_sends(gap, last, lease.spacings[index] if lease.spacings else None)
            if not door:
                policy.rampup.door_passed()
            # The requests this worker still has out (this one settles below): a fleet's admissions
            # tell the shared record of no send, so without them no worker's stragglers counted,
            # and the slots made no room for hangs as one process's do.
            policy.rampup.also_out(self.policies.out(name))
        # The fleet's requests in flight when this one went; for a refusal, when its answer came
        # (RedisStore._at_answer), as the memory store counts them. (The memory store counts an
        # accepted answer's at the answer: see bench/results/fleet3.md for why they still differ.)
        # The verdict on the scope's errors is stored state (policy/state.py, "e"): a redo meets it
        # as the newer policy holds it, which has not counted this outcome (its write-back lost).
        inflight = lease.inflight[index] if lease.inflight else None
        # Every worker's accepted answers, when read at this answer (RedisStore._at_answer): the
        # overshoot fit's count of a cycle is the fleet's, not this copy's share of it.
        accepted = lease.accepted[index] if lease.accepted and policy.rampup is not None else None
        if policy.rampup is not None and accepted is not None:
            policy.rampup.sync_accepted(accepted)
        # The page through the start's door accepted: taken as sending still above, the copy forgot
        # the door, and the page's 10-25 ms after robots.txt became the shortest gap the site
        # accepted. No refusal of a strict bucket was ever under it, so none was fitted or excused
        # as a late arrival: each was cut (bench/results/fleetstrict.md). One process, whose
        # window of one sends nothing before that answer, takes no gap from it.
        door_ok = (policy.rampup.shortest_ok_gap if policy.rampup is not None and door and signal is not None
                   and signal.accepted else None)
        # The fleet's sends out as the answer came, read from the store's lease set (RedisStore._at_answer),
        # where each release settles its own: the shared record of sends out hears of an end only through
        # a write-back (a plain answer makes none, a lost one drops it), and its sends long answered passed
        # for hangs: a fleet of 8 on a cap of 6 read every refusal at 1 in flight (bench/results/storm2.md).
        out = lease.out[index] if lease.out else None
        if policy.budget is not None:
            policy.budget.shared()  # (a copy read from the store: its answers are the fleet's)
        policy.on_outcome(now, signal, generation=generation, sent_at=lease.server_granted_at,
                          expected_use=use, inflight=inflight, out=out)
        if (policy.rampup is not None and signal is not None and signal.accepted
                and signal.latency is not None and signal.latency >= 0.0):
            # The slot rampup just timed (held past its answer until this apply) stays in the store's
            # lease set until the release reaches the server: the count in flight other answers
            # come with counts it that much longer.
            policy.rampup.note_released_after(self.release_after)
        if policy.rampup is not None and signal is not None and not again:
            # The lease this answer held, to its release: after the answer's own count was read.
            policy.rampup.note_lease(now, now - lease.server_granted_at + self.release_after,
                                     signal.backoff and signal.status is not None, signal.latency)
            self.policies.entry(name).leases = policy.rampup.lease_times()
        if policy.window_log is not None:
            # The fleet's window log: every worker's answers, with the fleet's requests in flight.
            policy.window_log.shared()
        if policy.budget is not None:
            # The fleet's announced budget: every worker's answers, with the fleet's requests in flight.
            policy.budget.shared()
        if door_ok is not None and policy.rampup is not None:
            policy.rampup.door_page_accepted(door_ok)
        if policy.rampup is not None and accepted is not None:
            policy.rampup.rebase_accepted(accepted + (signal is not None and signal.accepted))
        return policy, version

    async def settle(self, lease: RedisLease, reply: Any,
                     pending: Pending, args: list[Any]) -> None:
        """Record the write-backs of a release that landed; redo those another worker beat."""
        await self.redo(lease, self.record(lease, reply, pending, args), pending)

    def record(self, lease: RedisLease, reply: Any, pending: Pending,
               args: list[Any]) -> dict[int, Lost]:
        """Record the write-backs of a release that landed; return those another worker beat.

        Returns:
            Scope index -> the policy stored instead (pass to :meth:`redo`).
        """
        beaten: dict[int, Lost] = {}
        for index, result in enumerate(reply[1:]):
            if index not in pending:
                continue
            if result in (b"ok", "ok"):
                self.policies.written(lease.demands[index][0], int(args[RELEASE.at(index, "version")]),
                                      args[RELEASE.at(index, "policy_blob")])
            else:
                beaten[index] = lost(result)
        return beaten

    async def redo(self, lease: RedisLease, beaten: dict[int, Lost],
                   pending: Pending) -> None:
        """Apply again, to the newer stored policies, the outcomes whose write-backs another worker beat.

        One redo runs per scope at a time, and it takes every lost outcome of the scope
        this worker has: a lost outcome whose scope is being redone joins that redo's
        next write and this call returns. Each try applies the outcomes waiting (oldest
        first) to the stored policy the lost write's reply carried, and writes them in one
        write-back.
        """
        for index, result in beaten.items():
            name, use = lease.demands[index]
            signal, generation, answered, leases = pending[index]
            lesson = Lesson(signal, generation, answered, lease, index, use, leases)
            waiting = self._redoing.get(name)
            if waiting is not None:
                # This worker redoes the scope already: the outcome rides with its next write. (Each
                # lost write-back redone on its own raced the worker's other redos of the scope: on
                # real HTTP 3.5-4.6 applies per lease, and a fifth to a third of a busy scope's
                # outcomes dropped after eight lost tries, bench/results/fleetwb1.md.)
                waiting.append(lesson)
                continue
            self._redoing[name] = waiting = [lesson]
            try:
                await self._redo_scope(name, result, waiting)
            finally:
                del self._redoing[name]

    def joins(self, name: str, lesson: Lesson) -> bool:
        """Add a new outcome's write-back to the running redo of its scope, if this worker has one.

        The outcome is then written with the redo's next write instead of on its own. Only a
        plain accepted answer joins: a refusal's write-back carries the hold that stands even
        when it loses (``release.lua``, "3"), and a failure's may open the breaker or give the
        scope up, which every worker must see at once. Returns whether the outcome joined.
        """
        waiting = self._redoing.get(name)
        if waiting is None or not lesson.plain:
            return False
        waiting.append(lesson)
        self.joined += 1
        return True

    async def _redo_scope(self, name: str, stored: Lost, waiting: list[Lesson]) -> None:
        """Write back the outcomes in ``waiting`` (which grows meanwhile) on the stored policy of ``name``."""
        # Another worker wrote first: the release's reply carried the newer policy. Each lost write
        # below takes the policy that beat it from its own reply (write()); the release's is not
        # used again: once another write lands, it is stale for good, and every try guarded by it
        # lost (bench/results/fleetpace1.md).
        self.policies.know(name, stored.version, stored.blob)
        tries, again = WRITE_TRIES, True
        while waiting:
            if tries <= 0:
                # Normal contention between busy workers: counted, and summed up once at close. A
                # refusal or a failure is not dropped with the plain answers: its lesson (a cut, a
                # breaker's count) is tried once as long again.
                kept = [lesson for lesson in waiting if not lesson.plain] if again else []
                self.unshared += len(waiting) - len(kept)
                logger.debug("scope %s: %d outcome(s) not shared: other workers kept writing first",
                              name, len(waiting) - len(kept))
                waiting[:] = kept
                tries, again = WRITE_TRIES, False
                if not waiting:
                    return
            batch = len(waiting)
            policy, at = self.policies.policy(name), self.policies.entry(name).version
            before = policy.summary()
            for lesson in waiting[:batch]:
                # Each outcome is applied at its answer's time, as the write that lost applied it: at
                # the redo's time, each redo's round trips (a busy fleet's scope: 2.2 s median, 6.6 s
                # at most on a loaded machine) were read as the request's, and its slot as held that
                # much longer past its answer (bench/results/fleetheld3.md). The write itself
                # carries the time it is written at.
                policy, at = self.apply(name, lesson.answered, lesson.signal, lesson.generation,
                                        lesson.lease, lesson.index, lesson.use, again=True,
                                        leases=lesson.leases)
            self.redone += batch
            if policy.summary() == before and all(lesson.plain for lesson in waiting[:batch]):
                # Nothing other workers must see changed (the rule of a release's first write-back,
                # release_call): the newer policy had learned what these answers teach. No write.
                self.absorbed += batch
                del waiting[:batch]
                continue
            if await self.write(name, at, policy, self._server_now()):
                del waiting[:batch]
                if waiting:
                    # Outcomes that lost meanwhile go on the policy just written, as stored: this
                    # worker's copy may hold a later release's outcome applied in place since.
                    cached = self.policies.entry(name)
                    self.policies.know(name, cached.version, cached.blob)
                    tries = WRITE_TRIES
            else:
                tries -= 1

    async def write(self, name: str, version: int, policy: ScopePolicy, now: float, *,
                    gap: float | None = None) -> bool:
        """Write ``policy`` back if the stored version is still ``version``; False if it was not.

        ``gap``, if given, replaces the scope's stored mean gap between sends with it.
        """
        blob, values = self.policies.writeback(policy, now)
        args = [await self._now_arg(), "", self.idle, 1, "0", "", "0", "0", "", str(version), *values,
                "", "", ""]
        if gap is not None:
            args.append(repr(gap))
        reply = await self._run("release", list(self._keys(name)), args)
        if reply[1] in (b"ok", "ok"):
            self.policies.written(name, version, blob)
            return True
        beaten = lost(reply[1])
        self.policies.know(name, beaten.version, beaten.blob)
        return False

    async def pass_door(self, name: str, at: float) -> float | None:
        """Close the start phase's door on the send admitted at ``at`` (server time), for the fleet.

        A robots.txt answer opens the door (``policy/_rampup_start.py``): the
        next send may go at once, on one slot. One process closes it as that
        send goes (``on_admit``); a fleet keeps the stored limits of the open
        door (one slot, the robots.txt round trip as the delay) until the
        page's answer is written back, a whole round trip later: a slow site
        then had one request in flight for seconds where one process had two.
        So the worker that sends through the door writes the closed door back
        at once, and with it the scope's mean gap between sends as one
        process counts it: the door's short spacing counts as the rate's gap
        (``Rampup.on_send``), or the fleet would read the scope's sends as
        many times its rate, and a worker whose answer came after another's
        send would read the scope as silent since its own. Should another
        worker have written first, that write is the newer lesson, and this
        one is dropped. Returns the gap written (None when nothing was).
        """
        cached = self.policies.peek(name)
        if cached is None or cached.blob is None:
            return None
        policy = self.policies.policy(name)
        rampup = policy.rampup
        if rampup is None or not rampup.door_open():
            return None
        policy.on_admit(at, 0.0, every_send=False)  # the fleet's other sends pass unseen
        gap = rampup.mean_gap
        if not await self.write(name, cached.version, policy, at, gap=gap):
            return None
        cached = self.policies.entry(name)
        cached.door_sent = at
        if cached.seen == at:
            cached.seen_gap = gap
        return gap

    def due(self, demands: tuple[Demand, ...]) -> bool:
        """Whether a scope of ``demands`` may have a time-driven change due (see :meth:`refresh_due`)."""
        now = self._server_now()
        policies = self.policies
        for name, _use in demands:
            cached = policies.peek(name)
            if cached is not None and cached.blob is not None and now >= policies.policy(name).wake_at:
                return True
        return False

    async def refresh_due(self, demands: tuple[Demand, ...]) -> None:
        """Write back the limits of policies whose time-driven change is due (a backoff wearing off)."""
        now = self._server_now()
        for name, _use in demands:
            cached: Cached | None = self.policies.peek(name)
            if cached is None or cached.blob is None:
                continue
            policy = self.policies.policy(name)
            if now < policy.wake_at:
                continue
            if policy.refresh(now):
                await self.write(name, cached.version, policy, now)
