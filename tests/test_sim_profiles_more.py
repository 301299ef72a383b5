"""The headers, slow, flaky, dead-with-resets and shifting profiles, over real loopback HTTP."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
import pytest

from crawlpace import parse_hints
from crawlpace.sim import (
    DeadSite,
    FlakySite,
    HeadersSite,
    OverloadSite,
    RateLimitSite,
    ShiftingSite,
    SlowSite,
)
from crawlpace.testing import MockClock

from .test_sim_profiles import GatedSleep, live, statuses


async def no_sleep(seconds: float) -> None:
    """Take no time at all, so latencies are chosen but not waited for."""


class Recorder:
    """A sleep that records what it was asked and returns at once."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)


# --- headers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("style", "source"), [
    ("ietf", "ratelimit"), ("trio", "ratelimit-trio"), ("x-ratelimit", "x-ratelimit")])
async def test_headers_announce_the_budget_in_each_family(style: str, source: str) -> None:
    clock = MockClock(50.0)
    site = HeadersSite(limit=3, window=10.0, style=style, clock=clock.now)
    assert site.capacity == pytest.approx(0.3)
    async with live(site) as client:
        clock.advance(0.0)
        answers = [await client.get("/page/1") for _ in range(3)]
        clock.advance(4.0)
        refused = await client.get("/page/1")
    assert [a.status_code for a in answers] == [200, 200, 200]
    hints = [parse_hints(a.headers, wall_now=time.time(), cap=3600.0) for a in answers]
    assert all(h is not None and h.source == source for h in hints)
    assert [h.remaining for h in hints if h] == [2, 1, 0]
    assert all(h.reset == pytest.approx(10.0, abs=1.0) for h in hints if h)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "6"  # the window opened at 50 ends at 60
    last = parse_hints(refused.headers, wall_now=time.time(), cap=3600.0)
    assert last is not None
    assert last.remaining == 0
    assert last.reset == pytest.approx(6.0, abs=1.0)
    if style != "x-ratelimit":
        assert last.limit == 3
    assert site.stats.throttled == 1


async def test_headers_windows_follow_each_other_from_the_first_request() -> None:
    clock = MockClock(0.0)
    site = HeadersSite(limit=2, window=5.0, retry_after=False, clock=clock.now)
    async with live(site) as client:
        assert await statuses(client, 3) == [200, 200, 429]
        clock.advance(4.9)
        assert await statuses(client, 1) == [429]
        clock.advance(0.1)  # t = 5: the second window
        assert await statuses(client, 3) == [200, 200, 429]
        clock.advance(12.0)  # t = 17: the fourth window, [15, 20)
        response = await client.get("/page/1")
        assert response.headers["ratelimit"] == '"site";r=1;t=3'
        assert response.headers["ratelimit-policy"] == '"site";q=2;w=5'
    assert not site.stats.violations  # no Retry-After was sent, so no embargo


# --- slow ------------------------------------------------------------------------------------------


async def test_slow_takes_one_to_two_seconds_and_sheds_past_its_limit() -> None:
    sleep = GatedSleep(expected=2)
    site = SlowSite(limit=2, sleep=sleep)
    assert site.capacity == pytest.approx(2 / 1.5)
    async with live(site) as client:
        held = [asyncio.create_task(client.get(f"/page/{n}")) for n in (1, 2)]
        async with asyncio.timeout(2.0):
            await sleep.all_waiting.wait()
        assert (await client.get("/page/3")).status_code == 503
        sleep.gate.set()
        assert [(await task).status_code for task in held] == [200, 200]
    assert all(1.0 <= latency <= 2.0 for latency in sleep.latencies)
    assert site.stats.statuses == {200: 2, 503: 1}


async def test_slow_latencies_are_spread_over_the_range() -> None:
    recorder = Recorder()
    site = SlowSite(low=1.0, high=2.0, limit=1, sleep=recorder)
    async with live(site) as client:
        await statuses(client, 200)
    assert len(recorder.asked) == 200
    assert min(recorder.asked) >= 1.0
    assert max(recorder.asked) <= 2.0
    assert sum(recorder.asked) / 200 == pytest.approx(1.5, abs=0.1)
    assert min(recorder.asked) < 1.2
    assert max(recorder.asked) > 1.8


# --- flaky -----------------------------------------------------------------------------------------


async def test_flaky_errors_and_hangs_in_their_shares() -> None:
    recorder = Recorder()
    site = FlakySite(errors=0.2, hangs=0.1, hang=30.0, latency=0.01, sleep=recorder)
    async with live(site) as client:
        codes = Counter(await statuses(client, 1000))
    waits = Counter(recorder.asked)
    assert codes[500] + codes[200] == 1000
    assert codes[500] / 1000 == pytest.approx(0.2, abs=0.04)
    assert waits[30.0] / 1000 == pytest.approx(0.1, abs=0.03)
    assert waits[30.0] + waits[0.01] == codes[200]  # a hanging request is still answered, late
    assert site.capacity is None


async def test_a_hanging_request_outlasts_the_client_timeout() -> None:
    site = FlakySite(errors=0.0, hangs=1.0, hang=5.0)
    async with live(site) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/page/1", timeout=0.2)
        assert (await client.get("/robots.txt")).status_code == 200  # robots.txt never hangs
    await asyncio.sleep(0)
    assert site.stats.requests == 2


