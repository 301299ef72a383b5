"""Each profile's limits and violation counting, over real loopback HTTP on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from crawlpace import crawl_delay, parse_hints
from crawlpace._robotstxt._robots import RobotsRules
from crawlpace.sim import (
    PROFILES,
    CrawlDelaySite,
    DeadSite,
    OverloadSite,
    QuotaSite,
    RateLimitSite,
    RetryAfterSite,
    SimServer,
    Site,
)
from crawlpace.sim._asgi import Message, Receive, Scope, Send
from crawlpace.sim._site import COMMON_PARAMS
from crawlpace.testing import MockClock

HOST = "127.0.0.2"


class Lucky(random.Random):
    """Chance that always draws the same value, so a staged brake's partial stages are scripted."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@contextlib.asynccontextmanager
async def live(site: Site) -> AsyncIterator[httpx.AsyncClient]:
    """Serve ``site`` on a loopback alias and yield a client aimed at it."""
    async with (SimServer(site, HOST) as server,
                httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=5.0) as client):
        yield client


async def statuses(client: httpx.AsyncClient, count: int, path: str = "/page/1") -> list[int]:
    return [(await client.get(path)).status_code for _ in range(count)]


# --- ratelimit -------------------------------------------------------------------------------------


async def test_ratelimit_refuses_past_the_bucket_with_retry_after() -> None:
    clock = MockClock(100.0)
    # No tolerance: on the fake clock nothing lags, so a request at the instant of the 429 came after it.
    site = RateLimitSite(rate=2.0, burst=2, clock=clock.now, tolerance=0.0)
    async with live(site) as client:
        assert await statuses(client, 2) == [200, 200]
        refused = await client.get("/page/2")
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"  # 0.5 s to the next token, in whole seconds
        # robots.txt is exempt from the bucket, not from the embargo: asking for it now is a violation.
        assert (await client.get("/robots.txt")).status_code == 200
        clock.advance(0.5)
        assert await statuses(client, 1) == [200]  # a token is back, but it came before the 1 s asked
        assert site.stats.violations["retry_after"] == 2
        clock.advance(1.0)  # the bucket is full again
        assert await statuses(client, 3) == [200, 200, 429]
    report = site.stats.as_dict()
    assert report["statuses"] == {"200": 6, "429": 2}
    assert report["capacity"] == 2.0
    assert report["violations"] == 2


async def test_ratelimit_without_retry_after_sets_no_embargo() -> None:
    clock = MockClock()
    site = RateLimitSite(rate=1.0, retry_after=False, clock=clock.now)
    async with live(site) as client:
        first, second = await client.get("/"), await client.get("/")
        assert first.status_code == 200
        assert second.status_code == 429
        assert "retry-after" not in second.headers
        assert await statuses(client, 3) == [429, 429, 429]
    assert site.stats.throttled == 4
    assert not site.stats.violations


# --- crawldelay ------------------------------------------------------------------------------------


async def test_crawldelay_counts_requests_closer_than_the_delay() -> None:
    clock = MockClock()
    site = CrawlDelaySite(delay=2.0, clock=clock.now)
    async with live(site) as client:
        robots = await client.get("/robots.txt")
        assert crawl_delay(robots.text, "anybot") == 2.0
        assert await statuses(client, 1) == [200]
        clock.advance(2.0)
        assert await statuses(client, 1) == [200]
        clock.advance(1.0)
        assert await statuses(client, 2, "/page/2") == [200, 200]  # both too soon, both answered
        assert (await client.get("/robots.txt")).status_code == 200  # robots.txt is not a page
        clock.advance(2.0)
        assert await statuses(client, 1, "/nothing") == [404]
    assert site.stats.violations == {"crawl_delay": 2}
    assert site.capacity == 0.5


async def test_private_pages_are_disallowed_served_and_counted() -> None:
    clock = MockClock()
    site = CrawlDelaySite(delay=1.0, private=2, clock=clock.now)
    async with live(site) as client:
        robots = (await client.get("/robots.txt")).text
        assert "Disallow: /private/\n" in robots
        rules = RobotsRules.parse(robots.encode(), "anybot")
        assert not rules.allowed(f"{client.base_url}/private/1")
        assert rules.allowed(f"{client.base_url}/page/1")
        assert await statuses(client, 1, "/private/2") == [200]  # served all the same...
        clock.advance(1.0)
        assert await statuses(client, 1, "/private/3") == [404]  # past the private pages
        clock.advance(1.0)
        assert await statuses(client, 1, "/page/1") == [200]
    assert site.stats.violations == {"disallow": 2}  # ... and counted, found or not
    plain = CrawlDelaySite(delay=1.0, clock=clock.now)
    assert b"Disallow" not in plain.content.robots


