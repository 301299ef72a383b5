"""A fleet worker's room is for URLs it can send soon, not for URLs waiting for their site's pace.

A worker of the shared frontier claims at most its room (twice
``CONCURRENT_REQUESTS``). URLs it holds that wait in its scheduler for their
site's turn (a Crawl-delay, a slow bucket, a hold) used to count in that room:
on a farm of more sites than the room, it filled with the URLs of the slow
sites, the worker claimed one URL per answer, round every site in turn, and a
fleet of 4 sent each site, fast or Crawl-delayed, about 4 x its answers / 30
a second (0.38 x the oracle on the Crawl-delay sites of a 30-site random farm,
where one process got 1.0). A real redis-server; nothing is sent: every URL
claimed waits in the scheduler, as the slow sites' URLs do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from pathlib import Path

import pytest

from crawlpace import ScopeConfig, Settings
from crawlpace.crawl import CrawlOptions
from crawlpace.crawl._shared_job import SharedCrawlJob, SharedSource
from crawlpace.frontier._claim_loop import WAITING_PER_SCOPE, ClaimLoop
from crawlpace.frontier._shared import Claim, SharedFrontier

from .test_claim_loop import WORDS, Idle

pytestmark = pytest.mark.redis

#: Two requests in flight per worker (a room of 4 URLs), no delay: the frontier hands URLs out at once.
SETTINGS = Settings(concurrent_requests=2, scope_defaults=ScopeConfig(concurrency=2, delay=0.0))
SLOW_SITES = 6


def site(host: str, count: int) -> list[str]:
    return [f"http://{host}/page/{n}" for n in range(count)]


async def test_urls_waiting_for_their_sites_do_not_fill_the_room(redis_url: str, tmp_path: Path) -> None:
    filler = SharedFrontier(redis_url, worker="filler")
    frontier = SharedFrontier(redis_url, worker="one")
    job = SharedCrawlJob(SETTINGS, CrawlOptions(output=tmp_path / "out.jsonl", store=redis_url),
                         frontier=frontier)
    source = job.source
    assert isinstance(source, SharedSource)
    rounds: list[Claim] = []

    def take(claim: Claim) -> bool:
        rounds.append(claim)
        return source._take(claim)

    try:
        # More slow sites than the room holds, queued first; the fast site's URLs after them.
        await filler.enqueue([url for n in range(SLOW_SITES) for url in site(f"slow{n}.test", 5)])
        await filler.enqueue(site("fast.test", 5))
        await asyncio.wait_for(source._claims.run(before=source._send_acks, take=take,
                                                  stopping=lambda: len(rounds) >= 8), 20.0)
        held = Counter(source._held.values())
    finally:
        await filler.aclose()
        await frontier.aclose()
        await job.throttler.aclose()
    # Main: the first claim took one URL of each of 4 slow sites, the room (4) was full, and every
    # later claim asked for none: fast.test waited in the frontier while nothing here could be sent.
    assert held["fast.test"] >= 1
    assert set(held) == {f"slow{n}.test" for n in range(SLOW_SITES)} | {"fast.test"}
    # No site has more URLs waiting here than its next turns need: the rest stay for other workers.
    assert max(held.values()) == WAITING_PER_SCOPE
    assert all(job.scheduler.queued_on_host(host) == count for host, count in held.items())


def test_the_room_counts_what_is_sent_soon_and_the_ceiling_bounds_the_rest() -> None:
    """In flight (not waiting) still fills the room; waiting URLs past two per site count in it; and
    whatever waits, one worker never holds more than its ceiling."""
    waiting: dict[str, int] = {}
    loop = ClaimLoop(Idle(), SETTINGS, now=time.monotonic, poll=0.1, wording=WORDS,
                     logger=logging.getLogger("test"), waiting=lambda scope: waiting.get(scope, 0))
    assert loop.target == 4
    for fid in range(4):
        loop.hold(fid, f"s{fid}.test")
    assert loop.room() == 0  # four in flight: the room is full
    waiting.update({f"s{fid}.test": 1 for fid in range(4)})
    assert loop.room() == 4  # the four wait for their sites: none of them counts
    for fid in range(4, 8):
        loop.hold(fid, "s0.test")
    waiting["s0.test"] = 5
    assert loop.full_scopes() == ["s0.test"]
    assert loop.room() == 4 - (5 - WAITING_PER_SCOPE)  # past two per site, waiting URLs count
    for fid in range(8, 8 + loop.ceiling):
        loop.hold(fid, f"w{fid}.test")
        waiting[f"w{fid}.test"] = 1
    assert loop.room() == 0  # the ceiling


def test_without_a_waiting_count_every_url_held_counts_as_before() -> None:
    """Scrapy's shared scheduler says nothing of what waits: its room is what it holds."""
    loop = ClaimLoop(Idle(), SETTINGS, now=time.monotonic, poll=0.1, wording=WORDS,
                     logger=logging.getLogger("test"))
    for fid in range(3):
        loop.hold(fid, f"s{fid}.test")
    assert loop.room() == 1
    assert loop.full_scopes() == []


async def test_a_workers_work_left_of_a_host_counts_the_urls_the_frontier_still_queues(
        redis_url: str, tmp_path: Path) -> None:
    """What a fleet's worker tells its throttler of a host's work (``crawl/_job.py`` ``_work_left``):
    its own queued URLs and those the frontier still held at its last claim, none more to come, as one
    process tells its own; unknown (a floor, more to come) before it claimed any of the host."""
    filler = SharedFrontier(redis_url, worker="filler")
    frontier = SharedFrontier(redis_url, worker="one")
    job = SharedCrawlJob(SETTINGS, CrawlOptions(output=tmp_path / "out.jsonl", store=redis_url),
                         frontier=frontier)
    source = job.source
    assert isinstance(source, SharedSource)
    try:
        await filler.enqueue(site("a.test", 9))
        assert source.unloaded("a.test") is None
        assert job._work_left("a.test") == (0, True)
        source._take(await frontier.claim(1, spacing=0.0))
        await filler.claim(3, spacing=0.0)  # another worker takes one: seen at this worker's next claim
        assert source.unloaded("a.test") == 8
        assert job._work_left("a.test") == (9, False)
    finally:
        await filler.aclose()
        await frontier.aclose()
        await job.throttler.aclose()
