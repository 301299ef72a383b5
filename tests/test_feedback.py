"""Feedback on the fake clock: backoff, recovery, server hints, Crawl-Delay, AutoThrottle."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from itertools import pairwise
from typing import Any

import pytest

from crawlpace import Throttler
from crawlpace.policy.backoff import SETTLE
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

FAST = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}
URL = "https://example.com/"


@dataclass
class Response:
    """The parts of a response the throttler reads."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


async def answer(throttler: Throttler, status: int = 200, headers: Mapping[str, str] | None = None,
                 url: str = URL, **feedback: Any) -> float:
    """Send one request when allowed, answer it at once; return the send time."""
    async with throttler.slot(url) as permit:
        sent = permit.granted_at
        permit.feedback(Response(status, headers or {}), **feedback)
    return sent


async def delay_of(throttler: Throttler, scope: str = "example.com") -> float:
    stats = await throttler.scope_stats(scope)
    assert stats is not None
    return stats.delay


# -- backoff ------------------------------------------------------------------------


async def test_a_burst_of_429s_backs_off_once(clock: MockClock,
                                              make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 10})
    permits = [await throttler.acquire(URL) for _ in range(10)]
    assert clock.now() == 0.0  # all ten went out together
    for permit in permits:
        permit.feedback(status=429)
        await permit.release()
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    # Delay 0 backs off to BACKOFF_MIN_DELAY once, not 2**10 times anything.
    assert (stats.backoff, stats.delay, stats.generation) == (1, 1.0, 1)


async def test_each_new_generation_doubles_the_delay(clock: MockClock,
                                                     make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler()  # delay 1.0: first backoff step is 2.0
    sends = [await answer(throttler, 429) for _ in range(4)]
    # Each 429 lengthens the wait after the send it answered: 2, 4, 8 seconds. (A run of 503s is
    # judged after the first cuts: errors that did not fall with the pace are the breaker's; see
    # test_load_errors.py.)
    assert sends == [0.0, 2.0, 6.0, 14.0]
    assert await delay_of(throttler) == 16.0


async def test_delay_is_capped_then_concurrency_backs_off(clock: MockClock,
                                                          make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "BACKOFF_MAX_DELAY": 4.0})
    for _ in range(6):
        await answer(throttler, 429)
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    # Two cuts double the delay to the 4 s cap (level 1); levels 2-4 halve the slots: 8 -> 4 -> 2 -> 1.
    assert (stats.delay, stats.concurrency, stats.backoff) == (4.0, 1, 4)


async def test_a_scope_that_sends_seldom_recovers_once_per_quiet_window(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "BACKOFF_WINDOW": 60.0})
    for _ in range(3):
        await answer(throttler, 429)
    assert await delay_of(throttler) == 4.0  # 1, 2, 4: nothing measured, so the seed's steps
    steps: list[tuple[float, float]] = []
    while clock.now() < 600.0:
        clock.advance(30.0)  # a response every 30 s: too few to earn a step by evidence
        await answer(throttler, 200)
        delay = await delay_of(throttler)
        if not steps or steps[-1][1] != delay:
            steps.append((clock.now(), delay))
    # The last 429 (t=3) came at 2 s between sends: the first quiet window goes straight to SETTLE
    # (0.95) of that rate (2 / 0.95 s), the next ones probe faster and faster (1.2, 1.44, 2.07 x ...),
    # until the pace is the scope's own.
    delays = [delay for _, delay in steps]
    assert delays[:3] == [4.0, pytest.approx(2 / SETTLE), pytest.approx(2 / SETTLE / 1.2)]
    assert delays[-1] == 0.0
    times = [t for t, _ in steps[1:]]
    assert all(b - a >= 60.0 for a, b in pairwise(times))


async def test_successes_at_the_new_pace_bring_it_back_within_seconds(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    # Issue 37: one 429 on a scope that was sending 10 requests a second costs what that says, not
    # a minute at 1 request a second. The answers take 0.1 s; 10 go per second.
    throttler = make_throttler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})

    async def timed(status: int) -> None:
        async with throttler.slot(URL) as permit:
            clock.advance(0.1)
            permit.feedback(Response(status))

    await timed(429)  # the first refusal: 1 in flight over 0.1 s, 10/s sent: cut to 5/s
    assert await delay_of(throttler) == pytest.approx(0.2)
    start = clock.now()
    for _ in range(24):
        await timed(200)
    # Four good answers at a pace earn a step half way to 0.95 x 10/s; no minute's wait.
    assert await delay_of(throttler) == pytest.approx(0.1 / SETTLE, rel=0.05)
    assert clock.now() - start < 6.0