# --- retryafter ------------------------------------------------------------------------------------


async def test_retryafter_demands_silence_and_counts_who_breaks_it() -> None:
    clock = MockClock()
    site = RetryAfterSite(rate=1.0, embargo=3, clock=clock.now)
    async with live(site) as client:
        assert await statuses(client, 1) == [200]
        clock.advance(0.5)
        over = await client.get("/page/1")
        assert over.status_code == 429
        assert over.headers["retry-after"] == "3"
        clock.advance(3.0)  # exactly as asked
        assert await statuses(client, 1) == [200]
        assert not site.stats.violations
        clock.advance(0.1)
        assert await statuses(client, 1) == [429]  # over the rate again: embargo until 6.6
        clock.advance(0.4)
        early = await client.get("/page/1")
        assert early.status_code == 429
        assert early.headers["retry-after"] == "3"  # 2.6 s left, rounded up
        assert site.stats.violations == {"retry_after": 1}
        assert (await client.get("/robots.txt")).status_code == 200  # still exempt, still counted
        assert site.stats.violations == {"retry_after": 2}
    hint = parse_hints(early.headers, wall_now=0.0, cap=60.0)
    assert hint is not None
    assert hint.retry_after == 3.0


async def test_retryafter_tolerates_a_little_jitter() -> None:
    clock = MockClock()
    site = RetryAfterSite(rate=1.0, embargo=2, tolerance=0.05, clock=clock.now)
    async with live(site) as client:
        assert await statuses(client, 2) == [200, 429]
        clock.advance(1.97)
        assert await statuses(client, 1) == [200]
    assert not site.stats.violations


# --- overload --------------------------------------------------------------------------------------


class GatedSleep:
    """Record each requested latency and hold every sleeper until the test opens the gate."""

    def __init__(self, expected: int) -> None:
        self.latencies: list[float] = []
        self.gate = asyncio.Event()
        self.all_waiting = asyncio.Event()
        self._expected = expected

    async def __call__(self, seconds: float) -> None:
        self.latencies.append(seconds)
        if len(self.latencies) >= self._expected:
            self.all_waiting.set()
        await self.gate.wait()


async def test_overload_slows_with_load_and_sheds_past_the_limit() -> None:
    sleep = GatedSleep(expected=2)
    site = OverloadSite(latency=0.05, per_inflight=0.05, limit=2, sleep=sleep)
    assert site.capacity == pytest.approx(20.0)  # 2 in flight, 0.1 s each at worst
    async with live(site) as client:
        first = asyncio.create_task(client.get("/page/1"))
        second = asyncio.create_task(client.get("/page/2"))
        async with asyncio.timeout(2.0):
            await sleep.all_waiting.wait()
        shed = await client.get("/page/3")
        assert shed.status_code == 503
        assert (await client.get("/robots.txt")).status_code == 200  # exempt from the load
        sleep.gate.set()
        assert [(await first).status_code, (await second).status_code] == [200, 200]
    assert sleep.latencies == pytest.approx([0.05, 0.1])
    assert site.busy == 0
    assert site.stats.peak_inflight == 3
    assert site.stats.throttled == 1


async def test_overload_latency_is_real() -> None:
    site = OverloadSite(latency=0.03, per_inflight=0.0, limit=1)
    async with live(site) as client:
        started = time.monotonic()
        assert (await client.get("/page/1")).status_code == 200
        assert time.monotonic() - started >= 0.03


# --- quota -----------------------------------------------------------------------------------------


