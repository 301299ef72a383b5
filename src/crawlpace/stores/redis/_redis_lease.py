"""A lease of the shared store: what a worker holds between acquire and release."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base import Lease

__all__ = ["RedisLease"]


@dataclass(slots=True)
class RedisLease(Lease):
    """A lease held in the shared store.

    Attributes:
        lease_id: the member of each scope's lease set.
        server_granted_at: the server's clock at admission.
        server_slot_ready: per scope, the server time the slot may send again.
        sends: per scope, the mean gap between sends and the last send, as the
            store counted them over every worker.
        inflight: per scope, its requests in flight over every worker with this one, at
            admission (empty when unknown); rampup reads it on a refusal.
        spacings: per scope, the seconds since its previous send by any worker (``None``
            for its first; empty when unknown); rampup's quick start weighs them.
        accepted: per scope, its answers accepted over every worker before this lease's
            answer, read as it came (empty when not read): rampup's overshoot fit counts
            a cycle's answers from it (``Rampup.sync_accepted``).
        out: per scope, when each request still out over every worker was sent, this one
            included, read from the scope's lease set as the answer came (empty when not read):
            rampup counts the requests a refusal met from them (``Rampup.met_at_send``).
    """

    lease_id: str = ""
    server_granted_at: float = 0.0
    server_slot_ready: tuple[float, ...] = ()
    sends: tuple[tuple[float | None, float], ...] = field(default_factory=tuple)
    inflight: tuple[int, ...] = ()
    spacings: tuple[float | None, ...] = ()
    accepted: tuple[int, ...] = ()
    out: tuple[tuple[float, ...], ...] = ()
