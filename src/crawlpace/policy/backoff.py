"""Backoff and recovery of one scope (seed 001, "Backoff").

Pure state plus ``now``. A scope backs off in *levels*. Level 0 is the
configured throttling. Each backoff step raises the level by one:

* the first levels multiply the delay: ``d(1) = max(anchor * factor, min_delay)``
  and ``d(k) = d(1) * factor ** (k - 1)``, capped at ``max_delay``, where the
  anchor is the scope's delay when the backoff began;
* once the delay sits at ``max_delay``, and the scope has more than one slot,
  each further level multiplies the concurrency by ``concurrency_factor``
  (never below one slot): every slot is already as slow as it may get, so
  fewer slots is the only way left to slow down.

Feedback does not compound. Every step starts a new *generation*, and only
backoff feedback from a request sent under the current generation may take
the next step: ten 429s answering one burst of ten requests count once,
because all ten were sent before the first of them raised the level.

Recovery takes one level off at a time, on a response that is not a backoff
trigger, once ``window`` seconds have passed since both the last backoff
feedback and the last step.

The last step down is taken in steps too. When the first level's delay is
``min_delay`` because the scope's own delay is short (no delay at all, say,
with many slots), leaving level 1 would jump from ``min_delay`` straight back
to a scope that sends all its slots at once: the very burst that drew the
refusal. So level 1 has a *tail*: each recovery step divides its delay by
``factor`` again, while the result stays above both the scope's own delay and
``min_delay / factor ** TAIL_STEPS``; only then is the level dropped. A
backoff trigger during the tail takes one tail step back (the delay doubles
again) instead of a whole new level. A server that refused a burst of eight
therefore sees sends spaced ever closer, one recovery window at a time, and
refuses one of them long before eight go out together again. A scope left idle keeps its level until the
whole recovery could have happened by time alone (``level * window`` after
the last change); after that the level is dropped, which is what the store's
eviction of idle scopes relies on.
"""

from __future__ import annotations

import math

__all__ = ["TAIL_STEPS", "Backoff"]

_NEVER = float("-inf")
# A factor of 1.0 never reaches max_delay; stop counting levels somewhere.
_LEVEL_LIMIT = 64
#: The tail of level 1 ends once its delay would be ``min_delay / factor ** TAIL_STEPS``.
TAIL_STEPS = 6


