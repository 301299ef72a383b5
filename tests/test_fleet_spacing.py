"""A fleet keeps a robots.txt ``Crawl-delay`` between the requests the site sees, not only between
its admissions.

The store admits a Crawl-delay scope's requests a delay apart, but on a loaded machine a worker
writes its request 0.1-0.3 s after the admission, more or less from one worker to the next: one
lagging write and a punctual next one reached the site closer than the delay (loaded fleets of 8
broke it on five sites of a farm). Each write now takes a slot at the store, a delay after the
previous slot and after the latest write a worker reported.
"""

from __future__ import annotations

import random
import uuid

import pytest

from crawlpace import Settings
from crawlpace.stores import Lease, Outcome, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.testing import MockClock

SETTINGS = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"concurrency": 4, "delay": 0.0},
                                 "CONCURRENT_REQUESTS": 16})
SCOPE = (("site", 1.0),)
DELAY = 0.5


async def _admitted(store: RedisStore, clock: MockClock) -> Lease:
    """A lease of ``SCOPE``, the clock advanced to the scope's next send."""
    for _ in range(10):
        got = await store.acquire(SCOPE)
        if isinstance(got, Lease):
            return got
        assert got.ready_at is not None
        clock.advance(max(got.ready_at - clock.now(), 0.001))
    raise AssertionError("never admitted")


@pytest.mark.redis
async def test_a_crawl_delay_spaces_the_fleets_writes_not_only_its_admissions(redis_url: str) -> None:
    clock = MockClock()
    url = redis_url.split("?")[0] + f"?namespace=c{uuid.uuid4().hex[:10]}&time=local"
    first, second = (open_store(url, SETTINGS, clock, random.Random(seed)) for seed in (1, 2))
    assert isinstance(first, RedisStore)
    assert isinstance(second, RedisStore)
    try:
        await first.set_crawl_delay("site", DELAY)
        lease = await _admitted(first, clock)
        assert await first.held_for(("site",)) == 0.0  # its slot is now
        clock.advance(0.3)  # its loop writes it 0.3 s late
        first.wrote(("site",))
        await first.flush()
        await first.release(lease, Outcome(status=200, latency=0.05))
        await first.flush()
        other = await _admitted(second, clock)  # a delay after the first admission
        admitted = clock.now()
        # Written at once it would reach the site 0.2 s after the first (main: 0.0, no look).
        wait = await second.held_for(("site",))
        assert admitted + wait == pytest.approx(lease.granted_at + 0.3 + DELAY, abs=0.01)
        # A look again after that wait takes no new slot; a third write's slot is a delay later.
        clock.advance(wait)
        assert await second.held_for(("site",), again=True) == 0.0
        assert await first.held_for(("site",)) == pytest.approx(DELAY, abs=0.01)
        await second.release(other, Outcome(status=200, latency=0.05))
    finally:
        await first.aclose()
        await second.aclose()
