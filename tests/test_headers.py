"""Reading pacing hints from response headers: every header family and container shape."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from email.utils import formatdate
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawlpace._responses._headers import (
    ServerHint,
    header_items,
    parse_hints,
    parse_reset,
    parse_retry_after,
)

NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
CAP = 300.0


def http_date(stamp: float) -> str:
    """Format a POSIX time as an IMF-fixdate."""
    return formatdate(stamp, usegmt=True)


def hints(headers: object, *, wall_now: float = NOW, cap: float = CAP) -> ServerHint | None:
    return parse_hints(headers, wall_now=wall_now, cap=cap)


# --- header containers -------------------------------------------------------------------------


def test_header_items_plain_dict_with_odd_casing_keeps_only_relevant_names() -> None:
    got = header_items({"RETRY-after": " 120 ", "Content-Type": "text/html", "x-RateLimit-Used": "4"})
    assert got == {"retry-after": "120", "x-ratelimit-used": "4"}


def test_header_items_bytes_dict_is_decoded_as_latin1() -> None:
    got = header_items({b"Retry-After": b"5", b"X-Rate-Limit-Remaining": b"\xe9"})
    assert got == {"retry-after": "5", "x-rate-limit-remaining": "\xe9"}


def test_header_items_scrapy_style_lists_use_first_element() -> None:
    got = header_items({b"Retry-After": [b"7", b"9"], b"Date": [], b"Ratelimit": [b"limit=1"]})
    assert got == {"retry-after": "7", "ratelimit": "limit=1"}


def test_header_items_pairs_prefer_first_occurrence() -> None:
    pairs = [("Retry-After", "1"), ("retry-after", "2"), (b"RateLimit-Reset", b"3"), ("Server", "x")]
    assert header_items(pairs) == {"retry-after": "1", "ratelimit-reset": "3"}
    assert header_items(tuple(pairs)) == {"retry-after": "1", "ratelimit-reset": "3"}


class MultiItems:
    """Mimics httpx.Headers: items() merges repeated names, multi_items() does not."""

    def items(self) -> list[tuple[str, str]]:
        return [("retry-after", "1, 2")]

    def multi_items(self) -> list[tuple[str, str]]:
        return [("retry-after", "1"), ("retry-after", "2")]


class RepeatingItems:
    """Mimics aiohttp's CIMultiDict: items() repeats a name."""

    def items(self) -> list[tuple[str, str]]:
        return [("Retry-After", "3"), ("Retry-After", "4")]


def test_header_items_multidicts_keep_first_value() -> None:
    assert header_items(MultiItems()) == {"retry-after": "1"}
    assert header_items(RepeatingItems()) == {"retry-after": "3"}


@pytest.mark.parametrize("garbage", [None, 42, "Retry-After: 5", b"Retry-After", object(), [1, 2], [("a",)]])
def test_header_items_garbage_gives_empty_dict(garbage: object) -> None:
    assert header_items(garbage) == {}


def test_header_items_returns_what_was_read_before_a_failure() -> None:
    def pairs() -> Iterator[tuple[object, object]]:
        yield "Retry-After", "5"
        yield object(), "ignored"  # unusable name: skipped
        yield "Date", 3.5
        raise RuntimeError("connection reset")

    assert header_items(pairs()) == {"retry-after": "5", "date": "3.5"}


@pytest.mark.parametrize(
    "headers",
    [
        {"rEtRy-AfTeR": "120"},
        {b"Retry-After": b"120"},
        {b"Retry-After": [b"120", b"999"]},
        [("Retry-After", "120")],
        [(b"retry-after", b"120"), (b"retry-after", b"5")],
    ],
)
def test_parse_hints_accepts_every_container_shape(headers: object) -> None:
    assert hints(headers) == ServerHint(retry_after=120.0, source="retry-after")