async def test_quota_stops_at_the_quota_until_the_window_ends() -> None:
    clock = MockClock(1.0)
    # No tolerance: on the fake clock nothing lags, so a request at the instant of the 429 came after it.
    site = QuotaSite(quota=4, window=10.0, clock=clock.now, rng=Lucky(0.999), tolerance=0.0)
    assert site.capacity == 0.4
    async with live(site) as client:
        allowed = await client.get("/page/1")
        assert allowed.headers["ratelimit-policy"] == '"guard";q=4;w=10'
        assert await statuses(client, 3) == [200, 200, 200]
        spent = await client.get("/page/1")
        assert spent.status_code == 429
        assert spent.headers["retry-after"] == "9"  # the window ends at 10
        assert (await client.get("/robots.txt")).status_code == 200  # never braked
        clock.advance(4.0)
        assert await statuses(client, 1) == [429]
        clock.advance(5.0)  # t = 10: a new window, and the embargo is over
        assert await statuses(client, 1) == [200]
    assert site.stats.violations == {"retry_after": 2}  # robots.txt at 1 and the page at 5
    assert site.guard.stats()["totals"]["used"] == 1.0


async def test_quota_brakes_in_stages() -> None:
    clock = MockClock()
    site = QuotaSite(quota=4, window=10.0, clock=clock.now, rng=Lucky(0.0))
    async with live(site) as client:
        assert await statuses(client, 2) == [200, 200]
        braked = await client.get("/page/1")  # half the quota used: the first stage refuses
        assert braked.status_code == 429
        assert braked.headers["retry-after"] == "5"  # 10 s left for 2 requests


# --- dead ------------------------------------------------------------------------------------------


async def test_dead_answers_everything_with_an_error() -> None:
    site = DeadSite(status=502)
    async with live(site) as client:
        for path in ("/robots.txt", "/", "/page/1", "/nothing"):
            assert (await client.get(path)).status_code == 502
    report = site.stats.as_dict()
    assert report["statuses"] == {"502": 4}
    assert report["throttled"] == 0  # only 429 and 503 count as turning away
    assert report["capacity"] == 0.0
    assert report["goodput_ratio"] is None
    assert (await _call(DeadSite(), "/robots.txt"))[0] == 503


# --- the base site ---------------------------------------------------------------------------------


async def _call(app: Site, path: str, kind: str = "http") -> list[Any]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app({"type": kind, "method": "GET", "path": path, "headers": []}, receive, send)
    return [message.get("status") for message in sent if message["type"] == "http.response.start"]


class Broken(Site):
    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        raise RuntimeError("bug")


class Stuck(Site):
    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        await asyncio.Event().wait()


async def test_plain_site_serves_everything_and_ignores_other_scopes() -> None:
    site = Site(pages=2)
    assert await _call(site, "/page/2") == [200]
    assert await _call(site, "/page/3") == [404]
    assert await _call(site, "/", kind="lifespan") == []
    assert site.stats.requests == 2
    assert site.capacity is None


async def test_failures_and_cancellations_are_recorded() -> None:
    broken = Broken()
    with pytest.raises(RuntimeError, match="bug"):
        await _call(broken, "/page/1")
    assert broken.stats.statuses == {500: 1}
    stuck = Stuck()
    task = asyncio.create_task(_call(stuck, "/page/1"))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stuck.stats.aborted == 1
    assert stuck.stats.inflight == 0


# --- parameters ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_declared_parameters_match_the_constructor(name: str) -> None:
    cls = PROFILES[name]
    assert cls.profile == name
    signature = inspect.signature(cls.__init__)
    for param in cls.PARAMS:
        default = signature.parameters[param.name].default
        expected = inspect.Parameter.empty if param.required else param.default
        assert default == expected, param.name
    base = inspect.signature(Site.__init__)
    for param in COMMON_PARAMS:
        assert base.parameters[param.name].default == param.default


@pytest.mark.parametrize(("factory", "message"), [
    (lambda: RateLimitSite(rate=0.0), "rate = 0.0 is too small"),
    (lambda: RateLimitSite(rate=1.0, burst=1.5), "burst = 1.5 is not an integer"),  # type: ignore[arg-type]
    (lambda: RateLimitSite(rate=1.0, retry_after=1), "retry_after = 1 is not true or false"),  # type: ignore[arg-type]
    (lambda: CrawlDelaySite(delay=-1.0), "delay"),
    (lambda: RetryAfterSite(rate=1.0, embargo=0), "embargo"),
    (lambda: OverloadSite(limit=0), "limit"),
    (lambda: QuotaSite(quota=float("nan")), "quota = nan is not a finite number"),
    (lambda: DeadSite(status=200), "status = 200 is too small"),
    (lambda: Site(pages=0), "pages"),
])
def test_constructors_refuse_bad_values(factory: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        factory()
