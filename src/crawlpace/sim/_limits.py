"""The hidden rules of simulated sites, as pure bookkeeping on passed-in times.

Each class answers one question about a request arriving at ``now`` and keeps
the little state it needs. None reads a clock or awaits, so the profiles that
use them can be tested by scripting times.
"""

from __future__ import annotations

import math
import random
from collections import deque

__all__ = ["ClockWindow", "Embargo", "FixedWindow", "LoopClock", "RequestQueue", "RequestRate",
           "SlidingWindow", "SlotCap", "Spacing", "TokenBucket"]


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer of at least 1, got {value!r}")
    return value


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


class RequestQueue:
    """nginx's ``limit_req rate=R burst=B`` without ``nodelay``: the excess waits, then is served at the rate.

    nginx keeps, per client, an *excess*: how many requests ahead of the rate the client is. A
    request arriving ``dt`` after the previous one counted sets it to ``max(0, excess - R * dt + 1)``;
    past ``B`` the request is refused (and changes nothing), otherwise it is counted and served
    ``excess / R`` seconds later, so that requests sent faster than the rate leave nginx one
    ``1 / R`` apart, the rest of the burst waiting in line. With ``delay = D`` (nginx's ``delay=``)
    the first ``D`` of the excess go at once and only the rest wait, ``(excess - D) / R``; ``D >= B``
    is ``nodelay`` (then it refuses as a :class:`TokenBucket` of ``B + 1`` does). ``B = 0`` is
    nginx's default (no ``burst=``): a request closer than ``1 / R`` to the last one counted is
    refused, nothing waits. The arithmetic is nginx's (``ngx_http_limit_req_module``): whole
    milliseconds and thousandths of a request, so that a request exactly at the end of the line is
    let in, as nginx lets it. nginx reads ``now`` from its cached clock (:class:`LoopClock`).

    Args:
        rate: requests per second served.
        burst: requests that may wait beyond the one being served (0: none).
        delay: the excess served without waiting (0: all of it waits).
    """

    __slots__ = ("_excess", "_last", "_rate", "burst", "delay")

    def __init__(self, rate: float, burst: int, delay: int = 0) -> None:
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
            raise ValueError(f"burst must be an integer of at least 0, got {burst!r}")
        self.burst = burst
        if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
            raise ValueError(f"delay must be an integer of at least 0, got {delay!r}")
        self.delay = delay
        self._rate = self._milli(rate)
        self._excess = 0  # thousandths of a request
        self._last: int | None = None  # milliseconds

    @staticmethod
    def _milli(rate: float) -> int:
        return max(round(_positive("rate", rate) * 1000), 1)

    @property
    def rate(self) -> float:
        """Requests per second served."""
        return self._rate / 1000

    def take(self, now: float) -> float | None:
        """A request at ``now``: None when refused, else the seconds it waits before it is served."""
        ms = math.floor(now * 1000 + 1e-6)
        excess = 0
        if self._last is not None:
            elapsed = max(ms - self._last, 0)
            excess = max(self._excess - self._rate * elapsed // 1000 + 1000, 0)
            if excess > self.burst * 1000:
                return None
            if not elapsed:
                ms = self._last
        self._excess, self._last = excess, ms
        return max(excess - self.delay * 1000, 0) * 1000 // self._rate / 1000

    def set_rate(self, now: float, rate: float) -> None:
        """Serve at ``rate`` from ``now`` on, the excess kept."""
        self._rate = self._milli(rate)


class LoopClock:
    """A server's cached clock, read once per turn of its event loop (nginx's ``ngx_current_msec``).

    nginx does not read the time for each request: it updates its clock when its event loop wakes
    and stamps every request that turn handles with that time, in whole milliseconds. A request is
    therefore stamped when the loop woke for it, not when it came, and on a loaded machine the loop
    wakes late: each turn here wakes up to ``stale`` seconds after the arrival that woke it (a
    uniform draw; with ``tail``, an exponential one of mean ``stale``, unbounded), and an arrival
    that comes before that wake is handled in the same turn and gets the same stamp. Two sends
    spaced just over a limiter's gap can thus be read just under it (the earlier stamped late, the
    later on time), and the answer to each leaves only after the wake, so the client sees that delay
    in its latency.

    Args:
        stale: the longest wait of a turn's wake after its first arrival (0: a clock read at once).
        seed: the draws' seed.
        tail: draw each wake's delay from an exponential law of mean ``stale`` (mostly short, now and
            then several times as long), not evenly up to ``stale``.
    """

    __slots__ = ("_rng", "_wake", "stale", "tail")

    def __init__(self, stale: float = 0.0, seed: int = 0, *, tail: bool = False) -> None:
        if isinstance(stale, bool) or not (isinstance(stale, int | float) and 0.0 <= stale < math.inf):
            raise ValueError(f"stale must be a finite number of at least 0, got {stale!r}")
        self.stale = float(stale)
        self.tail = tail
        self._rng = random.Random(seed)
        self._wake = -math.inf

    def wake(self, now: float) -> float:
        """The time the loop reads for a request arriving at ``now`` (its turn's wake, at least ``now``)."""
        if now > self._wake:
            self._wake = now + self._draw()
        return self._wake

    def _draw(self) -> float:
        if not self.stale:
            return 0.0
        if self.tail:  # mostly short, now and then several times as long (a loaded machine's scheduler)
            return self._rng.expovariate(1.0 / self.stale)
        return self._rng.uniform(0.0, self.stale)


class FixedWindow:
    """A count of ``limit`` requests per window of ``window`` seconds, opened by a request.

    The first request opens the first window. With ``chained`` (the default)
    the next ones follow it back to back, so a window boundary falls every
    ``window`` seconds after that first request. Without it, a window is
    opened by the first request at or after the previous one's end, as
    ``limits``' fixed window (Flask-Limiter, SlowAPI) and any counter kept
    with Redis ``INCR`` and ``EXPIRE`` do: the count's expiry is set by the
    request that starts it. Refused requests are not counted (``limits``
    counts them past the limit, which changes nothing a client can see).

    Args:
        limit: requests allowed per window, at least 1.
        window: the window length in seconds.
        chained: windows back to back from the first request, or each opened by a request.
    """

    __slots__ = ("_start", "_used", "chained", "limit", "window")

    def __init__(self, limit: int, window: float, *, chained: bool = True) -> None:
        self.limit = _count("limit", limit)
        self.window = _positive("window", window)
        self.chained = bool(chained)
        self._start: float | None = None
        self._used = 0

    def _roll(self, now: float) -> float:
        if self._start is None:
            self._start = now
        elif now >= self._start + self.window:
            if self.chained:
                self._start += math.floor((now - self._start) / self.window) * self.window
            else:
                self._start = now
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

    def observe(self, now: float, late: float = 0.0) -> bool:
        """Record an arrival at ``now``; return whether it came too soon after the previous one.

        ``late``: seconds the arrival may have been noted late by the site itself (its
        server's loop running behind), which widen the tolerance for this arrival.
        """
        sent = self._sent
        earliest = now - self.tolerance - late
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


class ClockWindow:
    """A count of ``limit`` requests per window of ``window`` seconds, windows aligned to the clock.

    The windows are ``[k * window, (k + 1) * window)`` on the clock, whatever
    the first request's time: a client starts at a random point of a window,
    as with Flask-Limiter's or ``limits``' fixed windows (which align to the
    Unix epoch). With ``count_refused`` a refused request is counted too, which
    a fixed window only shows in :meth:`used` (the window refuses past the
    limit anyway); it is kept for symmetry with :class:`SlidingWindow`.

    Args:
        limit: requests allowed per window, at least 1.
        window: the window length in seconds.
        count_refused: count refused requests as well.
    """

    __slots__ = ("_index", "_used", "count_refused", "limit", "window")

    def __init__(self, limit: int, window: float, *, count_refused: bool = False) -> None:
        self.limit = _count("limit", limit)
        self.window = _positive("window", window)
        self.count_refused = bool(count_refused)
        self._index: int | None = None
        self._used = 0

    def _roll(self, now: float) -> None:
        index = math.floor(now / self.window)
        if self._index is None or index > self._index:
            self._index = index
            self._used = 0

    def take(self, now: float) -> bool:
        """Count a request at ``now``; return whether the window had room for it."""
        self._roll(now)
        allowed = self._used < self.limit
        if allowed or self.count_refused:
            self._used += 1
        return allowed

    def used(self, now: float) -> int:
        """Requests counted in the window holding ``now``."""
        self._roll(now)
        return self._used

    def remaining(self, now: float) -> int:
        """Requests left in the window holding ``now``."""
        return max(self.limit - self.used(now), 0)

    def reset(self, now: float) -> float:
        """Seconds from ``now`` until the window holding it ends."""
        return max((math.floor(now / self.window) + 1) * self.window - now, 0.0)


class SlidingWindow:
    """At most ``limit`` counted requests in any ``window`` seconds: a moving window (a log).

    A request at ``now`` is allowed when fewer than ``limit`` counted
    requests arrived in ``(now - window, now]``. Allowed requests are counted;
    with ``count_refused`` refused ones are too, so a client that keeps
    knocking keeps itself locked out (each refusal pushes the window's end
    on). Without it, refusals cost nothing, as in ``limits``' moving window.

    Args:
        limit: requests allowed in any window, at least 1.
        window: the window length in seconds.
        count_refused: count refused requests as well.
    """

    __slots__ = ("_log", "count_refused", "limit", "window")

    def __init__(self, limit: int, window: float, *, count_refused: bool = False) -> None:
        self.limit = _count("limit", limit)
        self.window = _positive("window", window)
        self.count_refused = bool(count_refused)
        self._log: deque[float] = deque()

    def _prune(self, now: float) -> None:
        log = self._log
        while log and log[0] <= now - self.window:
            log.popleft()

    def take(self, now: float) -> bool:
        """Count a request at ``now``; return whether the window had room for it."""
        self._prune(now)
        allowed = len(self._log) < self.limit
        if allowed or self.count_refused:
            self._log.append(now)
            if len(self._log) > self.limit:  # only the newest ``limit`` can still matter
                self._log.popleft()
        return allowed

    def remaining(self, now: float) -> int:
        """Requests that would be allowed at ``now``."""
        self._prune(now)
        return max(self.limit - len(self._log), 0)

    def reset(self, now: float) -> float:
        """Seconds from ``now`` until the oldest counted request leaves the window (0.0 when none is counted).

        When the window is full that is when one more request is allowed; while requests are left
        it is still the oldest one's end, as ``limits``' moving window announces it (Flask-Limiter's
        ``X-RateLimit-Reset``): the moment the budget starts to come back, not "now".
        """
        self._prune(now)
        if not self._log:
            return 0.0
        return max(self._log[0] + self.window - now, 0.0)


class RequestRate:
    """HAProxy's ``http_req_rate(period)`` stick-table counter, with a deny rule ``gt limit``.

    Every request increments the counter, refused ones included (the table
    tracks a request before the rule refuses it). The counter is HAProxy's
    ``freq_ctr``: a count for the current period and the previous one's,
    read as ``current + previous * (time left in the period / period)``. A
    request is allowed while that reading, the request counted, is at most
    ``limit``. A client that goes over keeps itself refused for as long as it
    keeps sending. HAProxy's periods follow its own clock, not the client's
    first request: ``phase`` is the share of a period already gone when the
    first request comes (0: periods start with it).

    Args:
        limit: the highest rate reading allowed, at least 1.
        period: the counter's period in seconds.
        phase: the share of the first period gone at the first request, 0 to 1 (1 is 0).
    """

    __slots__ = ("_current", "_previous", "_start", "limit", "period", "phase")

    def __init__(self, limit: int, period: float, phase: float = 0.0) -> None:
        self.limit = _count("limit", limit)
        self.period = _positive("period", period)
        if isinstance(phase, bool) or not (isinstance(phase, int | float) and 0.0 <= phase <= 1.0):
            raise ValueError(f"phase must be a number from 0 to 1, got {phase!r}")
        self.phase = float(phase)
        self._start: float | None = None
        self._current = 0
        self._previous = 0

    def _roll(self, now: float) -> float:
        if self._start is None:
            self._start = now - self.phase * self.period
        if now >= self._start + self.period:
            periods = math.floor((now - self._start) / self.period)
            self._previous = self._current if periods == 1 else 0
            self._current = 0
            self._start += periods * self.period
        return self._start

    def reading(self, now: float) -> float:
        """The counter's value at ``now``, before any request then."""
        start = self._roll(now)
        left = max(start + self.period - now, 0.0) / self.period
        return self._current + self._previous * left

    def take(self, now: float) -> bool:
        """Count a request at ``now``; return whether the rule lets it through."""
        self._roll(now)
        self._current += 1
        return self.reading(now) <= self.limit


class SlotCap:
    """At most ``cap`` requests at once, each slot freed ``lag`` seconds after its answer left.

    HAProxy's ``conn_cur`` and servers with a worker pool free a slot a
    moment after the client has its answer: a client that sends again the
    moment it reads an answer may find its own slot still taken.

    Args:
        cap: the most slots held at once, at least 1.
        lag: seconds a slot stays taken after its answer (0 frees it at once).
    """

    __slots__ = ("_held", "_releases", "cap", "lag")

    def __init__(self, cap: int, lag: float = 0.0) -> None:
        self.cap = _count("cap", cap)
        if isinstance(lag, bool) or not (isinstance(lag, int | float) and math.isfinite(lag) and lag >= 0):
            raise ValueError(f"lag must be a finite number >= 0, got {lag!r}")
        self.lag = float(lag)
        self._held = 0
        self._releases: deque[float] = deque()

    def busy(self, now: float) -> int:
        """Slots taken at ``now``: requests in flight and slots not yet freed."""
        releases = self._releases
        while releases and releases[0] <= now:
            releases.popleft()
        return self._held + len(releases)

    def acquire(self, now: float) -> bool:
        """Take a slot at ``now`` if one is free; return whether one was."""
        if self.busy(now) >= self.cap:
            return False
        self._held += 1
        return True

    def release(self, now: float) -> None:
        """The answer of a request holding a slot left at ``now``: free its slot ``lag`` later."""
        if self._held <= 0:
            raise RuntimeError("release() without a matching acquire()")
        self._held -= 1
        if self.lag > 0:
            # Answers leave in time order; a release out of order is kept sorted all the same.
            self._releases.append(now + self.lag)
            if len(self._releases) > 1 and self._releases[-2] > self._releases[-1]:
                self._releases = deque(sorted(self._releases))