# --- Retry-After -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("120", 120.0), (" 120\t", 120.0), ("0", 0.0), ("1.5", 1.5), ("1e12", CAP), ("9" * 400, CAP),
     ("1000000000000", CAP), ("300", 300.0), ("301", CAP)],
)
def test_retry_after_delay_seconds(value: str, expected: float) -> None:
    assert parse_retry_after(value, date=None, wall_now=NOW, cap=CAP) == expected


def test_retry_after_date_in_the_past_means_no_wait() -> None:
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", date=None, wall_now=NOW, cap=CAP) == 0.0


@pytest.mark.parametrize("wall_now", [NOW, NOW - 3600.0, NOW + 86_400.0, 0.0])
def test_retry_after_date_is_measured_against_the_date_header(wall_now: float) -> None:
    sent = NOW - 1000.0
    got = parse_retry_after(http_date(sent + 30), date=http_date(sent), wall_now=wall_now, cap=CAP)
    assert got == 30.0


def test_retry_after_date_without_date_header_uses_wall_now() -> None:
    assert parse_retry_after(http_date(NOW + 45), date=None, wall_now=NOW, cap=CAP) == 45.0
    assert parse_retry_after(http_date(NOW + 45), date="not a date", wall_now=NOW, cap=CAP) == 45.0
    assert parse_retry_after(http_date(NOW + 86_400), date=None, wall_now=NOW, cap=CAP) == CAP


@pytest.mark.parametrize(
    "value",
    [
        "Tuesday, 14-Nov-23 22:13:50 GMT",  # RFC 850
        "Tue Nov 14 22:13:50 2023",  # asctime, no zone: UTC
        "Tue, 14 Nov 2023 22:13:50 -0000",  # unknown zone: UTC
    ],
)
def test_retry_after_obsolete_date_formats(value: str) -> None:
    assert parse_retry_after(value, date=None, wall_now=NOW, cap=CAP) == 30.0


@pytest.mark.parametrize(
    "value",
    ["-1", "-0.5", "nan", "NaN", "inf", "Infinity", "abc", "", "   ", "1,2", "12s", "\u0661\u0662",
     "\uff11\uff12", "12\x00", "\x0c12", "1e", ".5", "+5", "0x10"],
)
def test_retry_after_malformed_is_ignored(value: str) -> None:
    assert parse_retry_after(value, date=None, wall_now=NOW, cap=CAP) is None
    assert hints({"Retry-After": value}) is None


def test_malformed_header_is_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="crawlpace._responses._headers"):
        assert hints({"Retry-After": "soon"}) is None
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "Retry-After" in caplog.records[0].getMessage()


def test_nan_wall_now_gives_no_date_based_wait() -> None:
    assert parse_retry_after(http_date(NOW), date=None, wall_now=math.nan, cap=CAP) is None
    assert parse_reset("1700000030", wall_now=math.nan, cap=CAP) is None


# --- reset values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30", 30.0),
        ("0", 0.0),
        ("2.5", 2.5),
        ("1000000000", CAP),  # largest value still read as a delay
        ("1700000042", 42.0),  # epoch seconds
        ("1700000042.5", 42.5),
        ("1700000042000", 42.0),  # epoch milliseconds
        ("1699999000", 0.0),  # epoch in the past
        ("1699999000000", 0.0),
        (str(int(NOW + 50 * 365 * 86_400)), CAP),  # 50 years ahead: still only the cap
        ("99999999999999999999999", CAP),
        ("Tue, 14 Nov 2023 22:14:20 GMT", 60.0),
    ],
)
def test_parse_reset(value: str, expected: float) -> None:
    assert parse_reset(value, wall_now=NOW, cap=CAP) == expected


@pytest.mark.parametrize("value", ["-5", "soon", "", "nan", "inf", "1,2", "\u0663"])
def test_parse_reset_malformed(value: str) -> None:
    assert parse_reset(value, wall_now=NOW, cap=CAP) is None


# --- RateLimit, current form -------------------------------------------------------------------


