"""The shared frontier's queue on a real redis-server: order, fairness, claims that expire, hand-backs.

Claims expire in real time, so the tests that need an expiry use a visibility
of a fraction of a second and sleep just past it; nothing else waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from crawlpace import ScopeConfig, Settings
from crawlpace.crawl import CrawlOptions
from crawlpace.crawl._shared_job import SharedCrawlJob, SharedSource, claim_per_scope
from crawlpace.frontier import Task
from crawlpace.frontier._shared import Claim, SharedFrontier

pytestmark = pytest.mark.redis

Factory = Callable[..., SharedFrontier]


@pytest.fixture
async def frontiers(redis_url: str) -> AsyncIterator[Factory]:
    """Frontier clients of one namespace (one per worker), closed after the test."""
    made: list[SharedFrontier] = []

    def make(worker: str = "w1", visibility: float = 30.0) -> SharedFrontier:
        frontier = SharedFrontier(redis_url, worker=worker, visibility=visibility)
        made.append(frontier)
        return frontier

    yield make
    for frontier in made:
        await frontier.aclose()


def site(host: str, count: int) -> list[str]:
    return [f"http://{host}/page/{n}" for n in range(count)]


async def test_enqueue_skips_duplicates_blanks_and_hostless_urls(frontiers: Factory) -> None:
    frontier = frontiers()
    report = await frontier.enqueue(["http://a.test/1", "", "# note", "http://a.test/1", "not a url",
                                     "http://b.test/1"])
    assert (report.read, report.added, report.duplicates, report.invalid) == (4, 2, 1, 1)
    again = await frontier.enqueue(["http://a.test/1"])
    assert again.added == 0
    counts = await frontier.counts()
    assert (counts.queued, counts.claimed, counts.scopes, counts.enqueued) == (2, 0, 2, 2)


async def test_a_claim_takes_one_url_per_ready_scope_in_queue_order(frontiers: Factory) -> None:
    frontier = frontiers()
    await frontier.enqueue(site("a.test", 3) + site("b.test", 2) + site("c.test", 1))
    claim = await frontier.claim(10, spacing=0.0)
    assert sorted(item.url for item in claim.urls) == ["http://a.test/page/0", "http://b.test/page/0",
                                                      "http://c.test/page/0"]
    assert {item.scope for item in claim.urls} == {"a.test", "b.test", "c.test"}
    assert all(item.tries == 1 for item in claim.urls)
    assert (claim.queued, claim.claimed) == (3, 3)
    second = await frontier.claim(10, spacing=0.0)
    assert sorted(item.url for item in second.urls) == ["http://a.test/page/1", "http://b.test/page/1"]


async def test_each_claimed_url_says_how_many_of_its_scope_the_frontier_still_queues(
        frontiers: Factory) -> None:
    # What a fleet's worker tells its throttler of a host's work left (crawl/_shared_job.py
    # ``unloaded``): the URLs no worker has claimed yet, counted in the claim's own step.
    worker, other = frontiers("w1"), frontiers("w2")
    await worker.enqueue(site("a.test", 5) + site("b.test", 1))
    claim = await worker.claim(10, spacing=0.0)
    assert {item.scope: item.left for item in claim.urls} == {"a.test": 4, "b.test": 0}
    await other.claim(10, spacing=0.0)  # another worker takes a.test/page/1
    again = await worker.claim(10, spacing=0.0)
    assert [(item.url, item.left) for item in again.urls] == [("http://a.test/page/2", 2)]


async def test_spacing_serves_the_other_scopes_first(frontiers: Factory) -> None:
    frontier = frontiers()
    await frontier.enqueue(site("big.test", 50))
    await frontier.enqueue(site("small.test", 2))
    first = await frontier.claim(1, spacing=60.0)  # the big site came first
    assert [item.scope for item in first.urls] == ["big.test"]
    second = await frontier.claim(5, spacing=60.0)
    # big.test gave a URL a moment ago and waits its spacing: only small.test is ready.
    assert [item.scope for item in second.urls] == ["small.test"]
    assert second.next_in is not None
    assert 59.0 < second.next_in <= 60.0
    assert (await frontier.claim(5, spacing=60.0)).urls == ()


async def test_ack_finishes_urls_and_lets_them_be_queued_again(frontiers: Factory) -> None:
    frontier = frontiers()
    await frontier.enqueue(site("a.test", 1))
    claim = await frontier.claim(5, spacing=0.0)
    assert not claim.drained
    assert await frontier.ack([claim.urls[0].id], "ok") == (1, 0)
    assert await frontier.ack([claim.urls[0].id], "ok") == (0, 1)  # a second ack is a duplicate
    after = await frontier.claim(5, spacing=0.0)
    assert after.drained
    assert after.urls == ()
    counts = await frontier.counts()
    assert (counts.done, counts.duplicates, counts.outcomes) == (1, 1, {"ok": 1})
    # Finished, so the same URL may be crawled again later.
    assert (await frontier.enqueue(site("a.test", 1))).added == 1


async def test_an_expired_claim_returns_to_the_front_of_its_queue(frontiers: Factory) -> None:
    dead, alive = frontiers("dead", visibility=0.3), frontiers("alive", visibility=30.0)
    await dead.enqueue(site("a.test", 3))
    taken = await dead.claim(1, spacing=0.0)
    assert [item.url for item in taken.urls] == ["http://a.test/page/0"]
    await asyncio.sleep(0.4)  # the dead worker never touches its claim
    claim = await alive.claim(1, spacing=0.0)
    assert claim.requeued == 1
    assert [(item.url, item.tries) for item in claim.urls] == [("http://a.test/page/0", 2)]
    # The dead worker's late ack neither finishes it nor frees the live worker's claim; that one's does.
    assert await dead.ack([taken.urls[0].id], "ok") == (0, 0)
    assert (await dead.counts()).claimed == 1
    assert await alive.ack([claim.urls[0].id], "ok") == (1, 0)
    counts = await alive.counts()
    assert (counts.done, counts.duplicates, counts.late, counts.claimed) == (1, 0, 1, 0)


async def test_a_claim_whose_reply_was_lost_is_handed_out_again(frontiers: Factory,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The server ran a claim and went away before answering (a stop seen in the suite): the claimed
    URLs came back only when their visibility ran out. The next claim now hands them over first."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    worker, other = frontiers("worker"), frontiers("other")
    await worker.enqueue(site("a.test", 3) + site("b.test", 3))
    run = worker._run
    lost_replies = 2  # two claims in a row run and go unanswered

    async def run_then_lose(name: str, args: list[object]) -> object:
        nonlocal lost_replies
        reply = await run(name, args)
        if name == "claim" and lost_replies:
            lost_replies -= 1
            raise RedisConnectionError("Connection closed by server.")
        return reply

    monkeypatch.setattr(worker, "_run", run_then_lose)
    for count in (1, 2):
        with pytest.raises(RedisConnectionError):
            await worker.claim(count, spacing=0.0)
    # The first took a.test/page/0; the second handed it over again and took b.test/page/0.
    assert (await other.counts()).claimed == 2
    claim = await worker.claim(3, spacing=0.0)
    urls = sorted(item.url for item in claim.urls)
    # Both URLs nobody knew of (the second claim carried the first one's along), then one new URL.
    assert urls == ["http://a.test/page/0", "http://a.test/page/1", "http://b.test/page/0"]
    assert [item.tries for item in claim.urls if item.url.endswith("/0")] == [1, 1]
    assert (await other.counts()).claimed == 3
    # Once answered, nothing is handed out twice: the next claim only takes new URLs.
    again = await worker.claim(5, spacing=0.0)
    assert sorted(item.url for item in again.urls) == ["http://a.test/page/2", "http://b.test/page/1"]


async def test_a_lost_claim_that_never_ran_recovers_nothing(frontiers: Factory,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    worker = frontiers("worker")
    await worker.enqueue(site("a.test", 2))
    first = await worker.claim(1, spacing=0.0)  # answered: the server keeps its token
    run = worker._run

    async def never_sent(name: str, args: list[object]) -> object:
        if name == "claim":
            raise RedisConnectionError("Connection refused.")
        return await run(name, args)

    monkeypatch.setattr(worker, "_run", never_sent)
    with pytest.raises(RedisConnectionError):
        await worker.claim(1, spacing=0.0)
    monkeypatch.setattr(worker, "_run", run)
    claim = await worker.claim(5, spacing=0.0)
    # The answered claim's URL is not handed out again; only the one left in the queue is.
    assert [item.url for item in first.urls] == ["http://a.test/page/0"]
    assert [item.url for item in claim.urls] == ["http://a.test/page/1"]


async def test_touch_keeps_a_claim_and_reports_claims_lost(frontiers: Factory) -> None:
    holder, other = frontiers("holder", visibility=0.3), frontiers("other")
    await holder.enqueue(site("a.test", 2))
    claim = await holder.claim(1, spacing=0.0)
    kept = claim.urls[0].id
    for _ in range(3):
        await asyncio.sleep(0.15)
        assert await holder.touch([kept]) == []
    again = await other.claim(5, spacing=0.0)
    assert again.requeued == 0
    assert [item.url for item in again.urls] == ["http://a.test/page/1"]
    assert await holder.touch([again.urls[0].id]) == [again.urls[0].id]  # not the holder's claim


async def test_give_back_puts_urls_at_the_front_in_order(frontiers: Factory) -> None:
    quitting, staying = frontiers("quitting"), frontiers("staying")
    await quitting.enqueue(site("a.test", 3) + site("b.test", 1))
    first = await quitting.claim(5, spacing=0.0)
    second = await quitting.claim(5, spacing=0.0)
    a_ids = [item.id for item in (*first.urls, *second.urls) if item.scope == "a.test"]
    assert len(a_ids) == 2
    assert await staying.give_back(a_ids) == 0  # only the owner may hand a claim back
    assert await quitting.give_back(a_ids) == 2
    got = [(await staying.claim(1, spacing=0.0)).urls[0].url for _ in range(3)]
    assert got == ["http://a.test/page/0", "http://a.test/page/1", "http://a.test/page/2"]
    assert (await staying.counts()).returned == 2


async def test_defer_keeps_a_scope_unclaimed_and_never_moves_it_earlier(frontiers: Factory) -> None:
    frontier = frontiers()
    await frontier.enqueue(site("slow.test", 2) + site("fast.test", 1))
    assert await frontier.defer("slow.test", 60.0)
    assert not await frontier.defer("slow.test", 5.0)  # earlier than already set: ignored
    assert not await frontier.defer("unknown.test", 60.0)  # nothing queued there: nothing to defer
    claim = await frontier.claim(5, spacing=0.0)
    assert [item.scope for item in claim.urls] == ["fast.test"]
    assert claim.next_in is not None
    assert claim.next_in > 59.0


async def test_claims_from_many_workers_hand_out_each_url_once(frontiers: Factory) -> None:
    workers = [frontiers(f"w{n}") for n in range(6)]
    urls = site("a.test", 40) + site("b.test", 40) + site("c.test", 40)
    await workers[0].enqueue(urls)
    seen: list[str] = []

    async def work(frontier: SharedFrontier) -> None:
        while True:
            claim = await frontier.claim(4, spacing=0.0)
            if claim.drained:
                return
            seen.extend(item.url for item in claim.urls)
            await frontier.ack([item.id for item in claim.urls], "ok")
            await asyncio.sleep(0)

    await asyncio.gather(*(work(frontier) for frontier in workers))
    assert sorted(seen) == sorted(urls)
    counts = await workers[0].counts()
    assert (counts.queued, counts.claimed, counts.done, counts.duplicates) == (0, 0, 120, 0)
    assert set(counts.workers) == {f"w{n}" for n in range(6)}


class SlowAcks(SharedFrontier):
    """A frontier client whose acknowledgements wait until the test lets them through."""

    def __init__(self, url: str) -> None:
        super().__init__(url, worker="slow")
        self.gate = asyncio.Event()
        self.acked: list[int] = []

    async def ack(self, ids: Sequence[int], outcome: str) -> tuple[int, int]:
        await self.gate.wait()
        self.acked.extend(ids)
        return len(ids), 0


async def test_answers_that_come_in_during_an_ack_are_acknowledged_later(redis_url: str,
                                                                         tmp_path: Path) -> None:
    frontier = SlowAcks(redis_url)
    options = CrawlOptions(output=tmp_path / "out.jsonl", store=redis_url)
    job = SharedCrawlJob(Settings(), options, frontier=frontier)
    source = job.source
    assert isinstance(source, SharedSource)
    try:
        first, second = Task(1, "http://a.test/1"), Task(2, "http://a.test/2")
        source._claims.hold(1, "a.test")
        source._claims.hold(2, "a.test")
        source.settled(first, "ok")
        sending = asyncio.ensure_future(source._send_acks())
        await asyncio.sleep(0)  # the first ack is on its way
        source.settled(second, "ok")  # answered meanwhile
        frontier.gate.set()
        await sending
        assert frontier.acked == [1]
        await source._send_acks()
        assert frontier.acked == [1, 2]
        assert not source._acks
    finally:
        await frontier.aclose()
        await job.throttler.aclose()


class BrokenClaims(SharedFrontier):
    """A frontier whose claims fail with an error that is not "unreachable" (a bug, a garbled reply)."""

    async def claim(self, count: int, *, spacing: float, skip: Sequence[str] = ()) -> Claim:
        raise RuntimeError("a reply nobody expected")


async def test_a_feeder_that_fails_stops_its_worker_instead_of_leaving_it_waiting(
        redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    frontier = BrokenClaims(redis_url)
    await frontier.enqueue(site("a.test", 2))
    options = CrawlOptions(output=tmp_path / "out.jsonl", store=redis_url)
    job = SharedCrawlJob(Settings(), options, frontier=frontier)
    with pytest.raises(RuntimeError, match="a reply nobody expected"):
        await asyncio.wait_for(job.run(None), 10.0)  # it waited forever before
    assert job.stopping
    assert "the shared frontier's feeder failed (RuntimeError: a reply nobody expected); stopping this " \
           "worker" in caplog.text


async def test_a_claim_skips_the_scopes_named_and_leaves_them_ready_for_others(frontiers: Factory) -> None:
    one, two = frontiers("w1"), frontiers("w2")
    await one.enqueue(site("a.test", 3) + site("b.test", 3))
    claim = await one.claim(10, spacing=0.0, skip=["a.test"])
    assert [item.url for item in claim.urls] == ["http://b.test/page/0"]
    claim = await two.claim(10, spacing=0.0)
    assert sorted(item.url for item in claim.urls) == ["http://a.test/page/0", "http://b.test/page/1"]


async def test_a_worker_stops_claiming_a_host_it_holds_enough_urls_of(frontiers: Factory,
                                                                      tmp_path: Path) -> None:
    frontier = frontiers("w1")
    settings = Settings(scope_defaults=ScopeConfig(concurrency=2))
    assert claim_per_scope(settings) == 4  # its slots, plus two
    assert claim_per_scope(Settings(scope_defaults=ScopeConfig(rampup=True))) == 18  # 16 slots, plus two
    await frontier.enqueue(site("slow.test", 8) + site("fast.test", 8))
    job = SharedCrawlJob(settings, CrawlOptions(output=tmp_path / "out.jsonl", store=frontier.url),
                         frontier=frontier)
    source = job.source
    assert isinstance(source, SharedSource)
    try:
        for _ in range(4):
            source._take(await frontier.claim(10, spacing=0.0, skip=source.full_scopes()))
        assert sorted(source.full_scopes()) == ["fast.test", "slow.test"]
        # Nothing is sent here: two URLs of each host wait in the scheduler (WAITING_PER_SCOPE),
        # and a host with two waiting is skipped before its cap of 4 held.
        assert len(source._held) == 4
        fast = next(fid for fid, scope in source._held.items() if scope == "fast.test")
        # One fast URL answered: room for one more of fast.test only.
        source.settled(Task(fast, "http://fast.test/"), "ok")
        assert source.full_scopes() == ["slow.test"]
        claim = await frontier.claim(10, spacing=0.0, skip=source.full_scopes())
        assert [item.scope for item in claim.urls] == ["fast.test"]
    finally:
        await job.throttler.aclose()
