"""Responses and download exceptions feed the scopes; every permit goes back, whatever happens."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Response
from twisted.internet.error import TimeoutError as TwistedTimeoutError

from crawlpace.scrapy import APPLIED_SCOPES_KEY, RequestRefused
from crawlpace.scrapy._extension import ThrottlingExtension
from crawlpace.testing import MockClock

from .far_store import FarStore
from .test_scrapy_engine import FakeEngine, Outcome, clock

__all__ = ["clock"]

FAST: dict[str, Any] = {"DOWNLOAD_DELAY": 0.1, "DOWNLOAD_DELAY_PER_SLOT": 0.1}


def status(code: int, **headers: str) -> Callable[[Request], Response]:
    def respond(request: Request) -> Response:
        return Response(request.url, status=code, headers=headers, request=request)
    return respond


def retry_once(request: Request, outcome: Outcome) -> Iterable[Request]:
    """RetryMiddleware's part: one retry of a 429 or a failure, right away."""
    failed = isinstance(outcome, BaseException) or outcome.status in (429, 503)
    if failed and not request.meta.get("retried"):
        retry = request.copy()
        retry.meta["retried"] = True
        retry.dont_filter = True
        yield retry


async def delay_of(engine: FakeEngine, scope: str) -> float:
    snapshot = await engine.throttler.scope_stats(scope)
    assert snapshot is not None
    return float(snapshot.delay)


# --- backoff: what Scrapy's AutoThrottle ignores -----------------------------------------------


async def test_a_fast_429_slows_the_scope_down(clock: MockClock) -> None:
    """Scrapy #6458/#6837: a quick 429 must raise the delay, not be ignored."""
    engine = FakeEngine({**FAST, "AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_START_DELAY": 0.1},
                        clock, latency=0.001,
                        respond=lambda r: status(429 if r.url.endswith("/0") else 200)(r))
    await engine.run((Request(f"https://api.example/{n}") for n in range(3)), close=False)
    assert engine.stats.get("throttling/backoffs/status/429") == 1
    # Refused at AutoThrottle's 0.1 s between sends: cut by BACKOFF_DELAY_FACTOR to 0.2 s.
    assert await delay_of(engine, "api.example") >= 0.2
    times = engine.times()
    assert times[1] - times[0] >= 0.2
    await engine.runtime.aclose()


async def test_a_download_exception_backs_off(clock: MockClock) -> None:
    """Scrapy's AutoThrottle never sees exceptions; here a timeout backs the scope off."""
    def respond(request: Request) -> Outcome:
        if request.url.endswith("/0"):
            return TwistedTimeoutError()  # type: ignore[no-untyped-call]
        return Response(request.url, request=request)

    engine = FakeEngine(FAST, clock, latency=0.001, respond=respond)
    await engine.run((Request(f"https://slow.example/{n}") for n in range(2)), close=False)
    assert engine.stats.get("throttling/backoffs/exception/TimeoutError") == 1
    assert engine.times()[1] >= 2 * FAST["DOWNLOAD_DELAY"]  # the pace it failed at, cut by the factor 2
    assert ("https://slow.example/0", "TimeoutError") in engine.outcomes
    await engine.runtime.aclose()


async def test_a_retry_waits_for_retry_after_while_other_sites_go_on(clock: MockClock) -> None:
    """Scrapy #3849: the retry of a 429 waits for Retry-After instead of going at once."""
    def respond(request: Request) -> Response:
        if request.url == "https://strict.example/page" and not request.meta.get("retried"):
            return status(429, **{"Retry-After": "30"})(request)
        return Response(request.url, request=request)

    engine = FakeEngine({**FAST, "BACKOFF_MAX_DELAY": 60.0}, clock, latency=0.01, respond=respond,
                        after=retry_once)
    await engine.run([Request("https://strict.example/page"),
                      *(Request(f"https://other.example/{n}") for n in range(5))])
    strict = engine.times("https://strict.example")
    assert strict[0] == 0.0
    assert strict[1] >= 30.0
    assert max(engine.times("https://other.example")) < 1.0
    assert engine.stats.get("throttling/holds") == 1


