"""Rampup's start phase: how a fresh scope climbs, and where its first refusal leaves it.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the other rules).
A fresh scope starts at its polite starting rate and doubles it once per *round*:

* a round is the scope's smoothed latency, within ``[START_MIN_ROUND,
  START_DOUBLING]``: a site answering in 50 ms doubles every 50 ms of sending,
  one answering in a millisecond (where latency says nothing about its limit)
  every half second, and one that takes seconds every second, as before;
* one answer doubles the rate at most once, however long it took: growth is
  clocked by answers, as TCP's slow start is by acknowledgements, so a scope
  that sends little learns little.

The first refusal ends the phase. Doubling means the rate a round earlier
drew no refusal, and the highest rate whose send was answered (the *good rate*)
is the best guess at the limit that the phase has: the rate falls back just
under it (not to half the refused rate, and not to the floor), and the climb
levels out at it. Its state is two numbers on the controller: the good rate
(``_good_rate``) and the lowest latency seen (``_low_latency``, 0 for none).
"""

from __future__ import annotations

import math
from typing import Protocol

__all__ = ["START_DOUBLING", "START_FALLBACK", "START_GOOD_CEILING", "START_LATENCY_SIGNAL",
           "START_MIN_ROUND",
           "START_USED_SHARE", "StartPhase"]

#: The longest round of the start phase, in seconds (the rate doubles at least this often while used).
START_DOUBLING = 1.0
#: The shortest round, in seconds.
START_MIN_ROUND = 0.05
#: Latency under this many seconds says nothing of a server's load (no queue to see), so the
#: round stays ``START_DOUBLING``: only a refusal could stop a quicker climb, and a one-second
#: round's finer steps leave the first refusal's good rate near the limit.
START_LATENCY_SIGNAL = 0.02
#: The start phase grows only while the measured send rate is at least this share of the rate
#: (under a half: the last gap was sent at the rate before the last doubling, and jitter lengthens it;
#: a scope held back by its slots falls far below it and stops doubling for nothing).
START_USED_SHARE = 0.4
#: After the first refusal, the rate falls back to this share of the good rate ...
START_FALLBACK = 0.85
#: ... and the climb levels out at this share of it.
START_GOOD_CEILING = 0.95


class _StartPhaseState(Protocol):
    """What the methods of :class:`StartPhase` use of the controller."""

    rate: float
    max_rate: float
    min_rate: float
    latency: float | None
    _good_rate: float
    _low_latency: float

    def allowed_rate(self, now: float) -> float: ...


class StartPhase:
    """The start-phase part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)

    def _start_round(self: _StartPhaseState) -> float:
        """Seconds per doubling: the lowest latency seen within ``[START_MIN_ROUND, START_DOUBLING]``,
        or ``START_DOUBLING`` while none is known or it is under ``START_LATENCY_SIGNAL``.

        The lowest, not the smoothed: a first answer slowed by its connection's set-up
        (or by a busy crawler) must not make a quick site look slow.
        """
        low = self._low_latency
        if low <= 0.0 or low < START_LATENCY_SIGNAL:
            return START_DOUBLING
        return min(START_DOUBLING, max(START_MIN_ROUND, low))

    def _start_latency(self: _StartPhaseState, sample: float | None) -> None:
        """Note an answer's latency: the start phase's round follows the lowest one."""
        if sample is not None and sample > 0.0 and math.isfinite(sample):
            low = self._low_latency
            self._low_latency = sample if low <= 0.0 else min(low, sample)

    def _start_used(self: _StartPhaseState, rate: float) -> float:
        """The send rate below which the start phase does not grow: the sends lag one doubling."""
        return START_USED_SHARE * rate

    def _start_grow(self: _StartPhaseState, now: float, step: float, round_: float) -> None:
        """An answer in the start phase: note the good rate, then double at most once."""
        allowed = self.allowed_rate(now)
        if self._good_rate <= 0.0:
            step = round_  # the first answer: the site answers at all, a round's worth of news
        if allowed > self._good_rate:
            self._good_rate = allowed
        self.rate = min(self.max_rate, self.rate * 2.0 ** (min(step, round_) / round_))

    def _start_fallback(self: _StartPhaseState, refused: float, rate: float, ceiling: float, cascade: bool,
                        beta: float) -> tuple[float, float, bool, float]:
        """The rate, ceiling, climb and cut factor after the start phase's first refusal at ``refused``.

        ``rate``, ``ceiling``, ``cascade`` and ``beta`` are the ordinary cut's
        (half the refused rate, a quick climb): kept when no good rate is known,
        or when a whole doubling lies between it and the refused rate (falling
        back under it would then be the deeper cut). Otherwise the rate falls back
        to ``START_FALLBACK`` of the good rate and levels out at
        ``START_GOOD_CEILING`` of it, with the ordinary climb (the limit is close).
        """
        good = min(self._good_rate, refused)
        fallback = max(self.min_rate, min(self.max_rate, good * START_FALLBACK))
        if good <= 0.0 or fallback <= rate or refused <= 0.0:
            return rate, ceiling, cascade, beta
        return fallback, max(fallback, good * START_GOOD_CEILING), False, fallback / refused
