"""A crawl worker's acknowledgements ride with its next claim: one script call and one round trip for both.

Counted on a real server (``INFO commandstats``: every script call is an ``EVALSHA``, a batch of
calls one of them). Main awaited the acknowledgements before the claim: two calls, two round trips
(a fleet of 4 on errors sites: 0.8 acknowledgements and 1.6 claims a request, bench/results/calls1.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from crawlpace import Settings
from crawlpace.crawl import CrawlOptions
from crawlpace.crawl._shared_job import SharedCrawlJob, SharedSource
from crawlpace.frontier import Task
from crawlpace.frontier._shared import SharedFrontier, ack_counts

pytestmark = pytest.mark.redis


def site(host: str, count: int) -> list[str]:
    return [f"http://{host}/page/{n}" for n in range(count)]


async def script_calls(frontier: SharedFrontier) -> int:
    client = await frontier._conn.client()
    stats: dict[str, Any] = await client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_acknowledgements_queued_before_a_claim_go_in_one_script_call_and_run_first(
        redis_url: str) -> None:
    frontier = SharedFrontier(redis_url, worker="one")
    try:
        await frontier.enqueue(site("a.test", 2) + site("b.test", 2))
        first = await frontier.claim(2, spacing=0.0)
        assert len(first.urls) == 2
        before = await script_calls(frontier)
        sent = frontier.ack_later([item.id for item in first.urls], "ok")
        assert sent is not None
        claim = await frontier.claim(2, spacing=0.0)
        assert await script_calls(frontier) - before == 1  # main: an ack, then a claim
        assert ack_counts(await sent) == (2, 0)
        # The server ran the acknowledgement first: the claim's counts no longer hold those two.
        assert len(claim.urls) == 2
        assert (claim.queued, claim.claimed) == (0, 2)
    finally:
        await frontier.aclose()


def job_on(redis_url: str, tmp_path: Path) -> tuple[SharedCrawlJob, SharedSource, SharedFrontier]:
    frontier = SharedFrontier(redis_url, worker="one")
    job = SharedCrawlJob(Settings(), CrawlOptions(output=tmp_path / "out.jsonl", store=redis_url),
                         frontier=frontier)
    source = job.source
    assert isinstance(source, SharedSource)
    return job, source, frontier


async def test_a_workers_claim_loop_sends_its_acknowledgements_with_its_claim(redis_url: str,
                                                                            tmp_path: Path) -> None:
    job, source, frontier = job_on(redis_url, tmp_path)
    try:
        await frontier.enqueue(site("a.test", 2) + site("b.test", 2))
        claimed = await frontier.claim(2, spacing=0.0)
        for item in claimed.urls:
            source._claims.hold(item.id, item.scope)
            source.settled(Task(item.id, item.url), "ok")
        before = await script_calls(frontier)
        await source._queue_acks()  # the claim loop's step before each claim
        claim = await frontier.claim(2, spacing=0.0)
        assert await script_calls(frontier) - before == 1
        assert (claim.queued, claim.claimed) == (0, 2)
        await asyncio.sleep(0)  # the acknowledgement's reply is read
        assert not source._acks
        assert not source._acking
    finally:
        await frontier.aclose()
        await job.throttler.aclose()


async def test_a_queued_acknowledgement_that_failed_is_sent_again_and_a_bug_stops_the_feeder(
        redis_url: str, tmp_path: Path) -> None:
    job, source, frontier = job_on(redis_url, tmp_path)
    failures: list[BaseException] = [RedisConnectionError("gone"), RuntimeError("a garbled reply")]

    def failing(ids: list[int], outcome: str) -> asyncio.Future[Any]:
        sent: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        sent.set_exception(failures.pop(0))
        return sent

    frontier.ack_later = failing  # type: ignore[assignment,method-assign]
    try:
        source._claims.hold(7, "a.test")
        source.settled(Task(7, "http://a.test/7"), "ok")
        await source._queue_acks()
        await asyncio.sleep(0)  # the reply (a failure) is read
        # The server was away: the acknowledgement waits for the next round, nothing is raised.
        assert source._acks == {"ok": [7]}
        await source._queue_acks()
        await asyncio.sleep(0)
        assert source._acks == {"ok": [7]}
        with pytest.raises(RuntimeError, match="a garbled reply"):
            await source._queue_acks()  # not an unreachable server: the feeder stops, as before
    finally:
        await frontier.aclose()
        await job.throttler.aclose()
