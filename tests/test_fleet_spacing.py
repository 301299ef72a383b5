"""A fleet keeps a robots.txt ``Crawl-delay`` between the requests the site sees, not only between
its admissions.

The store admits a Crawl-delay scope's requests a delay apart, one at a time, but on a loaded
machine a worker writes its request 0.1-0.3 s after the admission, more or less from one worker
to the next: one lagging write and a punctual next one reached the site closer than the delay
(loaded fleets of 8 broke it on five sites of a farm). Each write is now noted at the store as it
goes, the next admission's reply carries the time, and the next write keeps the delay after it.
"""

from __future__ import annotations

import math
import random
import uuid

import pytest

from crawlpace import Settings
from crawlpace.stores import Outcome, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.testing import MockClock

from .test_fleet_holds import admitted

SETTINGS = Settings.from_scrapy({
    "THROTTLING_SCOPE_DEFAULTS": {"concurrency": 4, "delay": 0.0, "delay_per_slot": 0.0},
    "CONCURRENT_REQUESTS": 16, "RANDOMIZE_DOWNLOAD_DELAY": False})
DELAY = 0.5


@pytest.mark.redis
async def test_a_crawl_delay_spaces_the_fleets_writes_not_only_its_admissions(redis_url: str) -> None:
    clock = MockClock()
    url = redis_url.split("?")[0] + f"?namespace=c{uuid.uuid4().hex[:10]}&time=local"
    first, second = (open_store(url, SETTINGS, clock, random.Random(seed)) for seed in (1, 2))
    assert isinstance(first, RedisStore)
    assert isinstance(second, RedisStore)
    try:
        await first.set_crawl_delay("site", DELAY)
        lease = await admitted(first, clock)
        assert first.write_after(("site",)) == -math.inf  # no write noted yet
        clock.advance(0.3)  # its loop writes it 0.3 s after the admission
        written = clock.now()
        first.wrote(("site",))
        clock.advance(0.05)  # the answer frees the one slot
        await first.release(lease, Outcome(status=200, latency=0.05))
        await first.flush()
        other = await admitted(second, clock)
        assert clock.now() == pytest.approx(lease.granted_at + DELAY, abs=0.002)  # admitted at its pace
        # Its write keeps the delay after the first write, not only after the first admission
        # (main: written at once, 0.2 s after the first); asked once, the time is gone.
        assert second.write_after(("site",)) == pytest.approx(written + DELAY, abs=0.002)
        assert second.write_after(("site",)) == -math.inf
        await second.release(other, Outcome(status=200, latency=0.05))
    finally:
        await first.aclose()
        await second.aclose()
