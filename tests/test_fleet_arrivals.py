"""Rampup counts the gaps a limiter judges between the requests' arrivals, not their admissions.

A fleet's worker writes its request a varying while after the shared store admitted it (its loop's
turn, the last look's question to the store, a hold's turn after another worker's refusal): traced
on a loaded machine (bench/results/fleetviol2.md), two sends admitted 0.42 s apart reached a bucket of
1.67/s with no burst 2.5 s apart. Taken as a gap the site accepted, the 0.42 s paced the fleet above
the bucket's rate, refused again after every hold. The caller tells the delay (``ScopeFeedback.lag``)
and rampup moves each send to its arrival for its record of gaps.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from crawlpace._clients._last_look import WRITING, LastLook, Writing
from crawlpace.crawl._fetch import AiohttpFetcher
from crawlpace.policy.rampup import Rampup
from crawlpace.stores import Outcome
from crawlpace.testing import MockClock

from .test_fetch import answering, server


def _rampup() -> Rampup:
    return Rampup(start_rate=1.0, min_rate=1 / 300, max_rate=100.0, max_concurrency=8, window=60.0,
                  target=(1.0, 1.0))


def _answer(rampup: Rampup, admitted: float, lag: float, latency: float, *, refused: bool = False) -> None:
    """A request admitted at ``admitted``, written ``lag`` later, answered ``latency`` after that."""
    now = admitted + lag + latency
    rampup.on_response(now, pushback=refused, current=True, latency=latency, elapsed=now - admitted, lag=lag)


def test_the_shortest_accepted_gap_is_between_arrivals() -> None:
    rampup = _rampup()
    for second in range(4):
        rampup.on_send(10.0 + 2.5 * second)
        _answer(rampup, 10.0 + 2.5 * second, 0.0, 0.02)
    # Admitted 0.42 s after the last one, its write waited 2.08 s (another worker's hold, its turn):
    # the site saw it 2.5 s after the one before. Main took 0.42 s for a gap the site had accepted.
    rampup.on_send(17.92)
    _answer(rampup, 17.92, 2.08, 0.02)
    assert rampup.shortest_ok_gap == pytest.approx(2.5)


def test_one_process_sends_are_its_arrivals() -> None:
    # No lag told (one process writes at once): the record is the sends', as before.
    rampup = _rampup()
    for at in (10.0, 10.7, 11.3):
        rampup.on_send(at)
        _answer(rampup, at, 0.0, 0.02)
    assert rampup.shortest_ok_gap == pytest.approx(0.6)


@dataclass
class _Granted:
    scopes: tuple[str, ...]
    granted_at: float
    outcome: Outcome | None = None


async def test_a_writes_wait_for_its_turn_after_a_hold_is_part_of_its_lag() -> None:
    """The last look's whole hold-back moves the request's arrival: the store's round trips and the
    turn it waited after another worker's hold (main told only the round trips: the arrival it gave
    rampup was the wait early)."""
    clock = MockClock(100.0)
    turns = [0.5, 0.0]

    async def held_for(scopes: tuple[str, ...]) -> float:
        clock.advance(0.02)  # the store's reply
        return turns.pop(0)  # another worker's hold: this write's turn comes 0.5 s later

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)  # the turn waited out, at once

    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    async with server(answering(head, b"ok")) as base:
        http = AiohttpFetcher(user_agent="test", timeout=5.0, max_connections=4, trust_env=False,
                              clock=clock.now, sleep=sleep)
        token = WRITING.set(Writing(_Granted(("site",), clock.now() - 0.2), LastLook(), clock.now, held_for))
        try:
            page = await http.get(f"{base}/a", 100)
        finally:
            WRITING.reset(token)
            await http.aclose()
    assert page.status == 200
    assert page.latency == pytest.approx(0.0)  # none of it the site's
    assert page.asked == pytest.approx(0.04)
    assert page.held == pytest.approx(0.54)  # the crawl job adds it to the lag
