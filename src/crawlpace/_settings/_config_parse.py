"""Reading a settings tree (the lower-case layout of the TOML file) into typed values.

The Scrapy-style names are first rearranged into this layout
(:mod:`crawlpace._settings._config_scrapy`), so one parser serves both spellings; only
the labels that name a setting in messages differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, replace
from typing import Any, TypeVar

from .._exceptions import ConfigError
from .._responses._blocks import parse_block_rules
from ._config_checks import Checker, kind_of
from ._config_crawl import CRAWL_KEYS, CrawlConfig, crawl_problems
from ._config_types import AutoThrottleConfig, BackoffConfig, BreakerConfig, ScopeConfig

__all__ = ["TreeLabels", "parse_tree"]

T = TypeVar("T")


class TreeLabels:
    """Names settings by their path in the TOML layout (``scopes."a.b".delay``)."""

    def __init__(self, source: str = "") -> None:
        self.source = source

    def top(self, key: str) -> str:
        return f"{self.source}{key}"

    def scope(self, name: str | None, key: str | None = None) -> str:
        base = f'{self.source}scopes."{name}"' if name is not None else f"{self.source}scope_defaults"
        return base if key is None else f"{base}.{key}"

    def sub(self, section: str, name: str | None, key: str | None = None) -> str:
        """Name a key of a scope's sub-table (``backoff`` or ``breaker``)."""
        base = self.scope(name, section)
        return base if key is None else f"{base}.{key}"

    def autothrottle(self, key: str | None = None) -> str:
        return self.top("autothrottle") if key is None else self.top(f"autothrottle.{key}")


_TOP_KEYS = frozenset({
    "concurrent_requests", "concurrent_requests_per_ip", "scope_defaults", "scopes", "manager",
    "rampup_backoff_target",
    "robotstxt_obey", "robotstxt_max_delay", "redirect_max_delay",
    "delayed_requests_warn_threshold", "autothrottle", "block_rules", "block_defaults", "learned",
    "crawl",
})
_SCOPE_KEYS = frozenset(f.name for f in fields(ScopeConfig))
_BACKOFF_KEYS = frozenset(f.name for f in fields(BackoffConfig))
_BREAKER_KEYS = frozenset(f.name for f in fields(BreakerConfig))
_AUTOTHROTTLE_KEYS = frozenset(f.name for f in fields(AutoThrottleConfig))


