"""Whole-second window limiters (issue 37.1): the scope's own log of answers, on scripted time.

Flask-Limiter's ``X-RateLimit-Reset`` is the window's end in whole epoch
seconds plus one, so a window of one or two seconds is known to a second only;
:class:`~crawlpace.policy.budget.WindowLog` learns the window's length and
gates sends by the client's own answers instead. The limiter here is
Flask-Limiter's own rule for its two strategies (a fixed window started by its
first request, and a moving window), written out for a scripted clock.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from crawlpace import Throttler
from crawlpace.policy.budget import LOG_MARGIN, SPREAD_SHARE, WindowLog
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

#: The server's epoch at the scripted clock's zero: a fraction, so windows do not start on whole seconds.
EPOCH = 1_800_000_000.37
ONE_WAY = 0.002  # seconds from a send to the server, and from the server to the answer


class Limiter:
    """Flask-Limiter (``limits``, in-memory storage) on a scripted clock."""

    def __init__(self, limit: int, window: float, moving: bool) -> None:
        self.limit, self.window, self.moving = limit, window, moving
        self.hits: list[float] = []
        self.start = -math.inf
        self.count = 0

    def hit(self, t: float) -> tuple[bool, int, float]:
        """Count a request arriving at ``t``: (allowed, remaining, the header's reset in scripted time)."""
        if self.moving:
            recent = [h for h in self.hits if h > t - self.window]
            allowed = len(recent) < self.limit
            if allowed:
                self.hits.append(t)
                recent.append(t)
            end = min(recent) + self.window
            remaining = self.limit - len(recent)
        else:
            if t >= self.start + self.window:
                self.start, self.count = t, 0
            self.count += 1  # limits counts a refused hit too
            allowed = self.count <= self.limit
            end = self.start + self.window
            remaining = max(0, self.limit - self.count)
        return allowed, remaining, math.floor(EPOCH + end) + 1 - EPOCH


def run(limit: int, window: float, *, moving: bool, windows: int = 12, slots: int = 8
        ) -> tuple[float, int, WindowLog]:
    """Send ``windows * limit + 1`` requests from ``slots`` slots as the log allows.

    Before the log knows the window's length, a spent budget holds to the
    header's reset (the coarse reading). Returns (share of the limit, refusals, log).
    """
    server, log = Limiter(limit, window, moving), WindowLog()
    answers: list[tuple[float, float, bool, int, float]] = []  # (answered, sent, allowed, remaining, reset)
    now = last_send = 0.0
    hold_until = -math.inf
    inflight = done = refused = 0
    target = windows * limit + 1
    while done < target:
        length = log.length()
        pace = 0.0 if length is None else SPREAD_SHARE * length / limit
        gate = log.ready_at(now) if log.sends_seen else -math.inf
        send_at = max(hold_until, last_send + pace, -math.inf if gate is None else gate)
        if inflight < slots and gate is not None and send_at <= now and done + inflight < target:
            log.on_send()
            inflight += 1
            last_send = now
            allowed, remaining, reset = server.hit(now + ONE_WAY)
            heapq.heappush(answers, (now + 2 * ONE_WAY, now, allowed, remaining, reset))
            continue
        wake = [answers[0][0]] if answers else []
        if inflight < slots and gate is not None and send_at > now:
            wake.append(send_at)
        now = min(wake)
        while answers and answers[0][0] <= now:
            answered, sent, allowed, remaining, reset = heapq.heappop(answers)
            log.observe(answered, sent_at=sent, remaining=remaining, limit=limit, reset=reset - answered,
                        refused=not allowed, inflight=inflight)
            inflight -= 1
            if allowed:
                done += 1
            else:
                refused += 1
            if remaining < 1 and not log.active:
                hold_until = max(hold_until, reset)
    return windows * window / now, refused, log


@pytest.mark.parametrize("moving", [False, True], ids=["fixed", "moving"])
@pytest.mark.parametrize(("limit", "window"), [(10, 1.0), (20, 2.0), (50, 10.0)])
def test_short_windows_are_used_to_at_least_90_percent_without_refusals(limit: int, window: float,
                                                                       moving: bool) -> None:
    share, refused, log = run(limit, window, moving=moving)
    assert refused == 0
    assert share >= 0.9
    assert log.length() == window  # the whole second learned, not the header's second more


def test_the_length_is_the_one_whole_second_the_windows_allow() -> None:
    log = WindowLog()
    # A window's first answer: its end lies in the second before the header's reset.
    log.observe(0.004, sent_at=0.0, remaining=9, limit=10, reset=1.6, refused=False, inflight=1)
    assert (log.lo, log.hi) == pytest.approx((0.6, 1.604))
    assert log.length() == 1.0
    log.observe(1.104, sent_at=1.1, remaining=9, limit=10, reset=1.5, refused=False, inflight=1)
    assert (log.lo, log.hi) == pytest.approx((0.6, 1.504))
    # An interval that holds two whole seconds gives the longer: never too short.
    wide = WindowLog()
    wide.observe(0.01, sent_at=0.0, remaining=9, limit=10, reset=1.99, refused=False, inflight=1)
    assert wide.length() == pytest.approx(2.0)
    wide.observe(2.51, sent_at=2.5, remaining=9, limit=10, reset=1.49, refused=False, inflight=1)
    assert wide.length() == 1.0
    # A slow first answer bounds the length from below by nothing: a window lasts a second at least.
    slow = WindowLog()
    slow.observe(1.0, sent_at=0.0, remaining=9, limit=10, reset=0.9, refused=False, inflight=1)
    assert (slow.lo, slow.hi, slow.length()) == pytest.approx((0.0, 1.9, 1.0))


def test_the_log_holds_a_send_until_an_answer_leaves_the_window() -> None:
    log = WindowLog()
    log.observe(0.004, sent_at=0.0, remaining=2, limit=3, reset=1.6, refused=False, inflight=1)
    log.observe(0.5, sent_at=0.45, remaining=1, limit=3, reset=1.1, refused=False, inflight=1)
    assert log.length() == 1.0
    assert log.ready_at(0.5) == -math.inf  # no send seen yet: the store does not report them
    log.on_send()
    # Two answers in the last second and one in flight: the older answer must leave the window.
    assert log.ready_at(0.6) == pytest.approx(0.004 + 1.0 + LOG_MARGIN)
    log.on_send()
    log.on_send()
    assert log.ready_at(0.6) is None  # the whole budget in flight: wait for an answer
    log.observe(0.7, sent_at=0.6, remaining=0, limit=3, reset=0.9, refused=False, inflight=3)
    assert log.ready_at(0.7) == pytest.approx(0.7 + 1.0 + LOG_MARGIN)
    log.on_abandon()
    log.on_abandon()
    # Cancelled requests free their places: three answers in the last second, the oldest must leave.
    assert log.ready_at(0.7) == pytest.approx(0.004 + 1.0 + LOG_MARGIN)
    assert log.ready_at(1.2) == -math.inf


def test_refusals_the_log_did_not_foresee_turn_it_off_in_two_steps() -> None:
    log = WindowLog()
    log.observe(0.004, sent_at=0.0, remaining=9, limit=10, reset=1.6, refused=False, inflight=1)
    log.on_send()
    assert log.active
    assert log.length() == 1.0
    # Refused with room in the log: the window is not the whole second (another client, or
    # skewed clocks): the interval's upper end from now on.
    log.observe(0.3, sent_at=0.29, remaining=0, limit=10, reset=1.3, refused=True, inflight=1)
    assert log.length() == pytest.approx(1.604)
    log.on_send()
    log.observe(0.5, sent_at=0.49, remaining=0, limit=10, reset=1.1, refused=True, inflight=1)
    assert not log.trusted
    assert log.length() is None
    assert log.ready_at(0.6) == -math.inf


def test_a_slow_answer_is_no_surprise() -> None:
    # A moving window of 3 a second: the fourth request goes as the log allows, and its answer
    # takes 0.3 s. The server counted it with the two before it (arrivals 0.302 and 0.602); those
    # were answered more than a second before this answer came, but not before it was sent.
    log = WindowLog()
    for sent, remaining in ((0.0, 2), (0.3, 1), (0.6, 0)):
        log.on_send()
        log.observe(sent + 0.004, sent_at=sent, remaining=remaining, limit=3, reset=1.6 - sent,
                    refused=False, inflight=1)
    assert log.length() == 1.0
    assert log.ready_at(0.7) == pytest.approx(0.004 + 1.0 + LOG_MARGIN)
    log.on_send()
    log.observe(1.31, sent_at=1.009, remaining=0, limit=3, reset=0.3, refused=False, inflight=1)
    assert log.whole
    assert log.trusted
    assert log.length() == 1.0


def test_windows_that_follow_the_clock_are_learned_from_the_requests_before_each_window() -> None:
    # Windows of 2 s on the clock's even seconds: a window's first request may come late in it, the
    # crawl's first most of all, and its interval's upper end is then too short. Taken as a window
    # begun by its first request, the first answer here said 0.3 s, and the log gated at 10 per 0.3 s.
    log = WindowLog()
    log.on_send()
    log.observe(1.704, sent_at=1.7, remaining=9, limit=10, reset=0.296, refused=False, inflight=1)
    assert log.clocked  # no whole-second window is that short: the window was met part spent
    assert log.length() is None
    # The next window began after the request answered before its first was sent (1.7).
    log.on_send()
    log.observe(2.014, sent_at=2.01, remaining=9, limit=10, reset=1.986, refused=False, inflight=1)
    assert (log.lo, log.hi) == pytest.approx((0.986, 2.3))
    assert log.length() == 2.0
    # A window whose first request came 0.3 s late in it keeps that: 2 s, not the 1.7 s its own send gives.
    log.on_send()
    log.observe(4.304, sent_at=4.3, remaining=9, limit=10, reset=1.696, refused=False, inflight=1)
    assert (log.lo, log.hi, log.length()) == pytest.approx((0.986, 2.3, 2.0))
    # A window that fits none of that (the server changed its windows) turns the log off.
    log.on_send()
    log.observe(8.304, sent_at=8.3, remaining=9, limit=10, reset=4.696, refused=False, inflight=1)
    assert not log.trusted
    assert log.length() is None


def test_a_clock_window_met_part_spent_is_learned_from_the_next_windows_first_answer() -> None:
    # 7 per 1 s on the clock, windows ending at .63: the crawl's first request goes at 0.37, with
    # the header's end at 1.0. Taken for a window begun by it, [0, 0.63], and the next window's first
    # answer ([0.27, 1.32]) kept the log at 7 per 0.63 s: refusals, then the log off.
    log = WindowLog()
    for sent, left, reset in ((0.37, 6, 0.58), (0.5, 5, 0.45), (0.68, 6, 1.27)):
        log.on_send()
        log.observe(sent + 0.05, sent_at=sent, remaining=left, limit=7, reset=reset, refused=False,
                    inflight=1)
    assert log.clocked
    assert (log.lo, log.hi) == pytest.approx((0.27, 1.5))  # it began after the request sent at 0.5 arrived
    assert log.length() == 1.0
    # A budget of one keeps the first-request rule: every answer is its window's first.
    one = WindowLog()
    one.observe(0.42, sent_at=0.37, remaining=0, limit=1, reset=0.58, refused=False, inflight=1)
    assert not one.clocked
    assert one.length() == pytest.approx(0.63)


@dataclass
class Response:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)


