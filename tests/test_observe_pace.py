"""The limit shown is the pace a server announced, when that is what binds.

A real HTTP server on 127.0.0.1 answers with ``RateLimit-Policy`` and
``RateLimit`` headers (a budget of 10 requests per 10 s, 2 left). The scope's
snapshot carries the announced pace, in the memory store and, read by another
process's store as ``crawlpace dashboard`` reads it, in Redis; the limit the
dashboard and the metrics show is that pace, with fixed limits and under
rampup alike (rampup's learned rate was shown instead), and the page names
the rule. One request each: no test waits for a throttle.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from crawlpace import Throttler
from crawlpace.observe import Sampler, limit_rule, store_reader
from crawlpace.observe._dashboard import dashboard_state
from crawlpace.observe._metrics import ThrottlerCollector, metrics_text
from crawlpace.observe._recorder import Recorder
from crawlpace.sim import SimServer

FIXED = {"DOWNLOAD_DELAY": 0.05, "DOWNLOAD_DELAY_PER_SLOT": 0.0, "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
         "RANDOMIZE_DOWNLOAD_DELAY": False}
RAMPUP = {**FIXED, "THROTTLING_SCOPE_DEFAULTS": {"rampup": True}}
HEADERS = [(b"ratelimit-policy", b'"p";q=10;w=10'), (b"ratelimit", b'"p";r=2;t=10')]


async def app(scope: Any, receive: Any, send: Any) -> None:
    """Every answer: 200 with the budget's headers."""
    await send({"type": "http.response.start", "status": 200,
                "headers": [*HEADERS, (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
async def server() -> AsyncIterator[SimServer]:
    async with SimServer(app, "127.0.0.1") as running:
        yield running


async def one_request(throttler: Throttler, url: str) -> None:
    async with (aiohttp.ClientSession() as session, throttler.slot(url) as permit,
                session.get(url) as answer):
        await answer.read()
        permit.feedback(answer)


@pytest.mark.parametrize("settings", [FIXED, RAMPUP], ids=["fixed", "rampup"])
async def test_the_limit_is_the_pace_the_server_announced(server: SimServer,
                                                         settings: dict[str, Any]) -> None:
    async with Throttler(settings) as throttler:
        await one_request(throttler, f"{server.url}/page")
        snap = await throttler.scope_stats("127.0.0.1")
        assert snap is not None
        # Two requests left of the budget, 10 s to its reset: a few seconds apart, not 20/s.
        assert snap.pace is not None
        assert 2.0 < snap.pace < 10.0
        assert limit_rule(snap) == (1.0 / snap.pace, "server's pace")
        recorder = Recorder()
        sampler = Sampler(lambda _limit: _one(snap), recorder=recorder)
        await sampler.sample()
        shown = dashboard_state(sampler)["scopes"][0]
        assert (shown["limit"], shown["limit_by"]) == (1.0 / snap.pace, "server's pace")
        assert shown["pace"] == snap.pace
        text = _metrics(ThrottlerCollector(recorder, sampler))
    assert f'crawlpace_pace_seconds{{scope="127.0.0.1"}} {snap.pace!r}' in text
    assert f'crawlpace_limit_requests_per_second{{scope="127.0.0.1"}} {1.0 / snap.pace!r}' in text


@pytest.mark.redis
async def test_a_fleet_view_of_the_shared_store_shows_the_same_pace(server: SimServer,
                                                                   redis_url: str) -> None:
    async with Throttler(RAMPUP, store=redis_url) as worker, Throttler(RAMPUP, store=redis_url) as viewer:
        await one_request(worker, f"{server.url}/page")
        mine = await worker.scope_stats("127.0.0.1")
        # What crawlpace dashboard reads: the store, from a process that sent nothing.
        seen = (await store_reader(viewer.store)(10))["127.0.0.1"]
    assert mine is not None
    assert mine.pace is not None
    assert seen.pace == pytest.approx(mine.pace)
    rate, rule = limit_rule(seen)
    assert rule == "server's pace"
    assert rate == pytest.approx(1.0 / mine.pace)


async def test_without_a_budget_the_rules_of_the_scope_bind() -> None:
    async with Throttler(FIXED) as throttler:
        async with throttler.slot("https://plain.example/") as permit:
            permit.feedback(status=200)
        snap = await throttler.scope_stats("plain.example")
    assert snap is not None
    assert snap.pace is None
    rate, rule = limit_rule(snap)
    assert rule == "delay"
    assert rate == pytest.approx(20.0)


def _one(snap: Any) -> Any:
    async def read() -> dict[str, Any]:
        return {"127.0.0.1": snap}
    return read()


def _metrics(collector: ThrottlerCollector) -> str:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return metrics_text(registry)[0].decode()



@pytest.mark.redis
async def test_a_fleet_view_without_the_workers_options_still_shows_their_rampup(redis_url: str) -> None:
    # Workers of crawlpace crawl's default (rampup); crawlpace dashboard reads the store with the
    # plain defaults, rampup off. It showed the delay in force (which follows what was sent lately)
    # instead of the rate rampup learned, and no rampup phase. A fixed-limit worker's scope stays fixed.
    ramping = {**FIXED, "THROTTLING_SCOPE_DEFAULTS": {"rampup": True},
               "THROTTLING_SCOPES": {"fixed.example": {"delay": 0.05, "rampup": False}}}
    async with Throttler(ramping, store=redis_url) as worker, Throttler({}, store=redis_url) as viewer:
        for url in ("https://ramp.example/", "https://ramp.example/", "https://fixed.example/"):
            async with worker.slot(url) as permit:
                permit.feedback(status=200)
        mine = await worker.scope_stats("ramp.example")
        seen = await store_reader(viewer.store)(10)
    assert mine is not None
    assert mine.rampup is not None
    ramp = seen["ramp.example"]
    assert ramp.rampup is not None  # was None: the reader's settings dropped it
    assert ramp.rampup.learned_rate == pytest.approx(mine.rampup.learned_rate)
    assert limit_rule(ramp) == limit_rule(mine)
    assert seen["fixed.example"].rampup is None
    assert limit_rule(seen["fixed.example"])[1] == "delay"