def parse_tree(tree: Mapping[str, Any], labels: TreeLabels, problems: Iterable[str] = ()) -> dict[str, Any]:
    """Check a settings tree and return the keyword arguments of ``Settings``.

    Raises:
        ConfigError: listing every problem found.
    """
    check = Checker()
    check.problems.extend(problems)
    check.keys(labels.source.rstrip(": ") or "settings", tree, _TOP_KEYS)
    top: dict[str, Any] = {}

    def take(key: str, parse: Callable[[str, object], T | None]) -> None:
        if key in tree:
            parsed = parse(labels.top(key), tree[key])
            if parsed is not None:
                top[key] = parsed

    take("concurrent_requests", check.count)
    take("rampup_backoff_target", check.pair)
    take("robotstxt_max_delay", check.seconds)
    take("delayed_requests_warn_threshold", check.count)
    take("robotstxt_obey", check.flag)
    take("block_defaults", check.flag)
    take("manager", check.import_path)
    per_ip = _per_ip(check, labels, tree, top)
    if tree.get("learned") is not None:
        learned = tree["learned"]
        if isinstance(learned, str) and learned.strip():
            top["learned"] = learned
        else:
            check.fail(f"{labels.top('learned')}: expected a SQLite file path or a redis:// URL, got "
                       f"{kind_of(learned)}; e.g. 'learned.sqlite'")
    if "block_rules" in tree:
        try:
            top["block_rules"] = parse_block_rules(labels.top("block_rules"), tree["block_rules"])
        except ConfigError as exc:
            check.problems.extend(exc.problems)
    if tree.get("redirect_max_delay") is not None:
        take("redirect_max_delay", check.seconds)

    defaults = ScopeConfig()
    raw_defaults = tree.get("scope_defaults")
    if raw_defaults is not None:
        data = check.mapping(labels.scope(None), raw_defaults)
        if data is not None:
            defaults = _parse_scope(check, labels, None, data, ScopeConfig()) or defaults
    if per_ip:
        defaults = replace(defaults, concurrency=per_ip)
    scopes: dict[str, ScopeConfig] = {}
    raw_scopes = tree.get("scopes")
    if raw_scopes is not None:
        table = check.mapping(labels.top("scopes"), raw_scopes)
        for name, raw in (table or {}).items():
            if not isinstance(name, str) or not name.strip():
                check.fail(f"{labels.top('scopes')}: scope names must be non-empty strings, "
                           f"got {kind_of(name)}")
                continue
            data = check.mapping(labels.scope(name), raw)
            if data is not None:
                parsed = _parse_scope(check, labels, name, data, defaults)
                if parsed is not None:
                    scopes[name] = parsed
    autothrottle = AutoThrottleConfig()
    if "autothrottle" in tree:
        data = check.mapping(labels.autothrottle(), tree["autothrottle"])
        if data is not None:
            autothrottle = _parse_autothrottle(check, labels, data)
    if "crawl" in tree:
        data = check.mapping(labels.top("crawl"), tree["crawl"])
        if data is not None:
            check.keys(labels.top("crawl"), data, CRAWL_KEYS)
            problems = crawl_problems(data, labels.top("crawl."))
            check.problems.extend(problems)
            if not problems and set(data) <= CRAWL_KEYS:
                top["crawl"] = CrawlConfig(**data)
    check.raise_if_any()
    return {"scope_defaults": defaults, "scopes": scopes, "autothrottle": autothrottle, **top}


#: The manager that scopes requests by server address, as ``CONCURRENT_REQUESTS_PER_IP`` asks.
IP_MANAGER = "crawlpace.IpScopes"


def _per_ip(check: Checker, labels: TreeLabels, tree: Mapping[str, Any], top: dict[str, Any]) -> int:
    """``concurrent_requests_per_ip`` (Scrapy's ``CONCURRENT_REQUESTS_PER_IP``): 0, or scope by address.

    As in Scrapy (seed 000), a non-zero value makes each server address,
    not each domain, the unit of concurrency: requests are scoped by
    :class:`~crawlpace.IpScopes` (what ``--scope-by ip`` does) and every
    scope admits that many at once. A ``manager`` decides the scopes
    itself, so the two together are refused.
    """
    key = "concurrent_requests_per_ip"
    if key not in tree:
        return 0
    label = labels.top(key)
    per_ip = check.count(label, tree[key], example="2", minimum=0)
    if not per_ip:
        return 0
    top[key] = per_ip
    if tree.get("manager") is not None:
        check.fail(f"{label}: {per_ip} has no effect beside {labels.top('manager')}, which decides the "
                   f"scopes; remove one of them ({labels.top('manager')} = {IP_MANAGER!r} with "
                   f"{labels.scope(None, 'concurrency')} = {per_ip} does the same)")
        return 0
    top["manager"] = IP_MANAGER
    return per_ip


def _parse_fields(data: Mapping[str, Any], parsers: Mapping[str, Callable[[str, object], Any]],
                  label: Callable[[str], str]) -> dict[str, Any]:
    """Run each field's parser on the keys present; keep the values that passed."""
    values: dict[str, Any] = {}
    for key, parse in parsers.items():
        if key in data:
            parsed = parse(label(key), data[key])
            if parsed is not None:
                values[key] = parsed
    return values