async def flask_request(throttler: Throttler, server: Limiter, clock: MockClock, sends: list[float]) -> bool:
    """One request through ``throttler`` to a Flask-Limiter-like ``server``, answered with its headers.

    Returns whether the server accepted it; the send time goes to ``sends``.
    """
    async with throttler.slot("http://api.example.com/") as permit:
        sent = clock.now()
        sends.append(sent)
        allowed, remaining, reset = server.hit(sent + ONE_WAY)
        await clock.sleep(2 * ONE_WAY)
        permit.feedback(Response(200 if allowed else 429, {
            "X-RateLimit-Limit": str(server.limit), "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": str(int(EPOCH + reset)),
            "Retry-After": str(max(0, int(reset - clock.now())))}))
    return allowed


async def test_a_flask_limiter_scope_is_gated_by_its_own_answers(clock: MockClock,
                                                                 make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                                "CONCURRENT_REQUESTS_PER_DOMAIN": 8, "RANDOMIZE_DOWNLOAD_DELAY": False})
    throttler._releaser._builder.wall_clock = lambda: EPOCH + clock.now()  # the server's epoch
    server = Limiter(10, 1.0, moving=False)
    sends: list[float] = []
    refused = 0
    for _ in range(61):
        refused += not await flask_request(throttler, server, clock, sends)
    assert refused == 0
    # Six windows after the first: a second each and the first request's trip, not the header's second more.
    assert sends[-1] - sends[10] == pytest.approx(5.0 + 5 * (2 * ONE_WAY + 0.005), abs=0.05)