async def test_an_admission_older_than_a_retry_after_is_neither_sent_nor_lent(clock: MockClock) -> None:
    """The last look: a page the scheduler admitted before a sibling's Retry-After came back is admitted
    again when it reaches the network, and its permit is not lent to robots.txt meanwhile."""
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                         "CONCURRENT_REQUESTS_PER_DOMAIN": 4}, clock)
    scheduler, middleware = engine.scheduler, engine.middleware
    for n in range(2):
        scheduler.enqueue_request(Request(f"https://held.example/{n}"))
    refused, late = scheduler.next_request(), scheduler.next_request()  # both admitted at 0.0
    assert refused is not None
    assert late is not None
    await middleware.process_request(refused)
    await clock.sleep(0.01)
    await middleware.process_response(refused, status(429, **{"Retry-After": "5"})(refused))

    async def sent_at(request: Request, after: float) -> float:
        await clock.sleep(after)
        await middleware.process_request(request)
        return clock.now()

    robots = Request("https://held.example/robots.txt", meta={"dont_obey_robotstxt": True})
    # robots.txt (outside the scheduler) at 0.02, the late page on the network at 0.03: its admission is
    # younger than the 50 ms after which it would be redone anyway. Both went at once before.
    robots_at, late_at = await asyncio.gather(sent_at(robots, 0.01), sent_at(late, 0.02))
    assert robots_at >= 5.01
    assert late_at >= 5.01
    assert engine.stats.get("throttling/readmitted/held") == 1
    assert engine.stats.get("throttling/permits/lent") == 0
    await engine.runtime.aclose()


async def test_a_hold_is_heard_before_the_release_reaches_a_shared_store(clock: MockClock) -> None:
    """The same race behind a shared store whose release takes 0.5 s (a fleet's round trips): the add-on
    noted the 429's hold once the release was back (0.51 s), so the late page, on the network at 0.03 s
    before that, went into the hold. Now the hold is noted as soon as the answer is known."""
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                         "CONCURRENT_REQUESTS_PER_DOMAIN": 4}, clock,
                        store=lambda settings, clock: FarStore(settings, clock, 0.5))
    scheduler, middleware = engine.scheduler, engine.middleware
    for n in range(2):
        scheduler.enqueue_request(Request(f"https://held.example/{n}"))
    admitted: list[Request] = []
    for _ in range(50):  # a shared store admits on the loop, not within next_request
        request = scheduler.next_request()
        if request is not None:
            admitted.append(request)
        if len(admitted) == 2:
            break
        await asyncio.sleep(0)
    refused, late = admitted  # both admitted at 0.0
    assert clock.now() == 0.0
    await middleware.process_request(refused)
    await clock.sleep(0.01)

    async def sent_at(request: Request, after: float) -> float:
        await clock.sleep(after)
        await middleware.process_request(request)
        return clock.now()

    answered = middleware.process_response(refused, status(429, **{"Retry-After": "5"})(refused))
    late_at, _ = await asyncio.gather(sent_at(late, 0.02), answered)
    assert late_at >= 5.01
    assert engine.stats.get("throttling/readmitted/held") == 1
    await engine.runtime.aclose()


async def test_rate_limit_headers_pace_the_scope(clock: MockClock) -> None:
    """A budget of 5 requests for the next 10.5 s is spread over 0.9 of it: the fifth goes before it ends."""
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}, clock, latency=0.01,
                        respond=status(200, **{"RateLimit-Limit": "6", "RateLimit-Remaining": "5",
                                               "RateLimit-Reset": "10.5"}))
    await engine.run(Request(f"https://budget.example/{n}") for n in range(3))
    times = engine.times()
    assert times[1] - times[0] == pytest.approx(0.9 * 2.1)
    assert times[2] - times[1] == pytest.approx(0.9 * 2.1)