def _parse_scope(check: Checker, labels: TreeLabels, name: str | None,
                 data: Mapping[str, Any], base: ScopeConfig) -> ScopeConfig | None:
    before = len(check.problems)
    check.keys(labels.scope(name), data, _SCOPE_KEYS)
    values: dict[str, Any] = {}
    parsers: dict[str, Callable[[str, object], Any]] = {
        "concurrency": check.count,
        "delay": check.seconds,
        "delay_per_slot": check.seconds,
        "jitter": check.jitter,
        "rampup": check.flag,
        "rampup_min_delay": check.seconds,
        "rampup_max_concurrency": check.count,
        "ignore_robots_txt": check.flag,
        "gradual_slots": check.flag,
        "manager": check.import_path,
        "window": check.window,
        "quota": lambda label, v: None if v is None else check.number(label, v, example="500.0",
                                                                     positive=True),
    }
    values.update(_parse_fields(data, parsers, lambda key: labels.scope(name, key)))
    if "backoff" in data:
        raw = check.mapping(labels.sub("backoff", name), data["backoff"])
        if raw is not None:
            backoff = _parse_backoff(check, labels, name, raw, base.backoff)
            if backoff is not None:
                values["backoff"] = backoff
    if "breaker" in data:
        raw = check.mapping(labels.sub("breaker", name), data["breaker"])
        if raw is not None:
            breaker = _parse_breaker(check, labels, name, raw, base.breaker)
            if breaker is not None:
                values["breaker"] = breaker
    if len(check.problems) > before:
        return None
    return replace(base, **values)


def _parse_breaker(check: Checker, labels: TreeLabels, name: str | None,
                   data: Mapping[str, Any], base: BreakerConfig) -> BreakerConfig | None:
    parsers: dict[str, Callable[[str, object], Any]] = {
        "enabled": check.flag,
        "window": check.window,
        "error_share": check.share,
        "min_requests": lambda label, v: check.count(label, v, example="5"),
        "pause": check.seconds,
        "give_up_after": lambda label, v: check.count(label, v, example="5", minimum=0),
    }
    values = _parse_sub(check, labels, "breaker", name, data, _BREAKER_KEYS, parsers)
    return None if values is None else replace(base, **values)


def _parse_sub(check: Checker, labels: TreeLabels, section: str, name: str | None,
               data: Mapping[str, Any], keys: frozenset[str],
               parsers: Mapping[str, Callable[[str, object], Any]]) -> dict[str, Any] | None:
    """Check a scope's sub-table (``backoff``, ``breaker``); ``None`` if it had problems."""
    before = len(check.problems)
    check.keys(labels.sub(section, name), data, keys)
    values = _parse_fields(data, parsers, lambda key: labels.sub(section, name, key))
    return None if len(check.problems) > before else values


def _parse_backoff(check: Checker, labels: TreeLabels, name: str | None,
                   data: Mapping[str, Any], base: BackoffConfig) -> BackoffConfig | None:
    parsers: dict[str, Callable[[str, object], Any]] = {
        "http_codes": check.codes,
        "exceptions": check.exceptions,
        "delay_factor": lambda label, v: check.number(label, v, example="2.0"),
        "min_delay": check.seconds,
        "max_delay": check.seconds,
        "window": check.window,
        "concurrency_factor": lambda label, v: check.number(label, v, example="0.5", positive=True),
        "jitter": check.jitter,
    }
    values = _parse_sub(check, labels, "backoff", name, data, _BACKOFF_KEYS, parsers)
    if values is None:
        return None
    before = len(check.problems)
    merged = {f.name: values.get(f.name, getattr(base, f.name)) for f in fields(BackoffConfig)}
    check.backoff_relations(lambda key: labels.sub("backoff", name, key), merged, labels.source)
    if len(check.problems) > before:
        return None
    return replace(base, **values)


def _parse_autothrottle(check: Checker, labels: TreeLabels,
                        data: Mapping[str, Any]) -> AutoThrottleConfig:
    check.keys(labels.autothrottle(), data, _AUTOTHROTTLE_KEYS)
    values: dict[str, Any] = {}
    parsers: dict[str, Callable[[str, object], Any]] = {
        "enabled": check.flag,
        "debug": check.flag,
        "start_delay": check.seconds,
        "max_delay": check.seconds,
        "target_concurrency": lambda label, v: check.number(label, v, example="1.0", positive=True),
    }
    values.update(_parse_fields(data, parsers, labels.autothrottle))
    return AutoThrottleConfig(**values)