def test_flaky_shares_may_not_exceed_one() -> None:
    with pytest.raises(ValueError, match="add up to more than 1"):
        FlakySite(errors=0.6, hangs=0.5)


# --- dead ------------------------------------------------------------------------------------------


async def test_dead_resets_connections_in_its_share() -> None:
    site = DeadSite(resets=0.5)
    outcomes: Counter[str] = Counter()
    async with live(site) as client:
        for _ in range(200):
            try:
                response = await client.get("/page/1")
            except httpx.TransportError:
                outcomes["reset"] += 1
            else:
                outcomes[str(response.status_code)] += 1
    assert outcomes["reset"] + outcomes["503"] == 200
    assert outcomes["reset"] / 200 == pytest.approx(0.5, abs=0.12)
    assert site.stats.resets == outcomes["reset"] == site.stats.aborted
    assert site.stats.statuses == {503: outcomes["503"]}
    assert site.stats.as_dict()["resets"] == outcomes["reset"]


async def test_every_dead_request_can_be_reset() -> None:
    site = DeadSite(resets=1.0)
    async with live(site) as client:
        for path in ("/robots.txt", "/page/1"):
            with pytest.raises(httpx.TransportError):
                await client.get(path)
    assert site.stats.resets == 2


# --- shifting --------------------------------------------------------------------------------------


async def test_shifting_ratelimit_halves_then_comes_back() -> None:
    clock = MockClock(0.0)
    site = ShiftingSite(base="ratelimit", changes=[[10, 0.5], [20, 1.0]], rate=4.0, burst=1,
                        retry_after=False, clock=clock.now)
    assert isinstance(site.inner, RateLimitSite)

    async def served_over(seconds: float, step: float) -> int:
        ok = 0
        for _ in range(round(seconds / step)):
            ok += (await client.get("/page/1")).status_code == 200
            clock.advance(step)
        return ok

    async with live(site) as client:
        assert await served_over(10.0, 0.125) == 40  # 8 tries a second, 4 served
        assert site.capacity == 4.0
        assert await served_over(10.0, 0.125) == 20  # halved at t = 10
        assert site.capacity == 2.0
        assert await served_over(10.0, 0.125) == 40  # back at t = 20
    assert site.capacity == 4.0
    assert site.stats.capacity == pytest.approx((10 * 4 + 10 * 2 + 10 * 4) / 30, abs=0.02)
    timeline = site.stats.timeline()
    assert timeline["capacity"] == [[0.0, 4.0], [10.0, 2.0], [20.0, 4.0]]
    assert timeline["ok"][:30] == [4] * 10 + [2] * 10 + [4] * 10
    assert timeline["refused"][:30] == [4] * 10 + [6] * 10 + [4] * 10


async def test_shifting_applies_to_windows_and_loaded_sites() -> None:
    clock = MockClock(0.0)
    budget = ShiftingSite(base="headers", changes=[[5, 0.5]], limit=10, window=5.0, clock=clock.now)
    async with live(budget) as client:
        assert await statuses(client, 1) == [200]
        clock.advance(5.0)
        response = await client.get("/page/1")
        assert response.headers["ratelimit-policy"] == '"site";q=5;w=5'
    assert budget.capacity == 1.0
    server = ShiftingSite(base="overload", changes=[[0, 0.5]], limit=8, latency=0.1, per_inflight=0.0,
                          sleep=no_sleep)
    async with live(server) as client:
        await statuses(client, 1)
    assert isinstance(server.inner, OverloadSite)
    assert server.inner.limit == 4
    assert server.capacity == pytest.approx(40.0)


def test_shifting_refuses_a_base_without_a_capacity_to_shift() -> None:
    with pytest.raises(ValueError, match="base = 'crawldelay' is not an accepted word"):
        ShiftingSite(base="crawldelay", changes=[[1, 0.5]], delay=1.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        ShiftingSite(base="ratelimit", changes=[[10, 0.5], [5, 1.0]], rate=1.0)


def test_overload_capacity_is_at_the_best_load() -> None:
    assert OverloadSite(latency=0.1, per_inflight=0.02, limit=5).capacity == pytest.approx(5 / 0.18)
    # Each extra request costs more than one alone: one at a time is fastest.
    assert OverloadSite(latency=0.1, per_inflight=0.3, limit=5).capacity == pytest.approx(10.0)


def test_overload_knee_makes_latency_grow_as_a_power_past_it() -> None:
    site = OverloadSite(latency=0.2, per_inflight=0.0, limit=10, knee=3, exponent=2.0)
    assert site.latency(2) == pytest.approx(0.2)  # 3 in flight: at the knee, no growth yet
    assert site.latency(5) == pytest.approx(0.2 * (6 / 3) ** 2)
    # Throughput n / latency peaks at the knee, then falls: keeping 3 in flight is best.
    assert site.best_load() == 3
    assert site.capacity == pytest.approx(3 / 0.2)
    level = OverloadSite(latency=0.2, per_inflight=0.0, limit=6, knee=2, exponent=1.0)
    # Exponent 1: level past the knee; the fewest in flight that reach it is the best load.
    assert level.best_load() == 2
    assert level.capacity == pytest.approx(2 / 0.2)