async def test_autothrottle_follows_latency_unless_the_request_opts_out(clock: MockClock) -> None:
    settings = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0, "AUTOTHROTTLE_ENABLED": True,
                "AUTOTHROTTLE_START_DELAY": 1.0, "AUTOTHROTTLE_TARGET_CONCURRENCY": 1.0}
    engine = FakeEngine(settings, clock, latency=0.2)
    await engine.run([Request("https://at.example/0")], close=False)
    assert await delay_of(engine, "at.example") == pytest.approx((1.0 + 0.2) / 2)
    engine.latency = 0.01
    await engine.run([Request("https://at.example/1", meta={"autothrottle_dont_adjust_delay": True})],
                     close=False)
    assert await delay_of(engine, "at.example") == pytest.approx(0.6)
    await engine.runtime.aclose()


async def test_a_redirect_to_another_host_is_throttled_there(clock: MockClock) -> None:
    """Scrapy #2141: the redirected request counts against the new host, not the old one."""
    def respond(request: Request) -> Response:
        if request.url == "https://old.example/moved":
            return status(301, Location="https://new.example/here")(request)
        return Response(request.url, request=request)

    def follow(request: Request, outcome: Outcome) -> Iterable[Request]:
        if isinstance(outcome, Response) and outcome.status == 301:
            yield request.replace(url=(outcome.headers.get("Location") or b"").decode())

    engine = FakeEngine({"DOWNLOAD_DELAY": 1.0, "DOWNLOAD_DELAY_PER_SLOT": 1.0}, clock, latency=0.01,
                        respond=respond, after=follow)
    await engine.run([Request("https://new.example/first"), Request("https://old.example/moved")])
    by_url = {send.url: send for send in engine.sends}
    assert by_url["https://old.example/moved"].scopes == ("old.example",)
    assert by_url["https://new.example/here"].scopes == ("new.example",)
    assert by_url["https://old.example/moved"].at == 0.0
    assert by_url["https://new.example/here"].at == 1.0  # a second after new.example's first request


async def test_retry_after_on_a_redirect_is_capped(clock: MockClock) -> None:
    """``REDIRECT_MAX_DELAY`` bounds what a 3xx may ask to wait."""
    engine = FakeEngine({**FAST, "REDIRECT_MAX_DELAY": 2.0}, clock, latency=0.01,
                        respond=lambda r: status(302 if r.url.endswith("/0") else 200,
                                                 **{"Retry-After": "100", "Location": "/x"})(r))
    await engine.run(Request(f"https://r.example/{n}") for n in range(2))
    assert engine.times()[1] == pytest.approx(2.0 + 0.01)


# --- robots.txt ---------------------------------------------------------------------------------


ROBOTS = b"User-agent: *\nCrawl-delay: 2\n"


async def test_robots_txt_goes_first_and_its_crawl_delay_spaces_the_pages(clock: MockClock) -> None:
    """The robots.txt fetch borrows the permit of the page waiting for it; the page then keeps Crawl-Delay."""
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.1, "DOWNLOAD_DELAY_PER_SLOT": 0.1, "ROBOTSTXT_OBEY": True,
                         "CONCURRENT_REQUESTS_PER_DOMAIN": 4}, clock, latency=0.01,
                        respond=lambda r: HtmlResponse(r.url, body=ROBOTS if "robots" in r.url else b"ok",
                                                       request=r))
    robots = Request("https://polite.example/robots.txt", meta={"dont_obey_robotstxt": True})
    pages = [Request(f"https://polite.example/{n}") for n in range(3)]
    scheduler, middleware = engine.scheduler, engine.middleware
    for page in pages:
        scheduler.enqueue_request(page)
    first = scheduler.next_request()  # admitted, then parked in RobotsTxtMiddleware, which fetches robots.txt
    assert first is pages[0]
    await middleware.process_request(robots)
    assert robots.meta[APPLIED_SCOPES_KEY] == ("polite.example",)
    assert engine.stats.get("throttling/permits/lent") == 1
    await middleware.process_response(robots, HtmlResponse(robots.url, body=ROBOTS, request=robots))
    engine.download(first)  # robots.txt parsed: the page goes on, and must be admitted again
    await engine.run()
    assert engine.stats.get("throttling/crawl_delay/polite.example") == 2.0
    assert engine.times() == [2.0, 4.0, 6.0]
    assert engine.peak_inflight["polite.example"] == 1


