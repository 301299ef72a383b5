"""A scope policy's gates: what holds every send of a scope until a time, apart from its slots.

A server-announced hold (``Retry-After``), the circuit breaker (created on
first use), and the quota. Part of :class:`~crawlpace.policy.scope.ScopePolicy`,
whose attributes these methods use (they are slots of ``ScopePolicy``, which
``policy/state.py`` lists).
"""

from __future__ import annotations

import logging
from typing import Protocol

from .._exceptions import QuotaError
from .._settings._config_types import ScopeConfig
from .breaker import FIRST_PAUSE_SHARE, Breaker
from .budget import HeaderBudget, WindowLog
from .quota import QuotaBucket
from .rampup import Rampup
from .signals import ScopeFeedback

__all__ = ["ScopeGates"]

logger = logging.getLogger("crawlpace.policy.scope")  # named in docs/concepts/ (autothrottle, breaker)

_NEVER = float("-inf")


class _GateState(Protocol):
    """What the methods of :class:`ScopeGates` use of the policy."""

    scope: str
    config: ScopeConfig
    breaker: Breaker | None
    quota: QuotaBucket | None
    rampup: Rampup | None
    hold_until: float
    gated: bool
    watches: bool
    window_log: WindowLog | None
    budget: HeaderBudget | None

    def ensure_breaker(self) -> Breaker: ...
    def _update_gated(self) -> None: ...


class ScopeGates:
    """The gates part of a scope policy."""

    __slots__ = ()
    breaker: Breaker | None  # declared for the assignment below, which would narrow it

    def ensure_breaker(self: _GateState) -> Breaker:
        """The circuit breaker, created on first use from the scope's settings."""
        breaker = self.breaker
        if breaker is None:
            cfg = self.config.breaker
            breaker = self.breaker = Breaker(window=cfg.window, error_share=cfg.error_share,
                                             min_requests=cfg.min_requests, pause=cfg.pause,
                                             give_up_after=cfg.give_up_after,
                                             first_pause=cfg.pause * FIRST_PAUSE_SHARE,
                                             in_place=self.rampup is not None)
        return breaker

    def _update_gated(self: _GateState) -> None:
        breaker = self.breaker
        # A window log gates, and hears of every send.
        self.gated = self.quota is not None or self.hold_until != _NEVER or (
            breaker is not None and breaker.state != "closed") or self.window_log is not None
        self.watches = self.gated or self.rampup is not None or self.budget is not None

    # -- gates ---------------------------------------------------------------

    def gate(self: _GateState, now: float, use: float) -> float | None:
        """The earliest time a send of ``use`` quota may go, apart from slots.

        Returns:
            A time (``-inf``: no gate), or ``None`` while the breaker waits
            for its probe's answer (or a window log's budget is all in flight).

        Raises:
            QuotaError: when ``use`` exceeds the scope's quota.
        """
        when = self.hold_until
        if when != _NEVER and when <= now:
            self.hold_until = when = _NEVER  # over: let the hot path skip the gate again
            self._update_gated()
        breaker = self.breaker
        if breaker is not None:
            blocked = breaker.blocked_until(now)
            if blocked is None:
                return None
            when = max(when, blocked)
        quota = self.quota
        if quota is not None and use > 0.0:
            if not quota.fits(use):
                raise QuotaError(f"a request expects to use {use:g} quota units of scope {self.scope!r}, "
                                 f"whose whole quota is {quota.quota:g} per {quota.window:g}s, so it can "
                                 "never be sent; lower its expected use or raise the scope's quota")
            when = max(when, quota.ready_at(now, use))
        log = self.window_log
        if log is not None:
            at = log.ready_at(now)
            if at is None:
                return None  # the budget is all in flight: the next answer frees a slot
            when = max(when, at)
        return when

    @property
    def given_up(self: _GateState) -> bool:
        """True once the circuit breaker gave the scope up."""
        return self.breaker is not None and self.breaker.state == "given_up"

    def _breaker_outcome(self: _GateState, now: float, feedback: ScopeFeedback, sent_at: float) -> bool:
        """Count an outcome in the breaker; True when it made the breaker give the scope up."""
        breaker = self.breaker
        gave_up = False
        if feedback.status is None and not feedback.failed:
            # Nothing the breaker counts (say, a bug in the caller's code): if this
            # was the probe, its slot must free, or the scope would wait forever.
            if breaker is not None:
                breaker.on_abandon(sent_at)
        elif self.config.breaker.enabled:
            breaker = self.ensure_breaker()
            # As of now: a worker of a shared store admits the probe in the store, so its own copy
            # may still say "open" for a pause that is over; a failed probe must read as a reopening.
            state_before = breaker.state_at(now)
            if breaker.on_outcome(now, failed=feedback.failed, sent_at=sent_at):
                logger.error("scope %s given up: %s", self.scope, breaker.reason)
                gave_up = True
            elif breaker.state != state_before:
                # The breaker knows no scope; its changes are logged here, under the scope's name.
                if breaker.state == "open":
                    logger.warning("scope %s: breaker opened: %s", self.scope, breaker.reason)
                elif breaker.state == "closed":
                    logger.info("scope %s: breaker closed: the probe succeeded", self.scope)
        self._update_gated()
        return gave_up
