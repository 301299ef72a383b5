"""One scope's snapshot from its policy and its admission counts (every store builds it the same way)."""

from __future__ import annotations

from ..policy.scope import ScopePolicy, ThrottlingScopeManager
from .base import ScopeSnapshot

__all__ = ["describe"]


def describe(scope: str, policy: ScopePolicy, now: float, *, concurrency: int, delay: float,
             delay_per_slot: float, inflight: int, resting: int, sends: int, responses: int, errors: int,
             ready_at: float | None, last_latency: float | None,
             mean_latency: float | None) -> ScopeSnapshot:
    """A :class:`ScopeSnapshot` of ``scope`` at ``now``.

    Args:
        ready_at: when a send could go (``None``: every slot busy).
        The others: the store's admission state, as named in :class:`ScopeSnapshot`.
    """
    manager = policy.manager
    backoff = manager.backoff if isinstance(manager, ThrottlingScopeManager) else None
    breaker = policy.breaker
    return ScopeSnapshot(
        scope=scope,
        concurrency=concurrency,
        delay=delay,
        delay_per_slot=delay_per_slot,
        inflight=inflight,
        resting=resting,
        sends=sends,
        responses=responses,
        errors=errors,
        ready_in=None if ready_at is None else max(0.0, ready_at - now),
        last_latency=last_latency,
        mean_latency=mean_latency,
        backoff=backoff.level if backoff is not None else 0,
        generation=policy.generation,
        hold_in=policy.hold_until - now if policy.hold_until > now else None,
        # As of now: a pause that has ended shows as half-open, in every store alike.
        breaker=breaker.snapshot(now).state if breaker is not None else (
            "closed" if policy.config.breaker.enabled else "off"),
        quota_remaining=policy.quota.remaining(now) if policy.quota is not None else None,
        crawl_delay=policy.crawl_delay,
        rampup=policy.rampup.stats(now) if policy.rampup is not None else None,
        pace=policy.pace if now < policy.pace_until and policy.pace > 0.0 else None,
    )