async def test_robots_parsed_signal_applies_scrapys_crawl_delay(clock: MockClock) -> None:
    """Scrapy 2.18+: the Crawl-Delay Scrapy's own parser read arrives through ``robots_parsed``."""
    from protego import Protego

    engine = FakeEngine({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0, "ROBOTSTXT_OBEY": True},
                        clock, latency=0.01)
    extension = ThrottlingExtension(engine.runtime)

    class Parser:  # what Scrapy's ProtegoRobotParser offers
        def __init__(self, body: str) -> None:
            self.rp = Protego.parse(body)

        def crawl_delay(self, user_agent: str) -> float | None:
            delay = self.rp.crawl_delay(user_agent)
            return None if delay is None else float(delay)

    await extension.robots_parsed(Parser("User-agent: *\nCrawl-delay: 3\n"),
                                  request=Request("https://sig.example/page"))
    await engine.run(Request(f"https://sig.example/{n}") for n in range(2))
    assert engine.times() == [0.0, 3.0]


async def test_crawl_delay_is_ignored_when_told_to(clock: MockClock) -> None:
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0, "ROBOTSTXT_OBEY": True,
                         "THROTTLING_ROBOTSTXT_OBEY": False}, clock, latency=0.01)
    robots = Request("https://free.example/robots.txt", meta={"dont_obey_robotstxt": True})
    engine.download(robots)
    engine.respond = lambda r: HtmlResponse(r.url, body=ROBOTS, request=r)
    await engine.run(Request(f"https://free.example/{n}") for n in range(2))
    assert engine.times() == [0.0, 0.01, 0.02]  # one slot, no delay: not Crawl-delay's 2 s
    assert "throttling/crawl_delay/free.example" not in engine.stats.values


# --- the circuit breaker ------------------------------------------------------------------------


async def test_a_dead_site_is_given_up_and_its_requests_refused(clock: MockClock) -> None:
    settings = {**FAST, "BREAKER_MIN_REQUESTS": 3, "BREAKER_PAUSE": 1.0, "BREAKER_GIVE_UP_AFTER": 2,
                "BACKOFF_MAX_DELAY": 2.0}
    engine = FakeEngine(settings, clock, latency=0.01,
                        respond=lambda r: status(503 if "dead" in r.url else 200)(r))
    await engine.run([*(Request(f"https://dead.example/{n}") for n in range(20)),
                      *(Request(f"https://alive.example/{n}") for n in range(5))])
    outcomes = dict(engine.outcomes)
    refused = [url for url, result in engine.outcomes if result == "RequestRefused"]
    assert len(refused) >= 15
    assert all(outcomes[f"https://alive.example/{n}"] == "200" for n in range(5))
    assert engine.stats.get("throttling/given_up/scopes") == 1
    assert engine.stats.get("throttling/refused/given_up") == len(refused)
    assert issubclass(RequestRefused, IgnoreRequest)


async def test_malformed_scopes_are_refused_not_crashed_on(clock: MockClock) -> None:
    engine = FakeEngine(FAST, clock)
    await engine.run([Request("https://a.example/", meta={"throttling_scopes": {"api": -1}}),
                      Request("https://a.example/ok")])
    assert dict(engine.outcomes) == {"https://a.example/": "RequestRefused", "https://a.example/ok": "200"}
    assert engine.stats.get("throttling/refused/scopes") == 1


