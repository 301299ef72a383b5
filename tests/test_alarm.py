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


async def test_an_earlier_time_moves_the_sleepers_timer() -> None:
    clock = MockClock(autojump=True)
    alarm = Alarm(clock)
    sleeper = asyncio.create_task(alarm.sleep(None))  # nothing on the board had a time
    await asyncio.sleep(0)
    alarm.wake_by(2.5)  # a queue put back meanwhile, to be looked at again then
    alarm.wake_by(4.0)  # a later time changes nothing
    assert clock.next_deadline() == 2.5
    assert await asyncio.wait_for(sleeper, 1.0) is False  # not its own time: it was moved
    assert clock.now() == 2.5
    assert clock.next_deadline() is None


async def test_it_says_when_it_slept_its_own_time_out() -> None:
    clock = MockClock(autojump=True)
    alarm = Alarm(clock)
    alarm.wake_by(1.0)  # no one sleeps: the next sleep is given the board's earliest time itself
    assert await alarm.sleep(3.0) is True
    assert clock.now() == 3.0
    alarm.ring()
    assert await alarm.sleep(5.0) is False
