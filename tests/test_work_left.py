"""The work a crawl still holds per scope, from its queues to rampup's bet after a Retry-After hold."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from crawlpace import Throttler
from crawlpace.crawl._journal_source import JournalSource
from crawlpace.crawl._options import CrawlOptions
from crawlpace.crawl._summary import CrawlSummary
from crawlpace.frontier._scheduler import Scheduler, Task
from crawlpace.policy.rampup import Rampup
from crawlpace.stores import MemoryStore
from crawlpace.testing import MockClock

from .bench_scripts import load_bench
from .conftest import ThrottlerFactory

holds_battery = load_bench("_bench_holds_battery", "holds_battery.py")


async def test_the_scheduler_counts_each_scopes_queued_pages(make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0})
    dropped: list[Task] = []
    scheduler = Scheduler(throttler, robots=None, on_drop=lambda task, why, detail: dropped.append(task))
    for n in range(3):
        scheduler.push(Task(n, f"https://a.example/{n}"))
    for n in range(2):
        scheduler.push(Task(10 + n, f"https://b.example/{n}"))
    assert (scheduler.queued_for("a.example"), scheduler.queued_for("b.example")) == (3, 2)
    got = await scheduler.take()
    assert got is not None
    assert scheduler.queued_for(got[0].key) == (2 if got[0].key == "a.example" else 1)  # sent: out of it
    await got[1].release()
    scheduler.give_up("b.example", "test")
    assert scheduler.queued_for("b.example") == 0
    assert scheduler.queued_for("c.example") == 0


class _Pushed:
    """The scheduler's part a journal source uses: it takes what is pushed."""

    idle = True

    def __init__(self) -> None:
        self.tasks: list[Task] = []

    def push(self, task: Task, *, front: bool = False) -> None:
        self.tasks.append(task)


class _Parts:
    def __init__(self, tmp_path: Path) -> None:
        self.options = CrawlOptions(output=tmp_path / "out.jsonl", max_in_memory=12)
        self.scheduler = _Pushed()
        self.summary = CrawlSummary()


async def test_the_journal_source_counts_a_hosts_urls_it_has_not_loaded(tmp_path: Path) -> None:
    source = JournalSource()
    parts = _Parts(tmp_path)
    source.bind(parts)  # type: ignore[arg-type]
    urls = [f"https://a.example/{n}" for n in range(25)] + [f"https://b.example/{n}" for n in range(2)]
    writer = source.open(urls)
    try:
        assert (source.unloaded("a.example"), source.unloaded("b.example")) == (25, 2)
        assert source.unloaded("shop") is None  # no host of the journal while more is to load: unknown
        source.refill()  # a URL per host in turn (a tenth of the memory bound) until 12 are held
        loaded = sum(1 for task in parts.scheduler.tasks if "a.example" in task.url)
        assert 0 < loaded < 25
        assert source.unloaded("a.example") == 25 - loaded
        assert source.unloaded("b.example") == 0
    finally:
        writer.close()
        await source.close()


async def test_the_throttler_carries_each_scopes_work_left_to_its_rampup(clock: MockClock) -> None:
    told: list[str] = []

    def work(scope: str) -> tuple[int, bool] | None:
        told.append(scope)
        return (7, False) if scope == "a.example" else None

    async with Throttler({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}}, clock=clock) as throttler:
        throttler.count_work(work)
        for url in ("https://a.example/1", "https://b.example/1"):
            async with throttler.slot(url) as permit:
                permit.feedback(status=200, latency=0.01)
        store = throttler.store
        assert isinstance(store, MemoryStore)
        rampups = {name: store._scopes[name].policy.rampup for name in ("a.example", "b.example")}
        assert told == ["a.example", "b.example"]
        a, b = rampups["a.example"], rampups["b.example"]
        assert a is not None
        assert b is not None
        assert (a._left, a._more) == (7, False)
        assert b._left == -1  # not known: rampup guesses the work ahead
        throttler.count_work(None)
        async with throttler.slot("https://a.example/2") as permit:
            permit.feedback(status=200, latency=0.01)
        assert told == ["a.example", "b.example"]  # no longer asked


