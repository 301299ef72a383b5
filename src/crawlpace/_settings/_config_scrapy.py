"""Seed 001's Scrapy-style setting names, mapped onto the settings tree.

``DOWNLOAD_DELAY``, ``THROTTLING_SCOPES`` and the rest are rearranged into
the TOML layout that :mod:`crawlpace._settings._config_parse` reads, and messages name
each setting the way the Scrapy user wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._config_parse import TreeLabels
from ._names import misspelt_name, unknown_name

__all__ = ["ScrapyLabels", "scrapy_to_tree"]


# Where each Scrapy name lands in the tree: (section, key). Section "" is the
# top level, "scope" the scope defaults, "backoff" the default backoff.
_SCRAPY_NAMES: dict[str, tuple[str, str]] = {
    "CONCURRENT_REQUESTS": ("", "concurrent_requests"),
    "CONCURRENT_REQUESTS_PER_DOMAIN": ("scope", "concurrency"),
    "CONCURRENT_REQUESTS_PER_IP": ("", "concurrent_requests_per_ip"),
    "DOWNLOAD_DELAY": ("scope", "delay"),
    "DOWNLOAD_DELAY_PER_SLOT": ("scope", "delay_per_slot"),
    "RANDOMIZE_DOWNLOAD_DELAY": ("scope", "jitter"),
    "THROTTLING_WINDOW": ("scope", "window"),
    "THROTTLING_SCOPE_MANAGER": ("scope", "manager"),
    "THROTTLING_SCOPES": ("", "scopes"),
    "THROTTLING_SCOPE_DEFAULTS": ("", "scope_defaults"),
    "THROTTLING_MANAGER": ("", "manager"),
    "THROTTLING_BLOCK_RULES": ("", "block_rules"),
    "THROTTLING_BLOCK_DEFAULTS": ("", "block_defaults"),
    "CRAWLPACE_LEARNED": ("", "learned"),
    "THROTTLING_ROBOTSTXT_OBEY": ("", "robotstxt_obey"),
    "THROTTLING_ROBOTSTXT_MAX_DELAY": ("", "robotstxt_max_delay"),
    "RAMPUP_BACKOFF_TARGET": ("", "rampup_backoff_target"),
    "RAMPUP_MIN_DELAY": ("scope", "rampup_min_delay"),
    "RAMPUP_MAX_CONCURRENCY": ("scope", "rampup_max_concurrency"),
    "THROTTLING_GRADUAL_SLOTS": ("scope", "gradual_slots"),
    "REDIRECT_MAX_DELAY": ("", "redirect_max_delay"),
    "DELAYED_REQUESTS_WARN_THRESHOLD": ("", "delayed_requests_warn_threshold"),
    "BACKOFF_HTTP_CODES": ("backoff", "http_codes"),
    "BACKOFF_EXCEPTIONS": ("backoff", "exceptions"),
    "BACKOFF_DELAY_FACTOR": ("backoff", "delay_factor"),
    "BACKOFF_MIN_DELAY": ("backoff", "min_delay"),
    "BACKOFF_MAX_DELAY": ("backoff", "max_delay"),
    "BACKOFF_JITTER": ("backoff", "jitter"),
    "BACKOFF_CONCURRENCY_FACTOR": ("backoff", "concurrency_factor"),
    "BACKOFF_WINDOW": ("backoff", "window"),
    "BREAKER_ENABLED": ("breaker", "enabled"),
    "BREAKER_WINDOW": ("breaker", "window"),
    "BREAKER_ERROR_SHARE": ("breaker", "error_share"),
    "BREAKER_MIN_REQUESTS": ("breaker", "min_requests"),
    "BREAKER_PAUSE": ("breaker", "pause"),
    "BREAKER_GIVE_UP_AFTER": ("breaker", "give_up_after"),
    "AUTOTHROTTLE_ENABLED": ("autothrottle", "enabled"),
    "AUTOTHROTTLE_START_DELAY": ("autothrottle", "start_delay"),
    "AUTOTHROTTLE_MAX_DELAY": ("autothrottle", "max_delay"),
    "AUTOTHROTTLE_TARGET_CONCURRENCY": ("autothrottle", "target_concurrency"),
    "AUTOTHROTTLE_DEBUG": ("autothrottle", "debug"),
}
_SCRAPY_BY_PATH = {path: name for name, path in _SCRAPY_NAMES.items()}
_SCOPE_TOP = {key: name for name, (section, key) in _SCRAPY_NAMES.items() if section == "scope"}
_OUR_PREFIXES = ("THROTTLING_", "BACKOFF_", "BREAKER_", "RAMPUP_", "AUTOTHROTTLE_")


class ScrapyLabels(TreeLabels):
    """Names settings the way Scrapy users wrote them (``THROTTLING_SCOPES["a"]``).

    A scope default may come from a plain Scrapy setting (``DOWNLOAD_DELAY``)
    or from ``THROTTLING_SCOPE_DEFAULTS``; messages use whichever was written.
    """

    def __init__(self) -> None:
        super().__init__()
        self.explicit: set[str] = set()
        # Keys of each sub-table given inside THROTTLING_SCOPE_DEFAULTS.
        self.explicit_sub: dict[str, set[str]] = {"backoff": set(), "breaker": set()}

    def top(self, key: str) -> str:
        return _SCRAPY_BY_PATH.get(("", key), key)

    def scope(self, name: str | None, key: str | None = None) -> str:
        if name is None:
            if key is None or key in self.explicit or ("scope", key) not in _SCRAPY_BY_PATH:
                base = "THROTTLING_SCOPE_DEFAULTS"
                return base if key is None else f'{base}["{key}"]'
            return _SCRAPY_BY_PATH[("scope", key)]
        base = f'THROTTLING_SCOPES["{name}"]'
        return base if key is None else f'{base}["{key}"]'

    def sub(self, section: str, name: str | None, key: str | None = None) -> str:
        if name is None and key is not None and key not in self.explicit_sub[section]:
            return _SCRAPY_BY_PATH[(section, key)]
        base = self.scope(name, section)
        return base if key is None else f'{base}["{key}"]'

    def autothrottle(self, key: str | None = None) -> str:
        if key is None:
            return "AUTOTHROTTLE_*"
        return _SCRAPY_BY_PATH.get(("autothrottle", key), key)


def scrapy_to_tree(settings: Mapping[Any, Any]) -> tuple[dict[str, Any], ScrapyLabels, list[str]]:
    """Rearrange Scrapy names into the TOML layout; flag our unknown names."""
    tree: dict[str, Any] = {}
    scope: dict[str, Any] = {}
    subs: dict[str, dict[str, Any]] = {"backoff": {}, "breaker": {}}
    autothrottle: dict[str, Any] = {}
    unknown: list[str] = []
    for name, value in settings.items():
        if not isinstance(name, str):
            continue
        where = _SCRAPY_NAMES.get(name)
        if where is None:
            problem = unknown_name(name, _SCRAPY_NAMES, _SCOPE_TOP) if name.startswith(_OUR_PREFIXES) else \
                misspelt_name(name, _SCRAPY_NAMES)
            if problem is not None:
                unknown.append(problem)
            continue
        section, key = where
        target = {"": tree, "scope": scope, "autothrottle": autothrottle, **subs}[section]
        target[key] = value
    for section, values in subs.items():
        if values:
            scope[section] = values
    explicit = tree.get("scope_defaults")
    labels = ScrapyLabels()
    if isinstance(explicit, Mapping):
        # The plain Scrapy globals come first; THROTTLING_SCOPE_DEFAULTS refines them.
        labels.explicit.update(str(key) for key in explicit)
        merged = {**scope, **explicit}
        for section, values in subs.items():
            explicit_sub = explicit.get(section)
            if isinstance(explicit_sub, Mapping):
                labels.explicit_sub[section].update(str(key) for key in explicit_sub)
                merged[section] = {**values, **explicit_sub}
        tree["scope_defaults"] = merged
    elif explicit is None and scope:
        tree["scope_defaults"] = scope
    if autothrottle:
        tree["autothrottle"] = autothrottle
    return tree, labels, unknown
