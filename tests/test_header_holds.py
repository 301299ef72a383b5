"""Headers read as servers mean them (issue 37.1), on the fake clock.

Flask-Limiter, with its headers on, sends ``Retry-After`` on every answer,
beside ``X-RateLimit-Remaining``: a success that says budget remains is no
hold; a spent budget holds to its reset; a refusal that says when the budget
comes back is paced by it, not backed off on top.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from crawlpace import Throttler
from crawlpace._responses._feedback import FeedbackBuilder, retry_after_applies
from crawlpace._responses._headers import parse_hints
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

FAST = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}
URL = "https://api.example.com/"


@dataclass
class Response:
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


def flask_limiter(remaining: int, reset: float, retry_after: int, limit: int = 100) -> dict[str, str]:
    """Flask-Limiter's headers (the reset as seconds here: the fake clock has no epoch)."""
    return {"X-RateLimit-Limit": str(limit), "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": f"{reset:g}", "Retry-After": str(retry_after)}


async def answer(throttler: Throttler, status: int = 200, headers: Mapping[str, str] | None = None) -> float:
    async with throttler.slot(URL) as permit:
        sent = permit.granted_at
        permit.feedback(Response(status, headers or {}))
    return sent


async def test_a_success_with_budget_left_is_not_held_by_its_retry_after(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 200, flask_limiter(99, 60, 60))
    # Paced over the window by the budget (about 0.6 s a request), not held for 60 s.
    second = await answer(throttler)
    assert 0.0 < second < 1.0


