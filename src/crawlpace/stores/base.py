"""The interface every state store implements, and the values it exchanges.

A store owns the admission state of every scope: requests in flight, the last
send, resting slots, and the limits in force. The async facade asks it to
admit a request against *all* of its scopes at once (:meth:`Store.acquire`)
and to take a slot back with the request's outcome (:meth:`Store.release`).

Admission is all-or-nothing: a store either records the send in every scope
or in none, so a request never holds one scope while waiting for another and
two requests that share scopes cannot deadlock, whatever order they list them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..policy.admission import Demand
from ..policy.rampup import RampupStats
from ..policy.signals import ScopeFeedback

__all__ = ["NO_OUTCOME", "Blocked", "HeldStore", "Lease", "LocalStore", "Outcome", "ScopeSnapshot", "Store"]


@dataclass(slots=True)
class Lease:
    """Proof that a request was admitted; give it back to :meth:`Store.release`.

    Attributes:
        demands: the scopes and expected quota uses the request was admitted to.
        slot_ready: per scope, when the slot the request used may send again.
        granted_at: the store clock's reading at admission.
        generations: per scope, the backoff generation the request was sent
            under (feedback from an older generation cannot slow it again).
    """

    demands: tuple[Demand, ...]
    slot_ready: tuple[float, ...]
    granted_at: float
    generations: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a request cannot be admitted yet.

    Attributes:
        ready_at: the earliest time every scope could admit it, or ``None`` if
            some scope has all its slots in flight (only a release helps).
        waiting_on: each scope that is not ready, with its own ready time
            (``None``: full).
        poll_at: when a full scope's limits may change with no release (a request out far
            too long frees its slot then); look again at that time too (``None``: no such time).
    """

    ready_at: float | None
    waiting_on: tuple[tuple[str, float | None], ...]
    poll_at: float | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to an admitted request, as fed back on release.

    Attributes:
        status: the HTTP status, when a response arrived.
        error: the exception's class name, when the request failed.
        latency: seconds from connection to response headers, when known.
        feedback: what the outcome means for each scope, in the lease's order;
            empty when the request was released without an outcome.
    """

    status: int | None = None
    error: str | None = None
    latency: float | None = None
    feedback: tuple[ScopeFeedback, ...] = ()

    def plain_feedback(self) -> ScopeFeedback | None:
        """Feedback for a scope when the outcome carries none of its own.

        ``None`` for a release without an outcome; otherwise a failure for an
        exception or a 5xx, and the status for anything else. Every store
        applies outcomes given without per-scope feedback this way.
        """
        if self.status is None and self.error is None:
            return None
        failed = self.error is not None or (self.status is not None and self.status >= 500)
        return ScopeFeedback(failed=failed, status=self.status)

    @property
    def ok(self) -> bool:
        """True for a response below 400 with no exception."""
        return self.error is None and self.status is not None and self.status < 400


#: The outcome of a permit released without feedback: it only frees the slot.
NO_OUTCOME = Outcome()


@dataclass(frozen=True, slots=True)
class ScopeSnapshot:
    """A store's view of one scope at one moment (the throttler adds the queue).

    Attributes:
        scope: the scope's name.
        concurrency: the effective number of slots.
        delay: the effective seconds between two sends.
        delay_per_slot: the effective seconds between two sends of a slot.
        inflight: requests admitted and not yet released.
        resting: idle slots still waiting out their per-slot delay.
        sends: requests admitted since the scope's state was created.
        responses: releases that carried a response (any status).
        errors: releases that carried an exception.
        ready_in: seconds until a send could be admitted (0: now; None: every
            slot is busy).
        last_latency: the latest latency fed back, in seconds.
        mean_latency: an exponential moving average of latencies.
        backoff: the backoff level (0: none).
        generation: the backoff generation.
        hold_in: seconds left of a server-announced hold, if any.
        breaker: the circuit breaker's state (``closed``, ``open``,
            ``half_open``, ``given_up``, or ``off``).
        quota_remaining: quota units available now, for scopes with a quota.
        crawl_delay: the robots.txt Crawl-Delay in force, if any.
        rampup: what rampup knows about the scope, when it is on.
        pace: seconds between two sends that a budget the server announced
            (``RateLimit``, ``X-RateLimit-*`` headers) asks for, while it is in
            force (``None``: no budget announced, or it has run out).
    """

    scope: str
    concurrency: int
    delay: float
    delay_per_slot: float
    inflight: int
    resting: int
    sends: int
    responses: int
    errors: int
    ready_in: float | None
    last_latency: float | None
    mean_latency: float | None
    backoff: int = 0
    generation: int = 0
    hold_in: float | None = None
    breaker: str = "closed"
    quota_remaining: float | None = None
    crawl_delay: float | None = None
    rampup: RampupStats | None = None
    pace: float | None = None


@runtime_checkable
class Store(Protocol):
    """Admission state behind the throttler.

    ``shared`` tells the throttler whether other processes change this state:
    a local store's slots only free up through this process's releases, which
    the throttler sees; a shared store's slots also free up elsewhere, so the
    throttler polls instead of waiting for a release it would never see.
    """

    shared: bool

    async def acquire(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """Admit a request to all of its scopes now, or say why not.

        Raises:
            ScopeGivenUp: when a scope was given up by its circuit breaker.
            QuotaError: when the request expects more than a scope's quota.
        """

    async def release(self, lease: Lease, outcome: Outcome) -> tuple[str, ...]:
        """Free the request's slots and apply its outcome.

        A shared store may return once the release is queued: it reaches the
        server with the worker's next call, before anything that call does.

        Returns:
            The scopes this outcome made the circuit breaker give up.
        """

    async def set_crawl_delay(self, scope: str, delay: float | None) -> None:
        """Apply a robots.txt Crawl-Delay to ``scope`` (``None`` removes it)."""

    async def snapshot(self, scope: str) -> ScopeSnapshot | None:
        """Describe ``scope``, or ``None`` if the store holds no state for it."""

    async def scopes(self) -> list[str]:
        """List the scopes the store holds state for."""

    async def aclose(self) -> None:
        """Release connections and background work."""


@runtime_checkable
class HeldStore(Protocol):
    """A shared store that can say, just before a request is written, whether its scopes are held.

    Another worker's refusal (``Retry-After``) reaches this worker only through the
    store: a request it admitted before is checked again at the last moment. So do the
    other workers' writes of a scope paced by a Crawl-delay.
    """

    async def held_for(self, scopes: tuple[str, ...], lease_id: str = "", siblings: bool = True) -> float:
        """Seconds until the latest hold the store keeps on ``scopes`` ends (0.0: none), or until
        this write (admitted as ``lease_id``) should look again: a sibling written a while before
        it, of a scope that has held, is still out, and its answer may be a refusal not yet read.
        With ``siblings`` False, holds only: the write has waited for its siblings long enough."""

    def holding(self, scopes: tuple[str, ...]) -> bool:
        """Whether every write of ``scopes`` must look (:meth:`held_for`), even one that follows
        its admission at once: one of them has held, and the store notes its writes."""

    def write_after(self, scopes: tuple[str, ...]) -> float:
        """The time before which the request just admitted for ``scopes`` may not be written: a
        Crawl-delay after the latest write of them any worker noted (``-inf``: none)."""

    def wrote(self, scopes: tuple[str, ...]) -> None:
        """Note that a request of ``scopes`` is being written now (a Crawl-delay scope's next
        write, by any worker, keeps the delay after it)."""


@runtime_checkable
class LocalStore(Store, Protocol):
    """A store that answers without I/O, and so also without awaiting.

    The throttler calls these synchronous twins of :meth:`Store.acquire` and
    :meth:`Store.release` when a store has them, which saves two coroutine
    round trips per request on the hot path.
    """

    def acquire_nowait(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
        """Like :meth:`Store.acquire`, synchronously."""

    def release_nowait(self, lease: Lease, outcome: Outcome) -> tuple[str, ...]:
        """Like :meth:`Store.release`, synchronously."""
