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
from crawlpace._redact import MASK, redact
from crawlpace._responses._headers import parse_hints
from crawlpace._robotstxt._robots import MAX_ROBOTS_BYTES, RobotsRules, crawl_delay
from crawlpace._scoping._fetchable import fetchable_scope
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

# A password of any characters a URL's user info can hold as typed (not "/" or "\\", which end it;
# not a line break, which parsers drop) and the form it is given in.
_PASSWORD = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="/\\\n\r"),
                    min_size=4, max_size=16)
_FORMS = ("redis://:{p}@h:1/0", "redis://user:{p}@h", "redis:/:{p}@h/0", "rediss:///:{p}@h",
          "<Store 'redis://:{p}@h' ns='x'>", "redis://h/0?password={q}", "redis://h/0?db=1&password={q}&x=1",
          "'redis://h?password={q}'", "store redis://:{p}@h:1: cannot be reached: Error 111")


def _password(value: tuple[str, str]) -> None:
    """No typed form of a password shows it once masked (issue 31: <, >, quotes, one slash)."""
    password, form = value
    query = "".join(ch for ch in password if ch not in "&# \t\f\v") .rstrip("'\")>]}")
    text = form.format(p=password, q=query)
    secret = query if "{q}" in form else password
    if len(secret) < 4 or secret.strip() != secret or text.count(secret) != form.count("{"):
        return
    shown = redact(text)
    if secret in shown:
        raise AssertionError(f"redact({text!r}) shows the password: {shown!r}")


_LIST_LINES = ["ftp://127.0.0.1/x", "http://127.0.0.2:9/x", "http://127.0.0.3:9/y", "mailto:a@b",
               "http://[::1", "http://127.0.0.1:99999/x", "http://0x7f.1/x", "", "# comment", "  ",
               "not a url",
               "http://127.0.0.2:9/robots.txt", "https://127.0.0.4:9/z"]
_LISTS = st.tuples(st.lists(st.tuples(st.sampled_from(_LIST_LINES), st.integers(0, 40)), max_size=40),
                   st.integers(1, 30))


def _url_list(value: tuple[list[tuple[str, int]], int]) -> None:
    """A crawl of any URL list (unfetchable, dead hosts, numeric hosts) ends with one line per URL."""
    import asyncio
    import json
    import tempfile
    from pathlib import Path

    from crawlpace.crawl import CrawlJob, CrawlOptions

    lines, memory = value
    urls = [f"{line}/{n}" if line.startswith(("http", "ftp")) else line for line, n in lines]
    wanted = {url.strip() for url in urls if url.strip() and not url.strip().startswith("#")}
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 0.0, "RANDOMIZE_DOWNLOAD_DELAY": False,
                                     "BACKOFF_MIN_DELAY": 0.01, "BACKOFF_MAX_DELAY": 0.02})
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "out.jsonl"
        job = CrawlJob(settings, CrawlOptions(output=output, trust_env=False, max_in_memory=memory,
                                              timeout=2.0, deadline=3.0, retries=1))
        asyncio.run(asyncio.wait_for(job.run(urls), 60))
        written = [json.loads(line)["url"] for line in output.read_text(encoding="utf-8").splitlines()]
    assert sorted(written) == sorted(wanted), (sorted(written), sorted(wanted))


#: name -> (strategy, check): every parser a user or a server can feed.
TARGETS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]] = {
    "robots.txt": (_ROBOTS, _robots),
    "scrapy settings": (_SCRAPY, _scrapy_settings),
    "toml settings": (_TOML, _toml),
    "farm files": (_FARM, _farm),
    "urls and store urls": (_URLS, _url),
    "response headers": (_HEADERS, _headers),
    "password forms": (st.tuples(_PASSWORD, st.sampled_from(_FORMS)), _password),
    "url lists": (_LISTS, _url_list),
}