async def test_a_success_that_spends_the_budget_holds_to_its_reset(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    # Flask-Limiter cuts Retry-After down to whole seconds: 1 with 1.8 s to the reset.
    await answer(throttler, 200, flask_limiter(0, 1.8, 1))
    assert await answer(throttler) == pytest.approx(1.8)


async def test_a_refusal_holds_for_its_retry_after_even_with_budget_left(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 429, flask_limiter(5, 60, 10))
    # Held for the whole Retry-After (a refusal with budget left is a brake: backed off too).
    assert await answer(throttler) >= 10.0


async def test_a_refusal_that_says_when_the_budget_returns_is_not_backed_off(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 429, flask_limiter(0, 5, 5))
    # Held to the reset, then one request at a time until an answer says what came back.
    assert await answer(throttler, 200, flask_limiter(99, 60, 60)) == pytest.approx(5.0)
    stats = await throttler.scope_stats("api.example.com")
    assert stats is not None
    # No backoff level: the old reading held the scope at one request a second for a minute.
    assert stats.backoff == 0
    third = await answer(throttler)
    assert 5.0 < third < 6.0  # the budget's pace, about 0.6 s


async def test_a_lone_retry_after_on_a_success_still_holds(clock: MockClock,
                                                          make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(FAST)
    await answer(throttler, 200, {"Retry-After": "3"})  # no budget announced: no other sign
    assert await answer(throttler) == 3.0


@pytest.mark.parametrize(("status", "headers", "applies"), [
    (200, {"Retry-After": "1", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "1"}, False),
    (200, {"Retry-After": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1"}, True),
    (200, {"Retry-After": "1", "RateLimit-Policy": '"p";q=10;w=1', "RateLimit": '"p";r=9;t=1'}, False),
    (200, {"Retry-After": "1", "RateLimit-Policy": '"p";q=10;w=1', "RateLimit": '"p";r=0;t=1'}, True),
    (204, {"Retry-After": "1", "RateLimit-Remaining": "3", "RateLimit-Reset": "1"}, False),
    (301, {"Retry-After": "1", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "1"}, True),
    (429, {"Retry-After": "1", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "1"}, True),
    (503, {"Retry-After": "1", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "1"}, True),
    (200, {"Retry-After": "1"}, True),
])
def test_when_retry_after_applies(status: int, headers: dict[str, str], applies: bool) -> None:
    hint = parse_hints(headers, wall_now=0.0, cap=300.0)
    assert hint is not None
    assert retry_after_applies(hint, status) is applies


async def test_a_debug_line_says_why_a_scope_is_held(clock: MockClock, make_throttler: ThrottlerFactory,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    throttler = make_throttler(FAST)
    with caplog.at_level(logging.DEBUG, logger="crawlpace._responses._feedback"):
        await answer(throttler, 200, flask_limiter(99, 60, 60))
        await answer(throttler, 429, {"Retry-After": "30"})
        await answer(throttler, 200, flask_limiter(0, 7, 6))
    lines = [record.getMessage() for record in caplog.records
             if record.name == "crawlpace._responses._feedback"]
    assert any("not held: Retry-After 60s on a 200" in line and "remaining 99" in line for line in lines)
    assert any("held 30.000s: Retry-After 30s on a 429" in line for line in lines)
    assert any("held 7.000s: X-RateLimit budget spent (remaining 0.0, reset in 7s) on a 200" in line
               for line in lines)


def test_hold_of_without_a_status_keeps_retry_after() -> None:
    from crawlpace import Settings

    builder = FeedbackBuilder(Settings())
    hint = parse_hints(flask_limiter(99, 60, 60), wall_now=0.0, cap=300.0)
    assert builder.hold_of(hint) == 60.0  # a manager that knows no status: the header stands
    assert builder.hold_of(hint, 200) is None


# -- a reset in whole seconds, narrowed by the window's learned length -------------------------


def flask_reset(window_end: float) -> float:
    """Flask-Limiter's X-RateLimit-Reset: the end's second, plus one."""
    return float(int(window_end + 1))


def test_the_refiner_learns_a_fixed_windows_length_and_narrows_its_reset() -> None:
    from crawlpace.policy.budget import EDGE_MARGIN, ResetRefiner

    refiner = ResetRefiner()
    # Windows of 1 s, each starting at its first request (sent 1 ms before it arrives).
    used = []
    for start in (10.3, 11.35, 12.42):
        end = start + 0.001 + 1.0
        now = start + 0.005
        used.append(refiner.reset(now, sent_at=start, remaining=9, limit=10,
                                  reset=flask_reset(end) - now, refused=False))
    # First window: only the header (its end lies anywhere in its last second).
    assert used[0] == pytest.approx(flask_reset(10.301 + 1.0) - 10.305)
    # Then the window's length (at most the time between two windows' first requests) narrows it.
    assert refiner.length == pytest.approx(1.05)
    assert used[2] == pytest.approx(12.42 + 1.05 + EDGE_MARGIN - 12.425)
    assert 12.42 + 0.001 + 1.0 <= 12.425 + used[2] <= flask_reset(13.421)


def test_a_stale_start_keeps_the_headers_reset() -> None:
    from crawlpace.policy.budget import ResetRefiner

    refiner = ResetRefiner()
    refiner.reset(0.005, sent_at=0.0, remaining=9, limit=10, reset=1.995, refused=False)
    refiner.reset(1.105, sent_at=1.1, remaining=9, limit=10, reset=0.895, refused=False)
    # A moving window's answer, long after the last window's first request: the header stands.
    assert refiner.reset(5.5, sent_at=5.49, remaining=2, limit=10, reset=0.5, refused=False) == 0.5


def test_a_refusal_of_a_request_let_go_early_turns_the_narrowing_off() -> None:
    from crawlpace.policy.budget import ResetRefiner

    refiner = ResetRefiner()
    refiner.reset(0.005, sent_at=0.0, remaining=9, limit=10, reset=1.995, refused=False)
    refiner.reset(1.105, sent_at=1.1, remaining=9, limit=10, reset=1.895, refused=False)
    narrowed = refiner.reset(1.5, sent_at=1.49, remaining=0, limit=10, reset=1.5, refused=False)
    assert narrowed < 1.5
    # The server refused a request sent before the header's reset: it rounds otherwise.
    refiner.reset(2.3, sent_at=2.25, remaining=0, limit=10, reset=0.7, refused=True)
    assert not refiner.trusted
    assert refiner.reset(2.4, sent_at=2.35, remaining=5, limit=10, reset=0.6, refused=False) == 0.6