def test_current_form_with_policy() -> None:
    got = hints({"RateLimit": '"default";r=0;t=30', "RateLimit-Policy": '"default";q=100;w=60'})
    assert got == ServerHint(remaining=0.0, reset=30.0, limit=100.0, window=60.0, source="ratelimit",
                             hold=30.0, policy="default")


def test_current_form_spent_budget_with_the_longest_span_binds() -> None:
    got = hints({
        "RateLimit": '"burst";r=5;t=1, "day";r=0;t=20, "hour";r=0;t=50, "min";r=3',
        "RateLimit-Policy": '"burst";q=10;w=1, "hour";q=1000;w=3600, "day";q=5000;w=86400',
    })
    assert got == ServerHint(remaining=0.0, reset=50.0, limit=1000.0, window=3600.0, source="ratelimit",
                             hold=50.0, policy="hour")


def test_current_form_without_matching_policy_caps_t() -> None:
    got = hints({"RateLimit": "api;r=7;t=9000", "RateLimit-Policy": '"other";q=50;w=10, "x";q=1'})
    assert got == ServerHint(remaining=7.0, reset=CAP, source="ratelimit", pace=CAP,
                             pace_for=CAP, policy="api")


def test_current_form_ignores_bad_members_and_unknown_params() -> None:
    got = hints({
        "RateLimit": '"a";r=-1;t=1, "b";t=2, "c";r=x, "d";r=1;t=zz, "e, f";r=4;t=3;pk=:YWJj:;flag, junk!',
    })
    assert got == ServerHint(remaining=4.0, reset=3.0, source="ratelimit", pace=0.75, pace_for=3.0,
                             policy="e, f", partition=b"abc")


def test_current_form_without_t_or_policy() -> None:
    assert hints({"RateLimit": '"q";r=12'}) == ServerHint(remaining=12.0, source="ratelimit", policy="q")


# --- RateLimit, draft-07 dictionary ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("limit=100, remaining=50, reset=5", ServerHint(remaining=50.0, reset=5.0, limit=100.0)),
        ("reset=5,remaining=50,limit=100", ServerHint(remaining=50.0, reset=5.0, limit=100.0)),
        ("reset=7", ServerHint(reset=7.0)),
        ("remaining=0, reset=100000", ServerHint(remaining=0.0, reset=CAP)),
        ("remaining=3, reset=-1, limit=0", ServerHint(remaining=3.0)),
    ],
)
def test_draft07_dictionary(value: str, expected: ServerHint) -> None:
    assert hints({"RateLimit": value}) == ServerHint(
        remaining=expected.remaining, reset=expected.reset, limit=expected.limit, source="ratelimit-draft07")


def test_draft07_dictionary_takes_window_from_policy() -> None:
    got = hints({"RateLimit": "remaining=1, reset=2", "RateLimit-Policy": "10;w=60"})
    assert got == ServerHint(remaining=1.0, reset=2.0, limit=10.0, window=60.0, source="ratelimit-draft07")


# --- RateLimit-* trio --------------------------------------------------------------------------


def test_trio_with_window_in_limit() -> None:
    got = hints({"RateLimit-Limit": "100, 100;w=60", "RateLimit-Remaining": "50", "RateLimit-Reset": "30"})
    assert got == ServerHint(remaining=50.0, reset=30.0, limit=100.0, window=60.0, source="ratelimit-trio")


def test_trio_with_policy_and_partial_fields() -> None:
    got = hints({"RateLimit-Policy": "100;w=60, 1000;w=3600", "RateLimit-Reset": "12"})
    assert got == ServerHint(reset=12.0, limit=100.0, window=60.0, source="ratelimit-trio")


def test_trio_limit_alone_is_not_a_hint() -> None:
    assert hints({"RateLimit-Limit": "100"}) is None


# --- vendor headers ----------------------------------------------------------------------------


def test_github_style() -> None:
    got = hints({
        "X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "4999", "X-RateLimit-Reset": "1700000120",
        "X-RateLimit-Used": "1", "X-RateLimit-Resource": "core",
    })
    assert got == ServerHint(remaining=4999.0, reset=120.0, limit=5000.0, source="x-ratelimit",
                             reset_whole=True)


