"""The embedded store: admission state in this process's memory.

The default store (``memory://``). It serves one process: every acquire and
release runs to completion without suspending, so multi-scope admission is
atomic simply because nothing else runs in between.

Scopes whose state is indistinguishable from a new one (nothing in flight, no
delay or resting slot pending, nothing learned that still matters) are
forgotten in an amortised sweep, so a crawl over millions of hosts keeps only
the active ones in memory. A scope that recently backed off, holds a
Crawl-Delay or a server's hold, or has spent quota is kept until that state
could no longer change what it admits.
"""

from __future__ import annotations

import logging
import math
import random

from .._clock import Clock
from .._exceptions import ScopeGivenUp
from .._settings._config import ScopeConfig, Settings
from ..policy._shared_rules import LATENCY_WEIGHT, due_at
from ..policy.admission import Demand, ScopeState
from ..policy.scope import ScopePolicy
from ..policy.signals import ScopeFeedback
from ..policy.tally import SuccessTally, count_success, tally_is_idle
from ._policies import PolicyFactory
from ._snapshot import describe
from .base import Blocked, Lease, Outcome, ScopeSnapshot

__all__ = ["MemoryStore"]

logger = logging.getLogger(__name__)

# Sweep idle scopes after this many admissions, at the least.
_SWEEP_MIN = 4096
#: Seconds between looks at a scope found waiting for an answer with nothing in flight (a bug).
STUCK_LOOK = 1.0


class _Scope(ScopeState):
    """A scope's admission state, its adaptive policy, and outcome counters.

    ``oks`` is ``None`` while the scope has a policy of its own. Otherwise the
    policy is one shared by every plain scope of the same settings (it is
    never changed), and ``oks`` is the compact count of the successes its
    breaker would hold (``policy/tally.py``).
    """

    __slots__ = ("errors", "last_latency", "mean_latency", "oks", "policy", "responses", "stuck")

    def __init__(self, policy: ScopePolicy, shared: bool = False) -> None:
        super().__init__(policy.limits)
        self.policy = policy
        self.oks: SuccessTally | None = () if shared else None
        self.responses = 0
        self.errors = 0
        self.last_latency: float | None = None
        self.mean_latency: float | None = None
        self.stuck = False  # found waiting for a release with nothing in flight (and told so)

    def ready(self, now: float, use: float) -> float | None:
        """When a send of ``use`` quota could go: slots, delays and gates together."""
        policy = self.policy
        if now >= policy.wake_at and policy.refresh(now):
            self.set_limits(policy.limits)
        ready = self.ready_at(now)
        if ready is None or not policy.gated:
            if ready is None and not self.inflight:
                return self._stuck(now, "every slot taken")
            return ready
        if policy.given_up:
            raise ScopeGivenUp(policy.scope, policy.breaker.reason if policy.breaker else "")
        gate = policy.gate(now, use)
        if gate is None:
            return None if self.inflight else self._stuck(now, "a gate waiting for an answer")
        return gate if gate > ready else ready

    def poll_at(self, now: float) -> float | None:
        """When a full scope's limits may change with no release (its policy's ``wake_at``: a
        request out far too long frees its slot then, rampup's ``hung_out``), if it has requests
        in flight and that is to come."""
        wake = self.policy.wake_at
        return wake if self.inflight and now < wake < math.inf else None

    def _stuck(self, now: float, why: str) -> float:
        """Waiting for a release with nothing in flight, which no release will ever end: a bug.

        Said once, with the scope's state; the scope is looked at again every :data:`STUCK_LOOK`
        seconds instead of never (the scheduler parks a queue whose scope waits for a release).
        """
        if not self.stuck:
            self.stuck = True
            policy = self.policy
            logger.warning("scope %s waits for an answer with nothing in flight (%s: %r, held %.3fs more, "
                           "breaker %s, rampup %s): a bug; looked at again every %g s",
                           policy.scope, why, self, max(0.0, policy.hold_until - now),
                           None if policy.breaker is None else policy.breaker.state,
                           None if policy.rampup is None else policy.rampup.decision, STUCK_LOOK)
        return now + STUCK_LOOK

    def send(self, now: float, use: float, rng: random.Random) -> float:
        """Record a send; return when its slot may send again."""
        policy = self.policy
        self.stuck = False
        jitter = policy.jitter
        # When the pace let this send go (before admit moves it), for rampup's measured send rate.
        due = due_at(self.next_send, self.inflight + self.resting, self.limits.concurrency)
        slot_ready = self.admit(now, jitter.factor(rng) if jitter.enabled else 1.0)
        if policy.watches:
            policy.on_admit(now, use, due=due)
            if self.limits is not policy.limits:
                self.set_limits(policy.limits)
        return slot_ready

    def record(self, outcome: Outcome) -> None:
        if outcome.error is not None:
            self.errors += 1
        elif outcome.status is not None:
            self.responses += 1
        latency = outcome.latency
        if latency is not None and latency >= 0.0:
            self.last_latency = latency
            mean = self.mean_latency
            self.mean_latency = latency if mean is None else mean + LATENCY_WEIGHT * (latency - mean)


