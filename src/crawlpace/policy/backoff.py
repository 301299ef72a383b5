"""Backoff and recovery of one scope (seed 001, "Backoff"), paced by evidence.

Pure state plus ``now``. Level 0 is the configured throttling; a scope that
was refused (a backoff answer) backs off to a *backoff delay* between sends,
and past ``max_delay`` to fewer slots. How long that delay is, and how it
comes back down, follows what the scope measured, not a fixed ladder:

* **The cut.** A refusal tells two things: the rate the scope was sending at
  (the *sent rate*: the larger of its delay and the spacing of its recent
  answers, or, before anything was measured, requests in flight over the
  refused request's round trip) and the rate the server let through (the
  *accepted rate*: good answers over the span of the last :data:`MEMORY`
  answers). With at least :data:`RICH` answers known, the server's accepted
  rate is the *ceiling* and the scope goes to :data:`SETTLE` of it at once.
  With fewer, the sent rate is the ceiling and the scope goes to the sent rate
  divided by ``factor`` (``BACKOFF_DELAY_FACTOR``): the seed's multiplicative
  step, taken from what was being sent rather than from a fixed 1 s. Only when
  nothing at all was measured does the first delay fall back to the seed's
  ``max(delay x factor, min_delay)`` (``BACKOFF_MIN_DELAY``).
* **The floor.** A ``BACKOFF_MIN_DELAY`` the user set (``floor``) is what the
  seed calls it, the minimum delay during backoff: whatever the evidence says,
  a scope backing off waits at least that long between sends. Left at its
  default, it is no floor, and evidence may cut gentler than 1 s.
* **The climb.** Below :data:`SETTLE` of the ceiling, every :data:`STEP_ANSWERS`
  good answers to requests sent at the current pace close half of the gap to
  it: successes at the new pace are the evidence, so recovery takes seconds,
  not one ``BACKOFF_WINDOW`` per step. A scope that sends too seldom to earn
  them still gets the seed's recovery: a good answer after ``window`` quiet
  seconds takes it straight to the target.
* **The cap.** Evidence may make a cut gentler than the seed's step, never
  harsher: the sent rate counts only up to ``max(delay, min_delay)`` between
  sends (a client idle between its requests was not paced by the scope), and
  the ceiling at most ``factor`` times that.
* **The probe.** At :data:`SETTLE` of the ceiling the scope stays put. Only after
  ``window`` seconds (``BACKOFF_WINDOW``) without a refusal does it raise the
  ceiling by :data:`PROBE_STEP` and go to :data:`SETTLE` of the new one; a refused probe takes it
  back to :data:`SETTLE` of what was accepted (not a whole cut) and doubles
  the wait before the next probe (up to :data:`PROBE_WAITS` windows), while
  each probe that held squares the next one's step (1.2, 1.44, 2.07, 4.3 x),
  so a limit that was lifted is found again in a few windows. So under
  a server whose limit is steady, the pace settles just below it and moves
  once in a long while, instead of swinging between a cut and a full recovery.
* **The end.** Once the pace the backoff aims at is no slower than the scope's
  own delay (or, with no delay of its own, faster than ``min_delay /
  factor ** TAIL_STEPS``), the backoff ends: level 0.

Past ``max_delay`` the delay stays at the cap and each further refusal
multiplies the concurrency by ``concurrency_factor`` (a level each); the climb
gives those levels back first.

Feedback does not compound. Every cut starts a new *generation*, and only
feedback from a request sent under the current generation may take the next
step: ten 429s answering one burst of ten requests count once, and only
answers to requests sent at the current pace count as evidence for the climb.
A server's hold (``Retry-After``) counts in the measure like any silence: what
a server lets through over a span that includes the holds it imposed is what
it allows in the long run, and a server that punishes a refusal with long
holds is thereby approached more carefully. A scope left idle keeps its state
until ``(level + PROBE_WAITS) * window`` after the last change; then it is
dropped, which the store's eviction of idle scopes relies on.
"""

from __future__ import annotations

import math

__all__ = ["MEMORY", "PROBE_STEP", "PROBE_WAITS", "RICH", "SETTLE", "STEP_ANSWERS", "TAIL_STEPS", "Backoff"]

_NEVER = float("-inf")
#: Answers remembered to measure the sent and the accepted rate (a few seconds of a busy scope).
MEMORY = 16
#: Answers needed before the accepted rate is trusted over the sent rate: fewer are one burst.
RICH = 8
#: The share of the ceiling the scope settles at: under the rate refused, with room for BACKOFF_JITTER (10 %).
SETTLE = 0.95
#: Good answers at the current pace that earn one step of the climb: one is luck, a few are a pace.
STEP_ANSWERS = 4
#: A probe raises the ceiling by this much: a fifth more, where a whole factor would be a swing.
PROBE_STEP = 1.2
#: A refused probe doubles the wait before the next one, up to this many windows.
PROBE_WAITS = 8
#: With no delay of its own, the backoff ends once its delay would be ``min_delay / factor ** TAIL_STEPS``.
TAIL_STEPS = 6
# Successful probes in a row past which the step stops growing (4.3 x a window).
_HITS_LIMIT = 3
# A rate within this share of the target counts as at it (float noise).
_CLOSE = 0.99


