"""A fleet's workers refused by a scope's pace take turns instead of all asking again at its next send.

Told the scope's next send time every one, the workers waiting on a paced scope all asked the store
again then; one got the send and each other was refused again, so a fleet of N made about N admission
calls per send (the look herd, bench/results/errors17.md). Each refusal now takes the next turn of
the scope's line (``_shared_rules.take_turn``, applied by ``acquire.lua``): one step of the scope's
gap after the line's last, the first at the next send; a worker asking again before its turn keeps it.
"""

from __future__ import annotations

import random
import uuid

import pytest
import redis

from crawlpace import Settings
from crawlpace.policy._shared_rules import NEAR_MISS, STEADY, TURN_LINE, take_turn
from crawlpace.stores import Blocked, Lease, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.stores.redis._lua import CLOCK
from crawlpace.testing import MockClock

from .redis_server import RedisServer

DELAY = 0.1
SETTINGS = Settings.from_scrapy({
    "THROTTLING_SCOPE_DEFAULTS": {"concurrency": 8, "delay": DELAY, "delay_per_slot": 0.0},
    "CONCURRENT_REQUESTS": 16, "RANDOMIZE_DOWNLOAD_DELAY": False})


def test_a_refusal_takes_the_next_turn_of_the_line() -> None:
    step = 0.1
    # No line yet: the first refused worker is told the scope's next send; the store keeps the turn.
    assert take_turn(10.0, 10.1, step, step, None, None) == (10.1, True)
    # A line: a step after its last turn.
    assert take_turn(10.0, 10.1, step, step, 10.3, None) == pytest.approx((10.4, True))
    # The line's turns came and went with the sends: it starts again at the next send.
    assert take_turn(10.0, 10.5, step, step, 10.4, None) == (10.5, True)
    # A line longer than TURN_LINE steps past the next send starts again there too.
    assert take_turn(10.0, 10.1, step, step, 10.1 + TURN_LINE * step, None) == (10.1, True)
    # A worker asking again before the turn it holds keeps its place, and takes no new turn.
    assert take_turn(10.0, 10.1, step, step, 10.4, 10.3) == (10.3, False)
    assert take_turn(10.0, 10.1, step, step, 10.1, 10.1) == (10.1, False)
    # Its turn gone by (a send went later than the turn), refused within NEAR_MISS of a step of the
    # next send: told the next send itself, not sent to the end of the line.
    near = 10.3 + 0.9 * NEAR_MISS * step
    assert take_turn(10.3, near, step, step, 10.6, 10.3) == (near, False)
    # A turn no longer in the line (it started again lower) is no place to keep.
    assert take_turn(10.0, 10.1, step, step, 10.2, 10.5) == pytest.approx((10.3, True))
    # A pace that moved lately (its mean gap off its delay by more than STEADY of it), or is not known
    # yet, hands out no turns: the refused are told the next send.
    assert take_turn(10.0, 10.1, step, step * (1 + 1.1 * STEADY), 10.3, None) == (10.1, False)
    assert take_turn(10.0, 10.1, step, step * (1 - 1.1 * STEADY), 10.3, None) == (10.1, False)
    assert take_turn(10.0, 10.1, step, None, 10.3, None) == (10.1, False)
    assert take_turn(10.0, 10.1, step, step * (1 + 0.9 * STEADY), 10.3, None) == pytest.approx((10.4, True))
    # A scope paced by no gap hands out no turns.
    assert take_turn(10.0, 10.1, 0.0, 0.0, 10.3, None) == (10.1, False)


@pytest.mark.redis
def test_lua_takes_a_turn_as_python_does(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    try:
        script = CLOCK + ("local t, write = take_turn(now, tonumber(ARGV[2]), tonumber(ARGV[3]), "
                          "tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]))\n"
                          "return {string.format('%.17g', t), write and 1 or 0}")
        cases = [(10.0, 10.1, 0.1, 0.1, None, None), (10.0, 10.1, 0.1, 0.11, 10.3, None),
                 (10.0, 10.5, 0.1, 0.09, 10.4, None), (10.0, 10.1, 0.1, 0.1, 10.9, None),
                 (10.0, 10.1, 0.1, 0.1, 10.4, 10.3), (10.0, 10.1, 0.1, 0.1, 10.1, 10.1),
                 (10.3, 10.34, 0.1, 0.1, 10.6, 10.3), (10.0, 10.1, 0.1, 0.1, 10.2, 10.5),
                 (10.0, 10.1, 0.0, 0.0, 10.3, None), (10.0, 10.1, 0.25, 0.25, 10.2, None),
                 (10.0, 10.02, 0.1, 0.1, None, None), (10.0, 10.1, 0.1, 0.2, 10.3, None),
                 (10.0, 10.1, 0.1, None, 10.3, None), (10.0, 10.1, 0.1, 0.05, 10.3, 10.2)]
        for now, at, step, mean, last, mine in cases:
            got = client.eval(script, 0, *(("" if value is None else repr(value))
                                           for value in (now, at, step, mean, last, mine)))
            want = take_turn(now, at, step, mean, last, mine)
            assert (float(got[0]), bool(got[1])) == want, (now, at, step, mean, last, mine)
    finally:
        client.close()


def _fleet(redis_url: str, clock: MockClock, n: int) -> list[RedisStore]:
    url = redis_url.split("?")[0] + f"?namespace=h{uuid.uuid4().hex[:10]}&time=local"
    stores = [open_store(url, SETTINGS, clock, random.Random(seed)) for seed in range(n)]
    assert all(isinstance(store, RedisStore) for store in stores)
    return stores  # type: ignore[return-value]


@pytest.mark.redis
async def test_workers_refused_by_the_gap_are_told_one_turn_each(redis_url: str) -> None:
    clock = MockClock()
    stores = _fleet(redis_url, clock, 4)
    try:
        for sends in range(3):  # a steady pace: the scope's mean gap between sends is its delay
            clock.advance(DELAY if sends else 0.0)
            first = await stores[0].acquire((("site", 1.0),))
            assert isinstance(first, Lease)
        sent = clock.now()
        clock.advance(0.01)
        turns = []
        for store in stores[1:]:
            got = await store.acquire((("site", 1.0),))
            assert isinstance(got, Blocked)
            assert got.ready_at is not None
            turns.append(got.ready_at)
        # One turn a step apart each, the first at the scope's next send (main told all three that).
        assert turns == pytest.approx([sent + DELAY, sent + 2 * DELAY, sent + 3 * DELAY])
        # Woken early (a release of its own), the third worker keeps its turn: no new one at the end.
        clock.advance(0.02)
        again = await stores[3].acquire((("site", 1.0),))
        assert isinstance(again, Blocked)
        assert again.ready_at == pytest.approx(turns[2])
        # At each turn its holder is admitted, alone: no one else was told that time.
        for store, at in zip(stores[1:], turns, strict=True):
            clock.advance(max(0.0, at - clock.now()))
            got = await store.acquire((("site", 1.0),))
            assert isinstance(got, Lease), at
    finally:
        for store in stores:
            await store.aclose()
