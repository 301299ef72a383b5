"""Gradual slots: a scope with no delay opens its slots as its site answers well.

A scope configured with several slots and no delay has nothing but the slots
to space its first sends: all of them go at once, before the site has said
anything (a ``Retry-After``, a RateLimit budget, a refusal). With
``gradual_slots`` on, such a scope starts with one slot open and doubles the
open slots each time a round of answers came back well: a round is as many
good answers as there are slots open, so the slots go 1, 2, 4, 8 after 1, 2
and 4 good answers. A refusal (any backoff answer) closes all slots but one
again, and the doubling starts over once the scope sends unpaced again: good
answers count only while nothing but the slots spaces the sends (no backoff
delay, no announced pace on top of the configured delay), so that a backoff
wearing off does not find every slot open at once.

Pure: numbers in, numbers out; :class:`~crawlpace.policy.scope.ScopePolicy`
keeps the two counters and applies the result to its concurrency.
"""

from __future__ import annotations

import logging
from typing import Protocol

from .admission import Limits
from .signals import ScopeFeedback

__all__ = ["GradualSlots", "applies", "next_open"]

logger = logging.getLogger("crawlpace.policy.scope")  # the scope policy's log lines


def applies(enabled: bool, concurrency: int, delay: float, *, rampup: bool, autothrottle: bool) -> bool:
    """Whether the gradual-slots rule governs a scope.

    It does when the setting is on, the scope has more than one slot and no
    delay, and neither rampup nor AutoThrottle (which have start rules of
    their own) sets its pace.
    """
    return enabled and concurrency > 1 and delay <= 0.0 and not rampup and not autothrottle


def next_open(opened: int, good: int, slots: int, *, refused: bool, answered_well: bool,
              unpaced: bool) -> tuple[int, int]:
    """The open slots and the good answers counted toward the next step, after one outcome.

    Args:
        opened: slots open before the outcome (1 to ``slots``).
        good: good answers counted since the last step.
        slots: the scope's configured slots.
        refused: the outcome asked the scope to back off.
        answered_well: the site answered without refusing or failing.
        unpaced: nothing but the slots spaced the send (no backoff delay or
            server pace in force): only then does a good answer count.

    Returns:
        ``(opened, good)`` after the outcome.
    """
    if refused:
        return 1, 0
    if not (answered_well and unpaced) or opened >= slots:
        return opened, good
    good += 1
    if good >= opened:
        return min(2 * opened, slots), 0
    return opened, good


class _SlotState(Protocol):
    """What :meth:`GradualSlots._open_slots` uses of the policy."""

    scope: str
    concurrency: int
    opened: int
    opened_good: int
    limits: Limits
    _base: Limits
    pace_until: float

    def _compute_base(self, now: float) -> Limits: ...


class GradualSlots:
    """The gradual-slots part of a scope policy (its state is slots of ``ScopePolicy``)."""

    __slots__ = ()

    def _open_slots(self: _SlotState, now: float, feedback: ScopeFeedback) -> None:
        """Apply the rule to one outcome, and the open slots to the scope's base limits."""
        well = feedback.status is not None and not feedback.failed and not feedback.backoff
        opened, self.opened_good = next_open(
            self.opened, self.opened_good, self.concurrency, refused=feedback.backoff, answered_well=well,
            unpaced=self.limits.delay <= self._base.delay and now >= self.pace_until)
        if opened != self.opened:
            logger.debug("scope %s: gradual slots %d -> %d", self.scope, self.opened, opened)
            self.opened = opened
            self._base = self._compute_base(now)
