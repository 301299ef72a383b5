"""A fleet keeps a robots.txt ``Crawl-delay`` between the requests the site sees, not only between
its admissions.

The store admits a Crawl-delay scope's requests a delay apart, one at a time, but on a loaded
machine a worker writes its request 0.1-0.3 s after the admission, more or less from one worker
to the next: one lagging write and a punctual next one reached the site closer than the delay
(loaded fleets of 8 broke it on five sites of a farm). Each write is now noted at the store as it
goes, and the scope's next admission, by any worker, waits the delay after the write.
"""

from __future__ import annotations

import random
import uuid

import pytest

from crawlpace import Settings
from crawlpace.stores import Lease, Outcome, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.testing import MockClock

SETTINGS = Settings.from_scrapy({
    "THROTTLING_SCOPE_DEFAULTS": {"concurrency": 4, "delay": 0.0, "delay_per_slot": 0.0},
    "CONCURRENT_REQUESTS": 16, "RANDOMIZE_DOWNLOAD_DELAY": False})
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
        clock.advance(0.3)  # its loop writes it 0.3 s after the admission
        written = clock.now()
        first.wrote(("site",))
        clock.advance(0.05)  # the answer frees the one slot
        await first.release(lease, Outcome(status=200, latency=0.05))
        await first.flush()
        other = await _admitted(second, clock)
        # A delay after the write (main: after the admission; written at once, 0.2 s after the first).
        assert clock.now() == pytest.approx(written + DELAY, abs=0.002)
        second.wrote(("site",))  # punctual: its own write is the next one's mark
        await second.release(other, Outcome(status=200, latency=0.05))
        await second.flush()
        third = await _admitted(first, clock)
        assert clock.now() == pytest.approx(written + 2 * DELAY, abs=0.002)
        await first.release(third, Outcome(status=200, latency=0.05))
    finally:
        await first.aclose()
        await second.aclose()
