"""Per-server scopes: the resolver's cache, the managers, real crawls of two host names of one server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import crawlpace
from crawlpace import Throttler
from crawlpace._exceptions import ConfigError
from crawlpace._scoping._resolver import Resolver, pick_address
from crawlpace._scoping._server_scopes import ServerScopes, manager_path, registrable_domain
from crawlpace.cli import _parser
from crawlpace.cli.crawl import build_settings
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.sim import RateLimitSite, SimServer

from .test_crawl import lines
from .test_scrapy_crawl import FAST as SCRAPY_FAST
from .test_scrapy_crawl import crawl as scrapy_crawl


class FakeDns:
    """Answers from a table, counting queries; a missing name fails like NXDOMAIN."""

    def __init__(self, table: dict[str, list[tuple[str, float]]], delay: float = 0.0) -> None:
        self.table = table
        self.delay = delay
        self.asked: list[str] = []

    async def __call__(self, host: str) -> Sequence[tuple[str, float]]:
        self.asked.append(host)
        if self.delay:
            await asyncio.sleep(self.delay)
        if host not in self.table:
            raise OSError(f"{host}: name not found")
        return self.table[host]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -- the resolver ---------------------------------------------------------------------------------


def test_the_lowest_ipv4_address_names_the_server() -> None:
    assert pick_address(["10.0.0.9", "2001:db8::1", "10.0.0.10", "10.0.0.2"]) == "10.0.0.2"
    assert pick_address(["2001:db8::2", "2001:db8::1"]) == "2001:db8::1"
    assert pick_address(["not an address"]) is None


async def test_answers_are_kept_for_their_ttl_within_bounds() -> None:
    dns, clock = FakeDns({"a.example": [("192.0.2.1", 120.0)], "b.example": [("192.0.2.2", 1.0)]}), Clock()
    resolver = Resolver(lookup=dns, min_ttl=10.0, max_ttl=60.0, clock=clock)
    assert await resolver.address("a.example") == "192.0.2.1"
    assert await resolver.address("b.example") == "192.0.2.2"
    clock.now = 9.9
    await resolver.address("a.example")
    await resolver.address("b.example")
    assert dns.asked == ["a.example", "b.example"]  # both cached: b's 1 s TTL is raised to min_ttl
    clock.now = 10.0
    await resolver.address("b.example")
    clock.now = 59.9
    await resolver.address("a.example")
    clock.now = 60.0
    await resolver.address("a.example")  # a's 120 s TTL is cut to max_ttl
    assert dns.asked == ["a.example", "b.example", "b.example", "a.example"]


async def test_concurrent_callers_share_one_query() -> None:
    dns = FakeDns({"a.example": [("192.0.2.1", 60.0)]}, delay=0.01)
    resolver = Resolver(lookup=dns)
    answers = await asyncio.gather(*(resolver.address("a.example") for _ in range(20)))
    assert answers == ["192.0.2.1"] * 20
    assert dns.asked == ["a.example"]


async def test_a_failed_lookup_is_logged_and_remembered_briefly(caplog: pytest.LogCaptureFixture) -> None:
    dns, clock = FakeDns({}), Clock()
    resolver = Resolver(lookup=dns, negative_ttl=5.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="crawlpace._scoping._resolver"):
        assert await resolver.address("gone.example") is None
        assert await resolver.address("gone.example") is None
    assert dns.asked == ["gone.example"]
    assert "cannot resolve 'gone.example'" in caplog.text
    clock.now = 5.0
    await resolver.address("gone.example")
    assert dns.asked == ["gone.example", "gone.example"]
    assert (resolver.lookups, resolver.failures) == (2, 2)


async def test_ip_literals_are_never_looked_up_and_the_cache_is_bounded() -> None:
    dns = FakeDns({f"h{n}.example": [(f"192.0.2.{n}", 60.0)] for n in range(5)})
    resolver = Resolver(lookup=dns, max_entries=2)
    assert await resolver.address("203.0.113.7") == "203.0.113.7"
    assert await resolver.address("[2001:db8::1]") == "2001:db8::1"
    for n in range(5):
        await resolver.address(f"h{n}.example")
    assert dns.asked == [f"h{n}.example" for n in range(5)]
    assert resolver.cached("h0.example") == (False, None)
    assert resolver.cached("h4.example") == (True, "192.0.2.4")


async def test_the_real_resolver_finds_localhost_on_the_loopback() -> None:
    assert await Resolver().address("localhost") == "127.0.0.1"


# -- the managers ---------------------------------------------------------------------------------


def test_registrable_domains_come_from_the_bundled_suffix_list() -> None:
    assert registrable_domain("books.toscrape.com") == "toscrape.com"
    assert registrable_domain("a.b.example.co.uk") == "example.co.uk"
    assert registrable_domain("localhost") == "localhost"
    assert registrable_domain("127.0.0.2") == "127.0.0.2"


async def test_managers_name_the_server_scope_and_optionally_the_host() -> None:
    dns = FakeDns({"a.example": [("192.0.2.1", 60.0)], "b.example": [("192.0.2.1", 60.0)]})
    by_ip = ServerScopes("ip", resolver=Resolver(lookup=dns))
    assert await by_ip.get_scopes("https://a.example/x") == "192.0.2.1"
    assert await by_ip.get_scopes("https://b.example/y") == "192.0.2.1"
    assert await by_ip.get_scopes("https://gone.example/") == "gone.example"  # falls back to the host
    both = ServerScopes("ip", with_host=True, resolver=Resolver(lookup=dns))
    assert await both.get_scopes("https://a.example/") == ["a.example", "192.0.2.1"]
    domain = crawlpace.HostAndDomainScopes()
    assert await domain.get_scopes("https://books.toscrape.com/") == ["books.toscrape.com", "toscrape.com"]
    assert await domain.get_scopes("https://toscrape.com/") == "toscrape.com"

    class Request:
        url = "https://a.example/"

        def __init__(self) -> None:
            self.meta = {"throttling_scopes": "api"}

    assert await by_ip.get_scopes(Request()) == "api"  # a request's own scopes still win
    with pytest.raises(ConfigError, match="'mac' is not one of host, domain, ip"):
        ServerScopes("mac")
    assert manager_path("ip", with_host=True) == "crawlpace.HostAndIpScopes"
    assert manager_path("host", with_host=True) is None


async def test_the_throttler_admits_by_server_when_the_settings_say_so() -> None:
    throttler = Throttler({"THROTTLING_MANAGER": "crawlpace.HostAndIpScopes",
                           "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    try:
        first = await throttler.try_acquire("http://localhost:9/")
        assert isinstance(first, crawlpace.Permit)
        assert first.scopes == ("localhost", "127.0.0.1")
        second = await throttler.try_acquire("http://127.0.0.1:9/")
        assert isinstance(second, crawlpace.NotReady)  # the server's one slot is taken by the other name
        assert ("127.0.0.1", None) in second.waiting_on
        await first.release()
    finally:
        await throttler.aclose()


# -- real crawls: localhost and 127.0.0.1 are one server --------------------------------------------


async def crawl_both_names(tmp_path: Path, *flags: str,
                           delay: float = 0.25) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Crawl six pages under each name of one server that allows 5 requests a second."""
    site = RateLimitSite(rate=5.0, burst=1, pages=6)
    async with SimServer(site, "127.0.0.1") as server:
        urls = [f"http://{name}:{server.port}/page/{n}"
                for n in range(1, 7) for name in ("localhost", "127.0.0.1")]
        output, config = tmp_path / f"out{len(flags)}.jsonl", tmp_path / "crawlpace.toml"
        config.write_text("[scope_defaults]\njitter = 0\n"
                          "[scope_defaults.backoff]\nmin_delay = 0.3\nmax_delay = 0.5\n", encoding="utf-8")
        args = _parser().parse_args(["crawl", "-", "-o", str(output), "--per-host", "1",
                                     "--delay", str(delay), "--no-robots", "--retries", "0",
                                     "--config", str(config), *flags])
        settings = build_settings(args)
        job = CrawlJob(settings, CrawlOptions(output=output, trust_env=False, robots=False, retries=0))
        await job.run(urls)
        return site.stats.as_dict(), lines(output)