class MemoryStore:
    """Admission state held in a dict, for one process.

    Args:
        settings: the limits of every scope.
        clock: the time source (the throttler passes its own).
        rng: the random source for jitter; seed it for repeatable runs.

    Raises:
        ConfigError: when a scope manager named in the settings cannot be loaded.
    """

    shared = False

    def __init__(self, settings: Settings, clock: Clock, rng: random.Random | None = None) -> None:
        self._settings = settings
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._scopes: dict[str, _Scope] = {}
        self._since_sweep = 0
        self._kept = 0  # scopes the last sweep kept
        self.evicted = 0
        # Imports every scope manager now, so a bad path fails at start-up.
        self._factory = PolicyFactory(settings)
        # Per scope configuration: the policy its plain scopes share (None: they cannot share one).
        self._plain: dict[int, tuple[ScopeConfig, ScopePolicy | None]] = {}

    # -- the Store interface ------------------------------------------------

    async def acquire(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """Admit ``demands`` now in every scope, or return why not."""
        return self.acquire_nowait(demands)

    async def release(self, lease: Lease, outcome: Outcome) -> tuple[str, ...]:
        """Give the slots of ``lease`` back and apply ``outcome``."""
        return self.release_nowait(lease, outcome)

    async def set_crawl_delay(self, scope: str, delay: float | None) -> None:
        """Apply a robots.txt Crawl-Delay to ``scope``."""
        self.set_crawl_delay_nowait(scope, delay)

    async def snapshot(self, scope: str) -> ScopeSnapshot | None:
        """Describe one scope."""
        return self.snapshot_nowait(scope)

    async def scopes(self) -> list[str]:
        """List the scopes with state."""
        return list(self._scopes)

    async def aclose(self) -> None:
        """Nothing to close: memory goes with the object."""

    # -- synchronous core -----------------------------------------------------


    def __repr__(self) -> str:
        return f"<MemoryStore scopes={len(self._scopes)} evicted={self.evicted}>"
    def acquire_nowait(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """The body of :meth:`acquire`, callable without an event loop."""
        now = self._clock.now()
        scopes = self._scopes
        if len(demands) == 1:
            # The common case, kept free of loops and temporary lists.
            name, use = demands[0]
            state = scopes.get(name)
            if state is None:
                state = self._new_scope(name)
            ready = state.ready(now, use)
            if ready is None or ready > now:
                return Blocked(ready, ((name, ready),), state.poll_at(now) if ready is None else None)
            lease = Lease(demands, (state.send(now, use, self._rng),), now,
                          (state.policy.generation,))
            self._tick()  # after admit: the sweep must see this scope as busy
            return lease
        states: list[_Scope] = []
        waiting: list[tuple[str, float | None]] = []
        for name, use in demands:
            state = scopes.get(name)
            if state is None:
                state = self._new_scope(name)
            states.append(state)
            ready = state.ready(now, use)
            if ready is None or ready > now:
                waiting.append((name, ready))
        if waiting:
            times = [t for _, t in waiting]
            latest = None if None in times else max(t for t in times if t is not None)
            return Blocked(latest, tuple(waiting))
        rng = self._rng
        slot_ready = tuple(state.send(now, use, rng) for state, (_, use) in zip(states, demands, strict=True))
        lease = Lease(demands, slot_ready, now, tuple(state.policy.generation for state in states))
        self._tick()
        return lease

    def release_nowait(self, lease: Lease, outcome: Outcome) -> tuple[str, ...]:
        """The body of :meth:`release`."""
        now = self._clock.now()
        scopes = self._scopes
        feedback: tuple[ScopeFeedback | None, ...] = outcome.feedback or (
            outcome.plain_feedback(),) * len(lease.demands)
        generations = lease.generations or (0,) * len(lease.demands)
        given_up: list[str] = []
        for (name, use), slot_ready, generation, signal in zip(
                lease.demands, lease.slot_ready, generations, feedback, strict=True):
            state = scopes.get(name)
            if state is None:  # pragma: no cover - in-flight scopes are never evicted
                logger.warning("release for unknown scope %r ignored", name)
                continue
            inflight = state.inflight  # this request included
            state.release(slot_ready, now)
            if signal is None:
                if state.policy.gated:  # only a breaker's probe needs to hear of it
                    state.policy.on_outcome(now, None, generation=generation,
                                            sent_at=lease.granted_at, expected_use=use)
                continue
            state.record(outcome)
            tally = state.oks
            if tally is not None:  # a plain scope, on the shared policy
                if state.policy.counts_only(signal):
                    breaker = state.policy.config.breaker
                    if breaker.enabled and signal.status is not None:
                        state.oks = count_success(tally, now, breaker.window)
                    continue
                self._own_policy(name, state)
            policy = state.policy
            if policy.on_outcome(now, signal, generation=generation, sent_at=lease.granted_at,
                                 expected_use=use, inflight=inflight):
                given_up.append(name)
            if state.limits is not policy.limits:
                state.set_limits(policy.limits)
        return tuple(given_up)

    def set_crawl_delay_nowait(self, scope: str, delay: float | None) -> None:
        """The body of :meth:`set_crawl_delay`."""
        settings = self._settings
        if not settings.robotstxt_obey:
            return
        state = self._scopes.get(scope)
        if state is None:
            state = self._new_scope(scope)
        policy = self._own_policy(scope, state) if state.oks is not None else state.policy
        policy.set_crawl_delay(delay, max_delay=settings.robotstxt_max_delay,
                               explicit=settings.is_explicit(scope), now=self._clock.now())
        if state.limits is not policy.limits:
            state.set_limits(policy.limits)

    def snapshot_nowait(self, scope: str) -> ScopeSnapshot | None:
        """The body of :meth:`snapshot`."""
        state = self._scopes.get(scope)
        if state is None:
            return None
        now = self._clock.now()
        policy = state.policy
        try:
            ready = state.ready(now, 0.0)
        except ScopeGivenUp:
            ready = float("inf")
        limits = state.limits
        return describe(scope, policy, now, concurrency=limits.concurrency, delay=limits.delay,
                        delay_per_slot=limits.delay_per_slot, inflight=state.inflight,
                        resting=state.resting, sends=state.sends, responses=state.responses,
                        errors=state.errors, ready_at=ready, last_latency=state.last_latency,
                        mean_latency=state.mean_latency)

    def evict_idle(self) -> int:
        """Forget every scope whose state a fresh one would reproduce.

        Returns:
            How many scopes were forgotten.
        """
        now = self._clock.now()
        idle = [name for name, state in self._scopes.items()
                if state.is_idle(now) and state.policy.is_idle(now) and (
                    not state.oks or tally_is_idle(state.oks, now, state.policy.config.breaker.window))]
        for name in idle:
            del self._scopes[name]
        self.evicted += len(idle)
        self._since_sweep = 0
        self._kept = len(self._scopes)
        if idle:
            logger.debug("forgot %d idle scopes, %d remain", len(idle), len(self._scopes))
        return len(idle)

    def __len__(self) -> int:
        return len(self._scopes)

    # -- helpers ------------------------------------------------------------

    def _new_scope(self, name: str) -> _Scope:
        shared = self._plain_policy(name)
        state = _Scope(self._factory.new(name)) if shared is None else _Scope(shared, shared=True)
        self._scopes[name] = state
        return state

    def _plain_policy(self, name: str) -> ScopePolicy | None:
        """The policy shared by the plain scopes of ``name``'s settings, or ``None`` if they are not plain.

        Plain: nothing but a failure, a backoff or a server's word could change
        the policy (no AutoThrottle, rampup, quota, scope manager or warm start).
        Such scopes share one policy until one of them needs its own, which
        saves a policy object per scope in a broad crawl.
        """
        settings = self._settings
        config = settings.scope_config(name)
        found = self._plain.get(id(config))
        if found is not None and found[0] is config:
            return found[1]
        policy: ScopePolicy | None = None
        if settings.warm_start is None and not config.manager:
            policy = self._factory.new(name)
            if (policy.manager is not None or policy.rampup is not None or policy.autothrottle is not None
                    or policy.quota is not None or policy.watches or policy.gated):
                policy = None
        self._plain[id(config)] = (config, policy)
        return policy

    def _own_policy(self, name: str, state: _Scope) -> ScopePolicy:
        """Give a plain scope a policy of its own, holding what the shared one stood for."""
        policy = self._factory.new(name)
        tally = state.oks
        if tally and policy.config.breaker.enabled:
            policy.ensure_breaker().absorb(tally)
        state.policy, state.oks = policy, None
        if state.limits is not policy.limits:
            state.set_limits(policy.limits)
        return policy

    def _tick(self) -> None:
        self._since_sweep += 1
        # Against the scopes the last sweep kept, not all of them: in a broad crawl every
        # admission may add a scope, so "all of them" would always stay ahead.
        if self._since_sweep >= _SWEEP_MIN and self._since_sweep >= self._kept:
            self.evict_idle()