async def test_a_refused_probe_goes_back_under_the_refused_rate_not_a_whole_cut(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "BACKOFF_WINDOW": 60.0, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    for _ in range(2):  # nothing measured: 1 s; then refused at 1 s between sends: 2 s
        await answer(throttler, 429)
    for _ in range(40):  # climbs by evidence to SETTLE x the rate refused, and stays there
        await answer(throttler, 200)
    assert await delay_of(throttler) == pytest.approx(1 / SETTLE)
    clock.advance(61.0)
    await answer(throttler, 200)  # a quiet window: a probe a fifth faster
    probe = await delay_of(throttler)
    assert probe == pytest.approx(1 / SETTLE / 1.2)
    for _ in range(20):  # the answers at the probe's pace are the evidence of the next refusal
        await answer(throttler, 200)
    await answer(throttler, 429)
    after = await delay_of(throttler)
    # Back under what the server let through at the probe's pace, not twice the probe's delay.
    assert probe < after < 1.25 * probe
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert stats.backoff == 1


async def test_a_scope_with_a_delay_of_its_own_recovers_to_it(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.3, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                                "RANDOMIZE_DOWNLOAD_DELAY": False, "BACKOFF_JITTER": 0})
    await answer(throttler, 429)
    assert await delay_of(throttler) == 0.6  # 0.3 x 2: the pace refused, cut by the factor
    delays = []
    for _ in range(3):
        clock.advance(61.0)
        await answer(throttler, 200)
        delays.append(await delay_of(throttler))
    # SETTLE of the rate refused, then a probe a fifth faster aims under 0.3 s: back to the scope's own.
    assert delays == [pytest.approx(0.3 / SETTLE), 0.3, 0.3]


async def test_a_new_429_restarts_the_quiet_window(clock: MockClock,
                                                   make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "BACKOFF_WINDOW": 60.0})
    await answer(throttler, 429)
    clock.advance(50.0)
    await answer(throttler, 429)  # level 2, delay 2
    clock.advance(50.0)
    await answer(throttler, 200)  # only 50 s since the last 429: no step
    assert await delay_of(throttler) == 2.0


async def test_per_scope_backoff_can_add_403(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": {
        "strict.example": {"delay": 0.0, "backoff": {"http_codes": [403, 429]}}}})
    await answer(throttler, 403)
    await answer(throttler, 403, url="https://strict.example/")
    assert await delay_of(throttler) == 0.0
    assert await delay_of(throttler, "strict.example") == 1.0