def test_rampup_weighs_a_step_for_the_work_it_was_told() -> None:
    rampup = Rampup(start_rate=1.0, min_rate=0.01, max_rate=math.inf, max_concurrency=8, window=60.0,
                    target=(0.1, 1.0))
    for n in range(40):
        rampup._note_ok_send(float(n))
    guess = rampup._work(40.0)
    assert guess > 0.0
    rampup.note_left(5, more=False)
    assert rampup._work(40.0) == 5.0  # all that is left: no guess
    rampup.note_left(5, more=True)
    assert rampup._work(40.0) == guess  # a floor under the guess
    rampup.note_left(10_000, more=True)
    assert rampup._work(40.0) == 10_000.0


@pytest.mark.parametrize(("rate", "burst", "hold"), [(0.93, 3.0, 35), (2.59, 5.0, 27)])
async def test_a_step_after_a_hold_is_not_bet_on_pages_the_crawl_does_not_have(
        rate: float, burst: float, hold: int) -> None:
    # rate x 20 s of pages: the guess of the work ahead (the sends so far over the time crawled, for
    # as long again) was several times the pages left, and the step it paid for drew a second hold.
    pages = round(rate * 20.0)
    # The holds battery's site and crawl (bench/holds_battery.py), 3 ms answers, 16 workers.
    guessed = holds_battery.HeldBucket(rate, burst, hold)
    told = holds_battery.HeldBucket(rate, burst, hold)
    took_guessed, _ = await holds_battery.crawl_pages(guessed, pages, 0.003, count_work=False)
    took_told, _ = await holds_battery.crawl_pages(told, pages, 0.003, count_work=True)
    assert guessed.holds == 2
    assert told.holds == 1
    # (0.75 before holds15: the first hold's fit weighs each burst by its evidence and both crawls
    # resume more cautiously, so the second hold is a smaller share of the guessed crawl.)
    assert took_told < 0.8 * took_guessed


async def test_a_refused_step_refits_the_bucket_not_back_to_the_pace_kept() -> None:
    # The random farm's seed 16 holds12: 1.27/s, a burst of 2, 18 s holds, 59 pages; 50 ms answers.
    # The second fit paced it at 0.99/s and its step to 1.43/s was refused (the third hold). Back to
    # the pace kept, 0.99/s, it crawled the rest at 78 % of the rate (107.2 s). The step's stretch
    # pins the bucket: refitted, it paces at 1.22/s, with no hold more (102.1 s).
    site = holds_battery.HeldBucket(1.27, 2.0, 18)
    took, _ = await holds_battery.crawl_pages(site, 59, 0.05)
    assert site.holds <= 3
    assert took < 104.5  # (the first hold's prior: 2 holds)


async def test_the_fit_after_a_second_hold_keeps_what_the_first_stretch_showed() -> None:
    # The random farm's seed 2032204775 holds01: 28.5/s, a burst of 5, 37 s holds (800 of its 1,500
    # pages), 3 ms answers. The first fit's bet, 30.4/s, drew the second hold 3.4 s after the first one
    # ended; the record's 64 sends span those 2 s only and fitted every burst up to 64, so the second
    # fit paced at 13.7/s, 48 % of the rate, to the end (127.5 s; the oracle's 28 s). Narrowed by what
    # the start showed, the fit leaves the burst of 5 at 28.5-29.4/s, and the belief keeps that band's
    # ends as knots (106.4 s).
    site = holds_battery.HeldBucket(28.5, 5.0, 37)
    took, _ = await holds_battery.crawl_pages(site, 800, 0.003)
    assert site.holds <= 2
    assert took < 115.0


async def test_the_first_hold_does_not_bet_a_second_on_the_starts_few_sends() -> None:
    # The random farm's seed 17 holds06: 0.808/s, a burst of 4, 50 s holds, 37 pages; 50 ms answers.
    # The start's four sends through fitted bursts of 2 and 3 at 7-17/s by 1 / b: paced at 3.4/s
    # (a stated chance of 0.88), refused after the hold, and a second 50 s hold (213 s; the oracle's
    # 41 s). Weighed by the rates each burst keeps (bench/results/holds15.md), one hold.
    site = holds_battery.HeldBucket(0.808, 4.0, 50)
    took, _ = await holds_battery.crawl_pages(site, 37, 0.05)
    assert site.holds == 1
    assert took < 120.0