class Backoff:
    """The backoff level of one scope.

    Args:
        factor: the delay multiplier per level (``BACKOFF_DELAY_FACTOR``).
        min_delay: the smallest backoff delay (``BACKOFF_MIN_DELAY``).
        max_delay: the largest backoff delay (``BACKOFF_MAX_DELAY``).
        concurrency_factor: the slot multiplier per level past the delay cap.
        window: quiet seconds needed before each recovery step.

    Attributes:
        level: 0 when not backing off.
        tail: recovery steps taken below the first level's delay (level 1 only).
        generation: incremented by every backoff step.
        last_feedback: when backoff feedback last arrived (counted or not).
        last_change: when the level last changed.
    """

    __slots__ = ("anchor", "concurrency_factor", "factor", "generation", "last_change",
                 "last_feedback", "level", "max_delay", "min_delay", "tail", "window")

    def __init__(self, *, factor: float, min_delay: float, max_delay: float,
                 concurrency_factor: float, window: float) -> None:
        self.factor = factor
        self.min_delay = min_delay
        self.max_delay = max_delay
        self.concurrency_factor = concurrency_factor
        self.window = window
        self.level = 0
        self.tail = 0
        self.generation = 0
        self.anchor = 0.0
        self.last_feedback = _NEVER
        self.last_change = _NEVER

    # -- what the level means ----------------------------------------------

    def delay(self) -> float:
        """The backoff delay of the current level (0.0 at level 0)."""
        if self.level == 0:
            return 0.0
        first = min(self.max_delay, max(self.anchor * self.factor, self.min_delay))
        if self.tail:
            return first / self.factor ** self.tail
        steps = min(self.level, self._delay_levels()) - 1
        return min(self.max_delay, first * self.factor ** steps)

    def _tail_ends(self, tail: int | None = None) -> bool:
        """True when level 1's next recovery step would end the backoff rather than lengthen the tail."""
        if self.factor <= 1.0:
            return True
        first = min(self.max_delay, max(self.anchor * self.factor, self.min_delay))
        following = first / self.factor ** ((self.tail if tail is None else tail) + 1)
        return following <= max(self.anchor, self.min_delay / self.factor ** TAIL_STEPS)

    def _tail_left(self) -> int:
        """Recovery steps the tail of level 1 still has."""
        tail = self.tail
        while tail < TAIL_STEPS and not self._tail_ends(tail):
            tail += 1
        return tail - self.tail

    def concurrency(self, configured: int) -> int:
        """The slots the current level leaves of ``configured``."""
        extra = self.level - self._delay_levels()
        if extra <= 0 or configured <= 1:
            return configured
        return max(1, math.floor(configured * self.concurrency_factor ** extra))

    def _delay_levels(self) -> int:
        """Levels needed for the delay to reach ``max_delay``."""
        first = min(self.max_delay, max(self.anchor * self.factor, self.min_delay))
        if first >= self.max_delay:
            return 1
        if self.factor <= 1.0:
            return 1  # the delay cannot grow: one level reaches all it ever will
        return min(_LEVEL_LIMIT, 1 + math.ceil(math.log(self.max_delay / first, self.factor) - 1e-9))

    def _top_level(self, configured: int) -> int:
        """The highest level that still slows the scope down."""
        top = self._delay_levels()
        if configured > 1 and self.concurrency_factor < 1.0:
            # Levels until the concurrency reaches one slot.
            top += math.ceil(math.log(1.0 / configured, self.concurrency_factor) - 1e-9)
        return min(top, _LEVEL_LIMIT)

    # -- transitions ---------------------------------------------------------

    def on_backoff(self, now: float, generation: int, anchor: float, configured: int) -> bool:
        """Take backoff feedback from a request sent under ``generation``.

        Args:
            now: when the feedback arrived.
            generation: the generation the request was sent under.
            anchor: the scope's delay without backoff, used when backoff begins.
            configured: the scope's configured concurrency.

        Returns:
            True when the level rose (a new generation began).
        """
        self.last_feedback = now
        if generation != self.generation:
            return False  # sent before the last step: that step already answered it
        if self.tail:
            self.tail -= 1  # refused during the tail: one step back up it
            self.generation += 1
            self.last_change = now
            return True
        if self.level >= self._top_level(configured) and self.level > 0:
            return False
        if self.level == 0:
            self.anchor = anchor
        self.level += 1
        self.generation += 1
        self.last_change = now
        return True

    def on_success(self, now: float) -> bool:
        """Take a response that is not a backoff trigger; maybe step down.

        Returns:
            True when the level fell.
        """
        # The response itself is the evidence a step needs, besides the quiet window.
        if self.level == 0:
            return False
        if now - max(self.last_feedback, self.last_change) < self.window:
            return False
        if self.level == 1 and not self._tail_ends():
            self.tail += 1
        else:
            self.level -= 1
            self.tail = 0
        self.last_change = now
        return True

    def expires_at(self) -> float:
        """When an idle scope's level is dropped (``-inf`` at level 0)."""
        if self.level == 0:
            return _NEVER
        return max(self.last_feedback, self.last_change) + (self.level + self._tail_left()) * self.window

    def settle(self, now: float) -> bool:
        """Drop the level if the scope sat idle long enough to recover fully.

        Returns:
            True when the level was dropped.
        """
        if self.level and now >= self.expires_at():
            self.level = 0
            self.tail = 0
            self.last_change = now
            return True
        return False

    def __repr__(self) -> str:
        tail = f" tail={self.tail}" if self.tail else ""
        return f"<Backoff level={self.level}{tail} delay={self.delay():g}s generation={self.generation}>"
