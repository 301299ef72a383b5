"""A page out far longer than its site's answers take is sent once more, within ``--retries``.

The rule is crawl/_hedge.py's.

A real HTTP server on loopback lets the first request of one path hang; every other request
(that path's second included) is answered at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from crawlpace import Settings
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.crawl._hedge import HEDGE_FLOOR, HedgeBook
from crawlpace.frontier._scheduler import Task
from crawlpace.sim import SimServer

#: 0.05 s between sends of the host, two at once; no breaker.
FIXED: dict[str, Any] = {
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "DOWNLOAD_DELAY": 0.05,
    "DOWNLOAD_DELAY_PER_SLOT": 0.05,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
    "BACKOFF_JITTER": False,
    "BREAKER_ENABLED": False,
}
#: Seconds the first request of ``/hang`` takes before its 200: far past the hedge's span
#: (HEDGE_FLOOR on a site answering in milliseconds), well under the 10-s timeout.
HANG = 4.0


class HangsOnce:
    """``/hang`` waits :data:`HANG` seconds the first time, then answers at once (``then``'s statuses
    first, 200 after); robots.txt 404; else 200."""

    def __init__(self, then: tuple[int, ...] = ()) -> None:
        self.arrivals: defaultdict[str, int] = defaultdict(int)
        self.hung_answered = False
        self.then = list(then)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        self.arrivals[path] += 1
        status, body = (404, b"") if path == "/robots.txt" else (200, path.encode())
        if path == "/hang" and self.arrivals[path] == 1:
            await asyncio.sleep(HANG)
            self.hung_answered = True
        elif path == "/hang" and self.then:
            status = self.then.pop(0)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


async def crawl(tmp_path: Path, app: HangsOnce, retries: int) -> tuple[Any, list[dict[str, Any]]]:
    async with SimServer(app, "127.0.0.2") as server:
        urls = [f"{server.url}/hang"] + [f"{server.url}/p{n}" for n in range(12)]
        output = tmp_path / "out.jsonl"
        options = CrawlOptions(output=output, trust_env=False, retries=retries)
        job = CrawlJob(Settings.from_scrapy(FIXED), options)
        summary = await job.run(urls)
    lines = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    return summary, lines


@pytest.mark.parametrize("then", [(), (503,)])
async def test_a_hung_page_is_sent_once_more_and_the_first_answer_counts_once(tmp_path: Path,
                                                                             then: tuple[int, ...]) -> None:
    app = HangsOnce(then)
    began = time.monotonic()
    summary, lines = await crawl(tmp_path, app, retries=2)
    took = time.monotonic() - began
    # The hedge went out once the host had nothing else to send, and answered at once; a hedge
    # answered with a 503 while the first send still hangs is dropped, and another one goes.
    sends = 2 + len(then)
    assert app.arrivals["/hang"] == sends
    assert not app.hung_answered, f"the crawl waited for the hung send ({took:.2f} s)"
    assert took < HANG
    # One line and one outcome per URL: the cancelled send counts as a request, nothing else.
    by_url = {line["url"].rsplit("/", 1)[1]: line for line in lines}
    assert len(lines) == 13 == len(by_url)
    assert by_url["hang"]["status"] == 200
    assert by_url["hang"]["attempts"] == sends
    assert summary.outcomes["ok"] == 13
    assert summary.outcomes.total() == 13
    assert summary.requests == 12 + sends + app.arrivals["/robots.txt"]
    assert summary.as_dict()["hedges"] == summary.hedges == sends - 1  # every send after the first
    assert summary.complete


async def test_retries_zero_sends_no_hedge(tmp_path: Path) -> None:
    app = HangsOnce()
    summary, lines = await crawl(tmp_path, app, retries=0)
    assert app.arrivals["/hang"] == 1
    assert app.hung_answered
    assert len(lines) == 13
    assert all(line["attempts"] == 1 and line["status"] == 200 for line in lines)
    assert summary.outcomes["ok"] == 13
    assert summary.requests == 13 + app.arrivals["/robots.txt"]
    assert summary.hedges == 0


@pytest.mark.parametrize(("latencies", "span"), [
    ([0.005] * 10, HEDGE_FLOOR),  # a quick site: the floor (the crawler's own noise)
    ([0.2] * 9 + [9.0], 0.8),  # one hang in the record moves no percentile
    ([0.5] * 20, 2.0),
])
async def test_the_span_follows_the_sites_answers(latencies: list[float], span: float) -> None:
    async def nap(seconds: float) -> None:
        return None

    book = HedgeBook(now=time.monotonic, sleep=nap, retries=3, idle=lambda host: True,
                     hedge=lambda task: None)
    task = Task(0, "http://a.example/", host="a.example")
    assert book.span("a.example") is None
    for latency in latencies:
        book.back(task, book.going(task), latency)
    assert book.span("a.example") == pytest.approx(span)


class Book:
    """A :class:`HedgeBook` on a hand-set clock, its hedges noted, every host idle unless told."""

    def __init__(self, retries: int = 3) -> None:
        self.now = 0.0
        self.busy: set[str] = set()
        self.queued: list[Task] = []

        async def nap(seconds: float) -> None:
            return None

        self.book = HedgeBook(now=lambda: self.now, sleep=nap, retries=retries,
                              idle=lambda host: host not in self.busy, hedge=self.queued.append)

    def answers(self, host: str, count: int, latency: float) -> None:
        other = Task(0, f"http://{host}/other", host=host)
        for _ in range(count):
            self.book.back(other, self.book.going(other), latency)
        self.book.settled(other)


async def test_a_hedge_waits_for_its_span_an_idle_host_and_a_retry_left() -> None:
    b = Book(retries=1)
    b.answers("a.example", 10, 0.2)  # span 0.8 s
    task = Task(1, "http://a.example/hang", host="a.example")
    first = b.book.going(task)
    b.now = 0.7
    assert b.book.due(b.now) == pytest.approx(0.8)
    b.busy.add("a.example")
    b.now = 1.0
    b.book.due(b.now)
    assert b.queued == []  # the host still has pages to send
    b.busy.clear()
    b.book.due(b.now)
    assert b.queued == [task]
    assert task.retries == 1
    assert b.book.racing(task)
    # Its first send answers while the hedge still waits in the queue: the queued hedge is stale.
    b.book.back(task, first, 1.0)
    b.book.settled(task)
    assert b.book.stale(task)
    assert not b.book.stale(task)
    # No retry left: no hedge at all.
    again = Task(2, "http://a.example/hang2", host="a.example")
    again.retries = 1
    b.book.going(again)
    b.now = 5.0
    b.book.due(b.now)
    assert b.queued == [task]


async def test_a_hedge_answered_with_a_retry_lets_another_go_within_the_retries() -> None:
    b = Book(retries=2)
    b.answers("a.example", 10, 0.01)  # span: the floor
    task = Task(1, "http://a.example/hang", host="a.example")
    first = b.book.going(task)
    b.now = HEDGE_FLOOR
    b.book.due(b.now)
    assert b.queued == [task]
    b.book.back(task, b.book.going(task), 0.01)  # the hedge came back with a 503, say
    assert b.book.racing(task)  # the first send is still out: the answer is dropped
    b.book.lost(task)
    b.book.due(b.now)
    assert b.queued == [task, task]
    assert task.retries == 2
    b.book.back(task, b.book.going(task), 0.01)
    b.book.lost(task)
    b.now = 10.0
    b.book.due(b.now)
    assert len(b.queued) == 2  # the retries are spent: 3 sends in all
    b.book.back(task, first, None)  # the first times out: nothing else is out, the crawl settles it
    assert not b.book.racing(task)


async def test_a_dropped_hedge_leaves_the_page_to_its_first_send() -> None:
    b = Book()
    b.answers("a.example", 10, 0.01)
    task = Task(1, "http://a.example/hang", host="a.example")
    b.book.going(task)
    b.now = 1.0
    b.book.due(b.now)
    assert b.book.dropped(task)  # its site given up while the hedge waited: the first send decides
    assert not b.book.dropped(task)