async def test_backoff_exceptions_match_by_class(clock: MockClock,
                                                 make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    for exc in (ValueError("not a network problem"), ConnectionRefusedError("refused")):
        with pytest.raises(type(exc)):
            async with throttler.slot(URL):
                raise exc
    # ConnectionRefusedError is a ConnectionError (a default trigger); ValueError is not.
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert (stats.backoff, stats.errors) == (1, 2)


async def test_backed_off_scope_survives_eviction(clock: MockClock,
                                                  make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 429)
    await answer(throttler, 429)
    clock.advance(30.0)
    store: Any = throttler.store
    assert store.evict_idle() == 0  # the backoff still matters
    assert await delay_of(throttler) == 2.0
    clock.advance(600.0)  # (level 1 + 8 probe waits) x 60 s since the last change: forgotten
    assert store.evict_idle() == 1
    assert await throttler.scope_stats("example.com") is None


async def test_backoff_jitter_replaces_the_normal_spread(clock: MockClock) -> None:
    import random

    throttler = Throttler({**FAST, "BACKOFF_JITTER": 0.5, "RANDOMIZE_DOWNLOAD_DELAY": False},
                          clock=clock, rng=random.Random(3))
    await answer(throttler, 429)  # delay 1.0, jittered +/-50 % while backing off
    shares = []
    for _ in range(20):
        delay = await delay_of(throttler)
        before = clock.now()
        sent = await answer(throttler, 200)
        shares.append((sent - before) / delay)
    shares = shares[1:]  # the first send goes at the refusal's own delay, counted from its send
    assert min(shares) >= 0.5 - 1e-9
    assert max(shares) <= 1.5 + 1e-9
    assert len({round(share, 6) for share in shares}) > 10
    await throttler.aclose()


# -- server hints -------------------------------------------------------------------


async def test_retry_after_holds_the_scope(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 429, {"Retry-After": "30"})
    assert await answer(throttler) == 30.0


async def test_huge_retry_after_is_capped(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 429, {"Retry-After": "1000000000000"})
    assert await answer(throttler) == 300.0  # BACKOFF_MAX_DELAY


async def test_retry_after_date_in_the_past_means_no_wait(clock: MockClock,
                                                          make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    past = format_datetime(datetime(2001, 1, 1, tzinfo=UTC), usegmt=True)
    await answer(throttler, 200, {"Retry-After": past})
    assert await answer(throttler) == 0.0


async def test_retry_after_date_is_read_against_the_date_header(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    date = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = datetime(2030, 1, 1, 12, 0, 45, tzinfo=UTC)
    await answer(throttler, 503, {"Date": format_datetime(date, usegmt=True),
                                  "Retry-After": format_datetime(later, usegmt=True)})
    assert await answer(throttler) == 45.0


async def test_hints_count_on_any_status(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 200, {"Retry-After": "5"})
    assert await answer(throttler) == 5.0
    assert await delay_of(throttler) == 0.0  # a hold, not a backoff


async def test_redirect_max_delay_caps_waits_from_redirects(clock: MockClock,
                                                            make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "REDIRECT_MAX_DELAY": 2.0})
    await answer(throttler, 302, {"Retry-After": "120"})
    assert await answer(throttler) == 2.0
    await answer(throttler, 503, {"Retry-After": "120"})
    # A 503 is no redirect: its hold is capped only by BACKOFF_MAX_DELAY.
    assert await answer(throttler) == 122.0


async def test_announced_budget_paces_before_the_429(clock: MockClock,
                                                     make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 200, {"RateLimit-Remaining": "10", "RateLimit-Reset": "5"})
    sends = [await answer(throttler) for _ in range(3)]
    # 10 requests left over "5" s, rounded up: 4 s at the earliest, spread over 0.9 of it so that
    # the tenth goes before the reset: one per 0.36 s.
    assert sends == pytest.approx([0.36, 0.72, 1.08])


async def test_a_fractional_reset_is_taken_as_exact(clock: MockClock,
                                                    make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 200, {"RateLimit": '"default";r=10;t=2.5'})
    sends = [await answer(throttler) for _ in range(2)]
    assert sends == pytest.approx([0.25, 0.5])


async def test_an_announced_budget_lifts_rampup_at_once(clock: MockClock,
                                                        make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True, "delay": 1.0}})
    first = await answer(throttler, 200, {"RateLimit-Remaining": "50", "RateLimit-Reset": "10"})
    second = await answer(throttler)
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert stats.rampup is not None
    # Rampup alone starts at 1 request per second; the budget allows 50 in 9 s at the earliest
    # (spread over 0.9 of it, so that the 50th goes before the reset).
    assert stats.rampup.phase == "start"
    # Rampup's jitter only lengthens a delay, by up to 5 %.
    assert 0.9 * 9.0 / 50 <= second - first <= 0.9 * 9.0 / 50 * 1.05


async def test_spent_budget_holds_until_the_reset(clock: MockClock,
                                                  make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 200, {"RateLimit": '"default";r=0;t=12',
                                  "RateLimit-Policy": '"default";q=100;w=60'})
    assert await answer(throttler) == 12.0


async def test_hold_and_backoff_are_separate_inputs(clock: MockClock,
                                                    make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 429, {"Retry-After": "10"})  # backoff delay 1 s and a 10 s hold
    assert await answer(throttler) == 10.0
    assert await answer(throttler) == 11.0  # the hold is over; the backoff delay still holds


# -- Crawl-Delay --------------------------------------------------------------------


async def test_crawl_delay_sets_one_slot_and_the_delay(clock: MockClock,
                                                       make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 8})
    await throttler.set_crawl_delay("example.com", 3.0)
    sends = await asyncio.gather(*(answer(throttler) for _ in range(3)))
    assert sorted(sends) == [0.0, 3.0, 6.0]
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert (stats.concurrency, stats.crawl_delay) == (1, 3.0)


async def test_huge_crawl_delay_is_clamped(clock: MockClock, make_throttler: ThrottlerFactory,
                                           caplog: pytest.LogCaptureFixture) -> None:
    throttler = make_throttler(FAST)
    with caplog.at_level(logging.WARNING, logger="crawlpace"):
        await throttler.set_crawl_delay("example.com", 86400.0)
    assert "clamped" in caplog.text
    assert await delay_of(throttler) == 60.0