@pytest.mark.parametrize(("limit", "window", "moving"), [(10, 1.0, False), (10, 1.0, True), (20, 2.0, True)],
                         ids=["fixed-1s", "moving-1s", "moving-2s"])
async def test_a_rampup_scope_in_one_process_is_gated_by_its_log_too(
        clock: MockClock, make_throttler: ThrottlerFactory, limit: int, window: float, moving: bool) -> None:
    # Rampup is the crawl's default: its scope hears every send in one process's store, so
    # its window log gates it as well (it got 0.68-0.91 of the limit on the header's reset).
    throttler = make_throttler({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "DOWNLOAD_DELAY": 1.0,
                                "CONCURRENT_REQUESTS_PER_DOMAIN": 8})
    throttler._releaser._builder.wall_clock = lambda: EPOCH + clock.now()  # the server's epoch
    server = Limiter(limit, window, moving=moving)
    sends: list[float] = []
    refused = 0
    pages = 12 * limit + 1

    async def worker() -> None:
        nonlocal refused, pages
        while pages > 0:
            pages -= 1
            refused += not await flask_request(throttler, server, clock, sends)

    await asyncio.gather(*(worker() for _ in range(8)))
    assert refused == 0
    # Twelve windows from the first send to the last: each a window and the first request's trip.
    assert 12 * window / (sends[-1] - sends[0]) >= 0.97


