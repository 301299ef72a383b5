"""Rampup's record of a scope's sends: the measured send rate, and what it lets the scope send.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the rules):
the rate only grows while the scope uses it, and what the scope may send is
capped at twice the rate it has been sending, so an idle scope neither learns
nor banks a rate it never tried.

It also keeps the send times of the requests still out, so that a request out
far longer than the site's answers take, while requests sent after it come
back quickly, is seen as a straggler (hung at the site) before it answers.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import Protocol

from ._rampup_tuning import TUNING as T
from ._shared_rules import GAP_WEIGHT, spacing

__all__ = ["NEVER", "SendRecord"]


NEVER = float("-inf")
#: A scope unsent for this many windows has learned nothing worth keeping: its record may be dropped
#: (``is_idle``) and a fresh one made when it sends again. By then what it may send is back near
#: its starting rate anyway (capped at ``T.sent_cap`` times a send rate that fell to nothing), and
#: its pushback count is empty; a memory bound, not a number the pace depends on while a scope sends.
IDLE_WINDOWS = 2.0
#: Two send times this close are one send (a send time given back as ``now - elapsed`` may differ by
#: a rounding error).
_SAME_SEND = 1e-6


class _SendRecordState(Protocol):
    """What the methods of :class:`SendRecord` use of the controller."""

    start_rate: float
    rate: float
    window: float
    _gap: float | None
    _sent_at: float
    _resumed_at: float
    _last_growth: float
    _door: float
    _outstanding: deque[float]
    _merged: bool
    latency: float | None
    _cycle_start: float
    _cycle_ok: int
    _acc_base: int
    _acc_cycle: float

    def sent_rate(self, now: float) -> float: ...
    def door_gap(self, gap: float, announced: bool = False) -> float: ...
    def _sent_weight(self) -> float: ...
    def hold(self, until: float) -> None: ...
    def _start_floor(self, door: bool = True) -> float: ...
    def _episode_cap(self, allowed: float) -> float: ...


class SendRecord:
    """The sends part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    _gap: float | None  # declared for the assignments below, which might narrow it

    def sent_rate(self: _SendRecordState, now: float) -> float:
        """The measured send rate: the inverse of the mean gap between recent sends.

        The time since the last send counts as a gap too, so the rate of a
        scope that stopped sending falls off at once. Not while it waits on its
        own requests: with requests out, no slot frees before the oldest is
        answered (its send plus the smoothed latency), and a scope whose slots
        are all out sends nothing till then. Counting that wait as idleness cut
        what it may send, and with it its slots, each time a round of slots
        came back together (a server that answers 16 in flight a little
        slower than 12: 3-4 in flight after each round, 0.8 of its capacity).
        """
        if self._sent_at == NEVER:
            return 0.0
        last = max(self._sent_at, self._resumed_at)
        if self._outstanding and self.latency is not None:
            last = max(last, self._outstanding[0] + self.latency)
        since = now - last
        gap = max(self._gap if self._gap is not None else T.round, since)
        return 1.0 / gap if gap > 0.0 else math.inf

    @property
    def mean_gap(self: _SendRecordState) -> float | None:
        """The mean gap between sends, in seconds (None before the second send)."""
        return self._gap

    def allowed_rate(self: _SendRecordState, now: float) -> float:
        """The rate the scope may send at now: :attr:`rate`, capped by what it has been sending,
        and never under the start phase's floor (``_rampup_start``: one request in flight back to back)."""
        cap = max(self.start_rate, T.sent_cap * self.sent_rate(now))
        allowed = self.rate if self.rate <= cap else cap
        floor = self._start_floor()
        return self._episode_cap(floor if floor > allowed else allowed)


    def door_gap(self: _SendRecordState, gap: float, announced: bool = False) -> float:
        """The delay from the last send when sends are ``gap`` apart: ``gap``, or longer after an early send.

        See :meth:`on_send`: the scope's second send may go early, as soon as
        the first is answered (robots.txt through the start phase's door, or an
        answer slow enough to open the window of one). Unless the answers since
        showed service time (the window of one then paces the scope, one request
        in flight), that early send is the one extra request the polite start
        allows: the next keeps at least the starting gap (``1 / start_rate``)
        after it. From the early send, not the first: the first answer's time
        bounds when the first request arrived, its send does not (a new
        connection, a loaded crawler). A robots.txt answered in 0.3 s, a first
        page at once and the next one gap after it put robots.txt and two pages
        within one second, one too many for a limit under one a second. Under a
        pace the server announced (``announced``) the next is due two gaps after
        the send before the early one, where it would have been without it: a
        budget of two a second must not see robots.txt, the first page and two
        more pages inside one second.
        """
        door = self._door
        if door == NEVER or self._start_floor(door=False) > 0.0:
            return gap
        if announced:
            return max(gap, door + 2.0 * gap - self._sent_at)
        return max(gap, 1.0 / self.start_rate)

    @property
    def went_early(self: _SendRecordState) -> bool:
        """Whether the last send went early, through the start phase's door or window of one
        (:meth:`door_gap` then sets when the next is due)."""
        return self._door != NEVER

    def is_idle(self: _SendRecordState, now: float) -> bool:
        """True once the scope has sent nothing for a while: a new controller would do as well."""
        return now - self._sent_at >= IDLE_WINDOWS * self.window

    # -- events ----------------------------------------------------------------

    def on_send(self: _SendRecordState, now: float, due: float | None = None) -> None:
        """Count a send towards the measured send rate; ``due``: when the scope's pace let it go (the
        gap counted is then the one it was due at, or its lateness if longer: ``spacing``)."""
        last = self._sent_at
        self._door = NEVER  # only the send right after the door's keeps the door's time
        if last == NEVER:
            self._last_growth = now  # growth is counted from the first send
        else:
            since = max(last, self._resumed_at)
            gap, mean = now - since, self._gap
            if mean is None and self.rate > 0.0 and gap < 1.0 / self.rate:
                # A second send before the rate's gap went through ``_rampup_start``'s door.
                # It is no rate the scope sent at: the first gap counts as the rate's (a mean
                # that took it would lift the send-rate cap off the climb). Under a pace the
                # server announced, the send after it keeps the time it had without the door
                # (see door_gap).
                self._door = last
                gap = 1.0 / self.rate
            else:
                gap = spacing(now, since, due)
            if gap < 0.0:
                gap = 0.0
            weight = self._sent_weight()  # GAP_WEIGHT but in a quick start phase
            self._gap = gap if mean is None else mean + weight * (gap - mean)
        self._sent_at = now

    def out(self: _SendRecordState, sent_at: float) -> None:
        """A request sent at ``sent_at`` is out until :meth:`settled` (its scope tells both ends)."""
        self._outstanding.append(sent_at)

    def also_out(self: _SendRecordState, sends: Sequence[float]) -> None:
        """Requests sent at ``sends`` are out, whether or not this record heard of them (:meth:`out`).

        A fleet's shared record hears of no send as it goes (a store's admission
        changes no stored state): each worker's release adds the requests that
        worker still has out, so that the stragglers of every worker count.
        """
        self._merged = True
        out = self._outstanding
        new = [at for at in sends if not any(abs(at - known) <= _SAME_SEND for known in out)]
        if new:
            merged = sorted([*out, *new])  # oldest first, as sends come
            out.clear()
            out.extend(merged)  # the newest ``maxlen`` stay

    def settled(self: _SendRecordState, sent_at: float) -> None:
        """The request sent at ``sent_at`` is over (answered, failed or abandoned): it is out no more."""
        out = self._outstanding
        for i, at in enumerate(out):  # oldest first: answers mostly come in the order of their sends
            if abs(at - sent_at) <= _SAME_SEND:
                del out[i]
                return

    def _count_stragglers(self: _SendRecordState, now: float, sent_at: float, span: float) -> int:
        """Requests sent before ``sent_at`` (whose answer just came) and out for longer than ``span``.

        A request out for a whole window is dropped: an outcome never reported
        (a request abandoned by its caller) must not hold a slot for ever.
        """
        out = self._outstanding
        while out and out[0] <= now - self.window:
            out.popleft()
        return sum(1 for at in out if at < sent_at and now - at > span)

    def hold(self: _SendRecordState, until: float) -> None:
        """The server asked for silence until ``until`` (``Retry-After``): resume where it left off.

        Nothing is sent during the hold, so without this rule the measured send
        rate would fall towards zero, and what the scope may send (capped at
        twice that) with it: after a five-second hold the scope would start over
        from its starting rate. The silence is the server's, not a sign that the
        scope stopped using its rate, so it is left out of the gaps: the first
        sends after the hold may go at the rate that was in force (already cut
        by the refusal that brought the hold), paced by the delay as before, so
        there is no burst either.
        """
        if until > self._resumed_at:
            self._resumed_at = until

    @property
    def resumed_at(self: _SendRecordState) -> float:
        """When the scope's latest silence that was not its own (a hold, hung slots) ended."""
        return self._resumed_at

    def hung_silence(self: _SendRecordState, now: float, elapsed: float | None) -> None:
        """A request that hung (no answer while the site's answers stay quick) is over.

        If the scope sent nothing for most of the ``elapsed`` seconds it hung, the
        hung requests held its slots: the silence is theirs, not the scope's
        choice, and is left out of the measured send rate as a server's hold is
        (:meth:`hold`). Otherwise the rate fell to nearly nothing in it, and the
        scope started over at its starting rate once the hangs timed out.
        """
        if elapsed is not None and now - self._sent_at >= 0.5 * elapsed:
            self.hold(now)

    def sync_sends(self: _SendRecordState, gap: float | None, last: float,
                   spacing: float | None = None) -> None:
        """Take the send record kept elsewhere: a shared store counts every worker's sends.

        The store's mean gap weighs each new gap by ``GAP_WEIGHT``; while the
        start phase weighs them more (it doubles the rate every round, and a
        slow mean would hold the climb back), the spacings of the sends this
        worker made are weighed here instead, as :meth:`on_send` would.

        Args:
            gap: the mean gap between the scope's sends (weighted as in
                :meth:`on_send`), or ``None`` after a single send.
            last: when the scope last sent.
            spacing: the seconds between one of this worker's sends and the
                scope's send before it (any worker's), if known.
        """
        if self._sent_at == NEVER:
            self._last_growth = last
        weight = self._sent_weight()
        if spacing is not None and weight != GAP_WEIGHT:
            mean = self._gap
            if mean is None and self.rate > 0.0 and spacing < 1.0 / self.rate:
                spacing = 1.0 / self.rate  # a send through the start's door, as in on_send
            self._gap = spacing if mean is None else mean + weight * (spacing - mean)
        elif gap is not None:
            self._gap = gap
        if last > self._sent_at:
            # A send after the one this record knows: the early send's successor has gone, so the
            # door's time is spent, as on_send forgets it at the next send (a fleet calls on_send
            # only for the send through the door; kept, door_gap held the scope at its starting gap).
            self._door = NEVER
            self._sent_at = last

    def sync_accepted(self: _SendRecordState, accepted: int) -> None:
        """Take the count of the scope's accepted answers kept elsewhere, before an outcome is applied.

        The overshoot episodes' fit (``_rampup_episode``) divides the answers
        accepted in a cycle by the cycle's length. A shared store's workers each
        count in their own copy of the policy only the answers they applied since
        they last read the stored one (an answer that changes nothing the scope
        admits by is not written back), so the fit read a fraction of the cycle:
        a fleet of 8 paced a window of 22/s at 2.7/s for good, with no refusal.
        The store counts every worker's accepted answers; the count at the
        cycle's start (:meth:`rebase_accepted`) makes the cycle's own count exact.

        Args:
            accepted: the scope's accepted answers over every worker, this one not included.
        """
        start = self._cycle_start
        if start == NEVER:
            return
        if self._acc_cycle == NEVER:
            # The first cycle runs from the scope's first accepted answer: every one counts.
            self._acc_base, self._acc_cycle = 0, start
        elif self._acc_cycle != start:
            # A cycle this copy began without the count (another worker's copy may have ended the
            # episode): its own count stands, and is exact from here on.
            self._acc_base, self._acc_cycle = accepted - self._cycle_ok, start
        self._cycle_ok = max(0, accepted - self._acc_base)

    def rebase_accepted(self: _SendRecordState, accepted: int) -> None:
        """After an outcome given to :meth:`sync_accepted`: a cycle it began counts from ``accepted``
        (the scope's accepted answers over every worker, this one included)."""
        start = self._cycle_start
        if start != NEVER and self._acc_cycle != start:
            self._acc_base, self._acc_cycle = accepted - self._cycle_ok, start

    def door_passed(self: _SendRecordState) -> None:
        """A send after the one through the start phase's door is known: a refusal is that send's
        no longer (:meth:`on_send` forgets the door at the next send; a shared store's worker,
        which records no send here, calls this for every answer but its own door send's). A
        fleet's copy kept the door for good and excused every refusal answered within a
        millisecond of its send as the door's: a quick limiter's refusals were never counted."""
        self._door = NEVER

    def own_mean(self: _SendRecordState) -> bool:
        """Whether the mean gap between sends is this record's own, weighted as :meth:`sync_sends`
        describes (a quick start phase), rather than the shared store's mean, which weighs every
        new gap by ``GAP_WEIGHT``. When it stops being its own, the store's lags the start's
        quick gaps: a shared store then takes this record's mean as its own (see
        ``stores/redis/_redis_release.py``)."""
        return self._sent_weight() != GAP_WEIGHT
