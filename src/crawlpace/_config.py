"""Typed settings, their validation, and the two ways to spell them.

Settings reach crawlpace in three forms, all ending in one frozen
:class:`Settings` object:

* Python objects: ``Settings(scope_defaults=ScopeConfig(delay=0.5), ...)``.
* Scrapy-style names (seed 001), for the Scrapy add-on and for users who know
  them: ``Settings.from_scrapy({"DOWNLOAD_DELAY": 0.5, "THROTTLING_SCOPES": {...}})``.
* A TOML file with lower-case keys, for the command line:
  ``Settings.from_toml("crawlpace.toml")``.

Every problem found is reported at once, in one :class:`ConfigError` whose
lines each name the setting as the user spelled it, the value and the fix.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from ._exceptions import ConfigError
from ._jitter import NO_JITTER, Jitter

__all__ = [
    "AutoThrottleConfig",
    "BackoffConfig",
    "BreakerConfig",
    "ScopeConfig",
    "Settings",
    "parse_jitter",
]

T = TypeVar("T")

HALF_JITTER = Jitter(-0.5, 0.5)
BACKOFF_JITTER = Jitter(-0.1, 0.1)
DEFAULT_BACKOFF_HTTP_CODES: frozenset[int] = frozenset({429, 502, 503, 504, 520, 521, 522, 523, 524})
# Timeouts and dropped connections as asyncio code and the common HTTP clients
# raise them (aiohttp's derive from the builtins already; httpx's do not). The
# client entries are skipped when that client is not installed.
DEFAULT_BACKOFF_EXCEPTIONS: tuple[str, ...] = (
    "builtins.TimeoutError",
    "builtins.ConnectionError",
    "httpx.TimeoutException",
    "httpx.NetworkError",
    "httpx.RemoteProtocolError",
)


@dataclass(frozen=True, slots=True)
class BackoffConfig:
    """How a scope slows down when the server pushes back (seed 001, "Backoff")."""

    http_codes: frozenset[int] = DEFAULT_BACKOFF_HTTP_CODES
    exceptions: tuple[str | type[BaseException], ...] = DEFAULT_BACKOFF_EXCEPTIONS
    delay_factor: float = 2.0
    min_delay: float = 1.0
    max_delay: float = 300.0
    jitter: Jitter = BACKOFF_JITTER
    concurrency_factor: float = 0.5
    window: float = 60.0

    def __post_init__(self) -> None:
        check = _Checker("BackoffConfig")
        # Accept the same forms as the settings: jitter as True/0.1/[lo, hi], codes as a list.
        check.coerce(self, "jitter", check.jitter)
        check.coerce(self, "http_codes", check.codes)
        check.check_backoff_object(self)


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """When a scope stops sending because too much fails (seed 003's circuit breaker).

    Attributes:
        enabled: turn the breaker off with ``False``.
        window: seconds of outcomes the error share is computed over.
        error_share: pause the scope when more than this share of outcomes failed.
        min_requests: outcomes the window must hold before the share counts.
        pause: seconds the scope stays paused before one probe is let through.
        give_up_after: give the scope up when a probe fails after this many
            consecutive failures (0: never give up).
    """

    enabled: bool = True
    window: float = 60.0
    error_share: float = 0.1
    min_requests: int = 5
    pause: float = 60.0
    give_up_after: int = 5

    def __post_init__(self) -> None:
        check = _Checker("BreakerConfig")
        check.check_breaker_object(self)


@dataclass(frozen=True, slots=True)
class ScopeConfig:
    """Throttling settings of one scope (the value type of ``THROTTLING_SCOPES``).

    Defaults are the seed's: one slot, one second between sends, one second
    between two sends of the same slot, and +/-50 % jitter.
    """

    concurrency: int = 1
    delay: float = 1.0
    delay_per_slot: float = 1.0
    jitter: Jitter = HALF_JITTER
    backoff: BackoffConfig = field(default_factory=BackoffConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    rampup: bool = False
    rampup_min_delay: float = 0.01
    rampup_max_concurrency: int = 8
    quota: float | None = None
    window: float = 60.0
    manager: str | None = None
    ignore_robots_txt: bool = False

    def __post_init__(self) -> None:
        check = _Checker("ScopeConfig")
        check.coerce(self, "jitter", check.jitter)
        check.check_scope_object(self)


@dataclass(frozen=True, slots=True)
class AutoThrottleConfig:
    """Latency-driven delays in the manner of Scrapy's AutoThrottle (seed 000)."""

    enabled: bool = False
    start_delay: float = 5.0
    max_delay: float = 60.0
    target_concurrency: float = 1.0
    debug: bool = False


@dataclass(frozen=True, slots=True)
class Settings:
    """Every throttling setting of a crawl.

    Attributes:
        concurrent_requests: requests in flight at once across all scopes of
            this process (``CONCURRENT_REQUESTS``).
        scope_defaults: settings of any scope not named in ``scopes``.
        scopes: per-scope settings, already merged over ``scope_defaults``.
    """

    concurrent_requests: int = 16
    scope_defaults: ScopeConfig = field(default_factory=ScopeConfig)
    scopes: Mapping[str, ScopeConfig] = field(default_factory=dict)
    manager: str | None = None
    rampup_backoff_target: tuple[float, float] = (1.0, 1.0)
    robotstxt_obey: bool = True
    robotstxt_max_delay: float = 60.0
    redirect_max_delay: float | None = None
    delayed_requests_warn_threshold: int = 500
    autothrottle: AutoThrottleConfig = field(default_factory=AutoThrottleConfig)

    def __post_init__(self) -> None:
        check = _Checker("Settings")
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
                check.fail(f"{label}: expected a ScopeConfig, got {_kind(cfg)}")
        check.raise_if_any()

    def scope_config(self, scope: str) -> ScopeConfig:
        """Return the settings that apply to ``scope``."""
        return self.scopes.get(scope, self.scope_defaults)

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
        return _parse(*_scrapy_to_tree(settings))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "") -> Settings:
        """Build settings from the lower-case layout of the TOML file.

        Raises:
            ConfigError: listing every invalid setting.
        """
        if not isinstance(data, Mapping):
            raise ConfigError([f"{source or 'settings'}: expected a mapping (the TOML file's layout), got "
                               f"{type(data).__name__}; give a dict such as {{'concurrent_requests': 8}}"])
        return _parse(data, _TreeLabels(source))

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
        cfg = self.scopes.get(scope)
        if cfg is None:
            return False
        base = self.scope_defaults
        return (cfg.concurrency, cfg.delay, cfg.delay_per_slot) != \
            (base.concurrency, base.delay, base.delay_per_slot)