def test_a_debug_line_says_when_the_window_log_holds_a_scope(caplog: pytest.LogCaptureFixture) -> None:
    from crawlpace._settings._config_types import ScopeConfig
    from crawlpace.policy.scope import ScopePolicy
    from crawlpace.policy.signals import CoarseReset, ScopeFeedback

    policy = ScopePolicy("api.example.com", ScopeConfig(), concurrency_cap=16)
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.scope"):
        policy.on_outcome(0.004, ScopeFeedback(status=200, coarse=CoarseReset(1.0, 2.0, 1.6)), generation=0,
                          sent_at=0.0, expected_use=1.0, inflight=1)
        policy.on_admit(0.01, 1.0)
        policy.on_outcome(0.02, ScopeFeedback(status=200, coarse=CoarseReset(0.0, 2.0, 1.58)), generation=0,
                          sent_at=0.01, expected_use=1.0, inflight=1)
    assert "window log gates the sends" in caplog.text
    assert "api.example.com held 0.989s: its window log has the budget of 2 spent" in caplog.text


def test_answers_without_the_budget_headers_leave_the_log_too() -> None:
    # An error page or a redirect carries no X-RateLimit-*: counted as still in flight, as many of them
    # as the budget held the scope for good ("until an answer", with none to come).
    from crawlpace._settings._config_types import ScopeConfig
    from crawlpace.policy.scope import ScopePolicy
    from crawlpace.policy.signals import CoarseReset, ScopeFeedback

    policy = ScopePolicy("api.example.com", ScopeConfig(), concurrency_cap=16)
    policy.on_outcome(0.004, ScopeFeedback(status=200, coarse=CoarseReset(1.0, 2.0, 1.6)), generation=0,
                      sent_at=0.0, expected_use=1.0, inflight=1)
    policy.on_admit(0.01, 1.0)
    policy.on_outcome(0.02, ScopeFeedback(status=200, coarse=CoarseReset(0.0, 2.0, 1.58)), generation=0,
                      sent_at=0.01, expected_use=1.0, inflight=1)
    log = policy.window_log
    assert log is not None
    assert log.active
    for n in range(2):
        policy.on_admit(3.0 + n, 1.0)
        policy.on_outcome(3.01 + n, ScopeFeedback(status=404), generation=0, sent_at=3.0 + n,
                          expected_use=1.0, inflight=1)
    assert log.inflight == 0
    assert log.ready_at(6.0) is not None


def test_a_moving_window_that_shows_no_reset_while_requests_are_left_is_learned_when_spent() -> None:
    # 4 per 1 s moving, its reset in seconds from now (X-RateLimit-Reset-After): 0 while requests are
    # left, then the time until the oldest counted leaves. No answer with one request counted shows a
    # reset, so the first-answer rule never learned such a window; the spent answer pins it.
    log = WindowLog()
    for k in range(4):
        log.on_send()
        sent = 0.1 * k
        remaining = 3 - k
        reset = 0.0 if remaining else (0.0 + ONE_WAY) + 1.0 - (sent + ONE_WAY)
        log.observe(sent + 0.05, sent_at=sent, remaining=remaining, limit=4, reset=reset, refused=False,
                    inflight=1, whole=False)
    length = log.length()
    assert log.moving
    assert log.active
    assert length is not None
    assert log.lo <= 1.0 <= length <= 1.0 + 0.1  # never shorter than the window
    # The next send waits until the first answer has left a window of that length.
    ready = log.ready_at(0.4)
    assert ready is not None
    assert ready == pytest.approx(0.05 + length + LOG_MARGIN)


def test_resets_in_seconds_from_now_teach_no_fixed_window() -> None:
    # The same headers on a fixed window (a reset > 0 with requests left): the whole-second rule is
    # not theirs (their windows need not last whole seconds), and the header's pace stands.
    log = WindowLog()
    for k in range(4):
        log.on_send()
        log.observe(0.1 * k + 0.05, sent_at=0.1 * k, remaining=3 - k, limit=4, reset=2.3 - 0.1 * k,
                    refused=False, inflight=1, whole=False)
    assert not log.moving
    assert log.length() is None
    assert not log.active

