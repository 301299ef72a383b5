"""Quotas and the circuit breaker through the throttler, on the fake clock."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from crawlpace import QuotaError, ScopeGivenUp, Throttler
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

FAST = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}


async def send(throttler: Throttler, scopes: Any, status: int = 200, **feedback: Any) -> float:
    async with throttler.slot(scopes=scopes) as permit:
        sent = permit.granted_at
        permit.feedback(status=status, **feedback)
    return sent


# -- quotas ---------------------------------------------------------------------------


async def test_daily_quota_leaves_budget_for_the_last_hour(clock: MockClock,
                                                           make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 4, "THROTTLING_SCOPES": {
        "api": {"quota": 10_000.0, "window": 86_400.0, "concurrency": 4, "delay": 0.0}}})
    sends: list[float] = []

    async def worker() -> None:
        while clock.now() < 86_400.0:
            sends.append(await send(throttler, "api"))

    await asyncio.gather(*(worker() for _ in range(4)))
    in_day = [t for t in sends if t < 86_400.0]
    last_hour = [t for t in in_day if t >= 82_800.0]
    assert len(in_day) <= 10_000
    assert len(in_day) >= 9_900
    # Spread evenly: an hour's share of the day's quota is about 416.
    assert 380 <= len(last_hour) <= 440
    first_hour = [t for t in in_day if t < 3_600.0]
    assert len(first_hour) <= 440


async def test_expected_and_actual_use_are_reconciled(clock: MockClock,
                                                      make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {"cost": {"quota": 100.0, "delay": 0.0}}})
    await send(throttler, {"cost": 2.0}, consumed_quota={"cost": 2.5})
    stats = await throttler.scope_stats("cost")
    assert stats is not None
    assert stats.quota_remaining == pytest.approx(10.0 - 2.5)  # burst capacity is a tenth of the quota
    await send(throttler, {"cost": 4.0}, consumed_quota={"cost": 1.0})
    stats = await throttler.scope_stats("cost")
    assert stats is not None
    assert stats.quota_remaining == pytest.approx(10.0 - 3.5)


async def test_a_request_larger_than_the_quota_fails_clearly(clock: MockClock,
                                                             make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {"cost": {"quota": 10.0}}})
    with pytest.raises(QuotaError, match=r"expects to use 11 quota units of scope 'cost', whose whole "
                                         r"quota is 10 per 60s"):
        await throttler.acquire(scopes={"cost": 11.0})


async def test_waiters_needing_more_quota_go_first(clock: MockClock,
                                                   make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {
        "cost": {"quota": 120.0, "window": 60.0, "delay": 0.0, "concurrency": 8}}})
    # Spend the burst, so that everyone below has to wait for the refill.
    await send(throttler, {"cost": 60.0})
    order: list[float] = []

    async def want(use: float) -> None:
        async with throttler.slot(scopes={"cost": use}):
            order.append(use)

    tasks = [asyncio.create_task(want(use)) for use in (1.0, 5.0, 2.0, 5.0)]
    await asyncio.gather(*tasks)
    assert order == [5.0, 5.0, 2.0, 1.0]


# -- circuit breaker ---------------------------------------------------------------


async def test_dead_site_is_given_up_within_two_minutes(clock: MockClock,
                                                        make_throttler: ThrottlerFactory,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    alerts: list[tuple[str, str, float]] = []
    throttler = make_throttler(on_give_up=lambda scope, why: alerts.append((scope, why, clock.now())))
    sends: list[float] = []

    async def crawl() -> None:
        while True:
            sends.append(await send(throttler, "dead.example", 503))

    with caplog.at_level(logging.ERROR, logger="crawlpace"), \
            pytest.raises(ScopeGivenUp, match=r"dead\.example"):
        await crawl()
    assert len(sends) <= 40
    assert alerts
    assert alerts[0][0] == "dead.example"
    assert alerts[0][2] <= 120.0
    assert "given up" in caplog.text


async def test_refused_connections_give_up_a_site_too(clock: MockClock,
                                                      make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"CONCURRENT_REQUESTS_PER_DOMAIN": 16, **FAST})
    attempts = 0

    async def fetch() -> None:
        nonlocal attempts
        while True:
            try:
                async with throttler.slot(scopes="down.example"):
                    attempts += 1
                    raise ConnectionRefusedError
            except ConnectionRefusedError:
                continue  # the permit took the exception as feedback

    results = await asyncio.gather(*(fetch() for _ in range(16)), return_exceptions=True)
    assert all(isinstance(r, ScopeGivenUp) for r in results)
    assert attempts <= 40
    assert clock.now() <= 120.0


async def test_a_given_up_scope_never_stalls_the_others(clock: MockClock,
                                                        make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    healthy: list[float] = []

    async def dead() -> None:
        while True:
            await send(throttler, "dead.example", 503)

    async def alive() -> None:
        while clock.now() < 200.0:
            healthy.append(await send(throttler, "ok.example", 200))
            await clock.sleep(1.0)

    results = await asyncio.gather(dead(), alive(), return_exceptions=True)
    assert isinstance(results[0], ScopeGivenUp)
    assert len(healthy) >= 195  # one a second, never held up by the dead site


async def test_queued_requests_of_a_given_up_scope_fail(clock: MockClock,
                                                        make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)

    async def one() -> int:
        await send(throttler, "dead.example", 503)
        return 1

    results = await asyncio.gather(*(one() for _ in range(30)), return_exceptions=True)
    failures = [r for r in results if isinstance(r, ScopeGivenUp)]
    assert failures
    assert all(r == 1 or isinstance(r, ScopeGivenUp) for r in results)
    assert "consecutive failures" in failures[0].reason


async def test_breaker_opens_probes_and_closes(clock: MockClock,
                                               make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "BACKOFF_HTTP_CODES": []})
    for _ in range(5):
        await send(throttler, "flaky.example", 500)  # 500 is no backoff code here
    stats = await throttler.scope_stats("flaky.example")
    assert stats is not None
    assert stats.breaker == "open"
    probe = await send(throttler, "flaky.example", 200)
    assert probe == 10.0  # paused for a sixth of BREAKER_PAUSE (the first pause), then one probe
    stats = await throttler.scope_stats("flaky.example")
    assert stats is not None
    assert stats.breaker == "closed"
    assert await send(throttler, "flaky.example") == 10.0


async def test_ten_percent_errors_slow_a_site_but_never_give_it_up(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.2, "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    statuses = iter([503 if i % 10 == 3 else 200 for i in range(2_000)])
    sent = 0
    for status in statuses:
        await send(throttler, "flaky.example", status)
        sent += 1
    assert sent == 2_000
    stats = await throttler.scope_stats("flaky.example")
    assert stats is not None
    assert stats.breaker != "given_up"
    assert clock.now() > 2_000 * 0.2  # slowed down by backoff and pauses


async def test_breaker_can_be_turned_off(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "BREAKER_ENABLED": False, "BACKOFF_HTTP_CODES": []})
    sends = [await send(throttler, "dead.example", 500) for _ in range(50)]
    assert sends[-1] == 0.0


async def test_errors_in_the_callers_code_do_not_trip_the_breaker(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    for _ in range(50):
        with pytest.raises(KeyError):
            async with throttler.slot(scopes="ok.example"):
                raise KeyError("a parsing bug")
    stats = await throttler.scope_stats("ok.example")
    assert stats is not None
    assert (stats.errors, stats.breaker, stats.backoff) == (50, "closed", 0)


async def test_an_uncounted_probe_outcome_frees_the_probe(clock: MockClock,
                                                          make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "BACKOFF_HTTP_CODES": []})
    for _ in range(5):
        await send(throttler, "flaky.example", 500)
    # The probe ends in a bug of the caller's code: nothing the breaker counts.
    with pytest.raises(KeyError):
        async with throttler.slot(scopes="flaky.example"):
            raise KeyError("parsing bug")
    assert clock.now() == 10.0  # the first pause: a sixth of BREAKER_PAUSE
    # The next request is the new probe; it must not wait forever.
    assert await send(throttler, "flaky.example") == 10.0


async def test_a_probe_that_hangs_holds_the_scope_no_longer_than_its_pause(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "BACKOFF_HTTP_CODES": [], "CONCURRENT_REQUESTS_PER_DOMAIN": 4})
    for _ in range(5):
        await send(throttler, "flaky.example", 500)
    assert clock.now() == 0.0

    async def hung_probe() -> float:
        async with throttler.slot(scopes="flaky.example") as permit:
            sent = permit.granted_at
            await clock.sleep(60.0)  # a hang the crawl's timeout ends much later
            permit.feedback(status=200, latency=60.0)
        return sent

    probe = asyncio.create_task(hung_probe())
    await clock.sleep(0.001)
    # The probe went at 10 (the first pause); out as long as that pause, it lets another go.
    assert await send(throttler, "flaky.example") == 20.0
    assert await probe == 10.0
