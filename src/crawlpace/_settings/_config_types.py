"""The typed settings of one scope: the value objects the pure core reads.

These frozen objects check their own values when built, so a
``ScopeConfig(delay=-1)`` written in Python fails as early, and with the same
kind of message, as ``DOWNLOAD_DELAY = -1`` in a Scrapy project.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from .._jitter import HALF_JITTER, Jitter
from ._config_checks import Checker, kind_of

__all__ = [
    "BACKOFF_JITTER",
    "DEFAULT_BACKOFF_EXCEPTIONS",
    "DEFAULT_BACKOFF_HTTP_CODES",
    "DEFAULT_MIN_DELAY",
    "HALF_JITTER",
    "AutoThrottleConfig",
    "BackoffConfig",
    "BreakerConfig",
    "ScopeConfig",
]

BACKOFF_JITTER = Jitter(-0.1, 0.1)
DEFAULT_BACKOFF_HTTP_CODES: frozenset[int] = frozenset({429, 502, 503, 504, 520, 521, 522, 523, 524})
# Timeouts and dropped connections as asyncio code and the common HTTP clients
# raise them (httpx's and requests' derive from no builtin, and aiohttp's dropped
# connection not from ConnectionError). The client entries are skipped when that
# client is not installed.
DEFAULT_BACKOFF_EXCEPTIONS: tuple[str, ...] = (
    "builtins.TimeoutError",
    "builtins.ConnectionError",
    "httpx.TimeoutException",
    "httpx.NetworkError",
    "httpx.RemoteProtocolError",
    # The other HTTP clients crawlpace wraps (skipped when not installed).
    "aiohttp.ClientConnectionError",
    "requests.ConnectionError",
    "requests.Timeout",
)


#: The first backoff delay of a refusal nothing was measured for, when ``min_delay`` is not set.
DEFAULT_MIN_DELAY = 1.0


@dataclass(frozen=True, slots=True)
class BackoffConfig:
    """How a scope slows down when the server pushes back (seed 001, "Backoff").

    ``min_delay`` (``BACKOFF_MIN_DELAY``), when set, is the minimum delay while
    the scope backs off, whatever the evidence says. Left unset (``None``),
    a refusal nothing was measured for still starts at
    :data:`DEFAULT_MIN_DELAY` (1 s), but a cut taken from the rate the scope
    was sending may be gentler than that (see :mod:`crawlpace.policy.backoff`).
    """

    http_codes: frozenset[int] = DEFAULT_BACKOFF_HTTP_CODES
    exceptions: tuple[str | type[BaseException], ...] = DEFAULT_BACKOFF_EXCEPTIONS
    delay_factor: float = 2.0
    min_delay: float | None = None
    max_delay: float = 300.0
    jitter: Jitter = BACKOFF_JITTER
    concurrency_factor: float = 0.5
    window: float = 60.0

    @property
    def first_delay(self) -> float:
        """The first delay of a refusal nothing was measured for: ``min_delay``, or 1 s unset."""
        return DEFAULT_MIN_DELAY if self.min_delay is None else self.min_delay

    def __post_init__(self) -> None:
        check = Checker("BackoffConfig")
        # Accept the same forms as the settings: jitter as True/0.1/[lo, hi], codes as a list.
        check.coerce(self, "jitter", check.jitter)
        check.coerce(self, "http_codes", check.codes)
        _check_backoff(check, self)


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
        check = Checker("BreakerConfig")
        _check_breaker(check, self)


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
    rampup_min_delay: float = 0.001
    rampup_max_concurrency: int = 16  # a hard cap; past 8 only on evidence (policy/_rampup_slots)
    quota: float | None = None
    window: float = 60.0
    manager: str | None = None
    ignore_robots_txt: bool = False
    gradual_slots: bool = False

    def __post_init__(self) -> None:
        check = Checker("ScopeConfig")
        check.coerce(self, "jitter", check.jitter)
        _check_scope(check, self)


@dataclass(frozen=True, slots=True)
class AutoThrottleConfig:
    """Latency-driven delays in the manner of Scrapy's AutoThrottle (seed 000)."""

    enabled: bool = False
    start_delay: float = 5.0
    max_delay: float = 60.0
    target_concurrency: float = 1.0
    debug: bool = False


def _check_backoff(check: Checker, cfg: BackoffConfig) -> None:
    o = check.owner
    for name in ("delay_factor", "min_delay", "max_delay", "window", "concurrency_factor"):
        if name != "min_delay" or cfg.min_delay is not None:  # unset: no floor
            check.number(f"{o}.{name}", getattr(cfg, name), example="1.0")
    if not check.problems:
        check.backoff_relations(lambda key: f"{o}.{key}",
                               {f.name: getattr(cfg, f.name) for f in fields(cfg)})
    check.raise_if_any()



def _check_breaker(check: Checker, cfg: BreakerConfig) -> None:
    o = check.owner
    check.flag(f"{o}.enabled", cfg.enabled)
    check.window(f"{o}.window", cfg.window)
    check.share(f"{o}.error_share", cfg.error_share)
    check.count(f"{o}.min_requests", cfg.min_requests, example="5")
    check.seconds(f"{o}.pause", cfg.pause)
    check.count(f"{o}.give_up_after", cfg.give_up_after, example="5", minimum=0)
    check.raise_if_any()



def _check_scope(check: Checker, cfg: ScopeConfig) -> None:
    o = check.owner
    backoff: object = cfg.backoff
    if not isinstance(backoff, BackoffConfig):
        check.fail(f"{o}.backoff: expected a BackoffConfig, got {kind_of(backoff)}")
    breaker: object = cfg.breaker
    if not isinstance(breaker, BreakerConfig):
        check.fail(f"{o}.breaker: expected a BreakerConfig, got {kind_of(breaker)}")
    check.count(f"{o}.concurrency", cfg.concurrency)
    check.seconds(f"{o}.delay", cfg.delay)
    check.seconds(f"{o}.delay_per_slot", cfg.delay_per_slot)
    check.seconds(f"{o}.rampup_min_delay", cfg.rampup_min_delay)
    check.count(f"{o}.rampup_max_concurrency", cfg.rampup_max_concurrency)
    check.number(f"{o}.window", cfg.window, example="60.0", positive=True)
    if cfg.quota is not None:
        check.number(f"{o}.quota", cfg.quota, example="500.0", positive=True)
    check.raise_if_any()
