"""Admission of one scope: slots, the delay between sends, the delay per slot.

Pure state plus ``now``: nothing here reads a clock, sleeps or awaits.

A scope has ``concurrency`` slots. A request may be sent when

* fewer than ``concurrency`` requests of the scope are in flight,
* at least ``delay`` has passed since the scope's previous send, and
* some idle slot has rested ``delay_per_slot`` since *its* previous send, and
  ``rest`` since its previous answer.

Slots are interchangeable, so the state keeps no slot identities: only the
times at which the idle slots that are still resting become usable again, in a
min-heap. A slot whose rest is over is indistinguishable from one never used,
so it is dropped from the heap; "fresh" slots are simply those neither in
flight nor resting. This keeps the state of an idle scope a few numbers, and
the cost of an admission O(log concurrency).

Jitter is drawn once per send and applied to both delays of that send, so the
spread the user asked for shows up in the spacing instead of being masked by
whichever of the two delays is not jittered.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TypeAlias

from ._shared_rules import rested

__all__ = ["Demand", "Limits", "ScopeState"]

#: One scope a request counts against, with the quota it is expected to use.
Demand: TypeAlias = tuple[str, float]

_NEVER = float("-inf")


@dataclass(frozen=True, slots=True)
class Limits:
    """The effective admission limits of a scope at one moment."""

    concurrency: int
    delay: float
    delay_per_slot: float
    #: No jittered delay may go below this (a Crawl-Delay, a server's pace).
    floor: float = 0.0
    #: How long a slot rests after its request's answer before it sends again: a server that frees
    #: a slot a moment after its answer leaves (HAProxy's ``conn_cur``, nginx's ``limit_conn``)
    #: refuses a request sent on a slot the moment it is released.
    rest: float = 0.0


def _woken(ready: float, last: float, shift: float, scale: float) -> float:
    """When a slot resting until ``ready`` wakes once the per-slot delay shrinks by ``shift``,
    to ``scale`` times what it was; ``last`` is the scope's latest send.

    As if it had been sent under the shorter delay: its rest was the old delay
    times its jitter, so the shorter one times the same jitter. The slot's own
    send time is not kept, but it is no later than ``last``, so scaling the
    rest left after ``last`` wakes it no sooner than that; taking the shift off
    does the same, and the sooner of the two is the one to keep. (Taking the
    shift off alone left a rest as long as the old delay's jitter: up to 50 ms
    after a one-second starting per-slot delay, before the first page after
    robots.txt.) Both move every slot the same way, so a heap keeps its order.
    """
    return min(ready - shift, last + (ready - last) * scale)


class ScopeState:
    """Admission state of one scope.

    Attributes:
        limits: the limits in force; replace with :meth:`set_limits`.
        inflight: admitted requests not yet released.
        next_send: earliest time the scope's delay allows another send.
        sends: requests admitted over the state's lifetime.
    """

    __slots__ = ("_resting", "inflight", "last_send", "limits", "next_send", "sends")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.inflight = 0
        self.next_send = _NEVER
        self.last_send = _NEVER
        self.sends = 0
        # Created on the first resting slot: most scopes (delay_per_slot 0, or
        # slow responses) never need it, and an empty list costs 56+ bytes.
        self._resting: list[float] | None = None

    # -- queries -----------------------------------------------------------

    def ready_at(self, now: float) -> float | None:
        """Return when a send could next be admitted.

        A value ``<= now`` means "now". ``None`` means every slot is in flight,
        so only a release can make room.
        """
        concurrency = self.limits.concurrency
        if self.inflight >= concurrency:
            return None
        resting = self._resting
        if not resting:
            return self.next_send
        while resting and resting[0] <= now:
            heapq.heappop(resting)
        if self.inflight + len(resting) < concurrency:
            return self.next_send
        # Every slot not in flight is resting; the first to wake decides. When
        # the limits shrank, more slots may be resting than there is room for.
        excess = self.inflight + len(resting) - concurrency
        wake = resting[0] if excess == 0 else heapq.nsmallest(excess + 1, resting)[-1]
        return wake if wake > self.next_send else self.next_send

    def is_idle(self, now: float) -> bool:
        """True when the state holds nothing a fresh state would not.

        Such a scope can be forgotten and recreated later with no change in
        behaviour.
        """
        if self.inflight or self.next_send > now:
            return False
        resting = self._resting
        while resting and resting[0] <= now:
            heapq.heappop(resting)
        return not resting

    @property
    def resting(self) -> int:
        """Idle slots still waiting out their per-slot delay."""
        return len(self._resting) if self._resting else 0

    # -- transitions -------------------------------------------------------

    def admit(self, now: float, factor: float = 1.0) -> float:
        """Record a send at ``now``; the caller checked :meth:`ready_at` first.

        Args:
            now: the send time.
            factor: the jitter multiplier drawn for this send.

        Returns:
            When the slot used by this send may send again; hand it back to
            :meth:`release`.
        """
        limits = self.limits
        self.inflight += 1
        self.sends += 1
        self.last_send = now
        if factor == 1.0:
            self.next_send = now + limits.delay
            # A ready scope always has a fresh slot (ready_at dropped the slots
            # whose rest is over), so the send takes that one: nothing to pop.
            return now + limits.delay_per_slot
        floor = limits.floor
        delay = limits.delay * factor
        self.next_send = now + (delay if delay > floor else floor)
        return now + limits.delay_per_slot * factor

    def release(self, slot_ready: float, now: float) -> None:
        """Return a slot once its request is answered (or failed): it rests till ``slot_ready`` and at
        least ``limits.rest`` from ``now``."""
        self.inflight -= 1
        slot_ready = rested(slot_ready, now, self.limits.rest)
        if slot_ready <= now:
            return  # the slot rested while its request was out: it is fresh
        resting = self._resting
        if resting is None:
            if self.inflight < self.limits.concurrency:
                self._resting = [slot_ready]
        elif self.inflight + len(resting) < self.limits.concurrency:
            heapq.heappush(resting, slot_ready)

    def set_limits(self, limits: Limits) -> None:
        """Change the limits; slots beyond a lower concurrency are retired.

        A new delay applies from the previous send at once, both ways: a scope
        that just backed off must not send the request already scheduled under
        the old, shorter delay, and one whose delays shrank (a server announced
        a larger budget, rampup sped up) need not wait out the old, longer ones.
        """
        old, last = self.limits.delay, self.last_send
        if last != _NEVER and limits.delay != old:
            if limits.delay > old:
                self.next_send = max(self.next_send, last + limits.delay)
            else:
                self.next_send = min(self.next_send, last + max(limits.delay, limits.floor))
        shift = self.limits.delay_per_slot - limits.delay_per_slot
        if shift > 0.0 and self._resting:
            self._resting = [_woken(ready, last, shift, limits.delay_per_slot / self.limits.delay_per_slot)
                             for ready in self._resting]
        self.limits = limits
        room = max(0, limits.concurrency - self.inflight)
        if self._resting and len(self._resting) > room:
            self._resting = heapq.nsmallest(room, self._resting)

    def __repr__(self) -> str:
        limits = self.limits
        return (f"<ScopeState inflight={self.inflight}/{limits.concurrency} "
                f"delay={limits.delay:g}s per_slot={limits.delay_per_slot:g}s "
                f"resting={self.resting} sends={self.sends}>")
