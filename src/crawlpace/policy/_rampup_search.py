"""Rampup's search for the limit after a deep cut, and its respect for a server's holds.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the
rules). Two rules of the steady phase live here:

**The search.** A deep cut (one the previous cut did not prevent) levels the
climb out at the geometric middle between the new rate and the rate that
failed, well under the limit when the refusal was only the echo of an earlier
overshoot (a token bucket still paying back its burst). The climb beyond that
middle would go at the ordinary, slow pace of a probe. Instead, every time the
climb reaches its level with no pushback, that level is taken as safe and the
next level is the geometric middle between it and the *top* (the level an
ordinary cut would have set, ``T.ceiling_share`` times the rate that failed),
reached by a climb twice as quick as the one after the deep cut; within
:data:`T.tolerance` of the top, the top is
the level and the search ends. A limit anywhere in between is found within a
few quick climbs, by bisection, without a refusal at all when it lies above
the top.

**Held refusals.** A refusal that comes with a hold (``Retry-After``: the
server wants silence for ``H`` seconds) costs ``H`` seconds of the scope's
time, where an ordinary refusal costs one request. So after such a refusal the
rate climbs back to its level and stays there: no probe beyond it until
``H / T.tolerance`` seconds have passed, so that a probe that fails costs at
most ``T.tolerance`` of the time. The length of the last hold is kept
(:attr:`hold_learned`), so a server that always asks for the same silence is
probed as rarely even on a refusal it sends without the header. And the
hold is left out of the climb: the curve resumes after the silence where it
was when the silence began, so the first sends after a hold do not jump to a
rate the climb would have reached had the scope been sending. But in the
steady phase a hold of :data:`T.hold_long` or more resumes *at* the level, not at
the cut rate under it: the cut under the level is there to pay back what an overshoot owes (a token
bucket's burst spent past its limit), and a silence of seconds has paid it
already, so a climb from under the level would only waste the sends after the
hold.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

from ._rampup_tuning import TUNING as T

__all__ = ["SearchClimb"]



class _SearchState(Protocol):
    """What the methods of :class:`SearchClimb` use of the controller."""

    phase: str
    rate: float
    ceiling: float | None
    hold_learned: float
    _held_asked: bool
    _held_refusals: deque[float]
    _top: float
    _lift: tuple[int, float, float]
    generation: int
    _probe_after: float
    _epoch: float
    _k: float
    _climb: float
    _resumed_at: float
    _last_growth: float

    def _start_climb(self, now: float, *, fast: bool) -> None: ...
    def _held_short(self, now: float, held: float, pace: float) -> bool: ...
    def _decide(self, now: float, decision: str) -> None: ...
    def _fit_holds(self, now: float, held: float, refused: float) -> bool: ...
    def _lifted(self, top: float, ceiling: float) -> float: ...


class SearchClimb:
    """The search part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    ceiling: float | None  # declared for the assignments below, which might narrow it

    def _after_cut(self: _SearchState, now: float, *, sent: float, allowed: float, cascade: bool,
                   steady: bool, refused: bool, pace: float = 0.0) -> None:
        """Set the search's top and the probe's wait after a cut from ``sent``.

        Args:
            now: when the cut was made.
            sent: the rate the cut started from.
            allowed: the rate the scope was allowed when the answer came (at most the level before the cut).
            cascade: the cut was a deep one (the previous cut was not enough, or the start phase's).
            steady: the cut came in the steady phase.
            refused: the cut answers a refusal (not a slow answer).
            pace: the rate the scope was allowed when it was sent.
        """
        ceiling = self.ceiling or 0.0
        top = T.ceiling_share * sent
        deep = cascade and steady
        held = self._resumed_at - now
        if refused and steady and held > 0.0:
            # The measured send rate may have sagged (a stall of the crawler's own), and the
            # probe will wait long: search up to under the rate the scope was allowed, never
            # past the level it held before (a site that asks for silence is not probed).
            top = max(top, T.ceiling_share * allowed)
            deep = True
        self._top = top if deep and refused and ceiling < top * (1.0 - T.tolerance) else 0.0
        if not refused:
            return
        if held > 0.0:
            self.hold_learned, self._held_asked = held, True
        if self.hold_learned > 0.0:
            self._probe_after = max(self._probe_after, now + self.hold_learned / T.tolerance)
        if steady and held >= T.hold_long and self._held_short(now, held, pace):
            # Refused within one hold of the last resume: the level is far too high (a bucket's
            # burst, refilled by the hold, spent in a moment). Halve it, and resume there.
            self.ceiling = ceiling = min(ceiling, T.cut_deep * sent)
            self.rate = min(self.rate, ceiling)
            self._top = 0.0
        if steady and held >= T.hold_long and ceiling > self.rate:
            # The silence has already paid back whatever the overshoot owed (a bucket refills in
            # it): climbing back from under the level would only waste the sends after it. (The
            # start phase's first refusal has a rule of its own, in _rampup_start.)
            self.rate = ceiling
            self._start_climb(now, fast=False)
        if held >= T.fit_hold or (held >= T.hold_long and len(self._held_refusals) >= 2):
            # (A short hold costs little, and one overshoot fits a wide range of buckets; from the
            # second, two stretches at different paces pin the bucket.)
            self._fit_holds(now, held, pace)

    def _search_step(self: _SearchState, now: float) -> bool:
        """At the level with no pushback: climb quickly to the next level of the search.

        Returns:
            True when a new climb was set (the curve changed).
        """
        top, ceiling = self._top, self.ceiling
        if top <= 0.0 or ceiling is None or self.phase != "steady" or now < self._epoch + self._k:
            return False
        if self.rate < ceiling * (1.0 - T.tolerance):
            # The climb's time is over but the rate is not at the level yet: it grows on answers, and a
            # slow scope's come further apart than a quick climb lasts (0.19/s, one answer per 5.3 s:
            # each step restarted from 0.19/s, the search "held" 0.5, 0.82, ... 1.33/s and sent at
            # 0.19/s all along). The level is held once the rate has been at it.
            return False
        self._top = top = self._lifted(top, ceiling)
        if ceiling >= top * (1.0 - T.tolerance):
            self._top = 0.0
            return False
        level = math.sqrt(ceiling * top)
        if level >= top * (1.0 - T.tolerance):
            level, self._top = top, 0.0
        self.ceiling = level
        self._start_climb(now, fast=True)
        if self._k > 0.0:  # the step is short, and a level just held is safe to climb from at once
            self._k /= T.search_pace
            self._climb *= T.search_pace ** 3
        self._decide(now, f"search: {ceiling:.3g}/s held with no pushback; climbing quickly to {level:.3g}/s "
                     f"(top {top:.3g}/s)")
        return True

    def _lifted(self: _SearchState, top: float, ceiling: float) -> float:
        """The search's top with ``ceiling`` held: past it to ``_lift``'s pace once its first step is held
        with no refusal since the fit that set it (see ``_episode_answer``), else ``top``.

        The pace a start's ramp had the limiter take over its lock-out's length is a counter's rate, but
        a clock window's lock-out is the rest of its window, and the count over that rest is the ramp's
        own pace (50 per 5 s read 31 to 63/s). Searched to it at once, 50 per 5 s at phase 0 took a
        first step of 17.3/s, not 13.1/s, filled its next window sooner, locked out longer, and its
        later probe lowered the next fit to 9.07/s, the level it was then held at (0.987 -> 0.917 of
        its capacity, bench/results/counters23.md). The first step goes to the middle as before, and a
        refusal there (a cut: a new generation) drops the lift.
        """
        generation, first, lift = self._lift
        if generation != self.generation or lift <= top:
            return top
        if ceiling < first * (1.0 - T.tolerance):
            return top
        self._lift = (0, 0.0, 0.0)
        return lift

    def _skip_hold(self: _SearchState, now: float) -> None:
        """Leave a server's hold out of the climb: the curve resumes where the silence began.

        The climb is a curve over time; without this rule, the first answer after
        a five-second hold would find the curve five seconds further on (most of a
        quick climb), and the sends right after the hold would go at a rate the
        scope never tried, into a server that has just said it was too fast.
        """
        held = min(now, self._resumed_at) - self._last_growth
        if held > 0.0:
            self._epoch += held
            self._last_growth += held

    def _probe_held(self: _SearchState, now: float) -> bool:
        """Whether the climb must stay at its level: a held refusal's wait is not over."""
        return now < self._probe_after