def test_reddit_style_fractional_remaining() -> None:
    got = hints({"x-ratelimit-used": "4", "x-ratelimit-remaining": "596.0", "x-ratelimit-reset": "204"})
    assert got == ServerHint(remaining=596.0, reset=204.0, source="x-ratelimit", reset_whole=True)


def test_twitter_style_epoch_milliseconds() -> None:
    got = hints({"x-rate-limit-limit": "900", "x-rate-limit-remaining": "0",
                 "x-rate-limit-reset": "1700000090000"})
    assert got == ServerHint(remaining=0.0, reset=90.0, limit=900.0, source="x-rate-limit")


def test_reset_after_is_preferred_over_reset() -> None:
    got = hints({"X-RateLimit-Reset": "1700000100.5", "X-RateLimit-Reset-After": "1.25"})
    assert got == ServerHint(reset=1.25, source="x-ratelimit")
    got = hints({"X-RateLimit-Reset": "1700000100.5", "X-RateLimit-Reset-After": "-3"})
    assert got == ServerHint(reset=100.5, source="x-ratelimit")


def test_vendor_malformed_remaining_keeps_valid_reset() -> None:
    got = hints({"X-RateLimit-Remaining": "-5", "X-RateLimit-Reset": "10", "X-RateLimit-Limit": "abc"})
    assert got == ServerHint(reset=10.0, source="x-ratelimit", reset_whole=True)


# --- precedence and Retry-After alongside ------------------------------------------------------

ALL_FAMILIES = {
    "RateLimit": '"p";r=1;t=1',
    "RateLimit-Remaining": "3",
    "X-RateLimit-Remaining": "4",
    "X-Rate-Limit-Remaining": "5",
}


@pytest.mark.parametrize(
    ("drop", "remaining", "source"),
    [
        ((), 1.0, "ratelimit"),
        (("RateLimit",), 3.0, "ratelimit-trio"),
        (("RateLimit", "RateLimit-Remaining"), 4.0, "x-ratelimit"),
        (("RateLimit", "RateLimit-Remaining", "X-RateLimit-Remaining"), 5.0, "x-rate-limit"),
    ],
)
def test_family_precedence(drop: tuple[str, ...], remaining: float, source: str) -> None:
    got = hints({k: v for k, v in ALL_FAMILIES.items() if k not in drop})
    assert got is not None
    assert (got.remaining, got.source) == (remaining, source)


def test_draft07_beats_trio() -> None:
    got = hints({"RateLimit": "remaining=9", "RateLimit-Remaining": "3"})
    assert got == ServerHint(remaining=9.0, source="ratelimit-draft07")


def test_unusable_family_falls_through_to_the_next() -> None:
    got = hints({"RateLimit": '"p";r=-1, garbage', "RateLimit-Remaining": "x", "X-RateLimit-Reset": "8"})
    assert got == ServerHint(reset=8.0, source="x-ratelimit", reset_whole=True)


def test_retry_after_is_reported_alongside_rate_limits() -> None:
    got = hints({"Retry-After": "20", "RateLimit": '"p";r=0;t=30'})
    assert got == ServerHint(retry_after=20.0, remaining=0.0, reset=30.0, source="ratelimit",
                             hold=30.0, policy="p")


def test_retry_after_date_via_parse_hints_uses_date_header() -> None:
    got = hints({"Date": http_date(NOW - 500), "Retry-After": http_date(NOW - 470)}, wall_now=NOW)
    assert got == ServerHint(retry_after=30.0, source="retry-after")


@pytest.mark.parametrize(
    "headers",
    [{}, {"Content-Type": "text/html"}, {"Date": http_date(NOW)}, {"X-RateLimit-Limit": "10"},
     {"RateLimit": "", "RateLimit-Reset": "-1", "X-RateLimit-Remaining": "inf"}],
)
def test_nothing_usable_gives_none(headers: dict[str, str]) -> None:
    assert hints(headers) is None


