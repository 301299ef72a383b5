"""The hidden rules of simulated sites, as pure bookkeeping on passed-in times.

Each class answers one question about a request arriving at ``now`` and keeps
the little state it needs. None reads a clock or awaits, so the profiles that
use them can be tested by scripting times.
"""

from __future__ import annotations

import math

__all__ = ["Embargo", "FixedWindow", "Spacing", "TokenBucket"]


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


class TokenBucket:
    """A bucket of ``burst`` tokens refilled at ``rate`` tokens per second.

    It starts full at the first request. A request takes one whole token;
    when less than one is left the request is refused and the bucket is left
    as it was, so refused requests cost nothing.

    Args:
        rate: tokens added per second.
        burst: the bucket size: requests that may come at once after a pause.
    """

    __slots__ = ("_level", "_stamp", "burst", "rate")

    def __init__(self, rate: float, burst: float = 1.0) -> None:
        self.rate = _positive("rate", rate)
        self.burst = _positive("burst", burst)
        if self.burst < 1.0:
            raise ValueError(f"burst must be at least 1, got {burst!r}")
        self._level = self.burst
        self._stamp: float | None = None

    def level(self, now: float) -> float:
        """The tokens available at ``now``."""
        if self._stamp is None:
            return self.burst
        return min(self.burst, self._level + max(now - self._stamp, 0.0) * self.rate)

    def take(self, now: float) -> float:
        """Try to take a token at ``now``.

        Returns:
            0.0 when a token was taken; otherwise the seconds until one will
            be available, with nothing taken.
        """
        level = self.level(now)
        if self._stamp is None or now > self._stamp:
            self._stamp = now
        self._level = level
        if level >= 1.0:
            self._level = level - 1.0
            return 0.0
        return (1.0 - level) / self.rate

    def set_rate(self, now: float, rate: float) -> None:
        """Refill at ``rate`` from ``now`` on, keeping the tokens earned until then."""
        rate = _positive("rate", rate)
        if self._stamp is not None:
            self._level = self.level(now)
            self._stamp = max(now, self._stamp)
        self.rate = rate


class FixedWindow:
    """A count of ``limit`` requests per window of ``window`` seconds.

    The first request opens the first window; the next ones follow it back to
    back, so a window boundary falls every ``window`` seconds after that
    first request. Refused requests are not counted.

    Args:
        limit: requests allowed per window, at least 1.
        window: the window length in seconds.
    """

    __slots__ = ("_start", "_used", "limit", "window")

    def __init__(self, limit: int, window: float) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an integer of at least 1, got {limit!r}")
        self.limit = limit
        self.window = _positive("window", window)
        self._start: float | None = None
        self._used = 0

    def _roll(self, now: float) -> float:
        if self._start is None:
            self._start = now
        elif now >= self._start + self.window:
            self._start += math.floor((now - self._start) / self.window) * self.window
            self._used = 0
        return self._start

    def take(self, now: float) -> bool:
        """Count a request at ``now`` if the window has room; return whether it had."""
        self._roll(now)
        if self._used >= self.limit:
            return False
        self._used += 1
        return True

    def remaining(self, now: float) -> int:
        """Requests left in the window holding ``now``."""
        self._roll(now)
        return max(self.limit - self._used, 0)

    def reset(self, now: float) -> float:
        """Seconds from ``now`` until the window holding it ends."""
        start = self._roll(now)
        return max(start + self.window - now, 0.0)


class Embargo:
    """The time until which the site has asked to be left alone.

    Every ``Retry-After`` the site sends pushes the end of the embargo to at
    least the moment it names; the end never moves back. :attr:`since` is when
    the current embargo began (the first answer that asked for it).
    """

    __slots__ = ("since", "until")

    def __init__(self) -> None:
        self.until: float | None = None
        self.since: float | None = None

    def extend(self, now: float, seconds: float) -> None:
        """Record that the site asked, at ``now``, for ``seconds`` of quiet."""
        end = now + max(seconds, 0.0)
        if self.until is None or now >= self.until:
            self.since = now
        if self.until is None or end > self.until:
            self.until = end

    def remaining(self, now: float) -> float:
        """Seconds of embargo left at ``now`` (0.0 when none)."""
        return 0.0 if self.until is None else max(self.until - now, 0.0)

    def breached(self, now: float, tolerance: float = 0.0) -> bool:
        """Whether a request at ``now`` comes more than ``tolerance`` seconds early."""
        return self.until is not None and now < self.until - tolerance

    def violated(self, now: float, tolerance: float = 0.0) -> bool:
        """Whether a request arriving at ``now`` broke the embargo.

        It did if it came more than ``tolerance`` before the end, unless it
        came before the embargo began or within ``tolerance`` after: a request
        that arrives that soon after the answer may have been admitted before
        the crawler read the answer (its arrival lagging its send, or its
        connection still busy with the answer).
        """
        since = self.since
        return since is not None and now >= since + tolerance and self.breached(now, tolerance)


class Spacing:
    """The minimum gap a site asks between the sends of two requests, judged from their arrivals.

    A site sees arrivals, not sends, and each arrival lags its send by a
    little that varies (the crawler's own event loop between deciding and
    writing, a new connection, the network stack, a busy machine). Comparing
    each gap with ``delay - tolerance`` would let a crawler that is a little
    early every time pass, and would still flag a punctual one whose previous
    request happened to lag more than this one. So the rule is asked of the
    whole sequence instead: the arrivals are fine as long as *some* send
    schedule that kept ``delay`` between sends, each send at most
    ``tolerance`` before its arrival, explains them. The earliest such
    schedule is followed greedily (the previous send at the earliest time it
    can have been); an arrival before that send plus ``delay`` has no
    explanation and counts. Lags never add up: a crawler early by 5 ms on
    every gap is flagged after ``tolerance / 0.005`` requests.

    Args:
        delay: the gap in seconds (a robots.txt ``Crawl-delay``).
        tolerance: the most an arrival may lag its send, in seconds.
    """

    __slots__ = ("_sent", "delay", "tolerance")

    def __init__(self, delay: float, tolerance: float = 0.0) -> None:
        self.delay = _positive("delay", delay)
        if not (math.isfinite(tolerance) and tolerance >= 0):
            raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
        self.tolerance = float(tolerance)
        # The earliest time the previous request can have been sent.
        self._sent: float | None = None

    def observe(self, now: float) -> bool:
        """Record an arrival at ``now``; return whether it came too soon after the previous one."""
        sent = self._sent
        earliest = now - self.tolerance
        if sent is None:
            self._sent = earliest
            return False
        due = sent + self.delay
        if now >= due:
            self._sent = max(due, earliest)
            return False
        # Too soon. The next request is judged from this one (never from before the previous one).
        self._sent = max(sent, earliest)
        return True
