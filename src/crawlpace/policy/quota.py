"""Quota of one scope: at most ``quota`` units in any span of ``window`` seconds, paced.

Pure state plus ``now``: nothing here reads a clock, sleeps or awaits.

The quota is a token bucket. It holds at most ``capacity`` units of credit,

    capacity = quota * min(0.1, 60 / window)

and refills at ``rate = (quota - capacity) / window`` units per second, so that
``capacity + rate * window == quota``. A request of ``use`` units is admitted
once the credit covers it, and the credit drops by ``use``. Since the credit
never exceeds ``capacity`` and (for requests no larger than ``capacity``) never
drops below zero, the units admitted within any closed span of ``window``
seconds are at most the credit at its start plus the refill during it, i.e. at
most ``quota``.

Short windows may spend a tenth of the quota at once and then run at nine
tenths of the quota per window; long ones (a daily quota) get only about a
minute's worth at once and run at nearly the full quota, spread evenly over the
window, so that the end of the window still has budget however greedy the
callers are. (A larger burst would cost sustained speed: with half the quota
as burst, a short window would deliver only half its quota in every window
after the first.)

Requests larger than ``capacity`` (but within ``quota``) wait for a full bucket
and then drive the credit negative; the refill pays that debt back before
anything else goes. Such a request may make a span of ``window`` seconds admit
up to ``use - capacity`` units more than ``quota``.

Ready times are a function of the stored state only (credit and the time it was
last settled), never of the ``now`` passed in. Asking again at the returned
time therefore gives the same answer, so an admission at its ready time can
never be refused because of rounding, with no tolerance to tune. A rounding
shortfall at admission leaves the credit a hair below zero, which delays the
next request by as little; it does not accumulate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._shared_rules import refill

__all__ = ["QuotaBucket", "QuotaSnapshot", "quota_share"]

_NEVER = float("-inf")
_FOREVER = float("inf")


def quota_share(use: float, remaining: float) -> float:
    """Return the portion of the remaining quota a request would consume.

    Schedulers use it to prefer requests that take a larger bite of what is left.

    Args:
        use: the units the request declares.
        remaining: the credit left in its quota.

    Returns:
        ``use / remaining``; +inf when nothing remains and ``use > 0``; 0.0 when
        ``use <= 0``.
    """
    if use <= 0:
        return 0.0
    if remaining <= 0:
        return _FOREVER
    return use / remaining


@dataclass(frozen=True, slots=True)
class QuotaSnapshot:
    """A read-only view of a quota at one moment.

    Attributes:
        quota: units allowed per window.
        window: the window, in seconds.
        capacity: the most credit the bucket can hold.
        remaining: credit available now; negative while paying back a debt.
        outstanding: units charged that the refill has not yet paid back
            (``capacity - remaining``); an estimate of the recent use.
        full_in: seconds until the bucket is full again.
        next_unit_in: seconds until one more unit (or the whole quota, if
            smaller) can be admitted.
    """

    quota: float
    window: float
    capacity: float
    remaining: float
    outstanding: float
    full_in: float
    next_unit_in: float


class QuotaBucket:
    """Token bucket enforcing ``quota`` units per ``window`` seconds for one scope."""

    __slots__ = ("_at", "_capacity", "_credit", "_quota", "_rate", "_window")

    def __init__(self, quota: float, window: float, *, capacity: float | None = None) -> None:
        """Set up a full bucket.

        Args:
            quota: units allowed in any span of ``window`` seconds.
            window: the span, in seconds.
            capacity: the largest burst, below ``quota``; by default the
                module's rule (a tenth of the quota, or a minute's worth).

        Raises:
            ValueError: when either is not a finite number above zero, or the
                capacity is not within ``(0, quota)``.
        """
        if not (math.isfinite(quota) and quota > 0):
            raise ValueError(f"quota must be a finite number > 0, not {quota!r}")
        if not (math.isfinite(window) and window > 0):
            raise ValueError(f"window must be a finite number > 0, not {window!r}")
        if capacity is not None and not 0 < capacity < quota:
            raise ValueError(f"capacity must be within (0, quota={quota!r}), not {capacity!r}")
        self._quota = quota
        self._window = window
        self._capacity = quota * min(0.1, 60.0 / window) if capacity is None else capacity
        self._rate = (quota - self._capacity) / window
        # The credit as of time _at; -inf means "full since forever".
        self._credit = self._capacity
        self._at = _NEVER

    @property
    def quota(self) -> float:
        """Units allowed in any span of ``window`` seconds."""
        return self._quota

    @property
    def window(self) -> float:
        """The span the quota applies to, in seconds."""
        return self._window

    @property
    def capacity(self) -> float:
        """The most credit the bucket holds: the largest burst."""
        return self._capacity

    @property
    def rate(self) -> float:
        """Refill speed in units per second."""
        return self._rate

    # -- queries -----------------------------------------------------------

    def fits(self, use: float) -> bool:
        """False when a request of ``use`` units can never be admitted (it exceeds the quota)."""
        return use <= self._quota

    def remaining(self, now: float) -> float:
        """Credit available at ``now``; negative while a debt is being paid back."""
        return refill(self._credit, self._at, self._capacity, self._rate, now)

    def ready_at(self, now: float, use: float) -> float:
        """Return the earliest time a request of ``use`` units can be admitted.

        Args:
            now: the current time; the answer does not depend on it, so asking
                again at the returned time gives the same answer.
            use: the units the request declares.

        Returns:
            A value ``<= now`` means "now". -inf for ``use == 0``; +inf when
            ``use`` exceeds the quota. A request larger than ``capacity``
            waits for a full bucket.

        Raises:
            ValueError: when ``use`` is negative or not a number.
        """
        if not use >= 0:
            raise ValueError(f"use must be >= 0, not {use!r}")
        if use == 0:
            return _NEVER
        if use > self._quota:
            return _FOREVER
        need = min(use, self._capacity)
        credit = self._credit
        if credit >= need:
            return self._at
        if self._rate <= 0:  # only when window is so large that the rate underflows
            return _FOREVER
        return self._at + (need - credit) / self._rate

    def is_idle(self, now: float) -> bool:
        """True when the bucket is full again: indistinguishable from a fresh one."""
        return self.remaining(now) >= self._capacity

    def snapshot(self, now: float) -> QuotaSnapshot:
        """Describe the bucket as of ``now``."""
        remaining = self.remaining(now)
        outstanding = self._capacity - remaining
        unit = self.ready_at(now, min(1.0, self._quota))
        return QuotaSnapshot(
            quota=self._quota,
            window=self._window,
            capacity=self._capacity,
            remaining=remaining,
            outstanding=outstanding,
            full_in=outstanding / self._rate if outstanding > 0 else 0.0,
            next_unit_in=max(0.0, unit - now),
        )

    # -- transitions -------------------------------------------------------

    def consume(self, now: float, use: float) -> None:
        """Record the admission of a request of ``use`` units; the caller checked :meth:`ready_at`."""
        if not use >= 0:
            raise ValueError(f"use must be >= 0, not {use!r}")
        self._settle(now)
        self._credit -= use

    def adjust(self, now: float, delta: float) -> None:
        """Reconcile a declared use with the actual one.

        Args:
            now: the current time.
            delta: actual minus declared units. A positive delta charges more
                (the credit may go negative); a negative one refunds, but never
                beyond ``capacity``.
        """
        self._settle(now)
        self._credit = min(self._capacity, self._credit - delta)

    def _settle(self, now: float) -> None:
        """Fold the refill up to ``now`` into the stored credit."""
        if now > self._at:
            self._credit = self.remaining(now)
            self._at = now

    def __repr__(self) -> str:
        return (f"<QuotaBucket {self._quota:g}/{self._window:g}s capacity={self._capacity:g} "
                f"credit={self._credit:g}>")