# --- no permit is ever leaked --------------------------------------------------------------------


async def test_a_request_dropped_before_the_network_frees_its_slot(clock: MockClock) -> None:
    """robots.txt or offsite rules refusing a request on its way: its slot comes back, unsent."""
    engine = FakeEngine(FAST, clock)
    scheduler, middleware = engine.scheduler, engine.middleware
    scheduler.enqueue_request(Request("https://a.example/forbidden"))
    request = scheduler.next_request()
    assert request is not None
    assert engine.throttler.inflight == 1
    await middleware.process_exception(request, IgnoreRequest("Forbidden by robots.txt"))
    assert engine.throttler.inflight == 0
    assert engine.stats.get("throttling/released_unsent") == 1


async def test_a_cached_response_frees_its_slot_and_teaches_nothing(clock: MockClock) -> None:
    engine = FakeEngine(FAST, clock)
    engine.scheduler.enqueue_request(Request("https://a.example/cached"))
    request = engine.scheduler.next_request()
    assert request is not None
    await engine.middleware.process_response(request, Response(request.url, status=429, request=request))
    assert engine.throttler.inflight == 0
    assert engine.stats.get("throttling/backoffs") == 0  # the HTTP cache answered, not the server


async def test_a_request_lost_with_its_permit_is_released_by_the_collector(clock: MockClock) -> None:
    engine = FakeEngine(FAST, clock)
    engine.scheduler.enqueue_request(Request("https://a.example/lost"))
    request = engine.scheduler.next_request()
    assert request is not None
    assert engine.throttler.inflight == 1
    del request
    gc.collect()
    await clock.sleep(0.01)
    assert engine.throttler.inflight == 0
    assert engine.stats.get("throttling/released_abandoned") == 1


async def test_a_retry_copy_made_before_release_does_not_keep_the_permit(clock: MockClock) -> None:
    engine = FakeEngine(FAST, clock)
    engine.scheduler.enqueue_request(Request("https://a.example/x"))
    request = engine.scheduler.next_request()
    assert request is not None
    copy = request.replace(url="https://b.example/y")  # a middleware returning a new request early
    engine.scheduler.enqueue_request(copy)
    await clock.sleep(0.01)
    assert engine.throttler.inflight == 0
    await engine.run()
    assert [send.url for send in engine.sends] == ["https://b.example/y"]


async def test_closing_releases_everything_still_held(clock: MockClock) -> None:
    engine = FakeEngine({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 3}, clock)
    for n in range(3):
        engine.scheduler.enqueue_request(Request(f"https://a.example/{n}"))
    held = [engine.scheduler.next_request()]
    assert held[0] is not None
    assert engine.throttler.inflight == 1
    engine.scheduler.close("shutdown")
    await engine.runtime.aclose()
    assert engine.throttler.inflight == 0
    assert engine.runtime.closed


# --- what it reports -----------------------------------------------------------------------------


async def test_debug_logs_one_line_per_adjustment(clock: MockClock, caplog: pytest.LogCaptureFixture) -> None:
    engine = FakeEngine({**FAST, "THROTTLING_DEBUG": True}, clock, latency=0.01,
                        respond=lambda r: status(429 if r.url.endswith("/1") else 200)(r))
    with caplog.at_level(logging.INFO, logger="crawlpace.scrapy"):
        await engine.run(Request(f"https://dbg.example/{n}") for n in range(4))
    lines = [record.getMessage() for record in caplog.records
             if record.name == "crawlpace.scrapy" and "dbg.example" in record.getMessage()]
    assert len(lines) == 1
    assert "delay 0.100s -> 0.200s" in lines[0]
    assert "backoff level 0 -> 1" in lines[0]
    assert "after status 429" in lines[0]


