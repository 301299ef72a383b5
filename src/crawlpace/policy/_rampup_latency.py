"""Rampup's latency watch: the smoothed latency, its baseline, and where it stands against it.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the rules):
past ``T.knee`` times the baseline the rate stops growing, past ``T.high`` times it
the rate is cut, so an overloaded server is caught at its knee, before it
starts to refuse.

Load slows every answer; a site's own outlier slows one. An answer slow enough to
move the verdict by itself (a request that hung for seconds, then answered 200)
that a later send overtook (answered quickly before it) is an outlier
(:meth:`LatencyWatch._outlier`): a queue serves in turn, so what is overtaken
was held by the site, not by a queue. It stays out of the smoothed latency, and
the slots make room for such answers as they do for hangs.
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
    _quick_sent: float

    def baseline(self) -> float | None: ...
    def _outlier_span(self) -> float | None: ...


class LatencyWatch:
    """The latency part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    latency: float | None  # declared for the assignments below, which might narrow it

    def baseline(self: _LatencyWatchState) -> float | None:
        """The lowest smoothed latency of the recent windows, if any was seen."""
        low = min(self._baseline, default=math.inf)
        low = min(low, self._window_min)
        return None if low == math.inf else low


    def _outlier_span(self: _LatencyWatchState) -> float | None:
        """Seconds past which one answer alone moves the smoothed latency past the knee (None: no base)."""
        smooth, base = self.latency, self.baseline()
        if smooth is None or base is None or self._samples < T.confirm:
            return None
        line = T.knee * base + T.knee_slack
        return smooth + max(line - smooth, 0.0) / LATENCY_WEIGHT

    def _outlier(self: _LatencyWatchState, sample: float | None, sent_at: float) -> bool:
        """Whether an accepted answer sent at ``sent_at`` is the site's own outlier, not load (see module).

        Notes when a quick answer's request was sent; call it once per accepted answer.
        """
        span, base = self._outlier_span(), self.baseline()
        if sample is None or span is None or base is None or not math.isfinite(sample):
            return False
        if sample <= T.knee * base + T.knee_slack:
            self._quick_sent = max(self._quick_sent, sent_at)
            return False
        # (One 6-s answer on a 20-ms site smoothed in read as a queue and cut the rate three times.)
        return sample > span and sent_at < self._quick_sent

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

