"""Scope managers: what adjusts a scope's limits from its feedback (``THROTTLING_SCOPE_MANAGER``).

The protocol a custom manager speaks, and the default one: backoff and
recovery (:mod:`crawlpace.policy.backoff`). A :class:`~crawlpace.policy.scope.ScopePolicy`
asks its manager for the limits after the configured ones.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol, runtime_checkable

from .._exceptions import ConfigError
from .._settings._config_checks import import_object
from .._settings._config_types import ScopeConfig
from .admission import Limits
from .backoff import Backoff
from .signals import ScopeFeedback

__all__ = ["ThrottlingScopeManager", "ThrottlingScopeManagerProtocol", "load_scope_manager"]

logger = logging.getLogger("crawlpace.policy.scope")  # named in docs/concepts/ (autothrottle, breaker)

_NEVER = float("-inf")
_FOREVER = float("inf")


@runtime_checkable
class ThrottlingScopeManagerProtocol(Protocol):
    """Adjusts one scope's limits from its feedback (``THROTTLING_SCOPE_MANAGER``).

    One instance is created per scope with ``cls(scope=name, config=ScopeConfig)``.
    The default, :class:`ThrottlingScopeManager`, implements backoff and
    recovery; replace it to change how a scope reacts to pushback.
    """

    @property
    def generation(self) -> int:
        """Raised by every slowdown; feedback from requests sent under an older
        generation must not cause another one."""

    def feedback(self, feedback: ScopeFeedback, *, now: float, generation: int, base: Limits) -> None:
        """Take one outcome of a request sent under ``generation``."""

    def adjust(self, base: Limits, now: float) -> Limits:
        """Return the limits to use, given the configured ones."""

    def wake_at(self) -> float:
        """When :meth:`adjust` may answer differently with no new feedback."""

    def is_idle(self, now: float) -> bool:
        """True when the manager holds nothing a new one would not."""


class ThrottlingScopeManager:
    """The default scope manager: multiplicative backoff with stepwise recovery.

    See :mod:`crawlpace.policy.backoff` for the rules.
    """

    def __init__(self, *, scope: str, config: ScopeConfig) -> None:
        cfg = config.backoff
        self.scope = scope
        self.backoff = Backoff(factor=cfg.delay_factor, min_delay=cfg.first_delay,
                               max_delay=cfg.max_delay, concurrency_factor=cfg.concurrency_factor,
                               window=cfg.window, floor=cfg.min_delay or 0.0)
        self._round_trip: float | None = None
        self._inflight: int | None = None

    @property
    def generation(self) -> int:
        """The backoff generation."""
        return self.backoff.generation

    def round_trip(self, seconds: float | None, inflight: int | None) -> None:
        """The round trip of the outcome :meth:`feedback` takes next, and the requests in flight with it.

        The scope policy passes them when the store knows them: they measure the pace a first
        refusal came at, before the backoff has answers of its own to measure it by.
        """
        self._round_trip, self._inflight = seconds, inflight

    def feedback(self, feedback: ScopeFeedback, *, now: float, generation: int, base: Limits) -> None:
        backoff = self.backoff
        round_trip, inflight = self._round_trip, self._inflight
        self._round_trip = self._inflight = None
        if feedback.backoff:
            if backoff.on_backoff(now, generation, base.delay, base.concurrency, round_trip=round_trip,
                                  inflight=inflight):
                cause = "a failed request" if feedback.status is None else f"status {feedback.status}"
                logger.info("scope %s: backing off after %s, level %d: delay %.3fs, concurrency %d "
                            "(pushback at %.3fs between sends)", self.scope, cause, backoff.level,
                            backoff.delay(), backoff.concurrency(base.concurrency), backoff.ceiling)
        elif feedback.status is not None and not feedback.failed:
            level = backoff.level
            if backoff.on_success(now, current=generation == backoff.generation):
                if backoff.level == 0:
                    logger.info("scope %s: backoff over, back to the configured delay %.3fs", self.scope,
                                base.delay)
                else:
                    logger.log(logging.INFO if backoff.level != level else logging.DEBUG,
                               "scope %s: recovering, level %d: delay %.3fs%s", self.scope, backoff.level,
                               max(base.delay, backoff.delay()), " (probing)" if backoff.probing else "")

    def adjust(self, base: Limits, now: float) -> Limits:
        backoff = self.backoff
        if backoff.settle(now):
            logger.debug("scope %s: idle long enough, backoff forgotten", self.scope)
        if backoff.level == 0:
            return base
        delay = backoff.delay()
        return Limits(backoff.concurrency(base.concurrency), max(base.delay, delay),
                      base.delay_per_slot, base.floor, base.rest)

    def wake_at(self) -> float:
        expires = self.backoff.expires_at()
        return _FOREVER if expires == _NEVER else expires

    def is_idle(self, now: float) -> bool:
        return self.backoff.level == 0 or now >= self.backoff.expires_at()


def load_scope_manager(path: str) -> type[Any]:
    """Import a scope manager class (``THROTTLING_SCOPE_MANAGER`` or a scope's ``manager``).

    Raises:
        ConfigError: when the path cannot be imported or names no scope manager.
    """
    try:
        target = import_object(path)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError([f"THROTTLING_SCOPE_MANAGER: cannot import {path!r} ({exc}); give the "
                           "import path of a scope manager class"]) from exc
    needed = ("feedback", "adjust", "wake_at", "is_idle")
    missing = [name for name in needed if not callable(getattr(target, name, None))]
    if not isinstance(target, type) or missing:
        raise ConfigError([f"THROTTLING_SCOPE_MANAGER: {path!r} is not a scope manager class "
                           f"(missing: {', '.join(missing) or 'a class'}); subclass "
                           "crawlpace.ThrottlingScopeManager"])
    return target
