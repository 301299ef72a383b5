"""A scope's snapshot as every worker of the shared store sees it, from its keys' contents."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any

from .._policies import PolicyFactory, PolicyFormatError, has_rampup, load_policy
from .._snapshot import describe
from ..base import ScopeSnapshot

__all__ = ["fetch_snapshot", "read_snapshot"]


async def fetch_snapshot(client: Any, scope: str, keys: tuple[str, str, str, str], factory: PolicyFactory,
                         now: float) -> ScopeSnapshot | None:
    """Read ``scope``'s four keys (one pipeline on ``client``) and describe it as of ``now`` (server time)."""
    admission, leases, resting_key, policy_key = keys
    async with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(admission)
        pipe.zcount(leases, f"({now}", "+inf")
        pipe.zcount(resting_key, f"({now}", "+inf")
        pipe.get(policy_key)
        fields, inflight, resting, blob = await pipe.execute()
    return read_snapshot(scope, fields, int(inflight), int(resting), blob, factory, now)


def read_snapshot(scope: str, fields: dict[Any, Any], inflight: int, resting: int, blob: bytes | None,
                  factory: PolicyFactory, now: float) -> ScopeSnapshot | None:
    """Describe ``scope`` from its admission hash, live lease and resting counts, and stored policy.

    Args:
        fields: the admission hash (``HGETALL``); empty: the scope has no state.
        now: the server's time.
    """
    if not fields:
        return None
    values = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
              for k, v in fields.items()}
    policy = factory.new(scope)
    if blob is not None:
        with contextlib.suppress(PolicyFormatError):
            if policy.rampup is None and has_rampup(blob):
                # Written by a worker that ran rampup on the scope, read with settings that leave it
                # off (crawlpace dashboard without the workers' options): show it as they run it.
                factory = factory.rampup_variant()
            policy = load_policy(blob, factory, scope)

    def number(key: str, default: float = -math.inf) -> float:
        text = values.get(key)
        return float(text) if text not in (None, "") else default

    # The stored limits are those of the last write; a recovery due since then (a backoff
    # window that passed, a hold that ended) is applied by the next admission, so the
    # snapshot applies it too, as the memory store's does: a dashboard must not show a
    # backoff the next request will not see.
    refreshed = now >= policy.wake_at and policy.refresh(now)
    if refreshed:
        for key, value in (("conc", policy.limits.concurrency), ("delay", policy.limits.delay),
                           ("pslot", policy.limits.delay_per_slot)):
            values[key] = str(value)
    concurrency = int(number("conc", policy.limits.concurrency))
    ready: float | None = max(number("next"), number("hold"), number("turn"))  # turn: look.lua
    if inflight >= concurrency:
        ready = None
    # "o": responses, errors, the latest latency and the mean, one field (release.lua). The
    # separate fields are what workers before 0.7.0 wrote: a rolling upgrade counts both.
    counts = values.get("o", "0 0  ").split(" ")
    responses = int(number("resp", 0)) + int(counts[0])
    errors = int(number("errs", 0)) + int(counts[1])
    latency = float(counts[2]) if counts[2] else number("lat", math.nan)
    mean = float(counts[3]) if counts[3] else number("mlat", math.nan)
    snap = describe(scope, policy, now,
                    concurrency=concurrency, delay=number("delay", policy.limits.delay),
                    delay_per_slot=number("pslot", policy.limits.delay_per_slot),
                    inflight=int(inflight), resting=int(resting),
                    # "rb": reservations rolled back after other sends (Redis Cluster); never sent.
                    sends=int(number("sends", 0) - number("rb", 0)),
                    responses=responses, errors=errors,
                    ready_at=ready, last_latency=None if math.isnan(latency) else latency,
                    mean_latency=None if math.isnan(mean) else mean)
    quota = policy.quota
    if quota is None:
        return snap
    # The shared bucket, not this worker's copy: the credit "qc" as of "qa" (none: full).
    credit, settled = number("qc", math.nan), number("qa", math.nan)
    remaining = quota.capacity
    if not (math.isnan(credit) or math.isnan(settled)):
        refill = quota.rate * (now - settled)
        remaining = credit if now <= settled else min(quota.capacity, credit + refill)
    return dataclasses.replace(snap, quota_remaining=remaining)
