"""Gradual slots: a scope with no delay opens its slots as its site answers well.

A scope configured with several slots and no delay has nothing but the slots
to space its first sends: all of them go at once, before the site has said
anything (a ``Retry-After``, a RateLimit budget, a refusal). With
``gradual_slots`` on, such a scope starts with one slot open and opens more
each time a round of answers came back well (a round is as many good answers
as there are slots open), the way TCP opens its window:

* below the threshold the open slots double: 1, 2, 4, 8 after 1, 2 and 4
  good answers (the threshold starts at every slot);
* a refusal (any backoff answer) sets the threshold to half the slots that
  were open, and closes all slots but one;
* at or above the threshold each round opens one more slot, so a site that
  refused at some number of requests in flight is approached slowly there;
* a request that failed without an answer (a timeout, a reset) is a refusal
  only while it is the site's latest word: when a request sent after it
  has already been answered well, the site was serving while that one hung,
  so the failure was the request's own (a flaky site's hang), not load, and
  it neither closes nor opens a slot. Failing answers that are not backoff
  answers (a 500) never close slots either. Without this, a site that hangs
  on a steady share of its requests whatever the rate keeps its slots shut.

While slots are still opening, sends go in rounds: a slot whose answer came
back is not used again until the whole round is back (the slots in force are
the open ones less the good answers of the round), so that a refusal in the
round is heard before the next request leaves, not after. Good answers count
only while nothing but the slots spaces the sends (no announced pace, and no
backoff delay on top of the configured delay, or one shorter than the time
the slots in force keep busy: ``delay x slots <= latency``), so that a backoff
wearing off does not find every slot open at once, while a slow site's slots
still reopen under a backoff delay that spaces nothing.

Pure: numbers in, numbers out; :class:`~crawlpace.policy.scope.ScopePolicy`
keeps the counters and applies the result to its concurrency.
"""

from __future__ import annotations

import logging
from typing import Protocol

from .admission import Limits
from .signals import ScopeFeedback

__all__ = ["GradualSlots", "applies", "in_force", "next_open"]

logger = logging.getLogger("crawlpace.policy.scope")  # named in docs/concepts/ (autothrottle, breaker)


def applies(enabled: bool, concurrency: int, delay: float, *, rampup: bool, autothrottle: bool) -> bool:
    """Whether the gradual-slots rule governs a scope.

    It does when the setting is on, the scope has more than one slot and no
    delay, and neither rampup nor AutoThrottle (which have start rules of
    their own) sets its pace.
    """
    return enabled and concurrency > 1 and delay <= 0.0 and not rampup and not autothrottle


def next_open(opened: int, good: int, threshold: int, slots: int, *, refused: bool,
              answered_well: bool, unpaced: bool) -> tuple[int, int, int]:
    """The open slots, the good answers counted toward the next step, and the threshold, after one outcome.

    Args:
        opened: slots open before the outcome (1 to ``slots``).
        good: good answers counted since the last step.
        threshold: the open slots past which each round opens one more
            slot instead of doubling them.
        slots: the scope's configured slots.
        refused: the outcome asked the scope to back off.
        answered_well: the site answered without refusing or failing.
        unpaced: nothing but the slots spaced the send (no backoff delay or
            server pace in force): only then does a good answer count.

    Returns:
        ``(opened, good, threshold)`` after the outcome.
    """
    if refused:
        return 1, 0, max(1, opened // 2)
    if not (answered_well and unpaced) or opened >= slots:
        return opened, good, threshold
    good += 1
    if good < opened:
        return opened, good, threshold
    grown = min(2 * opened, threshold) if opened < threshold else opened + 1
    return min(max(grown, opened), slots), 0, threshold


def in_force(opened: int, good: int, slots: int) -> int:
    """The slots a scope may fill now: while opening, the round's answered ones stay shut until it ends."""
    return opened - good if opened < slots else slots


class _SlotState(Protocol):
    """What :meth:`GradualSlots._open_slots` uses of the policy."""

    scope: str
    concurrency: int
    opened: int
    opened_good: int
    opened_threshold: int
    opened_good_sent: float
    limits: Limits
    _base: Limits
    pace_until: float

    def _compute_base(self, now: float) -> Limits: ...

    def _slots_set_pace(self, latency: float | None) -> bool: ...


class GradualSlots:
    """The gradual-slots part of a scope policy (its state is slots of ``ScopePolicy``)."""

    __slots__ = ()

    def _slots_set_pace(self: _SlotState, latency: float | None) -> bool:
        """Whether the slots, not a backoff delay, spaced the sends an answer taking ``latency`` came from.

        With no backoff delay above the configured one, they did. Under one,
        they still did while the slots in force, each busy for an answer's
        time, send less often than the delay allows (``delay x slots <=
        latency``): on a site that takes seconds to answer, a one-second
        backoff delay spaces nothing, and waiting for it to wear off before
        counting good answers would keep one slot open for a whole window.
        """
        delay = self.limits.delay
        if delay <= self._base.delay:
            return True
        return latency is not None and delay * max(self._base.concurrency, 1) <= latency

    def _open_slots(self: _SlotState, now: float, feedback: ScopeFeedback, sent_at: float) -> None:
        """Apply the rule to one outcome of a request sent at ``sent_at``; open slots go to the limits."""
        well = feedback.status is not None and not feedback.failed and not feedback.backoff
        refused = feedback.backoff
        if well:
            self.opened_good_sent = max(self.opened_good_sent, sent_at)
        elif refused and feedback.status is None and sent_at < self.opened_good_sent:
            logger.debug("scope %s: gradual slots kept at %d: a request sent later was answered well, so "
                         "this failure was its own, not load", self.scope, self.opened)
            return
        opened, self.opened_good, self.opened_threshold = next_open(
            self.opened, self.opened_good, self.opened_threshold, self.concurrency, refused=refused,
            answered_well=well, unpaced=self._slots_set_pace(feedback.latency) and now >= self.pace_until)
        if opened != self.opened:
            logger.debug("scope %s: gradual slots %d -> %d", self.scope, self.opened, opened)
            self.opened = opened
        if in_force(opened, self.opened_good, self.concurrency) != self._base.concurrency:
            self._base = self._compute_base(now)
