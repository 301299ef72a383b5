"""Shared fixtures: a fake clock that jumps, and throttlers built on it."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest

from crawlpace import Throttler
from crawlpace.testing import MockClock

from .redis_server import RedisServer, redis_binary

#: Settings with jitter off, so spacing is exact and tests can compare times.
EXACT: dict[str, Any] = {"RANDOMIZE_DOWNLOAD_DELAY": False, "BACKOFF_JITTER": False}


@pytest.fixture
def clock() -> MockClock:
    return MockClock(autojump=True)


ThrottlerFactory = Callable[..., Throttler]


@pytest.fixture
async def make_throttler(clock: MockClock) -> AsyncIterator[ThrottlerFactory]:
    """Build throttlers on the fake clock with jitter off; close them afterwards."""
    made: list[Throttler] = []

    def make(settings: Mapping[str, Any] | None = None, **kwargs: Any) -> Throttler:
        merged = {**EXACT, **(settings or {})}
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("rng", random.Random(1))
        throttler = Throttler(merged, **kwargs)
        made.append(throttler)
        return throttler

    yield make
    for throttler in made:
        await throttler.aclose()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port, shared by the session's tests."""
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH (scripts/test installs one)")
    server = RedisServer(binary)
    server.start()
    yield server
    server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The shared server's URL with a namespace of the test's own."""
    return f"{redis_server.url}?namespace=t{uuid.uuid4().hex[:12]}"
