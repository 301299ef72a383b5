"""Rampup's latency watch: the smoothed latency, its baseline, and where it stands against it.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the rules):
past ``T.knee`` times the baseline the rate stops growing, past ``T.high`` times it
the rate is cut, so an overloaded server is caught at its knee, before it
starts to refuse.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

from ._rampup_tuning import TUNING as T
from ._shared_rules import LATENCY_WEIGHT

__all__ = ["LatencyWatch"]



class _LatencyWatchState(Protocol):
    """What the methods of :class:`LatencyWatch` use of the controller."""

    latency: float | None
    window: float
    _baseline: deque[float]
    _window_min: float
    _window_start: float
    _samples: int
    _level: int

    def baseline(self) -> float | None: ...


class LatencyWatch:
    """The latency part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    latency: float | None  # declared for the assignments below, which might narrow it

    def baseline(self: _LatencyWatchState) -> float | None:
        """The lowest smoothed latency of the recent windows, if any was seen."""
        low = min(self._baseline, default=math.inf)
        low = min(low, self._window_min)
        return None if low == math.inf else low


    def _observe_latency(self: _LatencyWatchState, now: float, sample: float | None) -> int:
        """Smooth ``sample`` in; 0: latency fine, 1: at the knee, 2: too high."""
        if sample is None or not sample >= 0.0 or math.isinf(sample):
            return 0
        smooth = self.latency
        smooth = sample if smooth is None else smooth + LATENCY_WEIGHT * (sample - smooth)
        self.latency = smooth
        self._samples += 1
        if self._samples < T.confirm:
            return 0  # one odd first answer must not become the baseline
        if now - self._window_start >= self.window:
            if self._window_min != math.inf:
                self._baseline.append(self._window_min)
            self._window_min = math.inf
            self._window_start = now
        self._window_min = min(self._window_min, smooth)
        base = self.baseline()
        level = 0
        if base is not None and smooth > T.high * base + T.latency_noise:
            level = 2
        elif base is not None and smooth > T.knee * base + T.knee_slack and base >= T.latency_noise:
            # (A page answered in milliseconds has no knee to see: a busy crawler machine adds
            # more than T.knee times its latency to many answers. Only the cut line, with its
            # slack, speaks for it.)
            level = 1
        self._level = level
        return level

