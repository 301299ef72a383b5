"""Scope patterns as THROTTLING_SCOPES keys, and their precedence."""

from __future__ import annotations

from crawlpace import Settings
from crawlpace._scoping._patterns import resolve_scope

from .conftest import ThrottlerFactory


def test_exact_names_win_then_the_most_specific_pattern_then_star() -> None:
    settings = Settings.from_scrapy({"THROTTLING_SCOPES": {
        "*": {"concurrency": 2},
        "*.example.com": {"concurrency": 3},
        "*.api.example.com": {"concurrency": 4},
        "v2.api.example.com": {"concurrency": 5},
    }, "CONCURRENT_REQUESTS": 16})
    assert settings.scope_config("v2.api.example.com").concurrency == 5
    assert settings.scope_config("v1.api.example.com").concurrency == 4
    assert settings.scope_config("www.example.com").concurrency == 3
    assert settings.scope_config("example.com").concurrency == 2  # "*.example.com" needs a subdomain
    assert settings.scope_config("other.org").concurrency == 2
    assert settings.is_explicit("other.org")


def test_without_patterns_unknown_scopes_get_the_defaults() -> None:
    settings = Settings.from_scrapy({"THROTTLING_SCOPES": {"a.example": {"delay": 0.1}}})
    assert settings.scope_config("b.example") is settings.scope_defaults
    assert not settings.is_explicit("b.example")
    assert resolve_scope({}, "x") is None


def test_ties_go_to_the_key_that_sorts_first() -> None:
    scopes = {"127.0.0.?": 1, "127.0.0.[5]": 2}
    assert resolve_scope(scopes, "127.0.0.5") == "127.0.0.?"  # 8 literal characters each


async def test_a_star_key_turns_rampup_on_for_every_site(make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"THROTTLING_SCOPES": {"*": {"rampup": True}}})
    async with throttler.slot("https://anything.example/") as permit:
        permit.feedback(status=200)
    stats = await throttler.scope_stats("anything.example")
    assert stats is not None
    assert stats.rampup is not None
