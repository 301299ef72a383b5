"""No way around the allow-list (issue 36, item 4).

Before: under uvicorn's default proxy headers (which trust 127.0.0.1), a
request with Googlebot's user agent and ``X-Forwarded-For`` naming an address
inside the owner's Googlebot ranges got 8 of 8 through unbraked although
``trusted_proxies=()``: uvicorn had already replaced the client address with
the forwarded one. Owner-supplied ranges did not turn reverse DNS off either,
and nothing helped refresh the published ranges.

The end-to-end tests run a real uvicorn (default proxy settings) on 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from crawlpace.cli import main
from crawlpace.guard import BotVerifier, Guard

from .test_guard import Backend, FakeClock, call, http_scope
from .test_guard_uvicorn import uvicorn_on_loopback
from .test_guard_verify import GOOGLE, REAL_GOOGLE_IP, SCRAPER_IP, FakeResolver, google_dns

GOOGLE_RANGES = ["66.249.64.0/19"]


async def eight_googlebots(guard: Guard, forwarded: str) -> list[int]:
    async with uvicorn_on_loopback(guard, "off") as base_url, \
            httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=5.0) as client:
        answers = [await client.get("/search", headers={"User-Agent": GOOGLE, "X-Forwarded-For": forwarded})
                   for _ in range(8)]
    return [answer.status_code for answer in answers]


async def test_a_forwarded_address_rewritten_by_uvicorn_confirms_no_crawler(
        caplog: pytest.LogCaptureFixture) -> None:
    backend = Backend()
    guard = Guard(backend, quota=2, stages=(), costly="/search", clock=FakeClock(0.0),
                  bot_ranges={"googlebot": GOOGLE_RANGES})
    with caplog.at_level(logging.WARNING, logger="crawlpace.guard._address"):
        codes = await eight_googlebots(guard, REAL_GOOGLE_IP)
    assert codes == [200, 200] + [429] * 6
    assert backend.calls == 2
    warnings = [r.getMessage() for r in caplog.records if r.name == "crawlpace.guard._address"]
    assert len(warnings) == 1
    assert "--forwarded-allow-ips" in warnings[0]
    assert "--no-proxy-headers" in warnings[0]


async def test_a_proxy_the_owner_trusts_passes_the_crawlers_address() -> None:
    backend = Backend()
    guard = Guard(backend, quota=2, stages=(), costly="/search", clock=FakeClock(0.0),
                  bot_ranges={"googlebot": GOOGLE_RANGES}, trusted_proxies=["127.0.0.1"])
    assert await eight_googlebots(guard, REAL_GOOGLE_IP) == [200] * 8
    assert guard.stats()["crawlers"] == {"googlebot": 8}
    assert guard.stats()["totals"]["used"] == 0.0


async def test_the_owners_ranges_turn_reverse_dns_off() -> None:
    # This resolver would confirm the address (its PTR and A records agree), but the owner's ranges
    # are the whole truth for Googlebot: an address outside them is not looked up at all.
    resolver = FakeResolver(ptr={SCRAPER_IP: "crawl-203-0-113-9.googlebot.com"},
                            a={"crawl-203-0-113-9.googlebot.com": [SCRAPER_IP]})
    guard = Guard(Backend(), quota=1, stages=(), clock=FakeClock(0.0), resolver=resolver,
                  bot_ranges={"googlebot": GOOGLE_RANGES})
    answers = [await call(guard, http_scope(agent=GOOGLE, client=(SCRAPER_IP, 1))) for _ in range(2)]
    assert [answer.status for answer in answers] == [200, 429]
    assert sum(resolver.lookups.values()) == 0
    inside = await call(guard, http_scope(agent=GOOGLE, client=(REAL_GOOGLE_IP, 1)))
    assert inside.status == 200
    # Without ranges, DNS still confirms (the other names keep their lookups).
    dns_only = Guard(Backend(), quota=1, stages=(), clock=FakeClock(0.0), resolver=google_dns())
    assert [(await call(dns_only, http_scope(agent=GOOGLE, client=(REAL_GOOGLE_IP, 1)))).status
            for _ in range(3)] == [200] * 3


def published(path: Path, prefixes: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"creationTime": "2026-11-20T14:46:07.000000", "prefixes": prefixes}))
    return path


async def test_the_ranges_command_refreshes_the_file_the_guard_reads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "googlebot.txt"
    first = published(tmp_path / "googlebot.json", [{"ipv4Prefix": "66.249.64.0/27"},
                                                    {"ipv6Prefix": "2001:4860:4801:10::/64"}])
    assert main(["guard", "ranges", "--from", str(first), "--out", str(target)]) == 0
    assert "2 ranges (1 IPv4, 1 IPv6), published 2026-11-20" in capsys.readouterr().out
    clock = FakeClock(0.0)
    running = BotVerifier(["Googlebot"], ranges={"googlebot": target}, clock=clock)
    assert not await running.verify("googlebot", REAL_GOOGLE_IP)
    newer = published(tmp_path / "googlebot-2.json", [{"ipv4Prefix": "66.249.66.0/27"}])
    assert main(["guard", "ranges", "--from", str(newer), "--out", str(target), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["added"] == ["66.249.66.0/27"]
    assert report["removed"] == ["66.249.64.0/27", "2001:4860:4801:10::/64"]
    clock.now = 30.0
    assert not await running.verify("googlebot", REAL_GOOGLE_IP)  # looked at once a minute
    clock.now = 61.0
    assert await running.verify("googlebot", REAL_GOOGLE_IP)  # a running guard reads the new file
    guard = Guard(Backend(), quota=1, stages=(), clock=FakeClock(0.0), bot_ranges={"googlebot": target})
    assert [(await call(guard, http_scope(agent=GOOGLE, client=(REAL_GOOGLE_IP, 1)))).status
            for _ in range(3)] == [200] * 3
    broken = tmp_path / "broken.json"
    broken.write_text('{"prefixes": [{"ipv4Prefix": "66.249.999.0/27"}]}')
    assert main(["guard", "ranges", "--from", str(broken), "--out", str(target)]) == 3
    assert "66.249.999.0/27" in capsys.readouterr().err
    assert "66.249.66.0/27" in target.read_text()  # nothing was written
