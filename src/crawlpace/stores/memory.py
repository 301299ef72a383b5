"""The embedded store: admission state in this process's memory.

The default store (``memory://``). It serves one process: every acquire and
release runs to completion without suspending, so multi-scope admission is
atomic simply because nothing else runs in between.

Scopes whose state is indistinguishable from a new one (nothing in flight, no
delay or resting slot pending) are forgotten in an amortised sweep, so a crawl
over millions of hosts keeps only the active ones in memory.
"""

from __future__ import annotations

import logging
import random

from .._clock import Clock
from .._config import ScopeConfig, Settings
from .._jitter import Jitter
from .._scopes import Demand
from ..policy.admission import Limits, ScopeState
from .base import NO_OUTCOME, Blocked, Lease, Outcome, ScopeSnapshot

__all__ = ["MemoryStore"]

logger = logging.getLogger(__name__)

# Weight of the newest sample in the mean latency (an exponential moving average).
_LATENCY_WEIGHT = 0.2
# Sweep idle scopes after this many admissions, at the least.
_SWEEP_MIN = 4096


class _Scope(ScopeState):
    """A scope's admission state plus what the store learns from outcomes."""

    __slots__ = ("errors", "jitter", "last_latency", "mean_latency", "responses")

    def __init__(self, limits: Limits, jitter: Jitter) -> None:
        super().__init__(limits)
        self.jitter = jitter
        self.responses = 0
        self.errors = 0
        self.last_latency: float | None = None
        self.mean_latency: float | None = None

    def record(self, outcome: Outcome) -> None:
        if outcome is NO_OUTCOME:
            return
        if outcome.error is not None:
            self.errors += 1
        elif outcome.status is not None:
            self.responses += 1
        latency = outcome.latency
        if latency is not None and latency >= 0.0:
            self.last_latency = latency
            mean = self.mean_latency
            self.mean_latency = latency if mean is None else mean + _LATENCY_WEIGHT * (latency - mean)


class MemoryStore:
    """Admission state held in a dict, for one process.

    Args:
        settings: the limits of every scope.
        clock: the time source (the throttler passes its own).
        rng: the random source for jitter; seed it for repeatable runs.
    """

    shared = False

    def __init__(self, settings: Settings, clock: Clock, rng: random.Random | None = None) -> None:
        self._settings = settings
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._scopes: dict[str, _Scope] = {}
        self._limits: dict[int, tuple[Limits, Jitter]] = {}
        self._since_sweep = 0
        self.evicted = 0

    # -- the Store interface ------------------------------------------------

    async def acquire(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """Admit ``demands`` now in every scope, or return why not."""
        return self.acquire_nowait(demands)

    async def release(self, lease: Lease, outcome: Outcome) -> None:
        """Give the slots of ``lease`` back and record ``outcome``."""
        self.release_nowait(lease, outcome)

    async def snapshot(self, scope: str) -> ScopeSnapshot | None:
        """Describe one scope."""
        return self.snapshot_nowait(scope)

    async def scopes(self) -> list[str]:
        """List the scopes with state."""
        return list(self._scopes)

    async def aclose(self) -> None:
        """Nothing to close: memory goes with the object."""

    # -- synchronous core -----------------------------------------------------

    def acquire_nowait(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """The body of :meth:`acquire`, callable without an event loop."""
        now = self._clock.now()
        scopes = self._scopes
        if len(demands) == 1:
            # The common case, kept free of loops and temporary lists.
            name = demands[0][0]
            state = scopes.get(name)
            if state is None:
                state = self._new_scope(name)
            ready = state.ready_at(now)
            if ready is None or ready > now:
                return Blocked(ready, ((name, ready),))
            jitter = state.jitter
            lease = Lease(demands, (state.admit(now, jitter.factor(self._rng) if jitter.enabled else 1.0),),
                          now)
            self._tick()  # after admit: the sweep must see this scope as busy
            return lease
        states: list[_Scope] = []
        waiting: list[tuple[str, float | None]] = []
        for name, _use in demands:
            state = scopes.get(name)
            if state is None:
                state = self._new_scope(name)
            states.append(state)
            ready = state.ready_at(now)
            if ready is None or ready > now:
                waiting.append((name, ready))
        if waiting:
            times = [t for _, t in waiting]
            latest = None if None in times else max(t for t in times if t is not None)
            return Blocked(latest, tuple(waiting))
        rng = self._rng
        slot_ready = tuple(
            state.admit(now, state.jitter.factor(rng) if state.jitter.enabled else 1.0)
            for state in states
        )
        lease = Lease(demands, slot_ready, now)
        self._tick()
        return lease

    def release_nowait(self, lease: Lease, outcome: Outcome) -> None:
        """The body of :meth:`release`."""
        now = self._clock.now()
        scopes = self._scopes
        for (name, _use), slot_ready in zip(lease.demands, lease.slot_ready, strict=True):
            state = scopes.get(name)
            if state is None:  # pragma: no cover - in-flight scopes are never evicted
                logger.warning("release for unknown scope %r ignored", name)
                continue
            state.release(slot_ready, now)
            state.record(outcome)

    def snapshot_nowait(self, scope: str) -> ScopeSnapshot | None:
        """The body of :meth:`snapshot`."""
        state = self._scopes.get(scope)
        if state is None:
            return None
        now = self._clock.now()
        ready = state.ready_at(now)
        limits = state.limits
        return ScopeSnapshot(
            scope=scope,
            concurrency=limits.concurrency,
            delay=limits.delay,
            delay_per_slot=limits.delay_per_slot,
            inflight=state.inflight,
            resting=state.resting,
            sends=state.sends,
            responses=state.responses,
            errors=state.errors,
            ready_in=None if ready is None else max(0.0, ready - now),
            last_latency=state.last_latency,
            mean_latency=state.mean_latency,
        )

    def evict_idle(self) -> int:
        """Forget every scope whose state a fresh one would reproduce.

        Returns:
            How many scopes were forgotten.
        """
        now = self._clock.now()
        idle = [name for name, state in self._scopes.items() if state.is_idle(now)]
        for name in idle:
            del self._scopes[name]
        self.evicted += len(idle)
        self._since_sweep = 0
        if idle:
            logger.debug("forgot %d idle scopes, %d remain", len(idle), len(self._scopes))
        return len(idle)

    def __len__(self) -> int:
        return len(self._scopes)

    # -- helpers ------------------------------------------------------------

    def _new_scope(self, name: str) -> _Scope:
        config = self._settings.scope_config(name)
        cached = self._limits.get(id(config))
        if cached is None:
            cached = (self._limits_of(config), config.jitter)
            self._limits[id(config)] = cached
        state = _Scope(*cached)
        self._scopes[name] = state
        return state

    def _limits_of(self, config: ScopeConfig) -> Limits:
        return Limits(
            concurrency=min(config.concurrency, self._settings.concurrent_requests),
            delay=config.delay,
            delay_per_slot=config.delay_per_slot,
        )

    def _tick(self) -> None:
        self._since_sweep += 1
        if self._since_sweep >= _SWEEP_MIN and self._since_sweep >= len(self._scopes):
            self.evict_idle()

