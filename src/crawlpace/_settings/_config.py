"""Typed settings of a crawl, and the three ways to spell them.

Settings reach crawlpace in three forms, all ending in one frozen
:class:`Settings` object:

* Python objects: ``Settings(scope_defaults=ScopeConfig(delay=0.5), ...)``.
* Scrapy-style names (seed 001), for the Scrapy add-on and for users who know
  them: ``Settings.from_scrapy({"DOWNLOAD_DELAY": 0.5, "THROTTLING_SCOPES": {...}})``.
* A TOML file with lower-case keys, for the command line:
  ``Settings.from_toml("crawlpace.toml")``.

Every problem found is reported at once, in one :class:`ConfigError` whose
lines each name the setting as the user spelled it, the value and the fix.

The work is split by concern: :mod:`._config_types` holds the per-scope value
objects the pure core reads, :mod:`._config_checks` the checks of single
values, :mod:`._config_parse` the reading of the tree layout, and
:mod:`._config_scrapy` the Scrapy-name mapping. This module holds
:class:`Settings` and TOML reading, and re-exports the rest.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError
from .._scoping._patterns import resolve_scope
from ._config_checks import Checker, kind_of, parse_jitter
from ._config_crawl import CrawlConfig
from ._config_parse import TreeLabels, parse_tree
from ._config_scrapy import scrapy_to_tree
from ._config_types import (
    BACKOFF_JITTER,
    DEFAULT_BACKOFF_EXCEPTIONS,
    DEFAULT_BACKOFF_HTTP_CODES,
    HALF_JITTER,
    AutoThrottleConfig,
    BackoffConfig,
    BreakerConfig,
    ScopeConfig,
)

__all__ = [
    "BACKOFF_JITTER",
    "DEFAULT_BACKOFF_EXCEPTIONS",
    "DEFAULT_BACKOFF_HTTP_CODES",
    "HALF_JITTER",
    "AutoThrottleConfig",
    "BackoffConfig",
    "BreakerConfig",
    "CrawlConfig",
    "ScopeConfig",
    "Settings",
    "parse_jitter",
]


@dataclass(frozen=True, slots=True)
class Settings:
    """Every throttling setting of a crawl.

    Attributes:
        concurrent_requests: requests in flight at once across all scopes of
            this process (``CONCURRENT_REQUESTS``).
        concurrent_requests_per_ip: Scrapy's ``CONCURRENT_REQUESTS_PER_IP``:
            when above 0, each server address rather than each host is a
            scope (``manager`` is then :class:`~crawlpace.IpScopes`), and
            the scope defaults admit this many requests at once. Applied by
            :meth:`from_scrapy`, :meth:`from_dict` and :meth:`from_toml`.
        scope_defaults: settings of any scope not named in ``scopes``.
        scopes: per-scope settings, already merged over ``scope_defaults``.
        block_rules: soft-block body rules, ``REGEX[:STATUS]`` each
            (``THROTTLING_BLOCK_RULES``; see :mod:`crawlpace._responses._blocks`).
        block_defaults: add the default body rules for well-known challenge
            pages after ``block_rules`` (``THROTTLING_BLOCK_DEFAULTS``).
        learned: where learned limits are kept for a warm start, a SQLite
            file or a Redis URL (``CRAWLPACE_LEARNED``; see :mod:`crawlpace._throttle._learned`).
        crawl: the options of ``crawlpace crawl`` the file keeps (its ``[crawl]``
            table: ``deadline``, ``timeout``, ``retries``...); read by that command only.
        warm_start: the records read from ``learned`` for this run (a
            :class:`crawlpace._throttle._learned.WarmStart`), set by whoever reads
            them; new scopes' policies start from it.
    """

    concurrent_requests: int = 16
    concurrent_requests_per_ip: int = 0
    scope_defaults: ScopeConfig = field(default_factory=ScopeConfig)
    scopes: Mapping[str, ScopeConfig] = field(default_factory=dict)
    manager: str | None = None
    rampup_backoff_target: tuple[float, float] = (1.0, 1.0)
    robotstxt_obey: bool = True
    robotstxt_max_delay: float = 60.0
    redirect_max_delay: float | None = None
    delayed_requests_warn_threshold: int = 500
    autothrottle: AutoThrottleConfig = field(default_factory=AutoThrottleConfig)
    block_rules: tuple[str, ...] = ()
    block_defaults: bool = True
    learned: str | None = None
    crawl: CrawlConfig = field(default_factory=CrawlConfig)
    warm_start: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check = Checker("Settings")
        check.count("Settings.concurrent_requests", self.concurrent_requests)
        check.count("Settings.delayed_requests_warn_threshold", self.delayed_requests_warn_threshold)
        check.seconds("Settings.robotstxt_max_delay", self.robotstxt_max_delay)
        check.seconds("Settings.redirect_max_delay", self.redirect_max_delay, optional=True)
        check.coerce(self, "rampup_backoff_target", check.pair)
        # Typed callers cannot get these wrong, but untyped ones can.
        configs: list[tuple[str, object]] = [("Settings.scope_defaults", self.scope_defaults)]
        configs += [(f'Settings.scopes["{name}"]', cfg) for name, cfg in self.scopes.items()]
        for label, cfg in configs:
            if not isinstance(cfg, ScopeConfig):
                check.fail(f"{label}: expected a ScopeConfig, got {kind_of(cfg)}")
        crawl: object = self.crawl
        if not isinstance(crawl, CrawlConfig):
            check.fail(f"Settings.crawl: expected a CrawlConfig, got {kind_of(crawl)}")
        check.raise_if_any()

    def scope_config(self, scope: str) -> ScopeConfig:
        """Return the settings that apply to ``scope`` (an exact key, else a pattern; see docs/scopes.md)."""
        key = resolve_scope(self.scopes, scope)
        return self.scope_defaults if key is None else self.scopes[key]

    @classmethod
    def from_scrapy(cls, settings: Mapping[str, Any]) -> Settings:
        """Build settings from seed 001's Scrapy-style names.

        Keys that are not throttling settings are ignored, so a whole Scrapy
        settings object can be passed; a key that looks like one of ours
        (``THROTTLING_*``, ``BACKOFF_*``, ``RAMPUP_*``, ``AUTOTHROTTLE_*``) but
        is unknown is an error, with a suggestion.

        Raises:
            ConfigError: listing every invalid setting.
        """
        if not isinstance(settings, Mapping):  # a list of pairs, a string...: say so, not AttributeError
            raise ConfigError([f"settings: expected a mapping of setting names to values, got "
                               f"{type(settings).__name__} {repr(settings)[:80]}; give a dict "
                               "such as {'DOWNLOAD_DELAY': 1.0} (dict(pairs) makes one of a list of pairs)"])
        tree, labels, problems = scrapy_to_tree(settings)
        return cls(**parse_tree(tree, labels, problems))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "") -> Settings:
        """Build settings from the lower-case layout of the TOML file.

        Raises:
            ConfigError: listing every invalid setting.
        """
        if not isinstance(data, Mapping):
            raise ConfigError([f"{source or 'settings'}: expected a mapping (the TOML file's layout), got "
                               f"{type(data).__name__}; give a dict such as {{'concurrent_requests': 8}}"])
        return cls(**parse_tree(data, TreeLabels(source)))

    @classmethod
    def from_toml(cls, path: str | Path) -> Settings:
        """Read a TOML settings file (see docs/settings.md for its layout).

        Raises:
            ConfigError: when the file cannot be read or parsed, or holds
                invalid settings.
        """
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError([f"{path}: cannot read the settings file ({exc.strerror})"]) from exc
        except UnicodeDecodeError as exc:
            line = exc.object[:exc.start].count(b"\n") + 1
            raise ConfigError([f"{path}: line {line} is not UTF-8 text (byte {exc.object[exc.start]:#04x}); "
                               "TOML files are UTF-8: save the file as UTF-8"]) from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError([f"{path}: not valid TOML ({exc}); fix the syntax"]) from exc
        return cls.from_dict(data, source=f"{path}: ")

    def inactive(self) -> list[str]:
        """Name the settings that are set but have no effect where they would apply.

        AutoThrottle does not steer a scope with rampup on (rampup has its own
        latency rule); the throttler warns about each such scope once.
        """
        if not self.autothrottle.enabled:
            return []
        configs = [("the scope defaults", self.scope_defaults)]
        configs += [(f"scope {name!r}", cfg) for name, cfg in self.scopes.items()]
        return [f"AUTOTHROTTLE_ENABLED for {where}, which has rampup on: rampup sets its delay instead"
                for where, cfg in configs if cfg.rampup]

    def is_explicit(self, scope: str) -> bool:
        """True when ``THROTTLING_SCOPES`` sets ``scope``'s concurrency or delay.

        Such settings win over a robots.txt Crawl-Delay. A scope listed only for
        other keys (a quota, say) keeps the defaults' rate and so takes the
        Crawl-Delay.
        """
        key = resolve_scope(self.scopes, scope)
        if key is None:
            return False
        cfg = self.scopes[key]
        base = self.scope_defaults
        return (cfg.concurrency, cfg.delay, cfg.delay_per_slot) != \
            (base.concurrency, base.delay, base.delay_per_slot)