# --------------------------------------------------------------------------
# Labels: how a setting is named in messages, depending on how it was given.


class _TreeLabels:
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


# Where each Scrapy name lands in the tree: (section, key). Section "" is the
# top level, "scope" the scope defaults, "backoff" the default backoff.
_SCRAPY_NAMES: dict[str, tuple[str, str]] = {
    "CONCURRENT_REQUESTS": ("", "concurrent_requests"),
    "CONCURRENT_REQUESTS_PER_DOMAIN": ("scope", "concurrency"),
    "DOWNLOAD_DELAY": ("scope", "delay"),
    "DOWNLOAD_DELAY_PER_SLOT": ("scope", "delay_per_slot"),
    "RANDOMIZE_DOWNLOAD_DELAY": ("scope", "jitter"),
    "THROTTLING_WINDOW": ("scope", "window"),
    "THROTTLING_SCOPE_MANAGER": ("scope", "manager"),
    "THROTTLING_SCOPES": ("", "scopes"),
    "THROTTLING_SCOPE_DEFAULTS": ("", "scope_defaults"),
    "THROTTLING_MANAGER": ("", "manager"),
    "THROTTLING_ROBOTSTXT_OBEY": ("", "robotstxt_obey"),
    "THROTTLING_ROBOTSTXT_MAX_DELAY": ("", "robotstxt_max_delay"),
    "RAMPUP_BACKOFF_TARGET": ("", "rampup_backoff_target"),
    "RAMPUP_MIN_DELAY": ("scope", "rampup_min_delay"),
    "RAMPUP_MAX_CONCURRENCY": ("scope", "rampup_max_concurrency"),
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
_OUR_PREFIXES = ("THROTTLING_", "BACKOFF_", "BREAKER_", "RAMPUP_", "AUTOTHROTTLE_")


class _ScrapyLabels(_TreeLabels):
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


def _scrapy_to_tree(settings: Mapping[Any, Any]) -> tuple[dict[str, Any], _ScrapyLabels, list[str]]:
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
            if name.startswith(_OUR_PREFIXES):
                close = difflib.get_close_matches(name, _SCRAPY_NAMES, n=1, cutoff=0.6)
                hint = f' did you mean "{close[0]}"?' if close else ""
                unknown.append(f"{name}: unknown crawlpace setting;{hint} "
                               "see docs/settings.md for the full list")
            continue
        section, key = where
        target = {"": tree, "scope": scope, "autothrottle": autothrottle, **subs}[section]
        target[key] = value
    for section, values in subs.items():
        if values:
            scope[section] = values
    explicit = tree.get("scope_defaults")
    labels = _ScrapyLabels()
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


# --------------------------------------------------------------------------
# Checking values. Each check records a problem and returns None on failure so
# that parsing can go on and report every problem in one error.


def _kind(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def _unknown_key_message(where: str, key: str, valid: Iterable[str]) -> str:
    valid = sorted(valid)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f' did you mean "{close[0]}"?' if close else ""
    return f'{where}: unknown key "{key}";{hint} Valid keys: {", ".join(valid)}'


class _Checker:
    def __init__(self, owner: str = "") -> None:
        self.owner = owner
        self.problems: list[str] = []

    def fail(self, message: str) -> None:
        self.problems.append(message)

    def coerce(self, obj: object, name: str, parse: Callable[[str, object], Any]) -> None:
        """Check field ``name`` of a frozen object and store its normalised form."""
        value = parse(f"{self.owner}.{name}", getattr(obj, name))
        if value is not None:
            object.__setattr__(obj, name, value)

    def raise_if_any(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)

    # -- scalars --------------------------------------------------------

    def seconds(self, label: str, value: object, *, optional: bool = False) -> float | None:
        """A finite, non-negative number of seconds."""
        if value is None and optional:
            return None
        return self.number(label, value, example="1.0", unit=" of seconds")

    def number(self, label: str, value: object, *, example: str, unit: str = "",
               positive: bool = False, maximum: float | None = None) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"{label}: expected a number{unit}, got {_kind(value)}; "
                      f"use a number such as {example}")
            return None
        number = float(value)
        if math.isnan(number):
            self.fail(f"{label}: NaN is not allowed; use a finite number such as {example}")
            return None
        if math.isinf(number):
            self.fail(f"{label}: {value!r} is infinite; use a finite number such as {example}")
            return None
        if number < 0 or (positive and number == 0):
            need = "more than 0" if positive else "0 or more"
            self.fail(f"{label}: {value!r} is {'negative' if number < 0 else 'zero'}; use {need}")
            return None
        if maximum is not None and number > maximum:
            self.fail(f"{label}: {value!r} is too large; use at most {maximum:g}")
            return None
        return number

    def window(self, label: str, value: object) -> float | None:
        """A window length: a positive, finite number of seconds."""
        return self.number(label, value, example="60.0", unit=" of seconds", positive=True)

    def count(self, label: str, value: object, *, example: str = "8", minimum: int = 1) -> int | None:
        """A whole number of ``minimum`` (1) or more."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"{label}: expected a whole number, got {_kind(value)}; "
                      f"use a whole number such as {example}")
            return None
        if isinstance(value, float):
            if not value.is_integer():
                self.fail(f"{label}: {value!r} is not a whole number; "
                          f"use a whole number such as {example}")
                return None
            value = int(value)
        if value < minimum:
            self.fail(f"{label}: {value!r} is too small; use a whole number of {minimum} or more")
            return None
        return value

    def flag(self, label: str, value: object) -> bool | None:
        if not isinstance(value, bool):
            self.fail(f"{label}: expected true or false, got {_kind(value)}")
            return None
        return value

    def import_path(self, label: str, value: object, *, optional: bool = True) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or "." not in value.strip(". "):
            self.fail(f"{label}: expected an import path such as "
                      f"'myproject.throttling.Manager', got {_kind(value)}")
            return None
        return value

    def jitter(self, label: str, value: object) -> Jitter | None:
        try:
            return parse_jitter(value, label=label)
        except ConfigError as exc:
            self.problems.extend(exc.problems)
            return None

    def pair(self, label: str, value: object) -> tuple[float, float] | None:
        """A number, or a [low, high] pair of numbers (RAMPUP_BACKOFF_TARGET)."""
        if isinstance(value, list | tuple):
            if len(value) != 2:
                self.fail(f"{label}: expected a number or a [low, high] pair, got {_kind(value)}")
                return None
            low = self.number(f"{label}[0]", value[0], example="1")
            high = self.number(f"{label}[1]", value[1], example="3")
            if low is None or high is None:
                return None
            if low > high:
                self.fail(f"{label}: {list(value)!r} has low > high; write [low, high] with low <= high")
                return None
            return (low, high)
        single = self.number(label, value, example="1")
        return None if single is None else (single, single)

    def keys(self, where: str, data: Mapping[str, Any], valid: Iterable[str]) -> None:
        valid = set(valid)
        for key in data:
            if key not in valid:
                self.fail(_unknown_key_message(where, str(key), valid))

    def mapping(self, label: str, value: object) -> Mapping[str, Any] | None:
        if not isinstance(value, Mapping):
            self.fail(f"{label}: expected a table of settings (a dict), got {_kind(value)}")
            return None
        return value

    # -- objects built directly in Python ----------------------------------

    def check_backoff_object(self, cfg: BackoffConfig) -> None:
        o = self.owner
        for name in ("delay_factor", "min_delay", "max_delay", "window", "concurrency_factor"):
            self.number(f"{o}.{name}", getattr(cfg, name), example="1.0")
        if not self.problems:
            self.backoff_relations(lambda key: f"{o}.{key}",
                                   {f.name: getattr(cfg, f.name) for f in fields(cfg)})
        self.raise_if_any()

    def check_breaker_object(self, cfg: BreakerConfig) -> None:
        o = self.owner
        self.flag(f"{o}.enabled", cfg.enabled)
        self.window(f"{o}.window", cfg.window)
        self.share(f"{o}.error_share", cfg.error_share)
        self.count(f"{o}.min_requests", cfg.min_requests, example="5")
        self.seconds(f"{o}.pause", cfg.pause)
        self.count(f"{o}.give_up_after", cfg.give_up_after, example="5", minimum=0)
        self.raise_if_any()

    def share(self, label: str, value: object) -> float | None:
        """A fraction from 0 up to (not including) 1."""
        number = self.number(label, value, example="0.1")
        if number is not None and number >= 1.0:
            self.fail(f"{label}: {value!r} is out of range; use a share from 0 to below 1, e.g. 0.1")
            return None
        return number

    def check_scope_object(self, cfg: ScopeConfig) -> None:
        o = self.owner
        backoff: object = cfg.backoff
        if not isinstance(backoff, BackoffConfig):
            self.fail(f"{o}.backoff: expected a BackoffConfig, got {_kind(backoff)}")
        breaker: object = cfg.breaker
        if not isinstance(breaker, BreakerConfig):
            self.fail(f"{o}.breaker: expected a BreakerConfig, got {_kind(breaker)}")
        self.count(f"{o}.concurrency", cfg.concurrency)
        self.seconds(f"{o}.delay", cfg.delay)
        self.seconds(f"{o}.delay_per_slot", cfg.delay_per_slot)
        self.seconds(f"{o}.rampup_min_delay", cfg.rampup_min_delay)
        self.count(f"{o}.rampup_max_concurrency", cfg.rampup_max_concurrency)
        self.number(f"{o}.window", cfg.window, example="60.0", positive=True)
        if cfg.quota is not None:
            self.number(f"{o}.quota", cfg.quota, example="500.0", positive=True)
        self.raise_if_any()

    # -- compound values --------------------------------------------------

    def codes(self, label: str, value: object) -> frozenset[int] | None:
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            self.fail(f"{label}: expected a list of HTTP status codes such as [429, 503], "
                      f"got {_kind(value)}")
            return None
        codes: set[int] = set()
        for code in value:
            if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
                self.fail(f"{label}: {code!r} is not an HTTP status code; use whole numbers from 100 to 599")
                return None
            codes.add(code)
        return frozenset(codes)

    def exceptions(self, label: str, value: object) -> tuple[str | type[BaseException], ...] | None:
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            self.fail(f"{label}: expected a list of exception classes or import paths, got {_kind(value)}")
            return None
        out: list[str | type[BaseException]] = []
        for item in value:
            is_class = isinstance(item, type) and issubclass(item, BaseException)
            if is_class or (isinstance(item, str) and "." in item.strip(".")):
                out.append(item)
            else:
                self.fail(f"{label}: {item!r} is neither an exception class nor an import path "
                          "such as 'builtins.TimeoutError'")
                return None
        return tuple(out)

    def backoff_relations(self, label: Callable[[str], str], values: Mapping[str, Any],
                          source: str = "") -> None:
        """Check the backoff values against each other; ``label`` names each key."""
        factor, low, high = values["delay_factor"], values["min_delay"], values["max_delay"]
        if factor < 1.0:
            self.fail(f"{label('delay_factor')}: {factor:g} would shorten delays on backoff; "
                      "use 1.0 or more")
        if low > high:
            other = label("max_delay").removeprefix(source)
            self.fail(f"{label('min_delay')}: {low:g} is above {other} ({high:g}); "
                      "make the minimum no larger than the maximum")
        concurrency_factor = values["concurrency_factor"]
        if not 0.0 < concurrency_factor <= 1.0:
            self.fail(f"{label('concurrency_factor')}: {concurrency_factor:g} is out of range; "
                      "use a factor above 0 and at most 1, e.g. 0.5")


def parse_jitter(value: object, *, label: str = "RANDOMIZE_DOWNLOAD_DELAY") -> Jitter:
    """Turn the seed's jitter forms into a :class:`Jitter`.

    ``True`` means +/-50 %, ``False`` none, a float ``f`` means +/-``f`` and a
    ``[low, high]`` pair means ``delay * (1 + low)`` to ``delay * (1 + high)``.

    Raises:
        ConfigError: naming ``label`` when the value has none of those forms.
    """
    if value is True:
        return HALF_JITTER
    if value is False or value is None:
        return NO_JITTER
    if isinstance(value, Jitter):
        return value
    if isinstance(value, int | float):
        number = float(value)
        if math.isnan(number) or not 0.0 <= number <= 1.0:
            raise ConfigError([f"{label}: {value!r} is out of range; use a factor from 0 to 1 "
                               "(0.5 means +/-50 %)"])
        return Jitter(-number, number) if number else NO_JITTER
    if isinstance(value, list | tuple) and len(value) == 2 and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        low, high = float(value[0]), float(value[1])
        if any(math.isnan(v) or math.isinf(v) for v in (low, high)):
            raise ConfigError([f"{label}: {list(value)!r} must hold finite numbers, e.g. [-0.1, 0.3]"])
        if low > high:
            raise ConfigError([f"{label}: {list(value)!r} has low > high; write [low, high] with "
                               "low <= high, e.g. [-0.1, 0.3]"])
        if low < -1.0:
            raise ConfigError([f"{label}: {list(value)!r} would make delays negative; keep low >= -1"])
        return Jitter(low, high)
    raise ConfigError([f"{label}: expected true, false, a factor such as 0.5 or a [low, high] pair, "
                       f"got {_kind(value)}"])


# --------------------------------------------------------------------------
# Parsing the tree layout.

_TOP_KEYS = frozenset({
    "concurrent_requests", "scope_defaults", "scopes", "manager", "rampup_backoff_target",
    "robotstxt_obey", "robotstxt_max_delay", "redirect_max_delay",
    "delayed_requests_warn_threshold", "autothrottle",
})
_SCOPE_KEYS = frozenset(f.name for f in fields(ScopeConfig))
_BACKOFF_KEYS = frozenset(f.name for f in fields(BackoffConfig))
_BREAKER_KEYS = frozenset(f.name for f in fields(BreakerConfig))
_AUTOTHROTTLE_KEYS = frozenset(f.name for f in fields(AutoThrottleConfig))


def _parse(tree: Mapping[str, Any], labels: _TreeLabels, problems: Iterable[str] = ()) -> Settings:
    check = _Checker()
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
    take("manager", check.import_path)
    if tree.get("redirect_max_delay") is not None:
        take("redirect_max_delay", check.seconds)

    defaults = ScopeConfig()
    raw_defaults = tree.get("scope_defaults")
    if raw_defaults is not None:
        data = check.mapping(labels.scope(None), raw_defaults)
        if data is not None:
            defaults = _parse_scope(check, labels, None, data, ScopeConfig()) or defaults
    scopes: dict[str, ScopeConfig] = {}
    raw_scopes = tree.get("scopes")
    if raw_scopes is not None:
        table = check.mapping(labels.top("scopes"), raw_scopes)
        for name, raw in (table or {}).items():
            if not isinstance(name, str) or not name.strip():
                check.fail(f"{labels.top('scopes')}: scope names must be non-empty strings, "
                           f"got {_kind(name)}")
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
    check.raise_if_any()
    return Settings(scope_defaults=defaults, scopes=scopes, autothrottle=autothrottle, **top)


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


def _parse_scope(check: _Checker, labels: _TreeLabels, name: str | None,
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


def _parse_breaker(check: _Checker, labels: _TreeLabels, name: str | None,
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


def _parse_sub(check: _Checker, labels: _TreeLabels, section: str, name: str | None,
               data: Mapping[str, Any], keys: frozenset[str],
               parsers: Mapping[str, Callable[[str, object], Any]]) -> dict[str, Any] | None:
    """Check a scope's sub-table (``backoff``, ``breaker``); ``None`` if it had problems."""
    before = len(check.problems)
    check.keys(labels.sub(section, name), data, keys)
    values = _parse_fields(data, parsers, lambda key: labels.sub(section, name, key))
    return None if len(check.problems) > before else values


def _parse_backoff(check: _Checker, labels: _TreeLabels, name: str | None,
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


def _parse_autothrottle(check: _Checker, labels: _TreeLabels,
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
