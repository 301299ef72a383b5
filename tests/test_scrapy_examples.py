"""Seed 001's worked examples, written as the seed writes them, each checked for its scopes and spacing.

The managers below are the seed's code with one changed import
(``crawlpace.scrapy`` for ``scrapy.throttling``) and, for tldextract, an
extractor that uses its bundled suffix list instead of downloading one.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest
import tldextract
from scrapy import Request
from scrapy.http import Response
from scrapy.utils.httpobj import urlparse_cached
from w3lib.url import url_query_parameter

from crawlpace.scrapy import ThrottlingManager, add_scope, scope_cache, update_scope_backoff
from crawlpace.testing import MockClock

from .test_scrapy_engine import FakeEngine, clock

__all__ = ["clock"]

# The seed calls tldextract.extract(); this one never goes to the network.
extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)

NO_DELAY = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}


async def scopes_of(engine: FakeEngine, url: str, **meta: Any) -> set[str]:
    return {name for name, _ in await engine.runtime.scopes(Request(url, meta=meta))}


# --- "Alternative domain throttling", first way: one scope per registrable domain ---------------


class RegistrableDomainManager:
    def get_request_scopes(self, request: Request) -> str:
        extracted = extract(request.url)
        if extracted.domain and extracted.suffix:
            return f"{extracted.domain}.{extracted.suffix}"
        return urlparse_cached(request).netloc


async def test_registrable_domain_scopes(clock: MockClock) -> None:
    engine = FakeEngine({"DOWNLOAD_DELAY": 1.0, "DOWNLOAD_DELAY_PER_SLOT": 1.0}, clock, latency=0.1,
                        manager=RegistrableDomainManager)  # THROTTLING_MANAGER = MyThrottlingManager
    assert await scopes_of(engine, "https://books.toscrape.com/a") == {"toscrape.com"}
    assert await scopes_of(engine, "https://toscrape.com/") == {"toscrape.com"}
    assert await scopes_of(engine, "http://localhost:6800/") == {"localhost:6800"}
    await engine.run([Request("https://books.toscrape.com/1"), Request("https://quotes.toscrape.com/1"),
                      Request("https://toscrape.com/"), Request("https://example.com/")])
    # The three toscrape.com hosts share one scope: a second apart; example.com goes alongside.
    assert [send.at for send in engine.sends if "toscrape" in send.url] == [0.0, 1.0, 2.0]
    assert engine.times("https://example.com") == [0.0]


# --- "Alternative domain throttling", second way: the registrable domain and every subdomain ----


class SubdomainsManager:
    def get_request_scopes(self, request: Request) -> str | set[str]:
        extracted = extract(request.url)
        if not (extracted.domain and extracted.suffix):
            return urlparse_cached(request).netloc
        scopes = set()
        registrable_domain = f"{extracted.domain}.{extracted.suffix}"
        scopes.add(registrable_domain)
        if extracted.subdomain:
            subdomain_parts = extracted.subdomain.split(".")
            for i in range(len(subdomain_parts)):
                subdomain = ".".join(subdomain_parts[i:])
                full_domain = f"{subdomain}.{registrable_domain}"
                scopes.add(full_domain)
        return scopes


async def test_subdomain_scopes_cap_the_registrable_domain(clock: MockClock) -> None:
    settings = {**NO_DELAY, "CONCURRENT_REQUESTS": 100, "THROTTLING_SCOPES": {
        "toscrape.com": {"concurrency": 32},
        "books.toscrape.com": {"concurrency": 24},
        "quotes.toscrape.com": {"concurrency": 16},
    }}
    engine = FakeEngine(settings, clock, latency=1.0, manager=SubdomainsManager)
    assert await scopes_of(engine, "https://a.books.toscrape.com/") == {
        "toscrape.com", "books.toscrape.com", "a.books.toscrape.com"}
    books = [Request(f"https://books.toscrape.com/{n}") for n in range(40)]
    await engine.run(books, close=False)
    assert engine.peak_inflight["books.toscrape.com"] == 24
    books = [Request(f"https://books.toscrape.com/{n}/again") for n in range(40)]
    quotes = [Request(f"https://quotes.toscrape.com/{n}") for n in range(40)]
    start = clock.now()
    await engine.run([request for pair in zip(books, quotes, strict=True) for request in pair])
    assert engine.peak_inflight["quotes.toscrape.com"] == 16
    assert engine.peak_inflight["toscrape.com"] == 32  # never both at full concurrency: 24 + 16 > 32
    assert len([send for send in engine.sends if send.at == start]) == 32


# --- "Endpoint-specific throttling" ----------------------------------------------------------------


class EndpointManager(ThrottlingManager):
    @scope_cache
    async def get_scopes(self, request: Any) -> Any:
        parsed_url = urlparse_cached(request)
        if parsed_url.netloc != "api.toscrape.com":
            return await super().get_scopes(request)
        return f"{parsed_url.netloc}{parsed_url.path}"


async def test_endpoint_scopes(clock: MockClock) -> None:
    settings = {"THROTTLING_SCOPES": {
        "api.toscrape.com/fast-endpoint": {"concurrency": 1000, "delay": 0.08},
        "api.toscrape.com/slow-endpoint": {"delay": 5.0},
    }}
    engine = FakeEngine(settings, clock, latency=0.01, manager=EndpointManager)
    assert await scopes_of(engine, "https://api.toscrape.com/fast-endpoint?q=1") == {
        "api.toscrape.com/fast-endpoint"}
    assert await scopes_of(engine, "https://toscrape.com/fast-endpoint") == {"toscrape.com"}
    await engine.run([*(Request(f"https://api.toscrape.com/fast-endpoint?n={n}") for n in range(3)),
                      *(Request(f"https://api.toscrape.com/slow-endpoint?n={n}") for n in range(3))])
    assert engine.times("https://api.toscrape.com/fast") == pytest.approx([0.0, 0.08, 0.16])
    assert engine.times("https://api.toscrape.com/slow") == [0.0, 5.0, 10.0]


# --- "Web scraping API throttling" -------------------------------------------------------------------


class ScrapingApiManager(ThrottlingManager):
    @scope_cache
    async def get_scopes(self, request: Any) -> Any:
        scopes = await super().get_scopes(request)
        if urlparse_cached(request).netloc != "api.toscrape.com":
            return scopes
        target_url = url_query_parameter(request.url, "url")
        if not target_url:
            return scopes
        target_domain = urlparse(target_url).netloc
        return add_scope(scopes, target_domain)

    async def get_response_backoff(self, response: Any) -> Any:
        if (
            urlparse_cached(response.request).netloc != "api.toscrape.com"
            or response.status != 200
        ):
            return await super().get_response_backoff(response)
        upstream_status_code = int(
            response.headers.get("X-Upstream-Status-Code", b"200")
        )
        upstream_response = response.__class__(
            response.url,
            status=upstream_status_code,
            headers=response.headers,
            body=response.body,
        )
        return await super().get_response_backoff(upstream_response)


@pytest.mark.parametrize(("floor", "example_2", "slow_2"), [
    # BACKOFF_MIN_DELAY unset: each scope backs off by what it was sending (docs/concepts/backoff.md).
    # The API, sending every 0.08 s, halves that rate, so example.com's second page waits only for
    # example.com's own second; slow-site.com, sending at its one-second delay, doubles it.
    ({}, 1.0, 0.16 + 2.0),
    # BACKOFF_MIN_DELAY = 10 set: the proposal's "minimum delay during backoff". The API scope, which
    # every request holds, now sends at most one request per 10 s while it backs off.
    ({"BACKOFF_MIN_DELAY": 10.0}, 0.16 + 10.0, 0.16 + 20.0),
])
async def test_scraping_api_scopes_and_upstream_status(clock: MockClock, floor: dict[str, float],
                                                       example_2: float, slow_2: float) -> None:
    def respond(request: Request) -> Response:
        upstream = b"429" if "slow-site" in request.url else b"200"
        return Response(request.url, status=200, headers={"X-Upstream-Status-Code": upstream},
                        request=request)

    settings = {"DOWNLOAD_DELAY_PER_SLOT": 0.0, **floor,
                "THROTTLING_SCOPES": {"api.toscrape.com": {"concurrency": 1000, "delay": 0.08}}}
    engine = FakeEngine(settings, clock, latency=0.01, respond=respond, manager=ScrapingApiManager)
    api = "https://api.toscrape.com/?url="
    assert await scopes_of(engine, f"{api}https://example.com/a") == {"api.toscrape.com", "example.com"}
    assert await scopes_of(engine, "https://api.toscrape.com/") == {"api.toscrape.com"}
    await engine.run([Request(f"{api}https://example.com/1"), Request(f"{api}https://example.com/2"),
                      Request(f"{api}https://other.com/1"), Request(f"{api}https://slow-site.com/1"),
                      Request(f"{api}https://slow-site.com/2")])
    at = {send.url.removeprefix(api): send.at for send in engine.sends}
    # The API allows a request every 0.08 s; each target site keeps its own one second apart.
    assert at["https://example.com/1"] == 0.0
    assert at["https://other.com/1"] == pytest.approx(0.08)
    assert at["https://slow-site.com/1"] == pytest.approx(0.16)
    # An upstream 429 behind an API 200 counts as a 429 for the request's scopes, the target
    # site's and (as the seed's code is written) the API's.
    assert at["https://example.com/2"] == pytest.approx(example_2)
    assert at["https://slow-site.com/2"] == pytest.approx(slow_2)
    for scope in ("slow-site.com", "api.toscrape.com"):
        snapshot = await engine.throttler.scope_stats(scope)
        assert snapshot is not None
        assert snapshot.backoff >= 1
    assert engine.stats.get("throttling/backoffs/status/200") == 2  # an API 200, upstream 429
    await engine.runtime.aclose()


# --- "Cost-capped throttling" ----------------------------------------------------------------------


def estimate_request_cost(request: Request) -> float:
    return float(url_query_parameter(request.url, "estimate") or 1)


class CostManager(ThrottlingManager):
    @scope_cache
    async def get_scopes(self, request: Any) -> Any:
        scopes = await super().get_scopes(request)
        parsed_url = urlparse_cached(request)
        if parsed_url.netloc != "api.toscrape.com":
            return scopes
        return add_scope(scopes, "cost", estimate_request_cost(request))

    async def get_response_backoff(self, response: Any) -> Any:
        scopes = await super().get_response_backoff(response)
        if "cost" not in scopes:
            return scopes
        actual_cost = float(response.headers.get("X-Actual-Cost", b"0"))
        return update_scope_backoff(scopes, "cost", consumed_quota=actual_cost)


def charging(actual: float) -> Any:
    def respond(request: Request) -> Response:
        return Response(request.url, headers={"X-Actual-Cost": str(actual)}, request=request)
    return respond


COST_SETTINGS: dict[str, Any] = {
    **NO_DELAY, "CONCURRENT_REQUESTS_PER_DOMAIN": 100,
    "THROTTLING_SCOPES": {"cost": {"quota": 100.0}},
}


async def test_cost_capped_spending(clock: MockClock) -> None:
    """100 units per 60 s: after the initial credit, spending runs at about 1.5 units a second."""
    engine = FakeEngine(COST_SETTINGS, clock, latency=0.01, respond=charging(4.0), manager=CostManager)
    assert await scopes_of(engine, "https://api.toscrape.com/?estimate=4") == {"api.toscrape.com", "cost"}
    assert await scopes_of(engine, "https://toscrape.com/?estimate=4") == {"toscrape.com"}
    await engine.run(Request(f"https://api.toscrape.com/?estimate=4&n={n}") for n in range(8))
    times = engine.times()
    assert times[:2] == [0.0, 0.0]  # 10 units of credit: two requests of 4 at once
    for spent, at in enumerate(times, start=1):
        assert 4.0 * spent <= 10.0 + 1.5 * at + 1e-6  # never more than credit plus refill
    assert times[-1] == pytest.approx((8 * 4.0 - 10.0) / 1.5, abs=0.1)  # 32 units: 10 at once, 22 refilled


async def test_cost_reported_lower_than_estimated_is_refunded(clock: MockClock) -> None:
    expensive = FakeEngine(COST_SETTINGS, clock, latency=0.01, respond=charging(4.0), manager=CostManager)
    await expensive.run(Request(f"https://api.toscrape.com/?estimate=4&n={n}") for n in range(8))
    cheap = FakeEngine(COST_SETTINGS, clock, latency=0.01, respond=charging(1.0), manager=CostManager)
    start = clock.now()
    await cheap.run(Request(f"https://api.toscrape.com/?estimate=4&n={n}") for n in range(8))
    cheap_span = cheap.times()[-1] - start
    assert cheap_span < expensive.times()[-1] / 2


# --- "Per-request throttling" and the default THROTTLING_SCOPES ------------------------------------


async def test_per_request_scopes_from_meta(clock: MockClock) -> None:
    settings = {**NO_DELAY, "CONCURRENT_REQUESTS_PER_DOMAIN": 10,
                "THROTTLING_SCOPES": {"api": {"concurrency": 2}, "users": {"delay": 5.0}}}
    engine = FakeEngine(settings, clock, latency=1.0)
    assert await scopes_of(engine, "https://api.example/", throttling_scopes="api") == {"api"}
    assert await scopes_of(engine, "https://api.example/users",
                           throttling_scopes={"api", "users"}) == {"api", "users"}
    await engine.run([*(Request(f"https://api.example/{n}", meta={"throttling_scopes": "api"})
                        for n in range(4)),
                      *(Request(f"https://api.example/users/{n}",
                                meta={"throttling_scopes": {"api", "users"}}) for n in range(2))])
    assert engine.peak_inflight["api"] == 2
    users = engine.times("https://api.example/users")
    assert users[1] - users[0] >= 5.0


async def test_the_tutorial_site_default(clock: MockClock) -> None:
    """``{"quotes.toscrape.com": {"concurrency": 16, "delay": 0.0}}`` crawls it 16 at a time."""
    settings = {"DOWNLOAD_DELAY_PER_SLOT": 0.0,
                "THROTTLING_SCOPES": {"quotes.toscrape.com": {"concurrency": 16, "delay": 0.0}}}
    engine = FakeEngine(settings, clock, latency=0.5)
    await engine.run(Request(f"https://quotes.toscrape.com/page/{n}") for n in range(32))
    assert engine.times() == [0.0] * 16 + [0.5] * 16


async def test_rampup_speeds_a_scope_up_until_pushed_back(clock: MockClock) -> None:
    settings = {"DOWNLOAD_DELAY": 1.0, "THROTTLING_WINDOW": 5.0,
                "THROTTLING_SCOPES": {"api.toscrape.com": {"rampup": True}}}
    engine = FakeEngine(settings, clock, latency=0.01)
    await engine.run(Request(f"https://api.toscrape.com/{n}") for n in range(40))
    times = engine.times()
    assert times[1] - times[0] >= 0.99
    assert times[-1] - times[-2] < 0.5  # faster once the server never pushed back
