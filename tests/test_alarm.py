"""The crawl scheduler's alarm: news or the earliest due time, whichever comes first."""

from __future__ import annotations

import asyncio

from crawlpace.frontier._alarm import Alarm
from crawlpace.testing import MockClock


async def test_news_that_came_before_the_sleep_is_not_lost() -> None:
    clock = MockClock()
    alarm = Alarm(clock)
    alarm.ring()  # between finding nothing due and going to sleep
    await asyncio.wait_for(alarm.sleep(None), 1.0)
    assert clock.now() == 0.0
    assert "news=False" in repr(alarm)


async def test_it_sleeps_until_the_due_time_and_cancels_its_timer() -> None:
    clock = MockClock(autojump=True)
    alarm = Alarm(clock)
    await alarm.sleep(7.5)
    assert clock.now() == 7.5
    assert clock.next_deadline() is None


async def test_news_wakes_it_before_the_due_time() -> None:
    clock = MockClock()
    alarm = Alarm(clock)
    sleeper = asyncio.create_task(alarm.sleep(60.0))
    await asyncio.sleep(0)
    assert "sleeping=True" in repr(alarm)
    assert clock.next_deadline() == 60.0
    alarm.ring()
    await asyncio.wait_for(sleeper, 1.0)
    assert clock.now() == 0.0
    assert clock.next_deadline() is None  # the timer went with the sleep
    assert "news=False sleeping=False" in repr(alarm)
