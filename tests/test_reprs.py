"""Stateful objects say what they hold when printed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import crawlpace
from crawlpace import Settings
from crawlpace._user_agent import DEFAULT_USER_AGENT
from crawlpace.crawl import CrawlOptions
from crawlpace.frontier import Journal, Scheduler, Task
from crawlpace.policy.state import decode
from crawlpace.stores._policies import PolicyFactory, load_policy
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


def test_the_journal_shows_its_file_and_state(tmp_path: Path) -> None:
    journal = Journal.create(tmp_path / "crawl.db", fingerprint="out.jsonl")
    journal.add([("https://example.com/a", "example.com")])
    journal.mark_done([1])
    assert repr(journal) == f"<Journal {tmp_path / 'crawl.db'} open buffered_marks=1>"
    journal.close()
    assert repr(journal) == f"<Journal {tmp_path / 'crawl.db'} closed buffered_marks=0>"


def test_redis_clients_hide_the_password_in_their_repr() -> None:
    pytest.importorskip("redis")
    from crawlpace.frontier._shared import SharedFrontier
    from crawlpace.stores.redis import RedisStore

    # Nothing connects until the first command, so no server is needed to print them.
    url = "redis://:hunter2@127.0.0.1:9/0?namespace=t"
    store = RedisStore(url, Settings(), MockClock(), random.Random(1))
    assert repr(store) == "<RedisStore redis://:***@127.0.0.1:9/0 namespace='t' leases=0 policies=0/10000>"
    frontier = SharedFrontier("redis://user:hunter2@127.0.0.1:9/0?namespace=t", worker="w1")
    assert repr(frontier) == "<SharedFrontier redis://user:***@127.0.0.1:9/0 namespace='t' worker='w1'>"


def test_the_scrapy_runtime_and_scheduler_show_their_state() -> None:
    pytest.importorskip("scrapy")
    from scrapy.settings import Settings as ScrapySettings

    from crawlpace.scrapy import ThrottlingScheduler
    from crawlpace.scrapy._runtime import Runtime
    from crawlpace.scrapy._settings import read_config

    config = read_config(ScrapySettings({"CRAWLPACE_STORE": "redis://:hunter2@127.0.0.1:9/0"}),
                         lambda cls: cls(), clock=MockClock())
    runtime = Runtime(config)
    assert repr(runtime) == "<Runtime store=redis://:***@127.0.0.1:9/0 not started live=0 parked=0>"
    assert repr(ThrottlingScheduler(runtime)) == "<ThrottlingScheduler queued=0 queues=0 ready=0 refused=0>"
    assert repr(runtime.crawl_delays) == "<CrawlDelays scopes=0>"


def test_unreadable_stored_state_is_a_crawlpace_error() -> None:
    with pytest.raises(crawlpace.StateFormatError) as plain:
        decode(b"not ours")
    with pytest.raises(crawlpace.PolicyFormatError) as policy:
        load_policy(b"not ours", PolicyFactory(Settings()), "example.com")
    for caught in (plain, policy):
        assert isinstance(caught.value, crawlpace.CrawlpaceError)
        assert isinstance(caught.value, ValueError)  # as before, for code that caught that
    assert isinstance(policy.value, crawlpace.StateFormatError)