@pytest.mark.parametrize("values", [
    {"AUTOTHROTTLE_ENABLED": True},  # AutoThrottle starts above the delay
    {"AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_START_DELAY": 0.2, "DOWNLOAD_DELAY": 0.5},  # below it
    {"AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_MAX_DELAY": 2.0},  # the start is capped by the maximum
    {"AUTOTHROTTLE_ENABLED": True,  # rampup, not AutoThrottle, sets the start: one slot, not four
     "THROTTLING_SCOPES": {"a.example": {"rampup": True, "concurrency": 4, "delay": 0.25}}},
    {"THROTTLING_SCOPES": {"a.example": {"concurrency": 4, "delay": 0.25}}, "CONCURRENT_REQUESTS": 3},
])
async def test_debug_lines_start_where_the_throttler_starts(clock: MockClock, values: dict[str, Any]) -> None:
    """The add-on's idea of a fresh scope is the core's, not a rule of its own (one source of truth)."""
    engine = FakeEngine(values, clock)
    permit = await engine.throttler.acquire("https://a.example/")
    snapshot = await engine.throttler.scope_stats("a.example")
    await permit.release()
    assert snapshot is not None
    start = engine.runtime.report.starting_limits("a.example")
    assert start == (snapshot.concurrency, round(snapshot.delay, 3), 0, None, "closed")
    await engine.runtime.aclose()


async def test_per_scope_stats_are_published(clock: MockClock) -> None:
    engine = FakeEngine({**FAST, "THROTTLING_SCOPES": {"b.example": {"delay": 0.5}}}, clock, latency=0.01)
    await engine.run([Request("https://a.example/"), Request("https://b.example/")])
    values = engine.stats.values
    assert values["throttling/scope/a.example/delay"] == 0.1
    assert values["throttling/scope/b.example/delay"] == 0.5
    assert values["throttling/scope/a.example/sends"] == 1
    assert values["throttling/permits"] == 2


async def test_the_extension_neutralises_the_spider_and_publishes_periodically(clock: MockClock) -> None:
    engine = FakeEngine({"DOWNLOAD_DELAY": 0.25, "DOWNLOAD_DELAY_PER_SLOT": 0.25}, clock, latency=0.01)
    extension = ThrottlingExtension(engine.runtime, interval=60.0)

    class Spider:
        download_delay = 5.0
        max_concurrent_requests = 1

    spider = Spider()
    extension.spider_opened(spider)  # type: ignore[arg-type]
    assert (spider.download_delay, spider.max_concurrent_requests) == (0, 16)
    await engine.run([Request("https://periodic.example/")], close=False)
    assert "throttling/scope/periodic.example/delay" not in engine.stats.values
    await clock.sleep(61.0)
    assert engine.stats.values["throttling/scope/periodic.example/delay"] == 0.25
    await extension.spider_closed(spider)  # type: ignore[arg-type]
    assert engine.runtime.closed


@pytest.mark.parametrize(("values", "least", "most"), [
    ({}, 0.0, 0.5),  # left at its default: the cut follows the rate sent (8 in flight, 40 ms each)
    ({"BACKOFF_MIN_DELAY": 1.0}, 1.0, 1.5),  # set, even to the default's value: a floor
    ({"THROTTLING_SCOPES": {"api.example": {"backoff": {"min_delay": 2.0}}}}, 2.0, 2.5),
])
async def test_a_backoff_min_delay_the_user_set_is_a_floor(clock: MockClock, values: dict[str, Any],
                                                           least: float, most: float) -> None:
    engine = FakeEngine({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0,
                         "CONCURRENT_REQUESTS_PER_DOMAIN": 8, **values}, clock, latency=0.04,
                        respond=lambda r: status(429 if r.url.endswith("/0") else 200)(r))
    await engine.run(Request(f"https://api.example/{n}") for n in range(10))
    times = engine.times()
    assert times[:8] == [0.0] * 8  # 8 sent at once, /0 refused 40 ms later
    assert least <= times[8] - times[0] <= most, times  # the wait the 429 imposed on the next send
