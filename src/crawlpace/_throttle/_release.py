"""Giving a permit back: classify what happened to its request, then release its lease.

A :class:`~crawlpace.Permit` knows only this small object, not the throttler
that issued it: the throttler builds one :class:`Releaser` and tells it, with
a callback, what to do once a lease is back (wake the requests that wait for
its scopes). So the permit and the throttler do not import each other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._clock import Clock
from .._responses._feedback import FeedbackBuilder, FeedbackContext, ScopeFeedback, reset_context, use_context
from .._scoping._manager import ThrottlingManager, ThrottlingManagerProtocol
from ..stores.base import NO_OUTCOME, Lease, LocalStore, Outcome, Store

__all__ = ["DONT_ADJUST_KEY", "RawFeedback", "Releaser"]

logger = logging.getLogger(__name__)

# The request meta key that keeps a response's latency away from AutoThrottle (seed 000).
DONT_ADJUST_KEY = "autothrottle_dont_adjust_delay"

#: Called with a lease just given back and the scopes its release made the breaker give up.
OnReleased = Callable[[Lease, tuple[str, ...]], None]
#: Called with a scope's name: the requests of it the caller still holds to send, and whether more
#: may come (``None``: not known). See :meth:`crawlpace.Throttler.count_work`.
WorkLeft = Callable[[str], tuple[int, bool] | None]


@dataclass(frozen=True, slots=True)
class RawFeedback:
    """What the caller reported about a request, before it is classified."""

    response: Any = None
    status: int | None = None
    exception: BaseException | None = None
    latency: float | None = None
    consumed_quota: Mapping[str, float] | None = None
    blocked: bool = False
    #: The latency is mostly the caller's own lateness (see ``Permit.feedback``): no scope learns it.
    stalled: bool = False
    #: Seconds from the admission to the send (see ``Permit.feedback``): given to every scope.
    lag: float = 0.0


def _overrides(manager: object, name: str) -> bool:
    """True when ``manager`` has its own ``name`` hook instead of the default's."""
    method = getattr(type(manager), name, None)
    if method is None:
        return False
    return method is not getattr(ThrottlingManager, name)


def _dont_adjust(request: object) -> bool:
    meta = getattr(request, "meta", None)
    return bool(meta) and bool(meta.get(DONT_ADJUST_KEY))  # type: ignore[union-attr]


