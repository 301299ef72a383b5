"""The add-on's scheduler and middleware driven by a stand-in for Scrapy's engine, on a fake clock.

:class:`FakeEngine` does what Scrapy's engine does with them, minus the
network: it asks the scheduler for requests while fewer than
``CONCURRENT_REQUESTS`` are in the downloader, runs each through the
middleware, "downloads" it in virtual time and hands the response (or the
exception) back through the middleware. The other ``test_scrapy_*`` modules
import it; real Scrapy crawls are in ``test_scrapy_crawl.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.settings import Settings as ScrapySettings

from crawlpace.scrapy import APPLIED_SCOPES_KEY, ThrottlingMiddleware, ThrottlingScheduler
from crawlpace.scrapy._runtime import Runtime
from crawlpace.scrapy._settings import read_config
from crawlpace.testing import MockClock

#: Exact spacing: no jitter anywhere.
EXACT: dict[str, Any] = {"RANDOMIZE_DOWNLOAD_DELAY": False, "BACKOFF_JITTER": False}

Outcome = Response | BaseException
Respond = Callable[[Request], Outcome]


class DictStats:
    """Scrapy's stats collector interface, over a dict."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None:
        self.values[key] = self.values.get(key, start) + count

    def set_value(self, key: str, value: Any) -> None:
        self.values[key] = value

    def max_value(self, key: str, value: Any) -> None:
        self.values[key] = max(self.values.get(key, value), value)

    def get(self, key: str, default: Any = 0) -> Any:
        return self.values.get(key, default)


def ok(request: Request) -> Response:
    return Response(request.url, status=200, request=request)


@dataclass
class Send:
    at: float
    url: str
    scopes: tuple[str, ...]


@dataclass
class FakeEngine:
    """Scrapy's engine, reduced to what the throttling components see.

    Args:
        settings: Scrapy settings (project priority) on top of :data:`EXACT`.
        clock: the virtual clock.
        latency: seconds each download takes, or a function of the request.
        respond: the outcome of each download; 200 by default.
        after: called with each request and its outcome once it went back
            through the middleware; returns follow-up requests to schedule
            (a retry, a redirect), as Scrapy's own middlewares would.
    """

    settings: Mapping[str, Any]
    clock: MockClock
    latency: float | Callable[[Request], float] = 0.1
    respond: Respond = ok
    after: Callable[[Request, Outcome], Iterable[Request]] | None = None
    manager: Any = None
    #: Builds the store from the crawl's settings and the clock (default: the one the settings name).
    store: Callable[[Any, MockClock], Any] | None = None
    sends: list[Send] = field(default_factory=list)
    outcomes: list[tuple[str, str]] = field(default_factory=list)
    peak_inflight: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        values = {**EXACT, **self.settings}
        if self.manager is not None:
            values["THROTTLING_MANAGER"] = self.manager
        config = read_config(ScrapySettings(values), lambda cls: cls(), clock=self.clock,
                             rng=random.Random(1))
        if self.store is not None:
            config = dataclasses.replace(config, store=self.store(config.settings, self.clock))
        self.stats = DictStats()
        self.wakeup = asyncio.Event()
        self.runtime = Runtime(config, stats=self.stats, wake=self.wakeup.set)
        self.scheduler = ThrottlingScheduler(self.runtime)
        self.middleware = ThrottlingMiddleware(self.runtime)
        self.cap = config.settings.concurrent_requests
        self.active: set[asyncio.Task[None]] = set()
        self.inflight: Counter[str] = Counter()
        self.scheduler.open()

    @property
    def throttler(self) -> Any:
        return self.runtime.throttler

    def crawl(self, request: Request) -> None:
        self.scheduler.enqueue_request(request)
        self.wakeup.set()

    def download(self, request: Request) -> asyncio.Task[None]:
        """A request that bypasses the scheduler (``engine.download``)."""
        task = asyncio.get_running_loop().create_task(self._download(request))
        self.active.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self.active.discard(task)
        self.wakeup.set()

    async def run(self, requests: Iterable[Request] = (), *, close: bool = True) -> None:
        for request in requests:
            self.crawl(request)
        while self.scheduler.has_pending_requests() or self.active:
            self.wakeup.clear()
            while len(self.active) < self.cap:
                admitted = self.scheduler.next_request()
                if admitted is None:
                    break
                self.download(admitted)
            await self.wakeup.wait()
        if close:
            self.scheduler.close("finished")
            await self.runtime.aclose()

    async def _download(self, request: Request) -> None:
        middleware = self.middleware
        try:
            await middleware.process_request(request)
        except IgnoreRequest as exc:
            await middleware.process_exception(request, exc)
            self.outcomes.append((request.url, type(exc).__name__))
            return
        scopes = tuple(request.meta.get(APPLIED_SCOPES_KEY, ()))
        self.sends.append(Send(self.clock.now(), request.url, scopes))
        for scope in scopes:
            self.inflight[scope] += 1
            self.peak_inflight[scope] = max(self.peak_inflight[scope], self.inflight[scope])
        latency = self.latency(request) if callable(self.latency) else self.latency
        await self.clock.sleep(latency)
        outcome = self.respond(request)
        for scope in scopes:
            self.inflight[scope] -= 1
        if isinstance(outcome, BaseException):
            await middleware.process_exception(request, outcome)  # type: ignore[arg-type]
            self.outcomes.append((request.url, type(outcome).__name__))
        else:
            request.meta["download_latency"] = float(latency)
            answered = await middleware.process_response(request, outcome)
            assert not isinstance(answered, Request)  # no soft-block rules in these tests
            outcome = answered
            self.outcomes.append((request.url, str(outcome.status)))
        if self.after is not None:
            for follow_up in self.after(request, outcome):
                self.crawl(follow_up)

    def times(self, prefix: str = "") -> list[float]:
        return [round(send.at, 6) for send in self.sends if send.url.startswith(prefix)]


