"""The RateLimit fields as draft-ietf-httpapi-ratelimit-headers-11 defines them, with the draft's examples."""

from __future__ import annotations

import logging

import pytest

from crawlpace import Permit, Throttler
from crawlpace._responses._headers import ServerHint, parse_hints
from crawlpace._responses._ratelimit import Policy, _members, binding, parse_policies, parse_ratelimit
from crawlpace.policy.budget import EVEN_SHARE
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory
from .test_feedback import FAST, URL, answer

NOW = 1_700_000_000.0


def hints(headers: dict[str, str], cap: float = 300.0) -> ServerHint:
    got = parse_hints(headers, wall_now=NOW, cap=cap)
    assert got is not None
    return got


# -- the draft's examples -------------------------------------------------------------------------


def test_draft_example_one_policy_paces_r_over_t_capped_by_q_over_w() -> None:
    got = hints({"RateLimit-Policy": '"default";q=100;w=10', "RateLimit": '"default";r=50;t=30'})
    # 50 requests within 30 s is one per 0.6 s; the policy's 100 per 10 s alone would allow 0.1 s.
    assert got.pace == pytest.approx(0.6)
    assert (got.pace_for, got.hold) == (30.0, None)
    assert (got.remaining, got.reset, got.limit, got.window) == (50.0, 30.0, 100.0, 10.0)
    assert got.policy == "default"


def test_q_over_w_caps_a_budget_that_just_refilled() -> None:
    got = hints({"RateLimit-Policy": '"default";q=100;w=60', "RateLimit": '"default";r=100;t=1'})
    assert got.pace == pytest.approx(0.6)  # not 1/100 s: the window allows 100 per minute


def test_draft_example_two_policies_the_strictest_binds() -> None:
    got = hints({"RateLimit-Policy": '"permin";q=50;w=60,"perhr";q=1000;w=3600',
                 "RateLimit": '"permin";r=40;t=30, "perhr";r=100;t=1800'}, cap=3600.0)
    # permin allows one per max(30/40, 60/50) = 1.2 s, perhr one per max(1800/100, 3.6) = 18 s.
    assert (got.policy, got.pace_for) == ("perhr", 1800.0)
    assert got.pace == pytest.approx(18.0)


def test_a_spent_budget_holds_for_its_span_whatever_the_others_allow() -> None:
    got = hints({"RateLimit-Policy": '"burst";q=10;w=1, "day";q=5000;w=86400',
                 "RateLimit": '"burst";r=0;t=1, "day";r=4000;t=86400'})
    assert (got.policy, got.hold, got.pace) == ("burst", 1.0, None)


def test_content_bytes_budget_paces_by_the_size_of_the_response() -> None:
    # The draft's per-user byte quota, keyed by a partition.
    got = hints({"RateLimit-Policy": '"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:',
                 "RateLimit": '"peruser";r=10000;t=10;pk=:sdfjLJUOUH==:', "Content-Length": "5000"})
    # 10000 bytes within 10 s is 1 ms a byte: a 5000-byte page every 5 s.
    assert got.pace == pytest.approx(5.0)
    assert got.partition is not None
    assert got.limit == 65535.0


def test_content_bytes_budget_without_a_size_only_counts_when_spent() -> None:
    headers = {"RateLimit-Policy": '"b";q=1000;qu="content-bytes";w=10', "RateLimit": '"b";r=500;t=10'}
    assert hints(headers).pace is None
    assert hints({**headers, "RateLimit": '"b";r=0;t=7'}).hold == 7.0


def test_concurrent_requests_unit_is_a_concurrency_cap_not_a_pace() -> None:
    got = hints({"RateLimit-Policy": '"conc";q=4;qu="concurrent-requests", "rate";q=100;w=10',
                 "RateLimit": '"conc";r=1, "rate";r=90;t=10'})
    assert got.concurrency == 4
    assert (got.policy, got.hold) == ("rate", None)


def test_two_partition_keys_are_two_budgets() -> None:
    policies = parse_policies('"u";q=10;w=60;pk=:YQ==:, "u";q=1000;w=60;pk=:Yg==:')
    assert [p.partition for p in policies] == [b"a", b"b"]
    budgets = parse_ratelimit('"u";r=5;t=60;pk=:Yg==:, "u";r=0;t=60;pk=:YQ==:', policies)
    assert [(b.partition, b.policy and b.policy.quota) for b in budgets] == [(b"b", 1000.0), (b"a", 10.0)]
    # Partition a is spent, b is not: a response for b carries only b.
    only_b = hints({"RateLimit-Policy": '"u";q=10;w=60;pk=:YQ==:, "u";q=1000;w=60;pk=:Yg==:',
                    "RateLimit": '"u";r=5;t=60;pk=:Yg==:'})
    assert (only_b.partition, only_b.limit, only_b.hold, only_b.pace) == (b"b", 1000.0, None, 12.0)