class Releaser:
    """Turns raw feedback into an :class:`Outcome` and releases leases through the store.

    Args:
        builder: classifies responses and exceptions per scope.
        manager: the throttling manager; its response hooks are awaited when
            it overrides them.
        store: the store the leases came from.
        clock: the throttler's clock (a permit's default latency is measured on it).
        on_released: called after every release, with the lease and the scopes
            the circuit breaker gave up on it.

    Attributes:
        observe: when set, called with each lease and its outcome just before
            the release (the throttler's observers: metrics, the run report).
        work: when set, read for each scope of a released request: the work the
            caller still holds for it, carried to the scope in its feedback.
    """

    __slots__ = ("_builder", "_hooks", "_local", "_manager", "_on_released", "_store", "clock", "observe",
                 "work")

    def __init__(self, builder: FeedbackBuilder, manager: ThrottlingManagerProtocol, store: Store,
                 clock: Clock, on_released: OnReleased) -> None:
        self._builder = builder
        self._manager = manager
        # A manager with its own response hooks is awaited at release.
        self._hooks = any(_overrides(manager, name)
                          for name in ("get_response_backoff", "get_response_delay"))
        self._store = store
        self._local: LocalStore | None = store if isinstance(store, LocalStore) else None
        self._on_released = on_released
        self.clock = clock
        self.observe: Callable[[Lease, Outcome], None] | None = None
        self.work: WorkLeft | None = None

    def __repr__(self) -> str:
        return f"<Releaser store={type(self._store).__name__} hooks={self._hooks}>"

    # -- leases ------------------------------------------------------------------

    async def give_back(self, lease: Lease, outcome: Outcome) -> None:
        """Release ``lease`` with ``outcome`` through whichever store holds it."""
        if self.observe is not None:
            self.observe(lease, outcome)
        local = self._local
        if local is not None:
            given_up = local.release_nowait(lease, outcome)
        else:
            given_up = ()
            try:
                given_up = await self._store.release(lease, outcome)
            finally:
                # Even when the store raised: the request is over for this process, and a count
                # left up would hold back every later request of the global cap for good.
                self._on_released(lease, given_up)
            return
        self._on_released(lease, given_up)

    def give_back_nowait(self, lease: Lease, outcome: Outcome) -> None:
        """Release through a local store without awaiting (the permit's hot path)."""
        assert self._local is not None
        if self.observe is not None:
            self.observe(lease, outcome)
        self._on_released(lease, self._local.release_nowait(lease, outcome))

    # -- permits -----------------------------------------------------------------

    def release_nowait(self, lease: Lease, request: object, raw: RawFeedback | None) -> Outcome | None:
        """Classify the feedback and release, if both can be done without awaiting.

        Returns:
            The outcome applied, or ``None`` when the caller must await
            :meth:`release` instead.
        """
        if self._local is None:
            return None
        outcome = self._outcome_nowait(lease, request, raw)
        if outcome is not None:
            self.give_back_nowait(lease, outcome)
        return outcome

    async def release(self, lease: Lease, request: object, raw: RawFeedback | None,
                      heard: Callable[[Outcome], None] | None = None) -> Outcome:
        """Classify the feedback (awaiting the manager's hooks if it has any) and release.

        ``heard``, when given, is called with the outcome once it is known, before the store is
        told (a shared store's release is a round trip or more).
        """
        outcome = self._outcome_nowait(lease, request, raw)
        if outcome is None:
            assert raw is not None
            try:
                outcome = await self._outcome_from_hooks(lease, request, raw)
            except BaseException:
                await self.give_back(lease, NO_OUTCOME)
                raise
        try:
            if heard is not None:
                heard(outcome)
        finally:  # (the slots go back whatever the caller's hook did)
            await self.give_back(lease, outcome)
        return outcome

    # -- classification ------------------------------------------------------------

    def _outcome_nowait(self, lease: Lease, request: object, raw: RawFeedback | None) -> Outcome | None:
        if raw is None:
            return NO_OUTCOME
        builder = self._builder
        if raw.exception is not None:
            signals = builder.for_exception(lease.demands, raw.exception, raw.latency)
            by_name = {name: signal for (name, _use), signal in zip(lease.demands, signals, strict=True)}
            return _outcome_of(lease, raw, by_name, error=type(raw.exception).__name__, work=self.work)
        if self._hooks and raw.response is not None:
            return None
        hint = builder.hint(raw.response) if raw.response is not None else None
        latency = None if raw.stalled or _dont_adjust(request) else raw.latency
        by_scope = builder.for_response(lease.demands, status=raw.status, latency=latency,
                                        hold=builder.hold_of(hint, raw.status), hint=hint)
        return _outcome_of(lease, raw, by_scope, work=self.work)

    async def _outcome_from_hooks(self, lease: Lease, request: object, raw: RawFeedback) -> Outcome:
        builder = self._builder
        latency = None if raw.stalled or _dont_adjust(request) else raw.latency
        context = FeedbackContext(builder, lease.demands, latency)
        token = use_context(context)
        try:
            get = getattr(self._manager, "get_response_backoff", None)
            by_scope = await get(raw.response) if get is not None else None
        finally:
            reset_context(token)
        if not isinstance(by_scope, Mapping) or not all(
                isinstance(value, ScopeFeedback) for value in by_scope.values()):
            logger.error("get_response_backoff() of %r returned %r, not a dict of scope -> "
                         "ScopeFeedback; using the default feedback", self._manager, by_scope)
            hint = builder.hint(raw.response)
            by_scope = builder.for_response(lease.demands, status=raw.status, latency=latency,
                                            hold=builder.hold_of(hint, raw.status), hint=hint)
        return _outcome_of(lease, raw, by_scope, work=self.work)


def _outcome_of(lease: Lease, raw: RawFeedback, by_scope: Mapping[str, ScopeFeedback],
                error: str | None = None, work: WorkLeft | None = None) -> Outcome:
    """Line the per-scope feedback up with the lease's scopes (with the work left in each, when
    ``work`` reads it)."""
    consumed = raw.consumed_quota or {}
    feedback: list[ScopeFeedback] = []
    for name, _use in lease.demands:
        signal = by_scope.get(name)
        if signal is None:
            signal = ScopeFeedback(status=raw.status)
        if name in consumed:
            signal = replace(signal, consumed_quota=float(consumed[name]))
        if raw.lag > 0.0 and not raw.stalled:  # (a stall's lag is this process's, like its latency)
            signal = replace(signal, lag=raw.lag)
        if raw.blocked:  # a soft block is pushback like a 429; its latency says nothing
            signal = replace(signal, backoff=True, latency=None)
        if work is not None:
            known = work(name)
            if known is not None:
                signal = replace(signal, left=max(0, int(known[0])), more=bool(known[1]))
        feedback.append(signal)
    return Outcome(status=raw.status, error=error, latency=raw.latency, feedback=tuple(feedback))
