"""The crawl scheduler on the fake clock: when a queue is tried again."""

from __future__ import annotations

import asyncio

import pytest

from crawlpace import ThrottlingManager, host_scope
from crawlpace._scoping._scopes import ScopesSpec
from crawlpace.frontier._scheduler import Scheduler, Task
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory


async def test_an_answer_that_loosens_the_limits_wakes_its_queue(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # AutoThrottle starts at 5 s between sends; a fast answer lowers that at once.
    throttler = make_throttler({"AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_START_DELAY": 5.0,
                                "DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                                "CONCURRENT_REQUESTS_PER_DOMAIN": 2})
    dropped: list[Task] = []
    scheduler = Scheduler(throttler, robots=None, on_drop=lambda task, why, detail: dropped.append(task))
    for n in range(3):
        scheduler.push(Task(n, f"https://example.com/{n}"))
    got = await scheduler.take()
    assert got is not None
    task, permit = got
    # A slot is free but the delay is not over: the queue is filed for t = 5.
    assert await scheduler._take_due() is None
    permit.feedback(status=200, latency=0.1)
    await permit.release()
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert stats.delay == pytest.approx(2.55)
    scheduler.released(permit.scopes, task.key)
    second = await scheduler.take()
    assert second is not None
    assert second[0].url == "https://example.com/1"
    assert clock.now() == pytest.approx(2.55)  # the new delay, not the old 5 s
    assert not dropped


class _SiteGroups(ThrottlingManager):
    """A manager that must be awaited: both hosts of one site share a scope, others keep their host."""

    async def get_scopes(self, request: object) -> ScopesSpec:
        await asyncio.sleep(0)
        url = request if isinstance(request, str) else getattr(request, "url", "")
        host = host_scope(url)
        if host.endswith("shop.example"):
            return ["shop", host]
        if host == "bad.example":
            return ""
        return host


async def test_an_awaited_manager_queues_tasks_by_its_scopes(make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(manager=_SiteGroups())
    assert throttler.scopes_nowait("https://www.shop.example/") is None  # it must be awaited
    dropped: list[tuple[str, str]] = []
    scheduler = Scheduler(throttler, robots=None,
                          on_drop=lambda task, why, detail: dropped.append((task.url, why)))
    for url in ("https://www.shop.example/1", "https://www.shop.example/2", "https://other.example/1",
                "https://bad.example/1"):
        scheduler.push(Task(0, url))
    assert scheduler.queued == 4  # set aside until the manager answers
    assert not scheduler.idle
    assert scheduler.take_nowait() is None  # the plain-call path leaves the manager to take()
    got = await scheduler.take()
    assert got is not None
    task, permit = got
    # The queues are the manager's scopes, as the throttler admits by them, not the hosts.
    assert (task.key, task.host) == ("shop+www.shop.example", "www.shop.example")
    assert permit.scopes == ("shop", "www.shop.example")
    assert scheduler.scope_sizes() == {"shop+www.shop.example": 1, "other.example": 1}
    assert dropped == [("https://bad.example/1", "failed")]
    await permit.release()


async def test_take_nowait_admits_with_the_memory_store_and_says_none_when_nothing_is_due(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 1.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                                "CONCURRENT_REQUESTS_PER_DOMAIN": 2, "RANDOMIZE_DOWNLOAD_DELAY": False})
    scheduler = Scheduler(throttler, robots=None, on_drop=lambda task, why, detail: None)
    for n in range(2):
        scheduler.push(Task(n, f"https://example.com/{n}"))
    scheduler.push(Task(9, "https://other.example/9"))
    first, second = scheduler.take_nowait(), scheduler.take_nowait()
    assert first is not None
    assert second is not None
    assert {first[0].url, second[0].url} == {"https://example.com/0", "https://other.example/9"}
    assert first[0].scopes in {("example.com",), ("other.example",)}  # worked out once, at push
    # example.com's delay holds its second page back: nothing is due now, and no await was needed.
    assert scheduler.take_nowait() is None
    assert scheduler.queued == 1
    for _task, permit in (first, second):
        assert permit.release_nowait()  # the memory store releases as a plain call
        assert permit.released
    clock.advance(1.0)
    third = await scheduler.take_due()
    assert third is not None
    assert third[0].url == "https://example.com/1"
    assert clock.now() == pytest.approx(1.0)