class Backoff:
    """The backoff of one scope.

    Args:
        factor: the cut's divisor when evidence is thin (``BACKOFF_DELAY_FACTOR``).
        min_delay: the first delay when nothing was measured (``BACKOFF_MIN_DELAY``).
        floor: the shortest delay while backing off: ``BACKOFF_MIN_DELAY`` when the
            user set it, else 0.0 (the evidence decides).
        max_delay: the largest backoff delay (``BACKOFF_MAX_DELAY``).
        concurrency_factor: the slot multiplier per level past the delay cap.
        window: quiet seconds before probing above the ceiling (``BACKOFF_WINDOW``).

    Attributes:
        level: 0 when not backing off; 1 while the delay slows the scope;
            more once the slots are cut too.
        interval: the backoff delay in force while ``level > 0``.
        ceiling: the send interval at which pushback last recurred (0.0: none known).
        good: good answers to requests sent under the current generation.
        generation: incremented by every cut.
        last_feedback: when backoff feedback last arrived (counted or not).
        last_change: when the pace last changed.
        answers: times of the last :data:`MEMORY` answers, oldest first.
        answers_good: one bit per answer of ``answers`` (lowest: newest), set when it was good.
        probing: the ceiling was raised by a probe not yet confirmed.
        probe_misses: probes refused in a row (the next probe waits ``2 ** misses`` windows).
        probe_hits: probes that held in a row (the next one steps ``PROBE_STEP ** 2 ** hits``).
    """

    __slots__ = (
        "anchor",
        "answers",
        "answers_good",
        "ceiling",
        "concurrency_factor",
        "factor",
        "floor",
        "generation",
        "good",
        "interval",
        "last_change",
        "last_feedback",
        "level",
        "max_delay",
        "min_delay",
        "probe_hits",
        "probe_misses",
        "probing",
        "window",
    )

    def __init__(self, *, factor: float, min_delay: float, max_delay: float,
                 concurrency_factor: float, window: float, floor: float = 0.0) -> None:
        self.factor = factor
        self.min_delay = min_delay
        self.floor = min(floor, max_delay)
        self.max_delay = max_delay
        self.concurrency_factor = concurrency_factor
        self.window = window
        self.level = 0
        self.interval = 0.0
        self.ceiling = 0.0
        self.good = 0
        self.generation = 0
        self.anchor = 0.0
        self.last_feedback = _NEVER
        self.last_change = _NEVER
        self.answers: tuple[float, ...] = ()
        self.answers_good = 0
        self.probing = False
        self.probe_misses = 0
        self.probe_hits = 0

    # -- what the state means ----------------------------------------------

    def delay(self) -> float:
        """The backoff delay (0.0 at level 0; never below ``floor`` while backing off)."""
        return max(self.interval, self.floor) if self.level else 0.0

    def concurrency(self, configured: int) -> int:
        """The slots the current level leaves of ``configured``."""
        extra = self.level - 1
        if extra <= 0 or configured <= 1:
            return configured
        return max(1, math.floor(configured * self.concurrency_factor ** extra))

    def target(self) -> float:
        """The interval the backoff aims at: :data:`SETTLE` of the ceiling's rate (0.0 with no ceiling)."""
        return self.ceiling / SETTLE

    def _floor(self) -> float:
        """An interval at or below which the backoff no longer slows the scope."""
        tail = self.min_delay / self.factor ** TAIL_STEPS if self.factor > 1.0 else self.min_delay
        return max(self.anchor, tail)

    def _top_level(self, configured: int) -> int:
        """The highest level: the delay at its cap and the slots down to one."""
        if configured <= 1 or self.concurrency_factor >= 1.0:
            return 1
        return 1 + math.ceil(math.log(1.0 / configured, self.concurrency_factor) - 1e-9)

    # -- evidence ------------------------------------------------------------

    def _remember(self, now: float, good: bool) -> None:
        self.answers = (*self.answers[-(MEMORY - 1):], now)
        self.answers_good = ((self.answers_good << 1) | good) & ((1 << MEMORY) - 1)

    def spacing(self) -> float | None:
        """Mean seconds between the remembered answers, when at least two span some time."""
        answers = self.answers
        if len(answers) < 2 or answers[-1] <= answers[0]:
            return None
        return (answers[-1] - answers[0]) / (len(answers) - 1)

    def accepted_interval(self) -> float | None:
        """Seconds per good answer over the remembered span, once :data:`RICH` answers are known."""
        answers = self.answers
        if len(answers) < RICH or answers[-1] <= answers[0]:
            return None
        # Good answers after the oldest one (which opens the span), newest in the lowest bit.
        good = (self.answers_good & ((1 << (len(answers) - 1)) - 1)).bit_count()
        return (answers[-1] - answers[0]) / good if good else None

    # -- transitions ---------------------------------------------------------

    def on_backoff(self, now: float, generation: int, anchor: float, configured: int, *,
                   round_trip: float | None = None, inflight: int | None = None) -> bool:
        """Take backoff feedback from a request sent under ``generation``.

        Args:
            now: when the feedback arrived.
            generation: the generation the request was sent under.
            anchor: the scope's delay without backoff.
            configured: the scope's configured concurrency.
            round_trip: seconds from the refused request's send to its answer, if known.
            inflight: the scope's requests in flight as it came, itself included, if known.

        Returns:
            True when the scope slowed down (a new generation began).
        """
        self.last_feedback = now
        self._remember(now, False)
        if generation != self.generation:
            return False  # sent before the last cut: that cut already answered it
        if self.level == 0:
            self.anchor = anchor
        current = max(self.anchor, self.interval, self.floor) if self.level else self.anchor
        # Evidence may make a cut gentler than the seed's step, never harsher: a client that sent
        # seldom (answers far apart) was not paced by the scope, and its refusal says nothing of
        # a rate it never reached.
        cap = max(current, self.min_delay)
        spacing = self.spacing()
        if spacing is None and round_trip is not None and inflight and round_trip > 0.0:
            spacing = round_trip / inflight  # Little's law: before anything was measured
        sent = current if spacing is None else max(current, min(spacing, cap))
        accepted = self.accepted_interval()
        if accepted is not None:
            # The server said how much it lets through: settle under that, and from here probe rarely.
            if self.probing:
                self.probe_misses += 1
                self.probe_hits = 0
            self.ceiling = max(sent, min(accepted, cap * self.factor))
            new = self.target()
        elif sent > 0.0:
            self.ceiling = sent
            new = sent * self.factor
        else:
            new = max(self.anchor * self.factor, self.min_delay)  # seed 001's first step: nothing measured
            self.ceiling = new / self.factor
        self.probing = False
        if self.level and self.interval >= self.max_delay and new >= self.max_delay:
            if self.level >= self._top_level(configured):
                return False
            self.level += 1  # every slot is as slow as it may get: fewer slots
        else:
            self.level = max(self.level, 1)
        self.interval = min(self.max_delay, max(new, self.anchor))
        self.generation += 1
        self.good = 0
        self.last_change = now
        return True

    def on_success(self, now: float, *, current: bool = True) -> bool:
        """Take a good answer (not a backoff trigger); maybe step back up.

        Args:
            now: when it arrived.
            current: the request was sent under the current generation, at the pace in force.

        Returns:
            True when the pace rose.
        """
        self._remember(now, True)
        if self.level == 0:
            return False
        if current:
            self.good += 1
        target = self.target()
        quiet = now - max(self.last_feedback, self.last_change)
        if self.level > 1 or self.interval > target / _CLOSE:
            if self.good < STEP_ANSWERS and quiet < self.window:
                return False
            if self.level > 1:
                self.level -= 1  # slots first
            elif quiet >= self.window:
                self.interval = target  # a whole quiet window (the seed's recovery): straight to the target
            else:
                # Half of the gap in rate: from rate r toward the target's rate t, (r + t) / 2.
                self.interval = 2.0 / (1.0 / self.interval + 1.0 / target)
                if self.interval <= target / _CLOSE:
                    self.interval = target
            return self._changed(now)
        if quiet < self.window * 2 ** min(self.probe_misses, int(math.log2(PROBE_WAITS))):
            return False
        if self.probing:  # the last probe held a whole wait: the new ceiling is good
            self.probe_misses = 0
            self.probe_hits += 1
        self.probing = True
        self.ceiling /= PROBE_STEP ** 2 ** min(self.probe_hits, _HITS_LIMIT)
        self.interval = max(self.target(), self.anchor)  # the probe is the step itself
        return self._changed(now)

    def _changed(self, now: float) -> bool:
        self.good = 0
        self.last_change = now
        if self.level == 1 and self.target() <= self._floor():
            self.level = 0  # the pace aimed at is the scope's own: the backoff is over
            self.interval = 0.0
            self.probing = False
            self.probe_hits = 0
        return True

    def forgive(self, now: float) -> None:
        """Forget the backoff: its cuts answered errors judged not about load (``_load_errors``)."""
        self.level = 0
        self.interval = self.ceiling = 0.0
        self.probing = False
        self.probe_misses = self.probe_hits = 0
        self.good = 0
        self.last_change = now

    def expires_at(self) -> float:
        """When an idle scope's backoff is forgotten (``-inf`` at level 0)."""
        if self.level == 0:
            return _NEVER
        # A scope between two probes is not idle: its longest wait is PROBE_WAITS windows.
        return max(self.last_feedback, self.last_change) + (self.level + PROBE_WAITS) * self.window

    def settle(self, now: float) -> bool:
        """Forget the backoff of a scope idle long enough.

        Returns:
            True when it was dropped.
        """
        if self.level and now >= self.expires_at():
            self.level = 0
            self.interval = self.ceiling = 0.0
            self.probing = False
            self.probe_misses = self.probe_hits = 0
            self.last_change = now
            return True
        return False

    def __repr__(self) -> str:
        return (f"<Backoff level={self.level} delay={self.delay():g}s ceiling={self.ceiling:g}s "
                f"generation={self.generation}>")
