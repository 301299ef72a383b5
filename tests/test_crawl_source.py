"""A crawl job takes its URLs from a source object: the journal by default, anything else by choice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from pathlib import Path

from crawlpace import Settings
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.crawl._journal_source import JournalSource
from crawlpace.crawl._results import ResultWriter
from crawlpace.crawl._source import JobParts, RobotsShare
from crawlpace.frontier import Task
from crawlpace.sim import Farm

from .test_crawl import FAST, lines


class ListSource:
    """URLs from a list, nothing kept on disk but the output: the smallest source there is."""

    on_wait: Callable[[str, float], None] | None = None
    robots_share: RobotsShare | None = None

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.settled_outcomes: dict[str, str] = {}
        self.calls: list[str] = []
        self.job: JobParts | None = None

    def bind(self, job: JobParts) -> None:
        self.job = job

    def open(self, urls: Iterable[str] | None) -> ResultWriter:
        assert self.job is not None
        self.calls.append("open")
        for n, url in enumerate(self.urls, 1):
            self.job.scheduler.push(Task(n, url))
        self.job.summary.urls = len(self.urls)
        return ResultWriter(self.job.options.output, append=False)

    def start_background(self) -> None:
        self.calls.append("start")

    async def stop_background(self) -> None:
        self.calls.append("stop")

    def refill(self) -> None:
        pass

    def exhausted(self) -> bool:
        return True

    def unloaded(self, scope: str) -> int | None:
        return 0  # every URL is queued at open()

    def wait_for_urls(self) -> asyncio.Future[None] | None:
        return None

    def answered(self, task: Task) -> None:
        pass

    def settled(self, task: Task, outcome: str) -> None:
        self.settled_outcomes[task.url] = outcome

    async def close(self) -> None:
        assert self.job is not None
        self.calls.append("close")
        self.job.summary.answered = sum(outcome == "ok" for outcome in self.settled_outcomes.values())


async def test_a_job_crawls_what_its_source_gives_and_reports_back_to_it(tmp_path: Path) -> None:
    spec = {"site": [{"name": "a", "profile": "ratelimit", "rate": 100.0, "burst": 5, "pages": 4}]}
    async with Farm(spec) as farm:
        urls = [f"{farm.sites[0].url}/page/{n}" for n in range(1, 5)]
        source = ListSource(urls)
        options = CrawlOptions(output=tmp_path / "out.jsonl", trust_env=False, robots=False)
        job = CrawlJob(Settings.from_scrapy(FAST), options, source=source)
        summary = await job.run(None)
    assert source.calls == ["open", "start", "stop", "close"]
    assert source.settled_outcomes == dict.fromkeys(urls, "ok")  # each settled once its line was out
    assert sorted(line["url"] for line in lines(tmp_path / "out.jsonl")) == sorted(urls)
    assert summary.answered == 4
    assert not options.state_path.exists()  # no journal: the source decides what is kept


def test_the_journal_is_the_default_source(tmp_path: Path) -> None:
    job = CrawlJob(Settings(), CrawlOptions(output=tmp_path / "out.jsonl"))
    assert isinstance(job.source, JournalSource)
    assert repr(job.source) == "<JournalSource not open in_memory=0 hosts_pending=0>"