def test_policy_alone_gives_its_quota_pace() -> None:
    got = hints({"RateLimit-Policy": '"permin";q=50;w=60,"perhr";q=1000;w=3600'}, cap=600.0)
    # One per 1.2 s would spend the hour's 1000 in 20 minutes: the hourly 3.6 s binds (for at most the cap).
    assert (got.source, got.policy, got.pace, got.pace_for) == ("ratelimit-policy", "perhr", 3.6, 600.0)


# -- malformed input ------------------------------------------------------------------------------


@pytest.mark.parametrize("member", [
    '"a";r=-1;t=1', '"b";t=2', '"c";r=x', '"d";r=1;t=zz', '"e";r=1;pk=abc', "junk!", '"f";r=1;t=-3',
])
def test_malformed_ratelimit_members_are_dropped_with_a_log_line(
        member: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="crawlpace._responses._ratelimit"):
        got = hints({"RateLimit": f'{member}, "ok";r=4;t=2'})
    assert (got.policy, got.pace) == ("ok", 0.5)
    assert any("ignoring member" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("member", [
    '"a";w=60', '"b";q=0;w=60', '"c";q=10;w=0', '"d";q=10;qu="parsecs"', '"e";q=10;pk=1', '"f";q=1.5',
])
def test_malformed_policy_members_are_dropped(member: str) -> None:
    assert parse_policies(f'{member}, "ok";q=10;w=5') == [Policy("ok", 10.0, 5.0)]


def test_the_lenient_reader_matches_the_strict_parse_on_valid_fields() -> None:
    value = '"default";r=50;t=30;pk=:YWJj:, api;r=7, "x y";r=1;t=2.5'
    strict = [(name, params) for _, name, params in _members("RateLimit", value)]
    lenient = [(name, params) for _, name, params in _members("RateLimit", value + ", !!")]
    assert strict == lenient
    assert strict[0] == ("default", {"r": 50, "t": 30, "pk": b"abc"})


def test_nothing_usable_is_no_hint() -> None:
    assert parse_hints({"RateLimit": '"a";t=3, "b";r=zz'}, wall_now=NOW, cap=300.0) is None
    assert binding([], None) is None


def test_older_forms_keep_working_beside_the_new_reader() -> None:
    assert hints({"RateLimit": "limit=10, remaining=0, reset=4"}).source == "ratelimit-draft07"
    assert hints({"RateLimit-Remaining": "3", "RateLimit-Reset": "6"}).source == "ratelimit-trio"
    assert hints({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "6"}).source == "x-ratelimit"


# -- through the throttler, on the fake clock ---------------------------------------------------


async def test_the_binding_policy_paces_the_scope(clock: MockClock,
                                                  make_throttler: ThrottlerFactory) -> None:
    throttler: Throttler = make_throttler(FAST)
    await answer(throttler, 200, {"RateLimit-Policy": '"permin";q=50;w=60,"perhr";q=1000;w=3600',
                                  "RateLimit": '"permin";r=40;t=30, "perhr";r=1000;t=3600'})
    sends = [await answer(throttler) for _ in range(3)]
    # permin allows one per max(30/40, 60/50) = 1.2 s, perhr one per 3600/1000 = 3.6 s: perhr binds.
    # Its t pins the window's end, so the even pace is EVEN_SHARE of that (policy/budget.py).
    gap = EVEN_SHARE * 3.6
    assert sends == pytest.approx([gap, 2 * gap, 3 * gap])


async def test_a_spent_budget_holds_and_retry_after_takes_precedence(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler: Throttler = make_throttler(FAST)
    await answer(throttler, 200, {"RateLimit": '"burst";r=0;t=4'})
    assert await answer(throttler) == 4.0
    await answer(throttler, 429, {"RateLimit": '"burst";r=0;t=4', "Retry-After": "9"})
    assert await answer(throttler) == pytest.approx(13.0)


async def test_a_concurrent_requests_policy_caps_the_scopes_slots(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler: Throttler = make_throttler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 8})
    await answer(throttler, 200, {"RateLimit-Policy": '"conc";q=2;qu="concurrent-requests"',
                                  "RateLimit": '"conc";r=1'})
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert stats.concurrency == 2
    held = [await throttler.try_acquire(URL) for _ in range(3)]
    assert [isinstance(permit, Permit) for permit in held] == [True, True, False]
    for permit in held:
        if isinstance(permit, Permit):
            await permit.release()
    # A new announcement replaces the cap.
    await answer(throttler, 200, {"RateLimit-Policy": '"conc";q=5;qu="concurrent-requests"',
                                  "RateLimit": '"conc";r=4'})
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert stats.concurrency == 5
