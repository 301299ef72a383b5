"""Shared fixtures: a fake clock that jumps, and throttlers built on it."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from crawlpace import Throttler
from crawlpace.testing import MockClock

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