async def test_explicit_scope_settings_win_with_a_warning(clock: MockClock,
                                                          make_throttler: ThrottlerFactory,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    throttler = make_throttler({"THROTTLING_SCOPES": {
        "example.com": {"concurrency": 4, "delay": 0.1},
        "quiet.example": {"concurrency": 4, "delay": 0.1, "ignore_robots_txt": True}}})
    with caplog.at_level(logging.WARNING, logger="crawlpace"):
        await throttler.set_crawl_delay("example.com", 10.0)
        await throttler.set_crawl_delay("quiet.example", 10.0)
    assert "example.com: robots.txt asks for Crawl-Delay 10s" in caplog.text
    assert "quiet.example: robots.txt" not in caplog.text
    assert await delay_of(throttler) == 0.1
    assert await delay_of(throttler, "quiet.example") == 0.1


async def test_robots_obey_off_ignores_crawl_delay(clock: MockClock,
                                                   make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({**FAST, "THROTTLING_ROBOTSTXT_OBEY": False})
    await throttler.set_crawl_delay("example.com", 10.0)
    assert [await answer(throttler) for _ in range(2)] == [0.0, 0.0]


async def test_jitter_never_goes_below_the_crawl_delay(clock: MockClock) -> None:
    import random

    throttler = Throttler({"RANDOMIZE_DOWNLOAD_DELAY": 0.5, "DOWNLOAD_DELAY": 0.0,
                           "DOWNLOAD_DELAY_PER_SLOT": 0.0}, clock=clock, rng=random.Random(7))
    await throttler.set_crawl_delay("example.com", 2.0)
    sends = [await answer(throttler) for _ in range(30)]
    gaps = [b - a for a, b in pairwise(sends)]
    assert min(gaps) >= 2.0 - 1e-9  # float sums of send times
    assert max(gaps) <= 3.0
    await throttler.aclose()


# -- AutoThrottle -------------------------------------------------------------------


async def test_autothrottle_follows_the_five_rules(clock: MockClock,
                                                   make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"AUTOTHROTTLE_ENABLED": True, "DOWNLOAD_DELAY": 0.5,
                                "DOWNLOAD_DELAY_PER_SLOT": 0.0, "AUTOTHROTTLE_START_DELAY": 5.0,
                                "AUTOTHROTTLE_MAX_DELAY": 8.0, "AUTOTHROTTLE_TARGET_CONCURRENCY": 2.0})
    assert await answer(throttler, latency=1.0) == 0.0
    assert await delay_of(throttler) == 2.75      # rule 1 start 5.0; (5.0 + 1.0/2) / 2
    await answer(throttler, latency=0.0)
    assert await delay_of(throttler) == 1.375     # mean of 2.75 and 0
    await answer(throttler, 404, latency=0.0)
    assert await delay_of(throttler) == 1.375     # a non-200 cannot lower it
    await answer(throttler, 404, latency=20.0)
    assert await delay_of(throttler) == 5.6875    # ... but may raise it: (1.375 + 10) / 2
    await answer(throttler, latency=40.0)
    assert await delay_of(throttler) == 8.0       # capped at AUTOTHROTTLE_MAX_DELAY
    for _ in range(12):
        await answer(throttler, latency=0.0)
    assert await delay_of(throttler) == 0.5       # never below DOWNLOAD_DELAY


async def test_autothrottle_opt_out_per_request(clock: MockClock,
                                                make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"AUTOTHROTTLE_ENABLED": True, "DOWNLOAD_DELAY": 0.0})

    @dataclass
    class Request:
        url: str
        meta: dict[str, Any]

    request = Request(URL, {"autothrottle_dont_adjust_delay": True})
    async with throttler.slot(request) as permit:
        permit.feedback(status=200, latency=0.0)
    assert await delay_of(throttler) == 5.0


async def test_autothrottle_debug_logs_each_adjustment(clock: MockClock,
                                                       make_throttler: ThrottlerFactory,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    throttler = make_throttler({"AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_DEBUG": True})
    with caplog.at_level(logging.INFO, logger="crawlpace"):
        await answer(throttler, latency=1.0)
    assert "AutoThrottle" in caplog.text
    assert "5.000s -> 3.000s" in caplog.text


async def test_httpx_network_errors_back_off_by_default(clock: MockClock,
                                                        make_throttler: ThrottlerFactory) -> None:
    httpx = pytest.importorskip("httpx")
    throttler = make_throttler(FAST)
    for exc in (httpx.ConnectError("refused"), httpx.ReadTimeout("slow")):
        with pytest.raises(type(exc)):
            async with throttler.slot(URL):
                raise exc
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert stats.generation == 2  # the second was sent under the generation the first began: it cut too


async def test_client_defaults_are_matched_after_the_client_is_imported_late(
        clock: MockClock, make_throttler: ThrottlerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A throttler made before ``requests`` is imported does not import it, yet backs off on its errors."""
    requests = pytest.importorskip("requests")
    with monkeypatch.context() as patch:
        patch.delitem(sys.modules, "requests")  # as if nothing had imported it yet
        throttler = make_throttler(FAST)
        assert "requests" not in sys.modules  # making the throttler did not import it
    # Now the client is loaded (the context put it back) and raises its own error.
    with pytest.raises(requests.ConnectionError):
        async with throttler.slot(URL):
            raise requests.ConnectionError("refused")
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert (stats.backoff, stats.errors) == (1, 1)
