"""The crawl scheduler on a shared store: a sleeping take() hears of every queue that may go.

A fleet worker's fetch, once its page is answered, asks the scheduler for the
next task itself (``take_due``) while the worker's dispatcher sleeps in
``take()``. With a shared store each admission is a round trip, so the fetch
holds the site's queue off the board meanwhile, and the dispatcher, finding
nothing due, sleeps without a deadline. Should the answer be "every slot of
the site is taken" (by other workers), the queue is parked with a time to look
again: the sleeper must hear of that time, or nothing in this process ever
wakes it (the other workers' releases go through Redis only), and the worker
keeps its claimed URLs for ever.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from crawlpace import Permit, Throttler
from crawlpace.frontier import _scheduler
from crawlpace.frontier._scheduler import Scheduler, Task

from .redis_server import RedisServer

pytestmark = pytest.mark.redis

#: One slot per site, no delay: only the slot decides admission.
ONE_SLOT = {"CONCURRENT_REQUESTS_PER_DOMAIN": 1, "DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
            "RANDOMIZE_DOWNLOAD_DELAY": False}


def _namespace(server: RedisServer) -> str:
    return f"{server.url}?namespace=t{uuid.uuid4().hex[:12]}"


async def test_a_queue_parked_while_take_sleeps_wakes_it(redis_server: RedisServer,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=_scheduler.__name__)
    url = _namespace(redis_server)
    async with Throttler(ONE_SLOT, store=url) as here, Throttler(ONE_SLOT, store=url) as elsewhere:
        # Another worker holds the site's only slot.
        theirs = await elsewhere.try_acquire("https://example.com/theirs")
        assert isinstance(theirs, Permit)
        scheduler = Scheduler(here, robots=None, on_drop=lambda task, why, detail: None)
        scheduler.push(Task(1, "https://example.com/1"))
        # A fetch's take_due() pops the queue and waits for the store's answer; meanwhile the
        # dispatcher's take() finds nothing due and goes to sleep, with no queue on the board.
        fetch = asyncio.ensure_future(scheduler.take_due())
        take = asyncio.ensure_future(scheduler.take())
        assert await fetch is None  # the store said: the slot is taken, look again shortly
        assert not take.done()
        await theirs.release()  # the other worker is done: only a look at the store can tell
        try:
            got = await asyncio.wait_for(take, 5.0)
        except TimeoutError:
            raise AssertionError(f"take() never woke up: {scheduler!r}") from None
        assert got is not None
        task, permit = got
        assert task.url == "https://example.com/1"
        await permit.release()
    # Woken by the queue's own time to look again, not by the scheduler's last-resort look.
    assert not [record for record in caplog.records if "lost wake-up" in record.getMessage()]


async def test_a_lost_wake_up_is_still_found_by_the_periodic_look(
        redis_server: RedisServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # The second line only: a queue put on the board behind the alarm's back (what a future bug
    # would do) is still found, within MAX_QUIET, and the warning says a wake-up was lost.
    monkeypatch.setattr(_scheduler, "MAX_QUIET", 0.05)
    caplog.set_level(logging.WARNING, logger=_scheduler.__name__)
    async with Throttler(ONE_SLOT, store=_namespace(redis_server)) as here:
        scheduler = Scheduler(here, robots=None, on_drop=lambda task, why, detail: None)
        scheduler.push(Task(1, "https://example.com/1"))
        board = scheduler._board
        key = board.pop(here.clock.now())
        assert key == "example.com"
        take = asyncio.ensure_future(scheduler.take())
        await asyncio.sleep(0)
        assert not take.done()
        board.due(key, here.clock.now())  # no wake-up
        got = await asyncio.wait_for(take, 5.0)
        assert got is not None
        await got[1].release()
    assert [record for record in caplog.records if "lost wake-up" in record.getMessage()]
