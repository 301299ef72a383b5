"""A host that refuses connections is given up after a few refusals, not after minutes of backoff."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from crawlpace.crawl._refusals import RefusalTracker, is_refused
from crawlpace.sim import Farm

from .test_crawl import crawl


def closed_port(host: str = "127.0.0.2") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
    return port


def test_refusals_are_found_through_wrapping_errors() -> None:
    try:
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except OSError as inner:
            raise httpx.ConnectError("All connection attempts failed") from inner
    except httpx.ConnectError as exc:
        wrapped: BaseException = exc
    assert is_refused(wrapped)

    class ConnectorError(Exception):  # aiohttp keeps the OSError as os_error
        os_error = ConnectionRefusedError(111, "refused")

    assert is_refused(ConnectorError())
    assert not is_refused(httpx.ReadTimeout("slow"))
    assert not is_refused(None)
    tracker = RefusalTracker(limit=2)
    assert tracker.note("a", wrapped) is None
    assert tracker.note("a", None) is None  # an answer starts the count again
    assert tracker.note("a", wrapped) is None
    assert tracker.note("a", wrapped) == "connection refused 2 times in a row (nothing listens there)"


async def test_a_refusing_host_is_given_up_in_seconds_without_stalling_the_others(tmp_path: Path) -> None:
    port = closed_port("127.0.0.9")
    dead = [f"http://127.0.0.9:{port}/page/{n}" for n in range(20)]
    spec = {"site": [{"name": "alive", "profile": "ratelimit", "rate": 200.0, "pages": 10}]}
    async with Farm(spec) as farm:
        alive = [f"{farm.sites[0].url}/page/{n}" for n in range(1, 11)]
        started = time.monotonic()
        summary, results = await crawl(tmp_path, dead + alive, {"BACKOFF_MIN_DELAY": 1.0}, robots=False)
        took = time.monotonic() - started
        alive_requests = farm.stats()["alive"]["requests"]
    outcomes = {result["url"]: result["outcome"] for result in results}
    assert {outcomes[url] for url in alive} == {"ok"}
    assert {outcomes[url] for url in dead} == {"gave_up"}  # not final: --resume tries them again
    # Three refusals, then nothing more for that host (the live site's own count may include a resend
    # of a 429 that two bunched arrivals drew on a loaded machine).
    assert alive_requests >= 10
    assert summary.requests - alive_requests == 3
    assert took < 15.0  # backoff 1 s then 2 s between the refusals; the breaker alone took ~90 s
    assert "connection refused 3 times in a row" in next(r["error"] for r in results if r["url"] in dead)
