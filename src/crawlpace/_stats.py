"""Per-scope statistics as the throttler reports them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .stores.base import ScopeSnapshot

__all__ = ["ScopeStats"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms" if seconds < 10 else f"{seconds:.1f}s"


@dataclass(frozen=True, slots=True)
class ScopeStats:
    """One scope's state: the store's snapshot plus the throttler's queue.

    Attributes:
        scope: the scope's name.
        concurrency: the effective number of slots.
        delay: the effective seconds between two sends.
        delay_per_slot: the effective seconds between two sends of a slot.
        inflight: requests admitted and not yet released.
        queued: requests of this process waiting for this scope.
        sends: requests admitted since the scope's state was created.
        responses: releases that carried a response (any status).
        errors: releases that carried an exception.
        ready_in: seconds until a send could be admitted (0: now; None: all
            slots busy).
        last_latency: the latest latency fed back, in seconds.
        mean_latency: an exponential moving average of latencies.
    """

    scope: str
    concurrency: int
    delay: float
    delay_per_slot: float
    inflight: int
    queued: int
    sends: int
    responses: int
    errors: int
    ready_in: float | None
    last_latency: float | None
    mean_latency: float | None

    @classmethod
    def from_snapshot(cls, snap: ScopeSnapshot, queued: int) -> ScopeStats:
        """Combine a store snapshot with the local queue length."""
        return cls(
            scope=snap.scope, concurrency=snap.concurrency, delay=snap.delay,
            delay_per_slot=snap.delay_per_slot, inflight=snap.inflight, queued=queued,
            sends=snap.sends, responses=snap.responses, errors=snap.errors,
            ready_in=snap.ready_in, last_latency=snap.last_latency,
            mean_latency=snap.mean_latency,
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)

    def __repr__(self) -> str:
        ready = "full" if self.ready_in is None else _ms(self.ready_in)
        return (f"<Scope {self.scope} delay={self.delay:.2f}s inflight={self.inflight}/"
                f"{self.concurrency} queued={self.queued} sends={self.sends} next_in={ready}>")