@pytest.fixture
def clock() -> MockClock:
    return MockClock(autojump=True)


# --- the engine's contract ---------------------------------------------------------------------


async def test_the_seeds_worked_timeline(clock: MockClock) -> None:
    """Seed 001: concurrency 2, delay 0.3, per-slot delay 1.0: three requests go at 0.0, 0.3, 1.0."""
    engine = FakeEngine({"CONCURRENT_REQUESTS_PER_DOMAIN": 2, "DOWNLOAD_DELAY": 0.3,
                         "DOWNLOAD_DELAY_PER_SLOT": 1.0}, clock, latency=0.1)
    await engine.run(Request(f"https://books.toscrape.com/{n}") for n in range(3))
    assert engine.times() == [0.0, 0.3, 1.0]
    assert {send.scopes for send in engine.sends} == {("books.toscrape.com",)}
    assert engine.stats.get("throttling/permits/scheduler") == 3
    assert engine.stats.get("throttling/waits/scheduler") == 2  # the second and third waited in the scheduler


async def test_defaults_are_the_seeds_not_scrapys(clock: MockClock) -> None:
    """Unset, a scope gets one slot and one second between sends (Scrapy's own 8 and 0 do not apply)."""
    engine = FakeEngine({"RANDOMIZE_DOWNLOAD_DELAY": False}, clock, latency=0.1)
    await engine.run(Request(f"https://example.com/{n}") for n in range(3))
    assert engine.times() == [0.0, 1.0, 2.0]
    assert engine.peak_inflight["example.com"] == 1


async def test_a_slow_scope_never_takes_the_whole_budget(clock: MockClock) -> None:
    """Scrapy #2638/#6982: requests of a slow site wait in the scheduler, not in the downloader."""
    engine = FakeEngine({"CONCURRENT_REQUESTS": 4, "DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                         "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
                         "THROTTLING_SCOPES": {"slow.example": {"delay": 5.0, "concurrency": 1}}},
                        clock, latency=0.1)
    slow = [Request(f"https://slow.example/{n}") for n in range(10)]
    fast = [Request(f"https://fast{n % 3}.example/{n}") for n in range(60)]
    await engine.run([*slow, *fast])
    assert engine.times("https://slow.example") == [5.0 * n for n in range(10)]
    fast_times = [send.at for send in engine.sends if "fast" in send.url]
    assert len(fast_times) == 60
    # 60 fast requests of 0.1 s through 4 slots, the slow site borrowing one for 0.1 s in 5 s.
    assert max(fast_times) <= 1.6
    assert engine.peak_inflight["slow.example"] == 1
    assert engine.stats.get("throttling/waits/direct") == 0  # nobody waited outside the scheduler


async def test_higher_priority_goes_first_and_equal_scopes_take_turns(clock: MockClock) -> None:
    engine = FakeEngine({"DOWNLOAD_DELAY": 1.0, "CONCURRENT_REQUESTS": 1}, clock, latency=0.01)
    requests = [Request("https://a.example/low", priority=0), Request("https://a.example/high", priority=5),
                Request("https://a.example/mid", priority=2)]
    await engine.run(requests)
    assert [send.url for send in engine.sends] == ["https://a.example/high", "https://a.example/mid",
                                                   "https://a.example/low"]
    turns = FakeEngine({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0, "CONCURRENT_REQUESTS": 1},
                       clock, latency=0.01)
    await turns.run([*(Request(f"https://a.example/{n}") for n in range(3)),
                     *(Request(f"https://b.example/{n}") for n in range(3))])
    hosts = [send.scopes[0][0] for send in turns.sends]
    assert hosts == ["a", "b", "a", "b", "a", "b"]


class SeenUrls:
    """A duplicate filter with the interface of Scrapy's, by URL."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.logged: list[str] = []

    def request_seen(self, request: Request) -> bool:
        if request.url in self.seen:
            return True
        self.seen.add(request.url)
        return False

    def log(self, request: Request, spider: object) -> None:
        self.logged.append(request.url)


async def test_duplicates_are_filtered_as_scrapy_does(clock: MockClock) -> None:
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.0}, clock)
    engine.scheduler.df = dupefilter = SeenUrls()
    assert engine.scheduler.enqueue_request(Request("https://a.example/x"))
    assert not engine.scheduler.enqueue_request(Request("https://a.example/x"))
    assert engine.scheduler.enqueue_request(Request("https://a.example/x", dont_filter=True))
    await engine.run()
    assert len(engine.sends) == 2
    assert dupefilter.logged == ["https://a.example/x"]


async def test_requests_outside_the_scheduler_are_throttled_and_counted(
        clock: MockClock, caplog: pytest.LogCaptureFixture) -> None:
    """``engine.download`` requests wait in memory for their scope; the core warns at the threshold."""
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.5, "DOWNLOAD_DELAY_PER_SLOT": 0.5, "CONCURRENT_REQUESTS": 16,
                         "DELAYED_REQUESTS_WARN_THRESHOLD": 3}, clock, latency=0.01)
    with caplog.at_level("WARNING", logger="crawlpace"):
        for n in range(5):
            engine.download(Request(f"https://direct.example/{n}"))
        await engine.run()
    assert engine.times() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert engine.stats.get("throttling/permits/direct") == 5
    assert engine.stats.get("throttling/waits/direct") == 4
    assert engine.stats.get("throttling/delayed_requests/max") == 4
    assert engine.stats.get("throttling/wait_time_ms/direct") == 500 + 1000 + 1500 + 2000
    assert "requests are waiting in memory for a permit (DELAYED_REQUESTS_WARN_THRESHOLD)" in caplog.text
