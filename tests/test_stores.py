"""The store contract, run against every store (only ``memory://`` so far)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from crawlpace import ConfigError, Settings
from crawlpace.stores import Blocked, Lease, MemoryStore, Outcome, Store, open_store
from crawlpace.testing import MockClock

StoreMaker = Callable[[Settings, MockClock], Store]

STORES: list[object] = [
    pytest.param(lambda s, c: open_store("memory://", s, c, random.Random(1)), id="memory"),
]

SETTINGS = Settings.from_scrapy({
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "THROTTLING_SCOPES": {
        "a": {"concurrency": 2, "delay": 0.5, "delay_per_slot": 1.0},
        "b": {"concurrency": 1, "delay": 0.0, "delay_per_slot": 0.0},
    },
})


@pytest.fixture(params=STORES)
def store_and_clock(request: pytest.FixtureRequest) -> tuple[Store, MockClock]:
    clock = MockClock()
    maker: StoreMaker = request.param
    return maker(SETTINGS, clock), clock


async def test_admits_then_says_when(store_and_clock: tuple[Store, MockClock]) -> None:
    store, _clock = store_and_clock
    lease = await store.acquire((("a", 1.0),))
    assert isinstance(lease, Lease)
    assert lease.granted_at == 0.0
    blocked = await store.acquire((("a", 1.0),))
    assert blocked == Blocked(0.5, (("a", 0.5),))
    await store.release(lease, Outcome(status=200, latency=0.1))
    snap = await store.snapshot("a")
    assert snap is not None
    assert (snap.inflight, snap.sends, snap.responses, snap.resting) == (0, 1, 1, 1)


async def test_multi_scope_admission_is_all_or_nothing(store_and_clock: tuple[Store, MockClock]) -> None:
    store, _clock = store_and_clock
    held = await store.acquire((("b", 1.0),))
    assert isinstance(held, Lease)
    result = await store.acquire((("a", 1.0), ("b", 1.0)))
    assert result == Blocked(None, (("b", None),))
    snap_a = await store.snapshot("a")
    assert snap_a is not None
    assert (snap_a.inflight, snap_a.sends) == (0, 0)  # "a" was not held while "b" refused
    await store.release(held, Outcome())
    both = await store.acquire((("a", 1.0), ("b", 1.0)))
    assert isinstance(both, Lease)
    assert len(both.slot_ready) == 2


async def test_blocked_reports_the_latest_time_over_scopes(
        store_and_clock: tuple[Store, MockClock]) -> None:
    store, clock = store_and_clock
    first = await store.acquire((("a", 1.0),))
    assert isinstance(first, Lease)
    await store.release(first, Outcome())
    clock.advance(0.1)
    result = await store.acquire((("a", 1.0), ("c", 1.0)))
    # "a" waits for its 0.5 s delay; "c" (defaults) is free.
    assert result == Blocked(0.5, (("a", 0.5),))
    assert sorted(await store.scopes()) == ["a", "c"]


async def test_outcomes_are_counted(store_and_clock: tuple[Store, MockClock]) -> None:
    store, _clock = store_and_clock
    for outcome in (Outcome(status=200, latency=1.0), Outcome(error="TimeoutError"),
                    Outcome(status=503, latency=3.0)):
        lease = await store.acquire((("b", 1.0),))
        assert isinstance(lease, Lease)
        await store.release(lease, outcome)
    snap = await store.snapshot("b")
    assert snap is not None
    assert (snap.responses, snap.errors, snap.last_latency) == (2, 1, 3.0)
    assert snap.mean_latency == pytest.approx(1.4)  # 1.0 then 20 % of the way to 3.0
    assert await store.snapshot("never.example") is None
    await store.aclose()


async def test_memory_store_forgets_idle_scopes_only() -> None:
    clock = MockClock()
    store = MemoryStore(SETTINGS, clock, random.Random(1))
    busy = store.acquire_nowait((("busy", 1.0),))
    assert isinstance(busy, Lease)
    for i in range(10):
        lease = store.acquire_nowait(((f"s{i}", 1.0),))
        assert isinstance(lease, Lease)
        store.release_nowait(lease, Outcome())
    assert len(store) == 11
    assert store.evict_idle() == 0  # every scope still has its 1 s delay pending
    clock.advance(1.0)
    assert store.evict_idle() == 10  # the one in flight stays
    assert len(store) == 1
    store.release_nowait(busy, Outcome())


def test_store_urls() -> None:
    assert isinstance(open_store("memory://", SETTINGS, MockClock(), random.Random()), MemoryStore)
    with pytest.raises(ConfigError, match="the Redis/Valkey store is not part of this version"):
        open_store("redis://127.0.0.1:6379/0", SETTINGS, MockClock(), random.Random())
    with pytest.raises(ConfigError, match="unknown scheme 'ftp'"):
        open_store("ftp://x", SETTINGS, MockClock(), random.Random())
