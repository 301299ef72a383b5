"""Hostile input for every parser, and what each may do with it: return, or raise its documented error.

Shared by ``tests/test_fuzz.py`` (a bounded number of examples, in the test
command) and ``bench/fuzz.py`` (a long run). Each target takes one drawn value
and fails (an ``AssertionError`` or an undocumented exception escaping) when
the parser misbehaves.
"""

from __future__ import annotations

import math
import random
import tomllib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from hypothesis import strategies as st

from crawlpace import ConfigError, ScopeError, Settings
from crawlpace._fetchable import fetchable_scope
from crawlpace._headers import parse_hints
from crawlpace._redact import MASK, redact
from crawlpace._robots import MAX_ROBOTS_BYTES, RobotsRules, crawl_delay
from crawlpace.frontier._robots_cache import RobotsCache
from crawlpace.sim._spec import parse_farm
from crawlpace.stores import open_store
from crawlpace.stores._check import check_url
from crawlpace.testing import MockClock

__all__ = ["TARGETS"]

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=6)

_ROBOTS_WORDS = ["User-agent", "user-agent", "Allow", "Disallow", "Crawl-delay", "crawl-delay", "Sitemap",
                 "Request-rate", "Host", "#", ":", "*", "$", "/", "\n", "\r\n", " ", "\t", "bot", "crawlpace",
                 "-1", "1e400", "nan", "0.5", "\x00", "\ufeff", "%2F", "?", "é"]
_ROBOTS = st.one_of(
    st.binary(max_size=400),
    st.lists(st.sampled_from(_ROBOTS_WORDS), max_size=60).map(lambda words: "".join(words).encode()))

_SCRAPY_KEYS = ["DOWNLOAD_DELAY", "CONCURRENT_REQUESTS", "CONCURRENT_REQUESTS_PER_DOMAIN",
                "THROTTLING_SCOPES", "BACKOFF_HTTP_CODES", "BACKOFF_MAX_DELAY", "RAMPUP_BACKOFF_TARGET",
                "RANDOMIZE_DOWNLOAD_DELAY",
                "AUTOTHROTTLE_ENABLED", "THROTTLING_WINDOW", "BREAKER_PAUSE", "THROTTLING_ROBOTSTXT_OBEY",
                "BACKOFF_EXCEPTIONS", "THROTTLING_MANAGER", "THROTTLING_BOGUS", "USER_AGENT"]
_SCRAPY = st.one_of(_VALUES, st.dictionaries(st.sampled_from(_SCRAPY_KEYS), _VALUES, max_size=5))

_TOML_WORDS = ["concurrent_requests", "[scope_defaults]", "[scopes.\"a\"]", "delay", "=", "1", "-1", "0.5",
               "true", "\"x\"", "[1, 2]", "{ a = 1 }", "\n", "backoff", "[scope_defaults.backoff]",
               "concurrency", "jitter", "inf", "nan", "max_delay", "\"", "[", "]"]
_TOML = st.lists(st.sampled_from(_TOML_WORDS), max_size=40).map(" ".join)

_FARM_KEYS = ["name", "profile", "rate", "burst", "pages", "delay", "limit", "window", "status", "embargo",
              "bogus"]
_FARM = st.one_of(_VALUES, st.fixed_dictionaries({"site": st.lists(
    st.dictionaries(st.sampled_from(_FARM_KEYS), st.one_of(
        _SCALARS, st.sampled_from(["ratelimit", "crawldelay", "dead", "headers", "retryafter", "nope"]))),
    max_size=3)}))

_URL_PARTS = ["http://", "https://", "ftp://", "redis://", "rediss://", "unix://", "mailto:", "//", ":", "@",
              "[", "]", "::1", "127.0.0.1", "example.com", "ex ample", ":6379", ":99999", ":-1", ":x", "/0",
              "/a", "?namespace=x", "?namspace=y", "&password=z", "#", "%", "%zz", "é", "\x00", "\n", "",
              "user:pw@", "user:s3cr3t@", ":t0k3n@", "'", "\""]
_URLS = st.one_of(st.text(max_size=40), st.lists(st.sampled_from(_URL_PARTS), max_size=8).map("".join))

_HEADER_NAMES = ["retry-after", "ratelimit", "ratelimit-policy", "ratelimit-remaining", "ratelimit-reset",
                 "ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "date", "x"]
_HEADERS = st.dictionaries(st.sampled_from(_HEADER_NAMES), st.one_of(st.text(max_size=30), st.sampled_from(
    ["0", "-1", "1e309", "nan", "Wed, 21 Oct 2015 07:28:00 GMT", "limit=10, remaining=0, reset=5",
     "\"default\";r=0;t=10", "10;w=60"])), max_size=5)


def _documented(exc: ConfigError) -> None:
    """A settings error must list its problems, each a line of text."""
    if not exc.problems or not all(isinstance(problem, str) and problem for problem in exc.problems):
        raise AssertionError(f"a ConfigError without usable problem lines: {exc.problems!r}")


def _robots(body: bytes) -> None:
    rules = RobotsRules.parse(body, "crawlpace/1.0")
    for url in ("http://a/", "http://a/x?y", "http://a/%2F", "http://a/é"):
        assert isinstance(rules.allowed(url), bool)
    delay = crawl_delay(body, "crawlpace")
    assert delay is None or (math.isfinite(delay) and delay >= 0.0)
    cache = RobotsCache("crawlpace")
    for status in (None, 200, 404, 503):
        settled = cache.settle("http://a", status, body, 0.0)
        assert isinstance(settled.crawl_delay_changed, bool)
    assert len(body) <= MAX_ROBOTS_BYTES or rules.note == "truncated"


def _scrapy_settings(value: Any) -> None:
    try:
        Settings.from_scrapy(value)
    except ConfigError as exc:
        _documented(exc)


def _toml(text: str) -> None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    try:
        Settings.from_dict(data)
    except ConfigError as exc:
        _documented(exc)


def _farm(value: Any) -> None:
    try:
        parse_farm(value)
    except ConfigError as exc:
        _documented(exc)


def _url(url: str) -> None:
    try:
        scope = fetchable_scope(url)
    except ScopeError:
        pass
    else:
        assert scope
    problems = check_url(url)
    assert all(isinstance(problem, str) for problem in problems)
    try:
        open_store(url, Settings(), MockClock(), random.Random(0))
    except ConfigError as exc:
        _documented(exc)
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password and len(password) >= 4 and url.count(password) == 1:
        shown = redact(url)
        if password in shown:
            raise AssertionError(f"redact({url!r}) shows the password: {shown!r}")
        assert MASK in shown


def _headers(headers: dict[str, str]) -> None:
    hint = parse_hints(headers, wall_now=1_700_000_000.0, cap=300.0)
    if hint is not None and hint.retry_after is not None:
        assert 0.0 <= hint.retry_after <= 300.0


#: name -> (strategy, check): every parser a user or a server can feed.
TARGETS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]] = {
    "robots.txt": (_ROBOTS, _robots),
    "scrapy settings": (_SCRAPY, _scrapy_settings),
    "toml settings": (_TOML, _toml),
    "farm files": (_FARM, _farm),
    "urls and store urls": (_URLS, _url),
    "response headers": (_HEADERS, _headers),
}
