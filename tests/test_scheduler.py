"""The crawl scheduler on the fake clock: when a queue is tried again."""

from __future__ import annotations

import pytest

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
