"""One trace, every store: the same acquires, releases and outcomes give the same decisions.

The store contract (tests/test_stores.py) checks each rule on its own. This
replays long random traces, mixing every rule (slots, delays, per-slot delays,
quotas, backoff and its generations, server holds and paces, Crawl-delay, the
breaker, requests with several scopes), on the memory store and on Redis and
Valkey, all on the same fake clock (the Redis store's ``time=local``), and
compares every decision: each admission's time and slot readiness, each refusal's
wait per scope, and the snapshot of every scope after every step. The admission
rules live in Python for the memory store and in Lua for Redis; this is where
the two would be seen to drift apart.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from crawlpace import Settings
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Blocked, Lease, Outcome, Store, open_store
from crawlpace.testing import MockClock

from .redis_server import RedisServer

SETTINGS = Settings.from_scrapy({
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    # No BACKOFF_MIN_DELAY: one set is a floor, which would hide the cuts taken from the evidence.
    "BACKOFF_MAX_DELAY": 8.0,
    "BACKOFF_WINDOW": 5.0,
    # No jitter anywhere: each store draws its own random numbers, so jitter cannot be compared.
    "BACKOFF_JITTER": 0.0,
    "THROTTLING_SCOPES": {
        "slots": {"concurrency": 3, "delay": 0.0, "delay_per_slot": 0.0},
        "paced": {"concurrency": 2, "delay": 0.3, "delay_per_slot": 0.7},
        "quota": {"concurrency": 2, "delay": 0.0, "delay_per_slot": 0.0, "quota": 6.0, "window": 10.0},
        "brk": {"concurrency": 2, "delay": 0.1, "delay_per_slot": 0.0,
                "breaker": {"min_requests": 4, "error_share": 0.3, "pause": 3.0, "give_up_after": 50}},
    },
})
SCOPES = ("slots", "paced", "quota", "brk", "plain")
#: Digits kept of every time compared: the stores compute in doubles, in two languages.
DIGITS = 6


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, DIGITS)


@dataclass
class Replay:
    """A store under a trace: the leases it holds and what it decided."""

    store: Store
    clock: MockClock
    held: list[Lease] = field(default_factory=list)
    decisions: list[Any] = field(default_factory=list)


def _outcome(rng: random.Random, lease: Lease) -> Outcome:
    kind = rng.choice(["ok", "ok", "ok", "ok", "429", "503", "hold", "pace", "error", "none"])
    if kind == "none":
        return Outcome()
    if kind == "error":
        return Outcome(error="TimeoutError",
                       feedback=tuple(ScopeFeedback(backoff=True, failed=True) for _ in lease.demands))
    status = {"ok": 200, "429": 429, "503": 503, "hold": 429, "pace": 200}[kind]
    latency = round(rng.uniform(0.01, 0.5), 3)
    signals = []
    for _scope, _use in lease.demands:
        if kind == "ok":
            signals.append(ScopeFeedback(status=status, latency=latency))
        elif kind == "hold":
            signals.append(ScopeFeedback(backoff=True, status=status, hold=round(rng.uniform(0.5, 3.0), 2)))
        elif kind == "pace":
            signals.append(ScopeFeedback(status=status, latency=latency, pace=0.4, pace_for=5.0))
        else:
            signals.append(ScopeFeedback(backoff=True, failed=status >= 500, status=status))
    return Outcome(status=status, latency=latency, feedback=tuple(signals))


def _trace(seed: int, steps: int) -> list[tuple[str, Any]]:
    """A random trace of operations; each store gets the very same list."""
    rng = random.Random(seed)
    ops: list[tuple[str, Any]] = []
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.45:
            count = 1 if rng.random() < 0.8 else 2
            scopes = rng.sample(SCOPES, count)
            ops.append(("acquire", tuple((scope, 1.0) for scope in scopes)))
        elif roll < 0.8:
            ops.append(("release", (rng.random(), rng.randrange(1 << 30))))
        elif roll < 0.97:
            ops.append(("advance", round(rng.choice([0.05, 0.1, 0.3, 0.7, 1.5, 4.0]) * rng.random(), 3)))
        else:
            ops.append(("crawl_delay", rng.choice([None, 0.5, 1.0])))
    return ops


async def _apply(replay: Replay, op: str, arg: Any) -> None:
    store, clock = replay.store, replay.clock
    if op == "acquire":
        result = await store.acquire(arg)
        if isinstance(result, Lease):
            replay.held.append(result)
            replay.decisions.append(("lease", _round(result.granted_at),
                                     tuple(_round(ready) for ready in result.slot_ready)))
        else:
            assert isinstance(result, Blocked)
            replay.decisions.append(("blocked", _round(result.ready_at),
                                     tuple((scope, _round(at)) for scope, at in result.waiting_on)))
    elif op == "release":
        if not replay.held:
            replay.decisions.append(("nothing held",))
            return
        pick, seed = arg
        lease = replay.held.pop(int(pick * len(replay.held)))
        gave_up = await store.release(lease, _outcome(random.Random(seed), lease))
        replay.decisions.append(("released", tuple(sorted(gave_up))))
    elif op == "advance":
        clock.advance(arg)
        replay.decisions.append(("now", _round(clock.now())))
    else:
        await store.set_crawl_delay("paced", arg)
        replay.decisions.append(("crawl_delay", arg))
    for scope in SCOPES:
        snap = await store.snapshot(scope)
        if snap is None or snap.sends == 0:
            replay.decisions.append((scope, None))  # a shared store may keep no state for an unused scope
            continue
        replay.decisions.append((scope, snap.concurrency, _round(snap.delay), _round(snap.delay_per_slot),
                                 snap.inflight, snap.sends, snap.responses, snap.errors, snap.backoff,
                                 snap.generation, _round(snap.hold_in), snap.breaker,
                                 _round(snap.quota_remaining), snap.crawl_delay))


def _open(url: str) -> Replay:
    clock = MockClock()
    return Replay(open_store(url, SETTINGS, clock, random.Random(7)), clock)


#: Seeds replayed. Two met drifts now mended: seed 7, the requests in flight that the backoff's
#: first cut reads (the memory store counted them at the refusal's answer, Redis at its
#: admission; Redis now counts them at the answer too); seed 19, a failed breaker probe (a
#: Redis worker's copy still said "open" for a pause that was over, so the reopening was neither
#: written back nor logged, and other workers probed again at once). Seeds 1-60 agree.
SEEDS = [*range(1, 8), 19]


@pytest.mark.redis
@pytest.mark.parametrize("server_kind", ["redis", "valkey"])
@pytest.mark.parametrize("seed", SEEDS)
async def test_one_trace_gives_the_same_decisions_on_memory_and_on_a_server(
        server_kind: str, seed: int, request: pytest.FixtureRequest) -> None:
    server: RedisServer = request.getfixturevalue(f"{server_kind}_server")
    memory = _open("memory://")
    shared = _open(f"{server.url}?namespace=trace{uuid.uuid4().hex[:10]}&time=local&allot=0")
    try:
        for step, (op, arg) in enumerate(_trace(seed, 240)):
            for replay in (memory, shared):
                await _apply(replay, op, arg)
            if memory.decisions != shared.decisions:
                for index, (one, other) in enumerate(zip(memory.decisions, shared.decisions, strict=False)):
                    assert one == other, (f"seed {seed}, step {step} ({op} {arg!r}), decision {index}: "
                                          f"memory {one!r} != {server_kind} {other!r}")
                assert len(memory.decisions) == len(shared.decisions)
        admitted = sum(1 for decision in memory.decisions if decision[0] == "lease")
        refused = sum(1 for decision in memory.decisions if decision[0] == "blocked")
        # The trace exercised both answers.
        assert admitted > 10
        assert refused > 5
    finally:
        await memory.store.aclose()
        await shared.store.aclose()
