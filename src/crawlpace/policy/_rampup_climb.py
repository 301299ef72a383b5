"""Rampup's cuts and cubic climb: how deep a cut goes, and how the rate climbs back and probes beyond.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the rules):
after a cut the rate climbs back along a cubic curve scaled to the ceiling,
quickly at first, level near the ceiling, then probing beyond it ever faster.
"""

from __future__ import annotations

import math
from typing import Protocol

from ._rampup_tuning import TUNING as T

__all__ = ["CubicClimb"]



class _CubicClimbState(Protocol):
    """What the methods of :class:`CubicClimb` use of the controller."""

    phase: str
    rate: float
    ceiling: float | None
    target: tuple[float, float]
    _epoch: float
    _k: float
    _climb: float
    _probe_c: float
    _last_growth: float
    latency: float | None
    window: float

    def baseline(self) -> float | None: ...
    def _climb_time(self, *, fast: bool) -> float: ...
    def _start_climb(self, now: float, *, fast: bool) -> None: ...


class CubicClimb:
    """The climb part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    ceiling: float | None  # declared for the assignments below, which might narrow it

    def _curve(self: _CubicClimbState, now: float) -> float:
        """The cubic climb: up to the ceiling in ``_k`` seconds, then beyond it."""
        t = now - self._epoch - self._k
        ceiling = self.ceiling if self.ceiling is not None else self.rate
        if t < 0.0:
            return ceiling + self._climb * t ** 3
        return ceiling + self._probe_c * t ** 3

    def _enter_steady(self: _CubicClimbState, now: float, ceiling: float) -> None:
        self.phase = "steady"
        self.ceiling = ceiling
        self._start_climb(now, fast=False)

    def _climb_time(self: _CubicClimbState, *, fast: bool) -> float:
        low, high = self.target
        middle = (low + high) / 2.0
        k = self.window * T.climb_share / max(middle, 0.5)
        return k / T.fast_climb if fast else k

    def _start_climb(self: _CubicClimbState, now: float, *, fast: bool) -> None:
        """Set the curve from the current rate up to the ceiling, and the probe beyond it."""
        ceiling = self.ceiling if self.ceiling is not None else self.rate
        k = self._climb_time(fast=fast)
        gap = max(ceiling - self.rate, 0.0)
        self._epoch = now
        self._k = k if gap > 0.0 else 0.0
        self._climb = gap / k ** 3
        # Beyond the ceiling, always at the ordinary pace: the share (1 - T.cut) of
        # it gained in one climb time. (A quick probe after a quick climb would
        # overshoot, and the cut that follows would not be enough.)
        self._probe_c = ceiling * (1.0 - T.cut) / self._climb_time(fast=False) ** 3
        self._last_growth = now

    def _latency_beta(self: _CubicClimbState) -> float:
        """The cut for a latency past the cut line: the further past the knee, the deeper.

        The square root of knee latency (plus ``T.latency_noise``) over smoothed latency, within
        ``[T.cut_deep, T.cut]``: just past the line it is the ordinary cut, and a server whose
        queue has grown to several times its baseline latency gets the rate halved, as a
        gradient controller would, instead of one gentle cut per round trip while its queue
        keeps growing. The slack keeps a site answering in milliseconds from deep cuts
        when a busy machine (the crawler's own, say) adds a few tens of them.
        """
        base, smooth = self.baseline(), self.latency
        if base is None or not smooth:
            return T.cut
        knee = T.knee * base + T.knee_slack + T.latency_noise
        return min(T.cut, max(T.cut_deep, math.sqrt(knee / smooth)))

