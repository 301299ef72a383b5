"""Scopes: the per-host default, request meta forms, managers and their helpers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from crawlpace import (
    ScopeError,
    ThrottlingManager,
    ThrottlingManagerProtocol,
    add_scope,
    host_scope,
    normalize_scopes,
    scope_cache,
)
from crawlpace._scoping._scopes import ScopesSpec


@pytest.mark.parametrize(("url", "scope"), [
    ("https://books.toscrape.com/catalogue/page-2.html", "books.toscrape.com"),
    ("https://toscrape.com/", "toscrape.com"),
    ("HTTP://Books.ToScrape.COM:8080/x", "books.toscrape.com"),
    ("https://bücher.example/", "xn--bcher-kva.example"),
    ("https://[::1]:8000/", "::1"),
    ("http://127.0.0.2:8001/robots.txt", "127.0.0.2"),
    ("https://user:pw@api.example/v1?q=1", "api.example"),
])
def test_default_scope_is_the_host(url: str, scope: str) -> None:
    assert host_scope(url) == scope


@pytest.mark.parametrize("url", ["not a url", "mailto:someone", "https:///path-only"])
def test_url_without_host_is_an_error(url: str) -> None:
    with pytest.raises(ScopeError, match="has no host"):
        host_scope(url)


def test_unreadable_url_is_an_error() -> None:
    with pytest.raises(ScopeError, match="cannot read a host"):
        host_scope("http://[::1/")


@pytest.mark.parametrize(("spec", "demands"), [
    ("api", (("api", 1.0),)),
    ({"api", "users"}, (("api", 1.0), ("users", 1.0))),
    (["api", "api", "users"], (("api", 2.0), ("users", 1.0))),
    ({"api": 2.5, "cost": 0}, (("api", 2.5), ("cost", 0.0))),
])
def test_scope_forms(spec: object, demands: tuple[tuple[str, float], ...]) -> None:
    assert sorted(normalize_scopes(spec)) == sorted(demands)


@pytest.mark.parametrize(("spec", "message"), [
    ("", "an empty string is not a scope name"),
    (set(), "at least one scope"),
    ({"api": -1}, r"throttling_scopes\['api'\]: expected quota use must be a finite number >= 0"),
    ({"api": float("nan")}, "expected quota use must be a finite number"),
    ({"api": True}, "expected quota use must be a finite number"),
    ({"": 1.0}, "scope names must be non-empty strings"),
    ([1, 2], "scope names must be non-empty strings, got 1"),
    (42, "expected a string, a set of strings or a dict"),
    (b"api", "expected a string, a set of strings or a dict"),
])
def test_bad_scope_forms(spec: object, message: str) -> None:
    with pytest.raises(ScopeError, match=message):
        normalize_scopes(spec)


def test_add_scope_keeps_the_form_and_the_argument() -> None:
    original = "api.example"
    assert add_scope(original, "example.com") == {"api.example", "example.com"}
    names = {"a", "b"}
    assert add_scope(names, "c") == {"a", "b", "c"}
    assert names == {"a", "b"}
    uses = {"api": 2.0}
    assert add_scope(uses, "cost", 3.5) == {"api": 2.0, "cost": 3.5}
    assert add_scope(uses, "other") == {"api": 2.0, "other": 1.0}
    assert uses == {"api": 2.0}
    assert add_scope("api", "cost", 0.5) == {"api": 1.0, "cost": 0.5}


@dataclass
class Request:
    url: str
    meta: dict[str, Any] = field(default_factory=dict)


async def test_default_manager_prefers_meta_scopes() -> None:
    manager = ThrottlingManager()
    assert isinstance(manager, ThrottlingManagerProtocol)
    assert await manager.get_scopes("https://Example.com/x") == "example.com"
    assert await manager.get_scopes(Request("https://example.com/")) == "example.com"
    req = Request("https://api.example/users", meta={"throttling_scopes": {"api", "users"}})
    assert await manager.get_scopes(req) == {"api", "users"}


async def test_scope_cache_computes_once_per_request() -> None:
    calls: list[object] = []

    class Manager(ThrottlingManager):
        @scope_cache
        async def get_scopes(self, request: Any) -> ScopesSpec:
            calls.append(request)
            return add_scope(await super().get_scopes(request), "extra")

    manager = Manager()
    req = Request("https://api.example/")
    first = await manager.get_scopes(req)
    second = await manager.get_scopes(req)
    assert first == second == {"api.example", "extra"}
    assert len(calls) == 1
    # Plain URL strings are cached by value.
    await manager.get_scopes("https://x.example/")
    await manager.get_scopes("https://x.example/")
    assert len(calls) == 2
    # Another request object is computed afresh.
    await manager.get_scopes(Request("https://api.example/"))
    assert len(calls) == 3


META = {"not": "a manager"}


class HostAndTagManager:
    """Used by the THROTTLING_MANAGER test through its import path."""

    async def get_scopes(self, request: Any) -> ScopesSpec:
        return {host_scope(str(request)), "tag"}


async def test_throttling_manager_setting_is_loaded() -> None:
    from crawlpace import ConfigError, Throttler

    async with Throttler({"THROTTLING_MANAGER": "tests.test_scopes.HostAndTagManager",
                          "DOWNLOAD_DELAY": 0}) as throttler, throttler.slot("https://a.example/") as permit:
        assert permit.scopes == ("a.example", "tag")
    with pytest.raises(ConfigError, match=r"THROTTLING_MANAGER: cannot import 'tests\.nowhere\.Manager'"):
        Throttler({"THROTTLING_MANAGER": "tests.nowhere.Manager"})
    with pytest.raises(ConfigError, match=r"cannot create 'tests\.test_scopes\.Request' without arguments"):
        Throttler({"THROTTLING_MANAGER": "tests.test_scopes.Request"})
    with pytest.raises(ConfigError, match="has no get_scopes"):
        Throttler({"THROTTLING_MANAGER": "tests.test_scopes.META"})


async def test_scope_cache_is_per_manager_instance() -> None:
    class Manager:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        @scope_cache
        async def get_scopes(self, request: Any) -> ScopesSpec:
            return self.tag

    first, second = Manager("a"), Manager("b")
    assert await first.get_scopes("https://x.example/") == "a"
    assert await second.get_scopes("https://x.example/") == "b"


def test_set_scopes_have_a_stable_order() -> None:
    assert normalize_scopes({"b", "c", "a"}) == (("a", 1.0), ("b", 1.0), ("c", 1.0))
    assert normalize_scopes(["c", "a"]) == (("c", 1.0), ("a", 1.0))  # lists keep their order
