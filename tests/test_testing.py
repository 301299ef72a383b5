"""MockClock: virtual time, timers, and jumping when the loop is idle."""

from __future__ import annotations

import asyncio

import pytest

from crawlpace import Clock
from crawlpace.testing import MockClock


def test_advance_fires_due_timers_in_order() -> None:
    clock = MockClock(start=10.0)
    assert isinstance(clock, Clock)
    fired: list[tuple[str, float]] = []
    clock.call_at(12.0, lambda: fired.append(("b", clock.now())))
    clock.call_at(11.0, lambda: fired.append(("a", clock.now())))
    cancelled = clock.call_at(11.5, lambda: fired.append(("x", clock.now())))
    cancelled.cancel()
    clock.advance(1.5)
    assert fired == [("a", 11.0)]
    assert clock.now() == 11.5
    assert clock.next_deadline() == 12.0
    clock.advance(5)
    assert fired == [("a", 11.0), ("b", 12.0)]
    assert clock.next_deadline() is None


def test_time_never_goes_backwards() -> None:
    with pytest.raises(ValueError, match="time cannot go backwards"):
        MockClock().advance(-1)


async def test_autojump_skips_idle_time() -> None:
    clock = MockClock(autojump=True)
    seen: list[float] = []

    async def sleeper(delay: float) -> None:
        await clock.sleep(delay)
        seen.append(clock.now())

    await asyncio.gather(sleeper(30.0), sleeper(5.0), sleeper(3600.0))
    assert seen == [5.0, 30.0, 3600.0]


async def test_autojump_waits_for_busy_tasks() -> None:
    clock = MockClock(autojump=True)
    steps: list[float] = []

    async def busy() -> None:
        for _ in range(50):  # many loop iterations without touching the clock
            await asyncio.sleep(0)
        steps.append(clock.now())

    async def sleeper() -> None:
        await clock.sleep(1.0)
        steps.append(clock.now())

    await asyncio.gather(busy(), sleeper())
    assert steps == [0.0, 1.0]  # time did not jump while busy() still ran


async def test_without_autojump_time_stands_still() -> None:
    clock = MockClock()
    task = asyncio.create_task(clock.sleep(1.0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not task.done()
    clock.advance(1.0)
    await task
    assert clock.now() == 1.0
    assert repr(clock) == "<MockClock now=1 timers=0 autojump=False>"


async def test_two_autojumping_clocks_share_a_loop() -> None:
    first, second = MockClock(autojump=True), MockClock(start=100.0, autojump=True)

    async def nap(clock: MockClock, seconds: float) -> float:
        await clock.sleep(seconds)
        return clock.now()

    results = await asyncio.wait_for(
        asyncio.gather(nap(first, 5.0), nap(second, 2.0), nap(first, 1.0)), timeout=10)
    assert list(results) == [5.0, 102.0, 1.0]


def test_docstring_example_holds() -> None:
    from crawlpace import Throttler

    async def example() -> float:
        clock = MockClock(autojump=True)
        settings = {"DOWNLOAD_DELAY": 60, "RANDOMIZE_DOWNLOAD_DELAY": False}
        async with Throttler(settings, clock=clock) as t:
            for _ in range(3):
                async with t.slot("https://example.com/"):
                    pass
        return clock.now()

    assert asyncio.run(example()) == 120.0