async def test_two_names_of_one_server_share_one_budget_under_scope_by_ip(tmp_path: Path) -> None:
    # 0.5 s apart, a margin of 0.3 s over the server's 0.2 s: on a loaded machine one send's
    # connection can reach the server late and the next on time (0.15 s was once too little).
    report, results = await crawl_both_names(tmp_path, "--scope-by", "ip", delay=0.5)
    assert {result["status"] for result in results} == {200}
    assert report["throttled"] == 0  # one send per 0.5 s in all: under the server's 5 per second
    assert report["peak_inflight"] == 1
    assert report["active"] >= 11 * 0.5 - 0.05  # twelve sends, one budget
    assert {result["scope"] for result in results} == {"localhost", "127.0.0.1"}


async def test_with_host_scopes_the_same_server_gets_twice_the_pace(tmp_path: Path) -> None:
    """The control: per host, the two names each send every 0.25 s, 8 per second at the server."""
    report, results = await crawl_both_names(tmp_path)
    assert report["throttled"] >= 1
    assert 429 in {result["status"] for result in results}


async def test_the_scrapy_addon_honours_concurrent_requests_per_ip(tmp_path: Path) -> None:
    # 10/s with no burst: sends 0.5 s apart have a margin of 0.4 s over the server's 0.1 s gap
    # (with 5/s, one connection reaching the server 0.3 s late at load 28 drew a 429).
    site = RateLimitSite(rate=10.0, burst=1, pages=5)
    async with SimServer(site, "127.0.0.1") as server:
        urls = [f"http://{name}:{server.port}/page/{n}"
                for n in range(1, 6) for name in ("localhost", "127.0.0.1")]
        result = await scrapy_crawl(tmp_path, urls, {
            **SCRAPY_FAST, "ROBOTSTXT_OBEY": False, "CONCURRENT_REQUESTS_PER_IP": 1,
            "DOWNLOAD_DELAY": 0.5, "DOWNLOAD_DELAY_PER_SLOT": 0.5})
        report = site.stats.as_dict()
    assert result.returncode == 0, result.log[-3000:]
    assert {record["url"]: record.get("status") for record in result.records} == dict.fromkeys(urls, 200)
    assert report["throttled"] == 0  # both names kept to the one server's pace
    assert report["peak_inflight"] == 1
    assert {tuple(record["scopes"]) for record in result.records} == {("127.0.0.1",)}
