"""Per-scope statistics as the throttler reports them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ..stores.base import ScopeSnapshot

__all__ = ["ScopeStats"]


def _ms(seconds: float) -> str:
    if seconds == float("inf"):
        return "never"
    return f"{seconds * 1000:.0f}ms" if seconds < 10 else f"{seconds:.1f}s"


@dataclass(frozen=True, slots=True)
class ScopeStats(ScopeSnapshot):
    """One scope's state: the store's snapshot plus this process's queue.

    Attributes (beyond :class:`~crawlpace.stores.ScopeSnapshot`'s ``scope``,
    ``concurrency``, ``delay``, ``delay_per_slot``, ``inflight``, ``resting``,
    ``sends``, ``responses``, ``errors``, ``ready_in``, ``last_latency``,
    ``mean_latency``, ``backoff``, ``generation``, ``hold_in``, ``breaker``,
    ``quota_remaining``, ``crawl_delay``, ``rampup`` and ``pace``):
        queued: requests of this process waiting for this scope.
    """

    queued: int = 0

    @classmethod
    def from_snapshot(cls, snap: ScopeSnapshot, queued: int) -> ScopeStats:
        """Combine a store snapshot with the local queue length."""
        values = {f.name: getattr(snap, f.name) for f in fields(ScopeSnapshot)}
        return cls(**values, queued=queued)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)

    def __repr__(self) -> str:
        ready = "full" if self.ready_in is None else _ms(self.ready_in)
        extra = f" backoff={self.backoff}" if self.backoff else ""
        if self.breaker not in ("closed", "off"):
            extra += f" breaker={self.breaker}"
        if self.hold_in is not None:
            extra += f" hold={_ms(self.hold_in)}"
        if self.rampup is not None:
            extra += f" rampup={self.rampup.phase}:{self.rampup.rate:.3g}/s"
        return (f"<Scope {self.scope} delay={self.delay:.2f}s inflight={self.inflight}/"
                f"{self.concurrency} queued={self.queued} sends={self.sends}{extra} next_in={ready}>")