# --- properties --------------------------------------------------------------------------------

NAMES = ["Retry-After", "Date", "RateLimit", "RateLimit-Policy", "RateLimit-Limit", "RateLimit-Remaining",
         "RateLimit-Reset", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
         "X-RateLimit-Reset-After", "X-Rate-Limit-Limit", "X-Rate-Limit-Remaining", "X-Rate-Limit-Reset"]
SAMPLES = ["0", "5", "1.5", "-1", "nan", "inf", "1e309", "1700000042", "1700000042000", "9" * 40,
           '"a";r=1;t=2', "a;r=0, b;r=0;t=9", "limit=1, remaining=2, reset=3", "10;w=60", '"a";q=5;w=0',
           "Tue, 14 Nov 2023 22:14:20 GMT", "Sun, 06 Nov 1994 08:49:37 GMT", '"\\', ";;,,="]
text_values = st.one_of(st.sampled_from(SAMPLES), st.text())
names = st.one_of(st.sampled_from(NAMES), st.sampled_from(NAMES).map(str.upper), st.text(max_size=20))


def assert_sane(hint: ServerHint | None, cap: float) -> None:
    if hint is None:
        return
    values = [hint.retry_after, hint.remaining, hint.reset, hint.limit, hint.window]
    assert any(v is not None for v in values)
    assert all(math.isfinite(v) for v in values if v is not None)
    assert all(0.0 <= v <= cap for v in (hint.retry_after, hint.reset) if v is not None)
    assert hint.remaining is None or hint.remaining >= 0.0
    assert all(v > 0.0 for v in (hint.limit, hint.window) if v is not None)
    assert hint.source in {"retry-after", "ratelimit", "ratelimit-draft07", "ratelimit-trio", "x-ratelimit",
                           "x-rate-limit"}


caps = st.floats(min_value=0.0, max_value=1e6)
wall_nows = st.floats(min_value=0.0, max_value=4e9)


@given(st.dictionaries(names, text_values, max_size=8), wall_nows, caps)
def test_parse_hints_is_total_on_text(headers: dict[str, str], wall_now: float, cap: float) -> None:
    assert_sane(parse_hints(headers, wall_now=wall_now, cap=cap), cap)


@given(
    st.dictionaries(
        st.one_of(names.map(lambda n: n.encode("utf-8")), st.binary(max_size=20)),
        st.one_of(text_values.map(lambda v: v.encode("utf-8")), st.binary()),
        max_size=8,
    ),
    wall_nows,
    caps,
)
def test_parse_hints_is_total_on_bytes(headers: dict[bytes, bytes], wall_now: float, cap: float) -> None:
    assert_sane(parse_hints(headers, wall_now=wall_now, cap=cap), cap)


@given(st.lists(st.tuples(names, st.lists(text_values.map(str.encode), max_size=2)), max_size=6))
def test_parse_hints_is_total_on_scrapy_style_pairs(pairs: list[tuple[str, list[bytes]]]) -> None:
    assert_sane(parse_hints(pairs, wall_now=NOW, cap=CAP), CAP)


@given(text_values, st.one_of(st.none(), text_values), wall_nows)
def test_parse_retry_after_is_total(value: str, date: str | None, wall_now: float) -> None:
    got = parse_retry_after(value, date=date, wall_now=wall_now, cap=CAP)
    assert got is None or 0.0 <= got <= CAP


@given(st.text(), wall_nows)
def test_parse_reset_is_total(value: str, wall_now: float) -> None:
    got = parse_reset(value, wall_now=wall_now, cap=CAP)
    assert got is None or 0.0 <= got <= CAP


@given(st.one_of(st.none(), st.integers(), st.text(), st.binary(), st.lists(st.tuples(st.text(), st.text())),
                 st.lists(st.lists(st.binary(), max_size=3), max_size=3)))
def test_header_items_is_total(garbage: Any) -> None:
    got = header_items(garbage)
    assert isinstance(got, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in got.items())
