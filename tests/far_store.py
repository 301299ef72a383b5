"""A memory store behind a slow link, for tests of what a client hears before a shared store does."""

from __future__ import annotations

from crawlpace import Settings
from crawlpace._scoping._scopes import Demand
from crawlpace.stores import Blocked, Lease, MemoryStore, Outcome
from crawlpace.stores.base import ScopeSnapshot
from crawlpace.testing import MockClock


class FarStore:
    """A memory store behind a slow link: each release reaches it ``trip`` seconds after it was made
    (a loaded fleet's hold call, its read of the counts and its earlier releases before it), so a
    refusal's hold lands that late, as with a shared store. Not a local store: releases are awaited."""

    shared = True

    def __init__(self, settings: Settings, clock: MockClock, trip: float) -> None:
        self.inner = MemoryStore(settings, clock)
        self.clock, self.trip = clock, trip

    async def acquire(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
        return await self.inner.acquire(demands)

    async def release(self, lease: Lease, outcome: Outcome) -> tuple[str, ...]:
        await self.clock.sleep(self.trip)
        return await self.inner.release(lease, outcome)

    async def set_crawl_delay(self, scope: str, delay: float | None) -> None:
        await self.inner.set_crawl_delay(scope, delay)

    async def snapshot(self, scope: str) -> ScopeSnapshot | None:
        return await self.inner.snapshot(scope)

    async def scopes(self) -> list[str]:
        return await self.inner.scopes()

    async def aclose(self) -> None:
        await self.inner.aclose()
