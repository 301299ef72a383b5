"""``--retries N`` is a bound: at most N + 1 sends of a URL, each one through admission (issue 30, item 4).

Real HTTP servers on loopback count what arrives per path.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from crawlpace import Settings
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.sim import SimServer

#: Small fixed limits: 0.05 s between sends of a host, a backoff delay of at most 0.2 s.
FIXED: dict[str, Any] = {
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "DOWNLOAD_DELAY": 0.05,
    "DOWNLOAD_DELAY_PER_SLOT": 0.05,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
    "BACKOFF_MIN_DELAY": 0.2,
    "BACKOFF_MAX_DELAY": 0.2,
    "BACKOFF_JITTER": False,
    "BREAKER_ENABLED": False,
}


class Counting:
    """An ASGI app that notes when each path arrives: ``/refused*`` always 429, ``/challenge*`` a
    challenge page (``cf-mitigated: challenge``), ``/broken*`` a 500, robots.txt ``robots``, else 200."""

    def __init__(self, robots: int = 404) -> None:
        self.robots = robots
        self.arrivals: defaultdict[str, list[float]] = defaultdict(list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        self.arrivals[path].append(time.monotonic())
        headers: list[tuple[bytes, bytes]] = []
        body = b"page"
        if path == "/robots.txt":
            status, body = self.robots, b""
        elif path.startswith("/refused"):
            status = 429
        elif path.startswith("/challenge"):
            status, headers, body = 200, [(b"cf-mitigated", b"challenge")], b"<title>Just a moment...</title>"
        elif path.startswith("/broken"):
            status = 500
        else:
            status = 200
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def sends(self, path: str) -> int:
        return len(self.arrivals[path])


async def crawl(tmp_path: Path, urls: list[str], retries: int, **options: Any) -> list[dict[str, Any]]:
    output = tmp_path / "out.jsonl"
    job = CrawlJob(Settings.from_scrapy(FIXED), CrawlOptions(output=output, trust_env=False, retries=retries,
                                                              **options))
    await job.run(urls)
    return [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("retries", [0, 1, 3])
async def test_no_url_is_sent_more_than_retries_plus_one_times(tmp_path: Path, retries: int) -> None:
    # The other pages answer well all along: the site is alive, which used to stretch a refused
    # page's tries to 4 x (retries + 1).
    app = Counting()
    async with SimServer(app, "127.0.0.2") as server:
        bad = ["/refused", "/challenge", "/broken"]
        urls = [f"{server.url}{path}" for path in bad] + [f"{server.url}/p{n}" for n in range(6)]
        results = await crawl(tmp_path, urls, retries)
    for path in bad:
        assert app.sends(path) == retries + 1, (path, app.sends(path))
    by_path = {result["url"].rsplit("/", 1)[1]: result for result in results}
    assert by_path["refused"]["outcome"] == by_path["challenge"]["outcome"] == "exhausted"
    assert by_path["challenge"]["blocked"] is True
    assert (by_path["broken"]["outcome"], by_path["broken"]["status"]) == ("ok", 500)
    assert all(by_path[f"p{n}"]["status"] == 200 for n in range(6))
    tried = {result["attempts"] for result in results if "/" + result["url"].rsplit("/", 1)[1] in bad}
    assert tried == {retries + 1}


@pytest.mark.parametrize(("retries", "sends"), [(0, 1), (1, 2), (3, 2)])
async def test_a_failing_robots_txt_is_bounded_by_both_retry_settings(tmp_path: Path, retries: int,
                                                                       sends: int) -> None:
    # robots_retries is 1 by default; --retries 0 means one try of robots.txt too.
    app = Counting(robots=503)
    async with SimServer(app, "127.0.0.2") as server:
        results = await crawl(tmp_path, [f"{server.url}/p1"], retries)
    assert app.sends("/robots.txt") == sends
    assert app.sends("/p1") == 0  # an unreachable robots.txt forbids the site (RFC 9309)
    assert [result["outcome"] for result in results] == ["exhausted"]


async def test_a_resend_waits_for_the_backoff_the_refusal_asked_for(tmp_path: Path) -> None:
    # Each resend of a refused URL goes back through admission: the backoff delay (the host's 0.05 s
    # pace at the refusal, cut by the factor 2: 0.1 s at least) spaces it from the send before.
    app = Counting()
    async with SimServer(app, "127.0.0.2") as server:
        urls = [f"{server.url}/refused"] + [f"{server.url}/p{n}" for n in range(8)]
        await crawl(tmp_path, urls, 3, robots=False)
    times = app.arrivals["/refused"]
    assert len(times) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= 0.1 * 0.9, gaps  # a little slack for the arrival's own lag


class LockedOut:
    """An ASGI app that answers 429 to its sends number 2 to 1 + ``refusals`` (robots.txt aside),
    whatever the page, as a counter that counts refusals keeps refusing through a lock-out; 200 else."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] != "/robots.txt":
            self.paths.append(scope["path"])
        refused = 2 <= len(self.paths) <= 1 + self.refusals and scope["path"] != "/robots.txt"
        status = 429 if refused else 200 if scope["path"] != "/robots.txt" else 404
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


async def test_a_lock_outs_refusals_fall_on_several_pages_not_one(tmp_path: Path) -> None:
    # A refusal is about the site's pace, not the page: the refused page goes behind the others,
    # so a lock-out of three refusals in a row spends one retry each of three pages. At the front
    # of its queue, one page was sent into every refusal and given up as exhausted.
    app = LockedOut(refusals=3)
    async with SimServer(app, "127.0.0.2") as server:
        urls = [f"{server.url}/p{n}" for n in range(5)]
        results = await crawl(tmp_path, urls, 1, robots=False)
    assert len(app.paths) == 5 + 3
    assert {result["outcome"] for result in results} == {"ok"}
    refused = app.paths[1:4]
    assert len(set(refused)) == 3, app.paths
