"""Throttling-manager feedback hooks and per-scope managers (seed 001's examples)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from crawlpace import (
    ConfigError,
    Limits,
    ScopeConfig,
    ScopeFeedback,
    Throttler,
    ThrottlingManager,
    ThrottlingScopeManager,
    add_scope,
    scope_cache,
    update_scope_backoff,
)
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

FAST = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}


@dataclass
class Request:
    url: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Response:
    request: Request
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


async def fetch(throttler: Throttler, url: str, status: int = 200,
                headers: Mapping[str, str] | None = None) -> float:
    request = Request(url)
    async with throttler.slot(request) as permit:
        permit.feedback(Response(request, status, headers or {}))
        return permit.granted_at


async def backoff_of(throttler: Throttler, scope: str) -> int:
    stats = await throttler.scope_stats(scope)
    assert stats is not None
    return stats.backoff


class ScrapingApiManager(ThrottlingManager):
    """Seed 001: the API's scope plus the target site's; the upstream status counts for the site."""

    @scope_cache
    async def get_scopes(self, request: Any) -> Any:
        scopes = await super().get_scopes(request)
        parts = urlsplit(request.url)
        if parts.netloc != "api.toscrape.com":
            return scopes
        target = parse_qs(parts.query).get("url")
        if not target:
            return scopes
        return add_scope(scopes, urlsplit(target[0]).netloc)

    async def get_response_backoff(self, response: Any) -> dict[str, Any]:
        if urlsplit(response.request.url).netloc != "api.toscrape.com" or response.status != 200:
            return await super().get_response_backoff(response)
        upstream = int(response.headers.get("X-Upstream-Status-Code", "200"))
        return await super().get_response_backoff(Response(response.request, upstream, response.headers))


async def test_scraping_api_reads_the_upstream_status(clock: MockClock,
                                                      make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {
        "api.toscrape.com": {"concurrency": 1000, "delay": 0.08}}}, manager=ScrapingApiManager())
    url = "https://api.toscrape.com/?url=https://example.com/page"
    await fetch(throttler, url, 200, {"X-Upstream-Status-Code": "429"})
    # The upstream 429 counts for both scopes of the request; a plain 200 for neither.
    assert await backoff_of(throttler, "example.com") == 1
    await fetch(throttler, url, 200, {"X-Upstream-Status-Code": "200"})
    assert await backoff_of(throttler, "example.com") == 1
    await fetch(throttler, "https://other.example/", 429)
    assert await backoff_of(throttler, "other.example") == 1


class CostManager(ThrottlingManager):
    """Seed 001's cost-capped spending: expected cost up front, actual cost from a header."""

    @scope_cache
    async def get_scopes(self, request: Any) -> Any:
        scopes = await super().get_scopes(request)
        if urlsplit(request.url).netloc != "api.toscrape.com":
            return scopes
        return add_scope(scopes, "cost", float(parse_qs(urlsplit(request.url).query)["estimate"][0]))

    async def get_response_backoff(self, response: Any) -> dict[str, Any]:
        scopes = await super().get_response_backoff(response)
        if "cost" not in scopes:
            return scopes
        actual = float(response.headers.get("X-Actual-Cost", "0"))
        return update_scope_backoff(scopes, "cost", consumed_quota=actual)


async def test_cost_capped_spending_reconciles_actual_cost(clock: MockClock,
                                                           make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {
        "cost": {"quota": 100.0, "delay": 0.0},
        "api.toscrape.com": {"concurrency": 1000, "delay": 0.0}}}, manager=CostManager())
    await fetch(throttler, "https://api.toscrape.com/?estimate=2", 200, {"X-Actual-Cost": "7"})
    stats = await throttler.scope_stats("cost")
    assert stats is not None
    assert stats.quota_remaining == pytest.approx(10.0 - 7.0)


class HeaderDelayManager(ThrottlingManager):
    async def get_response_delay(self, response: Any) -> float | None:
        value = response.headers.get("X-Wait")
        return float(value) if value else await super().get_response_delay(response)


async def test_get_response_delay_can_read_a_custom_header(clock: MockClock,
                                                           make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST, manager=HeaderDelayManager())
    await fetch(throttler, "https://example.com/", 200, {"X-Wait": "7"})
    assert await fetch(throttler, "https://example.com/") == 7.0
    await fetch(throttler, "https://example.com/", 200, {"Retry-After": "3"})
    assert await fetch(throttler, "https://example.com/") == 10.0


class BrokenManager(ThrottlingManager):
    async def get_response_backoff(self, response: Any) -> dict[str, Any]:
        return {"example.com": "slow down please"}


async def test_a_broken_hook_falls_back_to_the_default(clock: MockClock,
                                                       make_throttler: ThrottlerFactory,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    throttler = make_throttler(FAST, manager=BrokenManager())
    with caplog.at_level(logging.ERROR, logger="crawlpace"):
        await fetch(throttler, "https://example.com/", 429)
    assert "not a dict of scope -> ScopeFeedback" in caplog.text
    assert await backoff_of(throttler, "example.com") == 1


def test_update_scope_backoff_copies_and_adds() -> None:
    original = {"a": ScopeFeedback(status=200)}
    updated = update_scope_backoff(original, "b", backoff=True, delay=3.0)
    assert original == {"a": ScopeFeedback(status=200)}
    assert updated["b"] == ScopeFeedback(backoff=True, hold=3.0)
    assert update_scope_backoff(updated, "a", failed=True)["a"] == ScopeFeedback(failed=True, status=200)


async def test_hooks_outside_the_throttler_say_so() -> None:
    with pytest.raises(RuntimeError, match="called by the throttler"):
        await ThrottlingManager().get_response_delay(Response(Request("https://example.com/")))


class PatientManager(ThrottlingScopeManager):
    """A per-scope manager that answers pushback with a fixed 30 s delay instead of doubling."""

    def __init__(self, *, scope: str, config: ScopeConfig) -> None:
        super().__init__(scope=scope, config=config)
        self.pushed_back = False

    def feedback(self, feedback: ScopeFeedback, *, now: float, generation: int, base: Limits) -> None:
        if feedback.backoff:
            self.pushed_back = True

    def adjust(self, base: Limits, now: float) -> Limits:
        if not self.pushed_back:
            return base
        return Limits(1, max(base.delay, 30.0), base.delay_per_slot, base.floor)


async def test_a_scope_manager_replaces_backoff_for_one_scope(clock: MockClock,
                                                              make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {
        "patient.example": {"delay": 0.0, "manager": f"{__name__}.PatientManager"}}})
    await fetch(throttler, "https://patient.example/", 429)
    await fetch(throttler, "https://example.com/", 429)
    assert await fetch(throttler, "https://example.com/") == 1.0  # the default: doubled from 0 to 1 s
    assert await fetch(throttler, "https://patient.example/") == 30.0


def test_a_bad_scope_manager_path_fails_at_start_up() -> None:
    with pytest.raises(ConfigError, match=r"THROTTLING_SCOPE_MANAGER: cannot import 'nowhere\.Manager'"):
        Throttler({"THROTTLING_SCOPE_MANAGER": "nowhere.Manager"})
    with pytest.raises(ConfigError, match="is not a scope manager class"):
        Throttler({"THROTTLING_SCOPE_MANAGER": "collections.OrderedDict"})


def test_unimportable_backoff_exceptions_fail_at_start_up() -> None:
    with pytest.raises(ConfigError, match=r"BACKOFF_EXCEPTIONS: cannot import 'nowhere_pkg.errors"):
        Throttler({"BACKOFF_EXCEPTIONS": ["nowhere_pkg.errors.TimeoutError"]})
