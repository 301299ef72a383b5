"""Token budgets of metered APIs (issue 37.4): headers, reservation and settlement, the stand-in, Redis."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from crawlpace import NotReady, Permit, Throttler
from crawlpace._responses._header_values import parse_duration, parse_timestamp
from crawlpace._responses._headers import Announced, header_items, parse_budgets, parse_hints
from crawlpace.budgets import TokenBudget, anthropic_usage, budget_kind, budget_scope, openai_usage
from crawlpace.policy.tokens import BURST_SHARE, REFILL_SHARE, learned_bucket
from crawlpace.sim import SimServer
from crawlpace.sim.token_api import TokenAPI, go_duration
from crawlpace.stores.redis import RedisStore
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

FAST = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0, "CONCURRENT_REQUESTS_PER_DOMAIN": 8}


def budgets_of(headers: Mapping[str, str], wall_now: float = 0.0) -> dict[str, Announced]:
    return {b.kind: b for b in parse_budgets(header_items(headers), wall_now=wall_now, cap=86400.0)}


# -- reading the headers --------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("6m0s", 360.0), ("1s", 1.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("850us", 0.00085),
    ("0.5s", 0.5), ("12", 12.0), ("2.5", 2.5), ("0s", 0.0),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "x", 1e9) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "-1s", "1x", "s", "1e999s", "nan", "inf", "1m-2s", "٣s", "1 s"])
def test_bad_durations_are_ignored_with_a_log_line(text: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="crawlpace._responses._headers"):
        assert parse_duration(text, "x-ratelimit-reset-tokens", 1e9) is None
    assert "x-ratelimit-reset-tokens" in caplog.text


def test_huge_durations_are_clamped() -> None:
    assert parse_duration("99999999h", "x", 300.0) == 300.0


@pytest.mark.parametrize(("text", "seconds"), [
    ("1970-01-01T00:01:00Z", 60.0), ("1970-01-01T00:01:00.250Z", 60.25),
    ("1970-01-01T01:01:00+01:00", 60.0), ("1970-01-01T00:00:00Z", 0.0),  # in the past: no wait
])
def test_rfc3339_resets(text: str, seconds: float) -> None:
    assert parse_timestamp(text, "x", wall_now=0.0, cap=1e9) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["tomorrow", "2026-13-01T00:00:00Z", "1970-01-01T00:00:00Zjunk", "x" * 500,
                                  "99999-01-01T00:00:00Z"])
def test_bad_rfc3339_resets_are_ignored(text: str) -> None:
    assert parse_timestamp(text, "x", wall_now=0.0, cap=1e9) is None


def test_openai_headers() -> None:
    found = budgets_of({"x-ratelimit-limit-requests": "60", "x-ratelimit-limit-tokens": "150000",
                        "x-ratelimit-remaining-requests": "59", "x-ratelimit-remaining-tokens": "75000",
                        "x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "30s"})
    assert found["requests"] == Announced("requests", 60.0, 59.0, 1.0, 60.0)
    # Half the tokens back in 30 s: the whole budget refills in a minute.
    assert found["tokens"] == Announced("tokens", 150000.0, 75000.0, 30.0, 60.0)


def test_anthropic_headers_count_input_and_output_apart() -> None:
    found = budgets_of({
        "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": "1970-01-01T00:00:01.2Z",
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "20000",
        "anthropic-ratelimit-input-tokens-reset": "1970-01-01T00:00:30Z",
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "8000",
        "anthropic-ratelimit-tokens-limit": "48000"})
    assert set(found) == {"requests", "input-tokens", "output-tokens", "tokens"}
    assert found["input-tokens"] == Announced("input-tokens", 40000.0, 20000.0, 30.0, 60.0)
    assert found["output-tokens"].remaining == 8000.0
    assert found["tokens"] == Announced("tokens", 48000.0)


def test_a_daily_budget_is_told_by_its_refill() -> None:
    found = budgets_of({"x-ratelimit-limit-requests": "14400", "x-ratelimit-remaining-requests": "7200",
                        "x-ratelimit-reset-requests": "12h0m0s"})
    assert found["requests"].window == 86400.0


def test_hostile_budget_values_are_dropped_or_clamped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="crawlpace._responses._headers"):
        found = budgets_of({"x-ratelimit-limit-requests": "0", "x-ratelimit-limit-tokens": "1000",
                            "x-ratelimit-remaining-tokens": "5000", "x-ratelimit-reset-tokens": "soon",
                            "anthropic-ratelimit-input-tokens-limit": "-5",
                            "anthropic-ratelimit-output-tokens-limit": "1e400",
                            "anthropic-ratelimit-output-tokens-remaining": "nan"})
    assert set(found) == {"tokens"}  # a limit of 0, a negative one, an infinite one: no budget
    assert found["tokens"].remaining == 1000.0  # above the limit: taken as the limit
    assert found["tokens"].reset is None
    assert "remaining 5000 above the limit 1000" in caplog.text
    assert "soon" in caplog.text


def test_budget_headers_alone_make_a_hint() -> None:
    hint = parse_hints({"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "10",
                        "content-type": "application/json"}, wall_now=0.0, cap=300.0)
    assert hint is not None
    assert hint.source == "budgets"
    assert [b.kind for b in hint.budgets] == ["tokens"]


# -- the budget scopes and their buckets ----------------------------------------------------


def test_budget_scope_names() -> None:
    assert budget_scope("api.example.com", "tokens") == "api.example.com#tokens"
    assert budget_kind("api.example.com#input-tokens") == "input-tokens"
    assert budget_kind("api.example.com") is None
    assert budget_kind("a#b") is None
    with pytest.raises(ValueError, match="unknown budget kind 'token'"):
        budget_scope("api", "token")


def test_a_learned_bucket_sits_inside_the_servers() -> None:
    bucket = learned_bucket(6000.0, 60.0)
    assert bucket is not None
    assert bucket.capacity == BURST_SHARE * 6000.0
    assert bucket.rate == pytest.approx(REFILL_SHARE * 6000.0 / 60.0)
    assert learned_bucket(0.0, 60.0) is None
    assert learned_bucket(float("inf"), 60.0) is None


def test_token_budget_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="unknown budget kinds"):
        TokenBudget("api", kinds=("requests", "tokns"))
    budget = TokenBudget("api")
    with pytest.raises(ValueError, match="input_tokens=5: not a budget of"):
        budget.settings(input_tokens=5)
    with pytest.raises(ValueError, match="tokens=-1: a budget must be a positive number"):
        budget.settings(tokens=-1)


def test_token_budget_scopes_and_settlement() -> None:
    budget = TokenBudget("api", kinds=("requests", "input-tokens", "output-tokens"))
    assert budget.scopes(input_tokens=900, output_tokens=300) == {
        "api": 1.0, "api#requests": 1.0, "api#input-tokens": 900.0, "api#output-tokens": 300.0}
    assert budget.consumed({"input-tokens": 880, "output-tokens": 12}) == {
        "api#requests": 1.0, "api#input-tokens": 880.0, "api#output-tokens": 12.0}
    both = TokenBudget("api")
    assert both.consumed({"input-tokens": 880, "output-tokens": 12}) == {"api#requests": 1.0,
                                                                         "api#tokens": 892.0}
    assert both.settings(tokens=1000)["api#tokens"] == {"delay": 0.0, "delay_per_slot": 0.0, "quota": 1000.0,
                                                        "window": 60.0}


@dataclass
class Answer:
    status_code: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        if isinstance(self.body, Exception):
            raise self.body
        return self.body


def test_usage_hooks() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert openai_usage(Answer(body={"usage": usage})) == {"input-tokens": 10.0, "output-tokens": 5.0}
    assert anthropic_usage(Answer(body={"usage": {"input_tokens": 7, "output_tokens": 3}})) == {
        "input-tokens": 7.0, "output-tokens": 3.0}
    assert openai_usage(Answer(body=ValueError("not JSON"))) is None
    assert openai_usage(Answer(body={"usage": {"prompt_tokens": -1, "completion_tokens": 5}})) is None
    assert anthropic_usage(Answer(body=[1, 2])) is None


async def tokens_left(throttler: Throttler, scope: str = "api#tokens") -> float:
    stats = await throttler.scope_stats(scope)
    assert stats is not None
    assert stats.quota_remaining is not None
    return stats.quota_remaining


async def test_a_request_reserves_its_expected_tokens_and_the_answer_settles_them(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    budget = TokenBudget("api", usage=openai_usage)
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": budget.settings(tokens=1000)})
    permit = await throttler.acquire(scopes=budget.scopes(input_tokens=100, output_tokens=300))
    assert await tokens_left(throttler) == 100.0  # half the server's bucket at once, 400 reserved
    budget.feedback(permit, Answer(body={"usage": {"prompt_tokens": 100, "completion_tokens": 50}}))
    await permit.release()
    assert await tokens_left(throttler) == pytest.approx(350.0)  # settled: 150, 250 given back
    # A request that expects more than is left waits for the refill (0.97 x 1000 / 60 a second).
    clock_before = clock.now()
    async with throttler.slot(scopes=budget.scopes(input_tokens=200, output_tokens=200)) as later:
        assert later.granted_at - clock_before == pytest.approx(50.0 / (REFILL_SHARE * 1000.0 / 60.0))
        budget.feedback(later, Answer(status_code=429, body={"error": "rate limited"}))
    # Refused: the server's budget holds less than the bucket showed, so the reservation
    # stays charged and the bucket comes down toward the server's.
    assert await tokens_left(throttler) == pytest.approx(0.0, abs=1e-6)


async def test_a_budget_is_learned_from_the_answers(clock: MockClock,
                                                    make_throttler: ThrottlerFactory) -> None:
    budget = TokenBudget("api", usage=openai_usage)
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": budget.settings()})
    async with throttler.slot(scopes=budget.scopes(input_tokens=100, output_tokens=100)) as permit:
        budget.feedback(permit, Answer(body={"usage": {"prompt_tokens": 100, "completion_tokens": 100}},
                                       headers={"x-ratelimit-limit-tokens": "2000",
                                                "x-ratelimit-remaining-tokens": "1800",
                                                "x-ratelimit-reset-tokens": "6s",
                                                "x-ratelimit-limit-requests": "100",
                                                "x-ratelimit-remaining-requests": "99",
                                                "x-ratelimit-reset-requests": "600ms"}))
    # The learned buckets, full: half the server's.
    assert await tokens_left(throttler) == 1000.0
    assert await tokens_left(throttler, "api#requests") == 50.0
    # 1000 tokens at once, then the refill: the 6th request of 200 waits.
    sends = []
    for _ in range(6):
        async with throttler.slot(scopes=budget.scopes(input_tokens=100, output_tokens=100)) as permit:
            sends.append(permit.granted_at)
            permit.feedback(Answer())
    assert sends[:5] == [sends[0]] * 5
    assert sends[5] > sends[0]


async def test_a_refusal_with_budgets_is_not_backed_off(clock: MockClock,
                                                        make_throttler: ThrottlerFactory) -> None:
    budget = TokenBudget("api")
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": budget.settings()})
    async with throttler.slot(scopes=budget.scopes(input_tokens=100)) as permit:
        permit.feedback(Answer(429, headers={"x-ratelimit-limit-tokens": "2000",
                                             "x-ratelimit-remaining-tokens": "0",
                                             "x-ratelimit-reset-tokens": "1s"}))
    stats = await throttler.scope_stats("api")
    assert stats is not None
    assert stats.backoff == 0


OPENAI_HEADERS = {"x-ratelimit-limit-tokens": "2000", "x-ratelimit-remaining-tokens": "1800",
                  "x-ratelimit-reset-tokens": "6s", "x-ratelimit-limit-requests": "100",
                  "x-ratelimit-remaining-requests": "99", "x-ratelimit-reset-requests": "600ms"}


async def test_a_budget_of_unknown_size_sends_one_request_first(make_throttler: ThrottlerFactory) -> None:
    budget = TokenBudget("api", usage=openai_usage)
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": budget.settings()})
    scopes = budget.scopes(input_tokens=100, output_tokens=100)
    first = await throttler.try_acquire(scopes=scopes)
    assert isinstance(first, Permit)
    # Nothing is known of the budget yet: the others wait for the first answer's headers.
    assert isinstance(await throttler.try_acquire(scopes=scopes), NotReady)
    budget.feedback(first, Answer(body={"usage": {"prompt_tokens": 100, "completion_tokens": 100}},
                                  headers=OPENAI_HEADERS))
    await first.release()
    # Known: the learned bucket (1000 tokens at once) admits five at once.
    permits = [await throttler.try_acquire(scopes=scopes) for _ in range(6)]
    assert [isinstance(p, Permit) for p in permits] == [True] * 5 + [False]
    for permit in permits:
        if isinstance(permit, Permit):
            await permit.release()


async def test_a_lost_first_request_or_a_silent_api_does_not_stall_a_budget(
        make_throttler: ThrottlerFactory) -> None:
    budget = TokenBudget("api")
    throttler = make_throttler({**FAST, "THROTTLING_SCOPES": budget.settings()})
    scopes = budget.scopes(input_tokens=100)
    lost = await throttler.try_acquire(scopes=scopes)
    assert isinstance(lost, Permit)
    await lost.release()  # cancelled: no answer, so the next request goes first in its place
    first = await throttler.try_acquire(scopes=scopes)
    assert isinstance(first, Permit)
    assert isinstance(await throttler.try_acquire(scopes=scopes), NotReady)
    first.feedback(Answer())  # an API that sends no budget headers: its first answer opens every slot
    await first.release()
    permits = [await throttler.try_acquire(scopes=scopes) for _ in range(8)]
    assert all(isinstance(p, Permit) for p in permits)
    for permit in permits:
        assert isinstance(permit, Permit)
        await permit.release()


# -- the stand-in API, served -----------------------------------------------------------------


async def test_the_stand_in_enforces_both_budgets_and_says_so() -> None:
    api = TokenAPI(requests=3, tokens=1000, latency=(0.0, 0.0))
    async with SimServer(api, "127.0.0.1") as server, httpx.AsyncClient(base_url=server.url) as http:
        first = await http.get("/v1/chat", params={"prompt_tokens": 400, "max_tokens": 100})
        assert first.status_code == 200
        hint = parse_hints(first.headers, wall_now=0.0, cap=300.0)
        assert hint is not None
        found = {b.kind: b for b in hint.budgets}
        assert found["requests"].remaining == 2.0
        used = json.loads(first.content)["usage"]
        assert found["tokens"].remaining == 1000 - used["total_tokens"]
        assert openai_usage(first) == {"input-tokens": 400.0, "output-tokens": used["completion_tokens"]}
        second = await http.get("/v1/chat", params={"prompt_tokens": 700, "max_tokens": 100})
        assert second.status_code == 429  # not enough tokens left for its prompt
        assert second.headers["retry-after"]
        assert (await http.get("/v1/chat", params={"prompt_tokens": "x"})).status_code == 400
    assert (api.stats.answered, api.stats.refused) == (1, 1)


def test_the_stand_in_speaks_anthropic_too() -> None:
    api = TokenAPI(requests=5, input_tokens=100, output_tokens=50, style="anthropic",
                   clock=lambda: 0.0, wall=lambda: 0.0)
    headers = dict((k.decode(), v.decode()) for k, v in api._headers(0.0))
    assert headers["anthropic-ratelimit-input-tokens-limit"] == "100"
    assert headers["anthropic-ratelimit-input-tokens-reset"] == "1970-01-01T00:00:00.000Z"
    with pytest.raises(ValueError, match="OpenAI's headers know only"):
        TokenAPI(requests=5, input_tokens=100)
    assert [go_duration(x) for x in (0.02, 1.5, 360.0, 61.25)] == ["20ms", "1.5s", "6m0s", "1m1.25s"]


# -- one budget for a team: real Redis ------------------------------------------------------


async def flush(throttler: Throttler) -> None:
    """Let the releases of ``throttler`` reach the server before another process looks."""
    store = throttler.store
    assert isinstance(store, RedisStore)
    await store.flush()


async def test_two_throttlers_on_one_redis_share_one_token_budget(redis_url: str) -> None:
    budget = TokenBudget("api", usage=openai_usage)
    settings = {**FAST, "THROTTLING_SCOPES": budget.settings(tokens=1000)}
    one, two = Throttler(settings, store=redis_url), Throttler(settings, store=redis_url)
    try:
        first = await one.try_acquire(scopes=budget.scopes(input_tokens=100, output_tokens=300))
        assert isinstance(first, Permit)
        # 100 of the 500 tokens at once are left: the other process's 300 must wait for the refill.
        waiting = await two.try_acquire(scopes=budget.scopes(input_tokens=100, output_tokens=200))
        assert isinstance(waiting, NotReady)
        # The first request used far less than it reserved: the rest comes back to the team.
        budget.feedback(first, Answer(body={"usage": {"prompt_tokens": 100, "completion_tokens": 20}}))
        await first.release()
        # The release reaches the server before the other process looks (the requests budget,
        # not set, has one slot until this first answer).
        await flush(one)
        second = await two.try_acquire(scopes=budget.scopes(input_tokens=100, output_tokens=200))
        assert isinstance(second, Permit)
        await second.release()
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_team_waits_for_the_first_answer_of_a_budget_of_unknown_size(redis_url: str) -> None:
    budget = TokenBudget("api", usage=openai_usage)
    settings = {**FAST, "THROTTLING_SCOPES": budget.settings()}
    one, two = Throttler(settings, store=redis_url), Throttler(settings, store=redis_url)
    scopes = budget.scopes(input_tokens=100, output_tokens=100)
    try:
        first = await one.try_acquire(scopes=scopes)
        assert isinstance(first, Permit)
        # The other process waits too: the one slot is the team's.
        assert isinstance(await two.try_acquire(scopes=scopes), NotReady)
        budget.feedback(first, Answer(body={"usage": {"prompt_tokens": 100, "completion_tokens": 100}},
                                      headers=OPENAI_HEADERS))
        await first.release()
        await flush(one)
        # Every slot opens, and the budget the first answer taught holds for both processes:
        # 1000 tokens at once, all spent by these five (the first of them was admitted on a
        # stale copy of the policy, before this process had read the budget: its answer is
        # charged whole).
        permits = [await two.try_acquire(scopes=scopes) for _ in range(5)]
        for permit in permits:
            assert isinstance(permit, Permit)
            budget.feedback(permit, Answer(body={"usage": {"prompt_tokens": 100, "completion_tokens": 100}}))
            await permit.release()
        await flush(two)
        assert isinstance(await one.try_acquire(scopes=scopes), NotReady)
    finally:
        await one.aclose()
        await two.aclose()
