"""Stateful objects say what they hold when printed."""

from __future__ import annotations

from crawlpace import Settings
from crawlpace._user_agent import DEFAULT_USER_AGENT
from crawlpace.crawl import CrawlOptions
from crawlpace.frontier import Scheduler, Task
from crawlpace.stores.memory import MemoryStore
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory


async def test_the_crawl_scheduler_shows_its_queues(make_throttler: ThrottlerFactory) -> None:
    scheduler = Scheduler(make_throttler(), robots=None, on_drop=lambda task, why, detail: None)
    scheduler.push(Task(1, "https://example.com/a"))
    scheduler.push(Task(2, "https://example.com/b"))
    assert repr(scheduler) == ("<Scheduler queued=2 queues=1 waiting_robots=0 "
                               "<Board due=1 parked=0 next_at=0.0>>")


def test_the_memory_store_shows_its_scopes() -> None:
    store = MemoryStore(Settings(), MockClock())
    assert repr(store) == "<MemoryStore scopes=0 evicted=0>"


def test_one_default_user_agent() -> None:
    assert CrawlOptions.__dataclass_fields__["user_agent"].default == DEFAULT_USER_AGENT
    assert DEFAULT_USER_AGENT.startswith("crawlpace/")
