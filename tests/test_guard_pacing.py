"""Honest headers: a client that follows RateLimit and Retry-After is never braked, and gets at least
what a client that hammers gets (issue 36, item 2).

Before, ``RateLimit`` announced the whole remaining quota while the partial
stages refused a random half or three quarters, so a client pacing by the
header ran into the brake: with a quota of 60 per 60 s it settled at 30 per
window, while a bot that hammered got all 60.

The brake is driven on a fake clock: first on its own (pure), then behind a
real uvicorn on 127.0.0.1, reached by crawlpace's own client
(``crawlpace.http``) and by a plain httpx client that follows the headers.
"""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from crawlpace import Throttler
from crawlpace.guard import Guard, StagedBrake
from crawlpace.http import throttled_client
from crawlpace.testing import MockClock

from .test_guard_uvicorn import uvicorn_on_loopback

QUOTA, WINDOW = 60, 60.0
AGENT = "ExampleBot/1.0 (+https://example.org/bot)"


def follow(brake: StagedBrake, key: str, start: float, end: float) -> tuple[int, int]:
    """A client that waits t/r after each answer (Retry-After after a 429); its (200s, 429s)."""
    now, ok, refused = start, 0, 0
    while now < end:
        decision = brake.decide(key, now)
        if decision.allowed:
            ok += 1
            gap = decision.horizon / decision.allowance if decision.allowance else decision.reset
        else:
            refused += 1
            gap = float(max(math.ceil(decision.retry_after or 0.0), 1))
        now += gap + 0.001  # the answer's way back
    return ok, refused


def hammer(brake: StagedBrake, key: str, start: float, end: float, tries: int) -> int:
    return sum(brake.decide(key, start + (end - start) * n / tries).allowed for n in range(tries))


@pytest.mark.parametrize(("quota", "window"), [(QUOTA, WINDOW), (1000, 86400.0), (200, 3600.0)])
def test_a_client_following_the_headers_is_never_braked_and_gets_the_quota(quota: int, window: float) -> None:
    ok, refused = follow(StagedBrake(quota, window, rng=random.Random(3)), "polite", 0.0, window)
    rude = hammer(StagedBrake(quota, window, rng=random.Random(3)), "rude", 0.0, window, quota * 20)
    assert refused == 0
    assert ok >= rude == quota


def test_a_late_comer_at_a_partial_stage_is_told_when_to_come_and_then_let_through() -> None:
    brake = StagedBrake(100, 1000.0, rng=random.Random(8))
    hammer(brake, "rude", 0.0, 100.0, 120)  # the rude client drives the quota into a partial stage
    first = brake.decide("polite", 500.0)
    assert brake.stats()["stage"] in (1, 2)
    wait = first.retry_after if first.retry_after is not None else first.horizon / first.allowance
    ok, refused = follow(brake, "polite", 500.0 + wait + 0.001, 1000.0)
    assert refused == 0
    assert ok >= 1


async def plain_client(base_url: str, clock: MockClock, end: float) -> tuple[int, int]:
    """An httpx client that follows RateLimit (one request per t/r seconds) and Retry-After."""
    ok = refused = 0
    async with httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=5.0) as client:
        while clock.now() < end:
            response = await client.get("/search", headers={"User-Agent": AGENT})
            if response.status_code == 429:
                refused += 1
                clock.advance(float(response.headers["retry-after"]))
                continue
            ok += 1
            fields = dict(part.split("=") for part in response.headers["ratelimit"].split(";")[1:])
            left, horizon = int(fields["r"]), int(fields["t"])
            clock.advance(horizon / left if left else horizon + 1)
    return ok, refused


def guarded_site(clock: MockClock, **options: Any) -> tuple[Guard, list[int]]:
    served: list[int] = []

    async def site(scope: Any, receive: Any, send: Any) -> None:
        served.append(1)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"results"})

    return Guard(site, quota=QUOTA, window=WINDOW, costly="/search", clock=clock.now,
                 rng=random.Random(11), **options), served


async def test_a_plain_client_following_the_headers_gets_the_whole_quota_unbraked() -> None:
    clock = MockClock(10 * WINDOW)
    guard, served = guarded_site(clock)
    async with uvicorn_on_loopback(guard, "off") as base_url:
        ok, refused = await plain_client(base_url, clock, 11 * WINDOW)
    assert (ok, refused) == (QUOTA, 0)
    assert len(served) == QUOTA


async def test_a_hammering_client_gets_no_more_than_a_polite_one() -> None:
    clock = MockClock(10 * WINDOW)
    guard, served = guarded_site(clock)
    async with uvicorn_on_loopback(guard, "off") as base_url, \
            httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=5.0) as client:
        codes = []
        while clock.now() < 11 * WINDOW:
            codes.append((await client.get("/search", headers={"User-Agent": AGENT})).status_code)
            clock.advance(0.2)  # five a second against a quota of one a second
    assert codes.count(200) == len(served) <= QUOTA


@pytest.fixture
async def paced_throttler() -> AsyncIterator[tuple[Throttler, MockClock]]:
    clock = MockClock(10 * WINDOW, autojump=True)
    throttler = Throttler({"RANDOMIZE_DOWNLOAD_DELAY": False, "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
                           "DOWNLOAD_DELAY": 0.0}, clock=clock, rng=random.Random(2))
    yield throttler, clock
    await throttler.aclose()


async def test_crawlpaces_own_client_learns_the_pace_and_is_never_braked(
        paced_throttler: tuple[Throttler, MockClock]) -> None:
    throttler, clock = paced_throttler
    guard, served = guarded_site(clock)
    codes: list[int] = []
    async with uvicorn_on_loopback(guard, "off") as base_url, \
            throttled_client(throttler=throttler, base_url=base_url, retries=0, trust_env=False,
                             headers={"User-Agent": AGENT}) as client:
        while clock.now() < 11 * WINDOW - 1.0:
            codes.append((await client.get("/search")).status_code)
    assert codes.count(429) == 0
    assert codes.count(200) == len(served) >= QUOTA - 2

