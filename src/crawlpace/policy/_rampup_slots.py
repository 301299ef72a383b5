"""Rampup's slots: how many the rate and latency call for, and the cap a server limiting them sets.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the rules):
the slots follow the baseline latency, grow by the requests that hang, and a
refusal on arrival with several in flight caps them below that count (at that
count, when as many were accepted in flight before: a slot freed late), raised
by one after every window without a pushback. Once latency passes the knee on a
server slower than ``T.latency_noise``, the load fit holds them instead
(:meth:`SlotSizing._judge_load`): the count in flight that serves the most.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Protocol

from ._load_errors import CROWD, crowded, scattered, tallied
from ._rampup_latency import LOAD_COUNTS
from ._rampup_sends import _SAME_SEND
from ._rampup_tuning import TUNING as T
from ._shared_rules import LATENCY_WEIGHT

_NEVER = float("-inf")

__all__ = ["SlotSizing"]




class _SlotSizingState(Protocol):
    """What the methods of :class:`SlotSizing` use of the controller."""

    max_concurrency: int
    phase: str
    slot_cap: float
    _cap_at: float
    _queue_cap: bool
    _inflight_ok: int
    _ok_at: float
    _ok_below: int
    _ok_since: float
    _answers: tuple[float, ...]
    _lag_lo: float
    _lag_hi: float
    _lag_probe: float
    _lag_gap: float
    _lag_at: int
    _rests: bool
    _lag_seen: int
    _crowd_n: tuple[float, ...]
    _crowd_quick: tuple[float, ...]
    _slot_ok: tuple[float, ...]
    _slot_refused: tuple[float, ...]
    _held_over: float
    _lease_on: float
    _lease_all: float
    _lease_at: float
    _outstanding: deque[float]
    _stuck_share: float
    _stuck_time: float
    latency: float | None
    window: float
    _low_latency: float
    _knee_hold: int
    _knee_at: float
    _answered_at: float
    _sent_at: float
    _load_since: float
    _slots_open: int
    _opened_at: float
    max_rate: float
    ceiling: float | None
    _belief: tuple[float, ...]
    _held_asked: bool

    rate: float
    _samples: int
    _lone_refused: bool
    _level: int
    _stragglers: int
    _hung: int
    _merged: bool
    _slow_last: bool
    _hung_sends: tuple[float, ...]
    _own: tuple[list[float], list[float]] | None

    def baseline(self) -> float | None: ...
    def best_load(self) -> int | None: ...
    def throughput(self, inflight: int) -> float | None: ...
    def _forget_load(self, inflight: int) -> None: ...
    def _note_held(self, now: float, sent_at: float | None, latency: float | None) -> None: ...
    def _most_slots(self) -> int: ...
    def _out_span(self) -> float | None: ...
    def _slot_reused(self, inflight: int) -> bool: ...
    def _met(self, inflight: int | None, sent_at: float | None, elapsed: float | None) -> int | None: ...
    def _outlier_span(self, early: bool = False) -> float | None: ...
    def _hung_at(self, sent_at: float | None, sends: Iterable[float] | None = None) -> int: ...
    def hung_out(self, now: float) -> tuple[int, float]: ...
    def _others_hung(self, now: float) -> list[float]: ...
    def _rest_before(self, sent: float, held: int = 1) -> float | None: ...
    def _hold_load(self, now: float, hold: int, best: int | None) -> None: ...
    def _decide(self, now: float, decision: str) -> None: ...
    def refused_on_arrival(self, answered: bool, elapsed: float | None, inflight: int | None, *,
                           sent_at: float | None = None, out: Sequence[float] | None = None) -> bool: ...
    def _refused_at(self, answered: bool, elapsed: float | None, inflight: int) -> bool: ...
    def cap_in_transit(self, answered: bool, elapsed: float | None, met: int | None) -> bool: ...
    def _accepted_leases(self, count: int | None, at: float | None = None) -> int | None: ...
    def _quick(self, answered: bool, elapsed: float | None) -> bool: ...
    def _door_open(self) -> bool: ...
    def sent_rate(self, now: float) -> float: ...
    def _cap_queue(self, now: float) -> None: ...
    def allowed_rate(self, now: float) -> float: ...
    def pushbacks(self, now: float) -> int: ...
    def slot_limit(self) -> int: ...
    def slot_rest(self) -> float: ...
    def _note_late(self, sent: float, inflight: int) -> None: ...
    def _miscounted(self, inflight: int) -> bool: ...
    def concurrency(self, rate: float) -> int: ...
    def crowded(self, met: int, now: float | None = None) -> bool: ...
    def _passed(self, now: float) -> tuple[float, ...]: ...


class SlotSizing:
    """The slots part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)

    def concurrency(self: _SlotSizingState, rate: float) -> int:
        """Slots enough for ``rate``, with room for the latency's swings.

        Once a baseline is known the slots follow it (``T.knee`` times the
        requests in flight at ``rate`` and the baseline latency, plus one): a server
        that queues answers ever more slowly, and slots counted from its slow answers
        would let the queue grow further, which is how an overloaded server's
        throughput collapses. Before that, twice the smoothed latency is the guess,
        and before any latency, a second's worth of sends (``T.round``).
        """
        if self._door_open():
            return 1  # robots.txt's door lets one send through, not a slot per worker
        if self._knee_hold > 0:
            # The load fit holds a count in flight (:meth:`_judge_load`): the slots, not the rate, pace.
            return max(1, min(self._most_slots(), self._knee_hold, int(min(self.slot_cap, 1e9))))
        base = self.baseline()
        if base is not None:
            span = T.knee * base
        elif self.latency is not None:
            span = 2.0 * self.latency
        else:
            # No page answered yet: the sends of the first second may all be out at once
            # (a server taking seconds per page would otherwise get one request at a time
            # until its first answer, whatever the rate allows).
            span = T.round
        # A slot is held longer than its request is at the site (:meth:`_note_held`): by Little's law
        # the slots that carry ``rate`` hold that time too.
        span += self._held_over
        # Slots held by hangs: their count in flight is Poisson, so its mean plus two deviations,
        # or a few hangs at once leave no slot free and the scope falls silent till they time out.
        # At the learned rate, not the one allowed now: hangs holding the slots slow the sends, and
        # the allowed rate (twice the send rate) with them, which would shrink the slots further.
        # The requests out now far longer than the site's answers take count too (the hangs learned above
        # count only once they end). Neither while latency shows load: a knee slows every answer.
        # The requests out now far past the site's answers (hung_out) hold no slot at all: a cap on
        # requests in flight is judged by answers that come, and an answer that never comes is no
        # sign of load (a 13-ms site capped at 1 slot after a 503 at 2 in flight fell silent for
        # each 10-s hang that took it).
        share = self._stuck_share / (1.0 - (1.0 - T.stuck_share_weight) ** max(1, self._samples))  # unbiased
        stuck = max(rate, self.rate) * share * self._stuck_time
        hung = 0 if self._level else self._hung
        known = float(max(self._stragglers, hung))
        stuck = 0.0 if self._level else max(stuck + 2.0 * math.sqrt(stuck), known)
        slots = min(self.slot_limit() + hung, math.ceil(rate * span + stuck) + 1)
        slots = slots if slots <= self.slot_cap + hung else int(self.slot_cap) + hung
        # Nor against the most slots: at 100/s a site hanging 3 % of its requests for 10 s has about
        # 30 out, and counted against 16 they left the pages a few (0.53 of the clean pace). Only the
        # crawl-wide cap on requests in flight (the throttler's) bounds them.
        return max(1, min(slots, self._most_slots() + hung))

    def _most_slots(self: _SlotSizingState) -> int:
        """The user's cap on requests in flight (``max_concurrency``) as slots: and the whole slots the
        crawler's own time holds at the learned rate (:meth:`_note_held`), which carry no request to
        the site. (None in one process, whose slots are held about as long as their requests are out.)"""
        return self.max_concurrency + int(self.rate * self._held_over)

    def _note_held(self: _SlotSizingState, now: float, sent_at: float | None, latency: float | None) -> None:
        """An accepted answer at ``now`` to a request admitted at ``sent_at`` that the site held ``latency``:
        the slot was held the difference more (the admission to the write, the answer to the release).

        One process writes and releases at once, and its slots hold their requests' latency. A fleet's
        worker waits for the store's grant to come back before it writes and releases through the
        store after its answer: on a loaded machine each slot was held 0.1-0.25 s past a 0.19 s page.
        Its requests at the site are the slots times the share of the slot's time they are there, so
        slots sized for a rate by the latency alone held the site at about half of it (a soft knee of
        11 at 0.19 s: 0.25 of its capacity through slots held 0.2 s longer, no refusal to say why).
        """
        if sent_at is None or latency is None or latency < 0.0:
            return
        over = max(0.0, now - sent_at - latency)
        self._held_over += LATENCY_WEIGHT * (over - self._held_over)

    def note_released_after(self: _SlotSizingState, seconds: float) -> None:
        """The slot of the accepted answer :meth:`_note_held` just timed stays held ``seconds`` more.

        A fleet worker applies the answer before its release reaches the store (the release rides
        with the worker's next call): the store's lease set, whose count each answer comes with,
        holds the slot until then. Traced on real HTTP (a fleet of 4, a loaded machine), 0.14-0.21 s
        more past a 0.26-0.30 s held time."""
        self._held_over += LATENCY_WEIGHT * max(0.0, seconds)

    def note_lease(self: _SlotSizingState, now: float, held: float, refused: bool,
                   latency: float | None) -> None:
        """A fleet worker's answer at ``now`` whose lease in the store's set was held ``held`` seconds
        (grant to release), ``refused`` with ``latency``: a refusal on arrival (:meth:`_quick`) held its
        lease in transit only, never a slot at the site. Noted after the answer's own count was read (it
        was in no count it met). One process does nothing: its counts are the site's."""
        if not self._merged or held <= 0.0:
            return
        on = 0.0 if refused and self._quick(latency is not None, latency) else held
        if on <= 0.0 and self._lease_all <= 0.0:
            # (Nothing accepted noted yet: no share to weigh a refusal against. Taken from a worker's
            # first noted answer, a refusal, the share was 0, its count of 8 leases read as 1 in flight,
            # not a cap's, and the cap's 503s were judged the site's own: 277 refusals in 30 s.)
            return
        self._lease_all += LATENCY_WEIGHT * (held - self._lease_all)
        self._lease_on += LATENCY_WEIGHT * (on - self._lease_on)
        self._lease_at = max(self._lease_at, now)

    def lease_times(self: _SlotSizingState) -> tuple[float, float, float]:
        """This worker's lease times as :meth:`note_lease` keeps them (accepted, all, when the latest was
        noted): its own, which its store keeps across the policy versions it reads."""
        return self._lease_on, self._lease_all, self._lease_at

    def set_lease_times(self: _SlotSizingState, times: tuple[float, float, float]) -> None:
        """Restore :meth:`lease_times` on a copy read from the store (which keeps none)."""
        self._lease_on, self._lease_all, self._lease_at = times

    def _accepted_leases(self: _SlotSizingState, count: int | None, at: float | None = None) -> int | None:
        """A fleet's lease count (``count``, the request's own included, read at ``at``) less the refusals
        in transit in it.

        A lease runs from the store's grant to the release; a refusal on arrival holds one for its whole
        round trip (grant, write, the site's instant 503, read, release) and no slot at the site. While a
        cap refuses, such leases fill the set, and every count read there holds them: an accepted answer's
        (at its grant) and a refusal's (at its answer). By Little's law the share of the set that the
        other leases fill is their share of the lease time (:meth:`note_lease`); the rest of the other
        ``count - 1`` are refusals in transit, taken off in whole requests only (rounded down: a fraction
        of one is none, and with no refusal lately every count is the store's, as before). Both counts
        are read so, the accepted ones and the refused, in one unit: the requests that hold slots.

        Counted whole, a fleet of 4 on a cap of 1 read accepted answers "with 4-10 in flight" among the
        refusals in transit, the most accepted rose to 10, slots opened to 11, and no refusal after that
        was read as the cap's: 436 refusals in 30 s (bench/results/storm5.md). Scaled by the share and
        rounded to the nearest, a second refusal at 9 leases past 8 accepted read 8 (one refusal in
        transit's 0.8 of a request taken off), a slot freed late, where it was past the cap: the rate
        stayed cut (a hard knee of 6: 0.87 -> 0.77 of its capacity, storm5).

        The share is the worker's latest answers', which stand for the set's company for a lease's time
        (the mean noted, ``_lease_all``): the other workers' answers come between. Read later than that
        after its latest noted answer, the refusals it saw have left the set, and the share fades. (A
        worker refused three times in a burst, then with no answer for 0.24 s, read a refusal at 8
        leases past 8 accepted as 7, a slot freed late: a hard knee of 6 capped at 7 leases where its
        8 serve more, 0.87 -> 0.82 of its capacity. Faded from the latest answer on, the share of a
        cap of 1's refusals, 0.07 s apart for a worker of 4, fell under a request's: 394 refusals.)"""
        if count is None or count <= 1 or not self._merged or self._lease_all <= 0.0:
            return count
        transit = max(0.0, 1.0 - self._lease_on / self._lease_all)
        if at is not None and at > self._lease_at + self._lease_all:
            transit *= math.exp(-(at - self._lease_at - self._lease_all) / self._lease_all)
        return count - math.floor((count - 1) * transit + 1e-9)

    def hung_out(self: _SlotSizingState, now: float) -> tuple[int, float]:
        """The requests out at ``now`` for longer than one answer may take without moving the latency
        past the knee (``_outlier_span``), and when the next request out will have been so long
        (``inf``: none). None while latency shows load (a knee slows every answer) or the latest
        answer was itself past the knee line (a queue forming, not a hang: a steep knee's requests
        read as hung opened slots up to its hard limit), nor a request out for a whole window (an
        outcome never reported, as ``_count_stragglers`` drops it).
        """
        span = self._out_span()
        own = self._own
        if span is None or self._level or (self._merged and own is None) or self._slow_last:
            # (A fleet's record of the requests out merges every worker's, and keeps some already
            # answered until a window has passed: read as hung, they lifted a cap of 6 to 10 refusals.
            # A fleet's worker reads its own sends out instead, and the others' hangs they shared.)
            return 0, math.inf
        count, due = (0, math.inf) if own is None else (len(self._others_hung(now)), math.inf)
        for at in self._outstanding if own is None else own[0]:  # (this worker's own: exact)
            if at <= now - self.window:
                continue
            if at + span <= now:  # (the same sum as the due time: a wake at it counts the request)
                count += 1
            else:
                due = min(due, at + span)
        return count, due

    def _out_span(self: _SlotSizingState) -> float | None:
        """How long a request may be out (from its admission) before it counts as hung: the longest
        answer that does not move the latency past the knee (``_outlier_span``), and the crawler's
        own time a slot is held past its answer (:meth:`_note_held`). Without the latter, a fleet's
        requests held 0.2 s past 0.155 s pages read hung while they waited for their worker, and a
        refusal at 9 in flight counted 6 of them out: a hard limit of 6 was capped at 3."""
        span = self._outlier_span(early=True)
        return None if span is None else span + self._held_over

    def note_hung(self: _SlotSizingState, now: float) -> bool:
        """Count the requests out far too long at ``now`` (:meth:`hung_out`); True when the count changed.

        A fleet's worker (``_own`` set by its store) counts its own sends out, which only it knows
        exactly (the shared record keeps sends long answered: see :meth:`hung_out`), and shares those
        it finds hung (``_hung_sends``): every worker's slots then make room for every worker's hangs.
        The merge is a set's, so a write-back redone on a newer policy adds nothing twice: the shared
        record keeps the other workers' entries, drops this worker's that ended, and adds its hangs now.
        Without it, a hang of a worker whose scope had one or two slots held them all, and the whole
        fleet fell silent until it timed out (10 s a hang: errors02 of seed 1464465244, 5x slower).
        """
        count, _due = self.hung_out(now)
        own = self._own
        if own is not None:
            out, mine = own
            others = self._others_hung(now)
            span = self._out_span()
            # (Its own hung sends are those hung_out counted: none when it counts none of its own.)
            hung = [] if span is None or count <= len(others) else [
                at for at in out if now - self.window < at and at + span <= now]
            mine[:] = [at for at in mine if at > now - self.window and at not in hung] + hung
            self._hung_sends = tuple(sorted([*others, *hung]))
        changed, self._hung = count != self._hung, count
        return changed

    def own_sends(self: _SlotSizingState, out: list[float], hung: list[float]) -> None:
        """A fleet's worker: ``out`` is its own record of its sends still out (kept up by its store),
        ``hung`` those of them it shares as hung (:meth:`note_hung` keeps it)."""
        own: tuple[list[float], list[float]] | None = (out, hung)
        self._own = own

    def _others_hung(self: _SlotSizingState, now: float) -> list[float]:
        """The hangs other workers of a fleet shared (:meth:`note_hung`) and still within a window: an
        entry this worker put there, or a send it has out, is its own to count."""
        own = self._own
        if own is None:
            return []
        out, mine = own
        return [at for at in self._hung_sends if at > now - self.window
                and not any(abs(at - known) <= _SAME_SEND for known in (*mine, *out))]

    def slot_limit(self: _SlotSizingState) -> int:
        """The most slots the rate may call for now: ``T.open_slots`` and those opened past it on evidence
        (:meth:`_open_slot`), never past ``max_concurrency`` (the user's cap) and the slots the crawler's
        own time holds (:meth:`_most_slots`). The load fit's hold is bound by that alone: it is
        evidence itself."""
        return min(self._most_slots(), T.open_slots + self._slots_open)

    def _open_slot(self: _SlotSizingState, now: float, inflight: int | None, level: int,
                   sample: float | None) -> None:
        """An accepted answer with ``inflight`` in flight at latency ``level``: open one slot more when the
        site is bound by requests in flight, not by a rate.

        That is: every slot in use (this answer came with all of them out) while the rate calls for
        more, latency under the knee line (each request answered as quickly as one alone: by
        Little's law one more in flight serves one more ``1 / n``), no pushback in the window, no cap
        read from refusals at or under the count, this answer itself as quick (its count is then the one
        it was served with: a knee of 3 opened a ninth slot on an answer 1.8 times the baseline), and a
        round trip (twice the baseline latency, at least ``T.round``) since the last one opened. In the
        start phase too: a site of 20 s spent its whole start at 8 slots. A bucket's first refusal
        then finds at most one slot more in flight than answers showed it holds. A rate's refusal
        takes them back (:meth:`_close_slot`); latency past the knee hands the slots to the load fit;
        a slot that served less than one fewer (:meth:`throughput`, a knee under the knee line)
        goes, for a window.
        """
        limit = self.slot_limit()
        if (level != 0 or inflight is None or inflight < limit or limit >= self._most_slots()
                or self._knee_hold > 0 or self.slot_cap <= limit):
            return
        base = self.baseline()
        if (base is None or now - self._opened_at < max(T.round, 2.0 * base) or self.pushbacks(now) > 0
                or self.concurrency(self.allowed_rate(now)) < limit):
            return
        if sample is None or sample > T.knee * base + T.knee_slack:
            # This answer itself came slow: the count it came with is not the one it was served with
            # (it left with fewer out, the slots filled behind it). A knee of 3 opened a ninth slot on
            # an answer 1.8 times the baseline that came "with 8 in flight" before the smoothed
            # latency crossed the knee line.
            return
        got, fewer = self.throughput(limit), self.throughput(limit - 1)
        if self._slots_open > 0 and got is not None and fewer is not None and got < fewer:
            # The last slot opened served less than one fewer (a knee under the knee line): back to one
            # fewer, and a window before the next try (one measured round would find the same).
            self._slots_open -= 1
            self._opened_at = now + self.window - T.round
            self._decide(now, f"slots: {limit} in flight serve less than {limit - 1}; back to {limit - 1}")
            return
        self._slots_open += 1
        self._opened_at = now
        self._forget_load(limit + 1)  # measured afresh before the next one opens
        self._decide(now, f"slots: {limit} in flight answered at the baseline latency with no pushback; "
                     f"opening {limit + 1}")

    def _close_slot(self: _SlotSizingState, now: float) -> None:
        """A rate's refusal: the site is bound by a rate, not by requests in flight; the opened slots go."""
        if self._slots_open > 0:
            self._slots_open = 0
            self._opened_at = now


    def _met(self: _SlotSizingState, inflight: int | None, sent_at: float | None,
            elapsed: float | None) -> int | None:
        """The requests in flight a refusal on arrival met, from ``inflight`` at its answer (itself
        included): those answered (accepted) since its send were out when it left, and held their
        slots when it arrived. A send reaches the site a moment after it leaves (a busy crawler's
        own delay), so an answer may come between: a cap of 1 refused a request sent while another
        was out, and counted at its answer it seemed alone, a slot freed late."""
        if inflight is None or sent_at is None or elapsed is None:
            return inflight
        return inflight + sum(1 for at in self._answers if sent_at < at <= sent_at + elapsed)

    def refused_on_arrival(self: _SlotSizingState, answered: bool, elapsed: float | None,
                           inflight: int | None, *, sent_at: float | None = None,
                           out: Sequence[float] | None = None) -> bool:
        """Whether a refusal came at once with several in flight: a cap on requests in flight, which
        is load by its nature (the errors-not-about-load rule leaves such refusals to rampup).

        Before a baseline is known, the lowest latency seen stands in for it, so
        that a slow site limiting what it holds is told apart at its first refusal.

        ``out``: a fleet's sends out as the answer came, from its store (as :meth:`met_at_send` takes
        them): the hangs are counted from them, not from the shared record of sends out, which keeps
        sends long answered (a fleet of 4 on a cap of 6 read a refusal at 8 in flight as 55 hangs
        and 1 in flight, the site's own error: 129 refusals in 30 s).
        """
        inflight = self._met(inflight, sent_at, elapsed)
        if inflight is None:
            return False
        at = None if sent_at is None or elapsed is None else sent_at + elapsed  # (its answer)
        inflight = self._accepted_leases(max(1, inflight - self._hung_at(sent_at, out)), at)
        return self._refused_at(answered, elapsed, inflight or 1)

    def _refused_at(self: _SlotSizingState, answered: bool, elapsed: float | None, inflight: int) -> bool:
        """:meth:`refused_on_arrival` of a refusal whose count met (``inflight``) is read already."""
        if (self._lone_refused or (inflight < T.confirm and not self._slot_reused(inflight)
                and not (self.slot_rest() > 0.0 and inflight <= self._inflight_ok)
                and not 1 <= self._inflight_ok < inflight)) and not self.crowded(inflight):
            # (A slot freed late was measured: a refusal at fewer than the most accepted is one more.
            # More than the most accepted, sent while they were out: a cap of 1, whose refusals, taken
            # for the site's own errors, were forgiven, and the breaker paused it for most of a minute.)
            # Unless the quick 5xx are seen to follow the count (crowded): a door of 6 whose backend
            # also failed 20 % at once, one of them alone in flight, had its refusals at 7 taken for
            # the site's own errors for the rest of the crawl (0.12 of its capacity, breaker pauses).
            return False
        return self._quick(answered, elapsed)

    def met_at_send(self: _SlotSizingState, inflight: int | None, sent_at: float, now: float,
                    out: Sequence[float] | None = None) -> int | None:
        """The requests in flight that a request sent at ``sent_at`` met (itself included), as its
        outcome comes at ``now`` (once it is out no more): those sent before it and still out, and those
        accepted since its send (``_met``'s count), no more than the count at its answer with the
        latter, less the hangs out then (``_hung_at``). None without a count (``inflight``).

        The count an answer came with holds the requests sent after it too: for a page that takes
        its time, many more than it met. The errors rule weighs quick 5xx by this count
        (``LoadErrors.crowded``): a cap refuses past its count, the site's own errors come at any.

        ``out``: a fleet's sends out as the answer came, read from its store (each settled by its
        release), in place of the record of sends out. A fleet's record hears of an end only through
        a write-back of the shared policy, which a plain answer does not make: it kept 15-44 sends,
        10-40 of them long answered and read as hangs, and a fleet of 8 on a cap of 6 read every
        refusal at 1 in flight, none a cap's: 751 refusals in 30 s (5 so)."""
        if inflight is None:
            return None
        sends = self._outstanding if out is None else [at for at in out if at < sent_at - _SAME_SEND]
        before = sum(1 for at in sends if at < sent_at)
        since = sum(1 for at in self._answers if sent_at < at <= now)
        return max(1, min(inflight + since, 1 + before + since) - self._hung_at(sent_at, sends))

    def tally_crowd(self: _SlotSizingState, met: int, quick: bool) -> None:
        """Count an answer to a request that met ``met`` in flight (:meth:`met_at_send`), and whether it was
        a quick 5xx (refused on arrival), for :meth:`crowded`."""
        self._crowd_n = tallied(self._crowd_n, met)
        if quick:
            self._crowd_quick = tallied(self._crowd_quick, met)

    def crowded(self: _SlotSizingState, met: int, now: float | None = None) -> bool:
        """Whether the site's quick 5xx follow the count in flight from ``met`` on (``_load_errors.crowded``):
        a cap's refusals, whatever the verdict on the site's other errors. At ``now``, the requests still
        out count too (:meth:`_passed`)."""
        return crowded(self._crowd_n if now is None else self._passed(now), self._crowd_quick, met)

    def _passed(self: _SlotSizingState, now: float) -> tuple[float, ...]:
        """The answers by count in flight (:meth:`tally_crowd`), with the requests still out at ``now`` for
        longer than a refusal on arrival takes, each at the count it met (:meth:`met_at_send`'s count, as
        if answered now): a cap refuses on arrival, so these passed it.

        Counted at their answers only, a count just reached shows its quick 5xx first (answered in a
        millisecond, where the pages sent beside them take tens): 6 of the first 10 answers at 7 or more in
        flight were quick 503s on a site failing 22 % of its requests at once, and its slots were capped
        at 7 and its pace at 90/s, where its slots served 300/s (errors14)."""
        base = self.baseline()
        if base is None and self._low_latency > 0.0:
            base = self._low_latency
        answers = self._crowd_n
        if base is None:
            return answers
        for before, at in enumerate(self._outstanding):
            if now - at >= T.quick_refusal * base:
                # (as met_at_send counts it: those sent before it still out, and those answered since)
                since = sum(1 for done in self._answers if at < done <= now)
                answers = tallied(answers, max(1, 1 + before + since - self._hung_at(at)))
        return answers

    def scattered(self: _SlotSizingState, met: int) -> bool:
        """Whether a quick 5xx to a request that met ``met`` in flight is no cap's: the site's quick 5xx do
        not follow the count (``_load_errors.scattered``: at that count its requests mostly passed), and
        no slot freed late is measured (:meth:`slot_rest`), whose cap refuses under its count too: a cap
        of 6 whose slots are freed 70 ms late passes most requests at 5 in flight and refuses one sent
        62 ms after an answer; taken for the site's own error, its rate was halved (0.69 of its
        capacity in 20 s, 0.88 before). (Not only those within the lag's bracket: a crawler whose sends
        reach the site late reads each rest short.) A backend failing at once drops that model soon
        (refused after a rest longer than a page takes)."""
        return self.slot_rest() <= 0.0 and scattered(self._crowd_n, self._crowd_quick, met)

    def _hung_at(self: _SlotSizingState, sent_at: float | None, sends: Iterable[float] | None = None) -> int:
        """Requests that were out at ``sent_at`` for longer than one answer may take without moving the
        latency past the knee (``_outlier_span``): hangs, whose answers may never come.

        A cap on requests in flight is judged by the requests whose answers come: a hang says nothing
        of load, and a quick 5xx sent while one was out is no cap's refusal for it. Counted, a 502 at
        once with a 4.3-s hang out (2 in flight, the most accepted 1) capped a 13-ms site's slots at 1,
        which the next hangs held: seconds of silence each, 0.01 of the oracle. None while the latest
        answer was past the knee line, as in :meth:`hung_out`.
        """
        span = self._out_span()
        if sent_at is None or span is None or self._slow_last:
            return 0
        return sum(1 for at in (self._outstanding if sends is None else sends) if at < sent_at - span)

    def _slot_reused(self: _SlotSizingState, inflight: int) -> bool:
        """Whether a refusal with ``inflight`` in flight fits a cap of one or two whose slot is freed late:
        as many were accepted in flight before and never more, and the latest send left right after an
        answer (within ``T.quick_refusal`` of the baseline latency), so the slot it freed had not rested.

        With fewer than ``T.confirm`` in flight a quick refusal is otherwise taken for the
        site's own (a backend failing at once); a cap of one with a late release refuses a
        request alone in flight, and read so, a site capped at one got 44 of 60 pages in 3 minutes.
        """
        base = self.baseline()
        if base is None:
            base = self._low_latency
        since = self._sent_at - self._answered_at
        if self._lag_lo < 0.0 or self._lag_hi < 0.0 or 0.0 < self._lag_hi < since:
            # The lag measured at the full count says no slot was held: dropped (refused after a rest over
            # half a page), refused after a longer rest than a send accepted at it, or this send left later
            # than one accepted. A cap freed late refuses the sends that leave within its lag of an answer
            # and accepts the later ones; a backend failing at once fails any. Read as a cap of one freed
            # late, a 40-ms site's 10 % of quick 502s alone in flight cut its rate four times (x0.9) before
            # they were judged its own (150 pages in 6.5 s, 2.5 s on seeds with no such refusal).
            return False
        # Alone in flight, sooner after an answer than every send accepted alone (``_ok_since``, as
        # ``held_late`` weighs it): a cap of one freed late refuses every send within its lag, so a send
        # accepted alone after a shorter rest (the start's window of one sends at the answer) says no slot
        # was held. Read so, a 40-ms site's lone quick 503 sent 19 ms after an answer, where the start's
        # sends at 0 ms had passed, kept it at one slot under a ceiling of 9.75/s for 2.5 s, the 503 no error
        # for the errors rule to judge (errors_farm, 20-ms+ sites of 30 farms: 338.7 -> 329.0 s).
        # (Not at two: an answer counted with two in flight may have left with one, the other sent after
        # it; its rest bounds no cap of two, whose lag a test brackets from its refusals: 4 -> 26 there.)
        late = since < self._ok_since if inflight == 1 else True
        return inflight == self._inflight_ok and base > 0.0 and 0.0 <= since < T.quick_refusal * base and late

    def held_late(self: _SlotSizingState, answered: bool, elapsed: float | None,
                  inflight: int | None, sent: float) -> bool:
        """Whether a quick refusal of a request sent at ``sent`` may be a cap's whose slot is freed late,
        so that no verdict on the site's errors may rest on it: at the most ever accepted in flight (or
        more), sent within a page's time (the baseline latency) after the latest answer before it, and
        sooner after it than any send accepted at the most in flight (``_ok_since``); at ``k`` fewer,
        the same of the ``k + 1``-th latest answer (that many slots still held: a cap of 3 freed 54 ms
        after 0.1 s pages refused a fleet's sends at 2, and was judged the site's errors).

        A cap freed late refuses only the sends that left sooner after an answer than the slot's lag
        and accepts every later one; a backend failing at once fails sends after any rest. The cap's
        refusals are load whatever rampup makes of them (its slot cap needs ``_slot_reused``'s
        narrower proof, a window's overshoot looks the same): a cap of one whose slot is freed 83 ms
        after 0.135 s pages refused a fleet's send 68 ms after an answer, which was judged the site's
        own error at 0 % after the cut against 50 % before (a share before measured on two outcomes
        can show no fall), and the verdict, shared, stopped every worker cutting for the cap's
        refusals: 8 workers drew 87-105 refusals of 150 requests.
        """
        # (As the most accepted is counted; read at the answer.)
        inflight = self._accepted_leases(inflight, None if elapsed is None else sent + elapsed)
        if inflight is None or inflight < 1 or self._inflight_ok < 1 or not self._quick(answered, elapsed):
            return False
        base = self.baseline()
        if base is None:
            base = self._low_latency
        # Counted from the request's own write, or from the scope's latest send as the shared record
        # knows it (a fleet's copy may have heard late of the answers before its own send: from the
        # write alone, 8 workers on a cap of 2 freed 83 ms late drew 471 refusals, 56 with both).
        # (A fleet's: the latest answer. Its most accepted holds an accepted request's transit, a grant
        # before the release of the one before: 2 leases on a cap of 1 freed 91 ms late, whose refusal
        # sent 82 ms after the latest answer met 1 lease, so the second latest answer was weighed, 0.35 s
        # before; the errors rule judged the cap's 503s the site's own at once: 70 refusals in 30 s.)
        held = 1 if self._merged else max(1, self._inflight_ok - inflight + 1)
        rests = [r for r in (self._rest_before(sent, held), self._rest_before(self._sent_at, held))
                 if r is not None]
        return bool(rests) and min(rests) < min(base, self._ok_since)

    def cap_in_transit(self: _SlotSizingState, answered: bool, elapsed: float | None,
                       met: int | None) -> bool:
        """Whether a fleet's quick refusal that met ``met`` leases at its send (:meth:`met_at_send`: those out
        at its grant and those answered since, itself included) may be a cap's whose holder was still in
        transit, so that no verdict on the site's errors may rest on it: at least one other lease, and no
        quick refusal of this site has come alone in flight (``_lone_refused``: a backend failing at once
        does so soon). One process: never (its counts are the site's, :meth:`refused_on_arrival` reads them).

        A lease spans both hops, so a fleet's counts are no site's: the most accepted rises with the
        accepted requests' own transit (5 leases on a cap of 1), and a slot's holder may be on its way
        back when a refusal is read. A cap of 1 freed 22 ms late refused a send that met 2 leases, the
        other at the site and released only 70 ms after the refusal was read: under the 3 in flight a
        refusal on arrival needs and under the most accepted, it was weighed by the errors rule against
        1 error in 16 and judged the site's own at once; the doubling drew 293 refusals in 30 s with 4
        workers. Nor is such a refusal one of the site's scattered errors (``scattered``, whose counts
        are leases here): a cap of 4 freed 85 ms late had many requests accepted "at 6 leases or more"
        (their own transit) and quick 503s at fewer (holders on their way back), and a refusal at 6 was
        judged the site's own at once: 180 refusals (bench/results/storm8.md)."""
        return (self._merged and met is not None and met >= 2 and not self._lone_refused
                and self._quick(answered, elapsed))

    def _rest_before(self: _SlotSizingState, sent: float, held: int = 1) -> float | None:
        """How long after the ``held``-th latest accepted answer before it a request left at ``sent``
        (None: not that many answers known before it). A fleet's worker writes its request a moment
        after the store's grant (0.1-0.25 s on a loaded machine): ``sent`` is the write, the answer's
        time less its latency. (Sorted: no order of the kept times is assumed.)"""
        before = sorted(at for at in self._answers if at <= sent)
        return sent - before[-held] if 1 <= held <= len(before) else None

    def _quick(self: _SlotSizingState, answered: bool, elapsed: float | None) -> bool:
        """Whether an answer came under ``T.quick_refusal`` of the baseline latency (refused on arrival)."""
        base = self.baseline()
        if base is None and self._low_latency > 0.0:
            base = self._low_latency
        return answered and elapsed is not None and base is not None and elapsed < T.quick_refusal * base

    def note_refusal(self: _SlotSizingState, answered: bool, elapsed: float | None,
                     inflight: int | None, *, sent_at: float | None = None) -> None:
        """A refusal, of a request sent at ``sent_at``. Refused on arrival, it was never held by the server,
        yet the accepted answer that set the most in flight (``_inflight_ok``) counted it if it was out
        then: that count falls by one, to no less than the most before.

        A refusal on arrival of a request that was alone in flight: no cap on requests in flight
        of ``T.confirm`` or more refuses that, so the site's quick refusals are its own errors
        (a backend failing at once), and a slot cap read from them is dropped."""
        if (sent_at is not None and elapsed is not None and sent_at < self._ok_at <= sent_at + elapsed
                and self._quick(answered, elapsed)):
            # Sent before that answer, refused on arrival after it: it reached the site late (a busy
            # crawler's own delay), after that answer's count was taken. A cap of 1 answered "with 2 in
            # flight" so, and its refusals of a send right after an answer (a slot freed late) were
            # then taken for the site's own errors: breaker pauses, 0.21-0.34 of its capacity.
            self._inflight_ok = max(self._ok_below, self._inflight_ok - 1)
            self._ok_at = sent_at  # (called twice per refusal: once by the scope, once by on_response)
        inflight = self._met(inflight, sent_at, elapsed)
        if (inflight == 1 and not self._lone_refused and self._quick(answered, elapsed)
                and not self._slot_reused(1)):
            self._lone_refused = True
            if not self._queue_cap:
                self.slot_cap = math.inf

    def _slots_refused(self: _SlotSizingState, now: float, answered: bool, elapsed: float | None,
                       inflight: int | None, out: Sequence[float] | None = None) -> bool:
        """A refusal on arrival with several in flight (:meth:`refused_on_arrival`): cap the slots.

        ``out``: a fleet's sends out as it came, from its store, whose hangs are counted as
        :meth:`refused_on_arrival` counts them. The shared record of sends out keeps sends long
        answered (it hears of an end only through a write-back of the shared policy): read as hangs,
        a fleet of 4 on a cap of 13 took 4 of the 14 leases a refusal met off its count and capped
        the slots at 10 for the rest of the crawl (0.65 of the cap's capacity, one refusal in 30 s)."""
        if inflight is None:
            return False
        if elapsed is not None:  # (the count the cap saw: see refused_on_arrival)
            inflight = max(1, inflight - self._hung_at(now - elapsed, out))
        quick = elapsed is not None and self._quick(answered, elapsed)
        late = inflight <= self._inflight_ok and not (quick and self._miscounted(inflight))
        if late and elapsed is not None and quick:
            self._note_late(now - elapsed, inflight)  # (first: a lag dropped here reads it as main does)
        if not self._refused_at(answered, elapsed, inflight):
            return False
        self._slot_refused = tallied(self._slot_refused, inflight)
        if inflight <= self._inflight_ok and not late:
            # Refused at this count more often than accepted at it: the acceptances were miscounts (a
            # request reaching the site, or its answer read, a moment late), and the cap is under it.
            # Taken for a slot freed late, a hard knee of 11 read accepted once "at 12" drew 228 refusals
            # at 12 on the fake clock (873 on a random farm), each cutting the rate, none lowering the cap.
            self._inflight_ok = inflight - 1
            self._ok_below = min(self._ok_below, self._inflight_ok)
            self._decide(now, f"slots: refused at {inflight} in flight more often than accepted at it; "
                         f"the most accepted at once taken as {self._inflight_ok}")
        # As many in flight were accepted before: the cap is that many, and the refusal came from a
        # slot freed a moment after its answer left (HAProxy's conn_cur). The rate's cut spaces the
        # sends so a slot rests; one slot fewer would leave a third of a cap of 3 unused for good.
        # With a rest after each answer measured (slot_rest), the slots rest instead: all of the most
        # accepted stay in use.
        held = self._inflight_ok if late and self.slot_rest() > 0.0 else inflight
        if late and self.slot_rest() > 0.0 and not self._queue_cap:
            # Resting, every slot of the most accepted is in use again, whatever an earlier refusal
            # capped them at before the lag was known (8 of a cap of 9 refused before any rest: the
            # slots stayed at 8, cut after cut, 0.80 of its capacity in 20 s; now 0.86).
            self.slot_cap = float(held)
        else:
            self.slot_cap = min(self.slot_cap, float(held if late else inflight - 1))
        self._cap_at = now
        return True

    def _slot_explained(self: _SlotSizingState, now: float, elapsed: float | None, inflight: int | None,
                        cap: float, most: int) -> bool:
        """Whether a refusal on arrival that :meth:`_slots_refused` just took (with ``inflight`` in flight,
        answered in ``elapsed``) is the slot cap's alone, so that the rate stays where it is. ``cap`` and
        ``most``: the slot cap and the most accepted at once before that call.

        It is when a cap was already learnt from refusals and the refusal met more in flight than the
        slots are capped at now: the slots no longer send at that count, so it cannot come again, and
        the rate was never the cause. The first refusal of a cap cut the rate already (the start's
        overshoot); a second at a count the cap forbids, cut again, left the slots under what they
        serve for the rest of the crawl (real nginx ``limit_conn`` and HAProxy ``conn_cur`` of 4 ran at
        0.88-0.90 x the oracle after it, 1.03 without). A refusal at or under the cap (a slot freed
        late, or a rate limiter behind the cap, which refuses at any count) still cuts.

        Where the refusal showed the most accepted at once was a miscount (it fell), the lag bounds
        measured at that count are dropped: its refusals were past the cap, not slots freed late, and
        the rest they set (twice the time since an answer: 48 ms on 0.1 s pages) held the slots at
        two thirds of what they serve.
        """
        if self._inflight_ok < most and self._lag_lo >= 0.0:
            self._lag_lo = self._lag_hi = 0.0
            self._lag_seen = 0
            self._lag_probe = _NEVER
        if inflight is None or cap == math.inf or self._queue_cap or not self._rests:
            return False  # (not _rests: a fleet's counts come from its store, and its slots take no rest)
        if elapsed is not None:  # (the count the cap saw, as _slots_refused counts it)
            inflight = max(1, inflight - self._hung_at(now - elapsed))
        if inflight > self.slot_cap:
            self._decide(now, f"slots: refused at {inflight} in flight, past the {self.slot_cap:g} slots the "
                         "cap holds now; the cap answers it, no cut")
            return True
        return False

    def _miscounted(self: _SlotSizingState, inflight: int) -> bool:
        """Whether a refusal on arrival at ``inflight`` in flight (no more than the most accepted at once)
        would leave the refusals at that count more than the accepted answers that came with it or more:
        the count is past the cap, and the answers read accepted at it were miscounts.

        A cap whose slots are freed late accepts most sends at its count (all but those sent within the
        lag after an answer, and none once the slots rest it): its refusals there stay fewer than its
        acceptances. A cap under the count refuses every send that meets it, and an answer is read with
        the count one too high only when another request left between the site's answer and its reading
        (a busy client), so such acceptances are few. A rate limiter refusing at any count is capped by
        this at a count where it refused most: no lower than the current rule's count, one under it.
        """
        k = min(max(inflight, 1), CROWD) - 1
        # (Accepted at this count or more: a cap under it would have refused those too. At least the one
        # that set the most accepted at once, which a fleet's shared record may hold without its answer.)
        return self._slot_refused[k] + 1.0 > max(1.0, sum(self._slot_ok[k:]))

    def slot_rest(self: _SlotSizingState) -> float:
        """How long a slot rests after its answer before it sends again (0: no slot freed late seen).

        A cap whose slots are freed a moment after the answer leaves (HAProxy's ``conn_cur``,
        nginx's ``limit_conn``) holds ``cap x latency / (latency + lag)`` of the crawler's requests
        at its capacity: integer slot caps and rate cuts both land under that, resting each slot
        the lag after its answer (as the server does) does not. The lag is bracketed by the
        longest rest after an answer that was refused and the shortest accepted at the full count
        (:meth:`_note_late`, :meth:`note_slot_send`), both measured from the first answer on: the
        rest halves the bracket until resting its top instead of the lag costs under ``T.tolerance``
        of a slot's cycle (page and rest), then sits at the top, a rest that was accepted (half-way
        forever would creep up on the lag from under it, refused each step); while no upper bound is
        known, twice the lower one.
        """
        lo, hi = self._lag_lo, self._lag_hi
        base = self.baseline()
        if lo < 0.0 or self._lag_seen < 2:
            return 0.0  # (none seen, one only, or the model was dropped: -1)
        if hi > lo:
            # Bracketed: a refusal says the lag is past its rest, an acceptance at the full count that it
            # is within its own. From the first refusal inside the bracket: the accepted sends of the start
            # bound it already (a first refusal 6 ms after an answer, its rest doubled refusal by refusal to
            # the true 50 ms, drew four refusals where the bracket's middle draws one).
            # The top was accepted: resting it costs at most ``hi - lo`` of each slot's cycle (its page and
            # rest), and once that is a share too small to matter, the search below it stops (half-way
            # steps crept up on a 50 ms lag from 35 ms, refused at each: four refusals to gain 2 %).
            return hi if hi - lo <= T.tolerance * ((base or 0.0) + hi) else 0.5 * (lo + hi)
        if lo <= 0.0 or self._lag_seen < 2:
            return 0.0  # (the lag bounded by refusals at no time since the latest answer)
        # (never half as long as a page takes: no late release is, see _note_late)
        return 2.0 * lo if base is None else min(2.0 * lo, 0.5 * base)

    def _note_late(self: _SlotSizingState, sent: float, inflight: int) -> None:
        """A refusal on arrival of a send at ``sent`` with ``inflight`` in flight, as many having been
        accepted at once before: a slot freed late. The server held at least ``_inflight_ok`` then
        (a lower bound of its cap), so at least ``_inflight_ok - inflight + 1`` of the scope's latest
        answers before the send still held their slots: the oldest of them bounds the lag from below.

        The first bound comes from a refusal at the full count only: a bucket's burst running dry
        refuses at any count (at 6 of 9, the fourth latest answer 140 ms before: a rest that long held
        a 25/s bucket at 19/s for a minute). Once slots rest, one at fewer (two slots held late: a cap
        of 5 refused at 4 every half second, its rest 10 ms short) raises it. A refusal after a
        longer rest than one accepted at the full count contradicts the model (the cap is higher
        than the most accepted, or there is no cap): it is forgotten, back to the cut's spacing,
        and the next refusal starts it afresh.
        """
        self._lag_probe = _NEVER
        late = self._inflight_ok - inflight + 1
        gap = self._rest_before(sent, late)
        base = self.baseline()
        # The full count: the most accepted, or the slots a refusal capped under it (a cap of 9 refused
        # at 8 the moment its ninth slot opened, capped at 8, never reached 9 again to be measured).
        full = min(self._inflight_ok, int(min(self.slot_cap, float(self._inflight_ok))))
        if (gap is None or (inflight < full and self.slot_rest() <= 0.0)
                or self._lag_lo < 0.0 or base is None or not self._rests):
            return  # (not _rests: a fleet's workers, whose shared admission takes no rest)
        if gap >= 0.5 * base:
            # A slot held past its answer half as long as its page takes is no late release (a
            # server's close takes milliseconds): a strict bucket in front of 0.3 s pages, read as a
            # cap of 3, raised the rest refusal by refusal to 0.85 s. The model is dropped for good
            # (-1); the cut's spacing paces.
            self._lag_lo, self._lag_hi = -1.0, 0.0
            self._decide(sent, f"slots: refused {gap * 1e3:.0f} ms after an answer, longer than a page "
                         "takes; no slot freed late, no rest after answers")
        else:
            if 0.0 < self._lag_hi <= gap:
                # Refused after a longer rest than one accepted: the upper bounds fail at this count (a send
                # reaches the site a moment after it leaves on a busy machine, so an accepted rest reads
                # short; or the cap is higher), the lower one holds either way (an answered slot was still
                # held). No upper bound till the most accepted rises: forgetting all and taking the next
                # accepted rest again drew a refusal every 0.3 s from a cap of 4 freed 10 ms late. Upper
                # bounds are taken again once slots rest (from the second refusal, as before the start's).
                self._lag_hi = -1.0
            # Slots rest from the second such refusal on: one alone is often the start phase's
            # overshoot (a real limit_conn of 4 saw one or two in 600 pages, and resting every slot
            # on one bound cost more than it saved). From the first where a send accepted at this count
            # after a longer rest brackets the lag already: the refusal is what a slot freed late within
            # the bracket draws (a cap of 2 freed 50 ms late, refused 6 ms after an answer, then at
            # twice each rest tried: four refusals more, where the accepted rests showed 69 ms).
            self._lag_seen += 2 if self._lag_hi > gap else 1
            self._lag_lo = max(self._lag_lo, gap)

    def note_slot_send(self: _SlotSizingState, now: float) -> None:
        """A send at ``now``: a send that fills every slot of the cap (the most accepted at once) right
        after an answer, if accepted while that count is still the most, says no answered slot was still
        held: the lag is at most its time since the latest answer (:meth:`slot_rest`'s upper bound).
        From the first answer on, not only once a slot freed late was seen: the start's accepted sends
        bound the lag before its first refusal (measured from refusals alone, a first bound of 6 ms on a
        50 ms lag was doubled refusal by refusal). One such probe is out at a time. Called for every
        send of a process whose admission rests the slots (a memory store), which turns the model on."""
        self._rests = True
        if self._lag_lo < 0.0 or not self._answers or self._inflight_ok < 1:
            return  # (the model dropped, or nothing accepted yet)
        if self._lag_probe != _NEVER and now - self._lag_probe < 2.0 * (self.latency or T.round):
            return
        if self._lag_hi < 0.0 and self.slot_rest() <= 0.0:
            return  # (the start's bounds failed at this count: none taken till slots rest)
        gap = now - self._answers[-1]
        base = self.baseline()
        if (len(self._outstanding) + 1 >= self._inflight_ok and base is not None and gap < 0.5 * base
                and (self._lag_hi <= 0.0 or gap < self._lag_hi)):
            # (Only a rest shorter than the bound known says more; none half a page long: see _note_late.)
            self._lag_probe, self._lag_gap, self._lag_at = now, gap, self._inflight_ok
        else:
            self._lag_probe = _NEVER

    def _lag_accepted(self: _SlotSizingState, sent_at: float | None) -> None:
        """An accepted answer to a request sent at ``sent_at``: the lag probe's upper bound holds.

        Accepted after a shorter rest than one refused at the full count, the model fails (the cap is
        higher than the most accepted, its slots would rest for nothing), and the rest is forgotten."""
        if sent_at is None or sent_at != self._lag_probe:
            return
        self._lag_probe = _NEVER
        gap = self._lag_gap
        if self._lag_lo < 0.0 or self._lag_at != self._inflight_ok:
            return  # (the model dropped, or more were accepted at once since: the cap is higher)
        if self._lag_seen > 0 and gap <= self._lag_lo:
            self._lag_lo = self._lag_hi = 0.0
            self._lag_seen = 0
        elif self._lag_hi <= 0.0 or gap < self._lag_hi:
            self._lag_hi = gap

    def _slots_pace(self: _SlotSizingState, now: float, inflight: int | None) -> None:
        """After the cut for a refusal on arrival at ``inflight`` in flight: where more were refused than
        were ever accepted at once, the site holds a fixed count (a hard limit), and the capped slots,
        not the rate, pace it: the rate stays at least at what they would serve answered at the
        baseline latency (the most they can serve, so the delay never binds under them). A hardknee of
        11 refused at 12 was cut to 24/s where its 11 serve 27.6/s, and the climb back took the rest of
        a 20 s crawl. A refusal at or under the most accepted is a slot freed late: the cut's spacing
        answers that, so the rate stays cut (a cap freed late serves less than its slots at the
        baseline latency; neither is the first refusal's rate lifted past that)."""
        base = self.baseline()
        if inflight is None or base is None or base < T.latency_noise:
            return  # (pages answered in milliseconds: a rate limiter's quick refusals, no count to hold)
        rest = self.slot_rest()
        if inflight <= self._inflight_ok and rest > 0.0:
            # A slot freed late, its lag measured: the slots rest it after each answer, so they pace;
            # the rate stays over what they serve so (a cut from a bunched round's rate left a cap of 6
            # at 0.85 of what it serves).
            serves = min(self.max_rate, (1.0 + T.tolerance) * self._inflight_ok / (base + rest))
            if serves > self.rate:
                self.rate = serves
                self._decide(now, f"slots: a slot freed late, {rest * 1e3:.0f} ms after its answer; each "
                             f"rests that long, the {self._inflight_ok} slots pace, {serves:.3g}/s")
            return
        if inflight <= self._inflight_ok:
            return
        if self.latency is None or self.latency < (1.0 + 2.0 * T.tolerance) * base:
            # Latency flat with the count: no sign the server holds its requests (a cap may be freeing
            # slots late, as nginx's limit_conn and HAProxy's conn_cur do, and slots pacing it would
            # send each request the moment an answer left: refused again). The cut's spacing stays.
            return
        serves = min(self.max_rate, min(self.slot_cap, float(self.max_concurrency)) / base)
        if serves > self.rate:
            self.rate = serves
            self._decide(now, f"slots: refused past the most accepted at once, a hard limit; the "
                         f"{self.slot_cap:g} slots pace it, the rate kept at what they serve, {serves:.3g}/s")

    def _note_inflight(self: _SlotSizingState, now: float, inflight: int | None,
                       sent_at: float | None = None) -> None:
        """An accepted answer at ``now`` with ``inflight`` in flight (this one included), to a request
        sent at ``sent_at``: the most seen, and how soon after an answer such a request may leave
        (``_ok_since``, counted afresh when the most rises)."""
        if inflight is not None and inflight > self._inflight_ok:
            self._ok_below, self._ok_at = self._inflight_ok, now
            self._inflight_ok, self._ok_since = inflight, math.inf
            if self._lag_lo >= 0.0:
                self._lag_hi = 0.0  # (accepted at fewer: no bound on a cap of more)
        if inflight is not None and inflight == self._inflight_ok and sent_at is not None:
            rest = self._rest_before(sent_at)
            if rest is not None:
                self._ok_since = min(self._ok_since, rest)
        if inflight is not None:
            self._slot_ok = tallied(self._slot_ok, inflight)
        self._answered_at = now
        keep = max(1, self.max_concurrency)
        self._answers = (*self._answers[max(0, len(self._answers) + 1 - keep):], now)


    def _cap_queue(self: _SlotSizingState, now: float) -> None:
        """Latency far past the knee in the steady phase: cap the slots at what the rate needs unqueued.

        By Little's law a server answering at its baseline latency holds ``rate *
        baseline`` of the scope's requests at once; more slots than that only
        queue at a server whose latency grows with its load, and its answers slow
        for every request. The cap is that count (rounded, at least
        :data:`T.confirm`), raised by one after every window without a pushback
        as the refusal cap is. The rate may then climb past what the slots let
        through: the slots, not the delay, pace such a server.
        """
        base = self.baseline()
        if self._knee_hold > 0:
            return  # the load fit holds the slots (_judge_load)
        if base is None or base < T.latency_noise or self.phase != "steady":
            return  # a page answered in milliseconds: its latency swings are the crawler's machine's
        cap = float(max(T.confirm, round(self.sent_rate(now) * base)))
        if cap < self.slot_cap:
            self.slot_cap = cap
            self._cap_at = now
            self._queue_cap = True

    def _knee_slots(self: _SlotSizingState, now: float) -> None:
        """Latency at the knee under a cap set by :meth:`_cap_queue`: the raise went too far, set it again.

        Past the knee a raised cap often slows answers without ever reaching the
        cut line (a server whose throughput falls as it queues), and the scope
        would sit there, slower, with the rate frozen.
        """
        if self._queue_cap:
            self._cap_queue(now)

    def _raise_cap(self: _SlotSizingState, now: float) -> None:
        """A window without pushback: try one slot more (no cap once it reaches the most slots)."""
        if self.slot_cap != math.inf and now - self._cap_at >= self.window:
            self.slot_cap += 1.0
            self._cap_at = now
            if self.slot_cap >= self.max_concurrency:
                self.slot_cap = math.inf
                self._queue_cap = False

    def _judge_load(self: _SlotSizingState, now: float, level: int, inflight: int | None,
                    sample: float | None) -> int:
        """An accepted answer with ``inflight`` in flight, answered in ``sample`` seconds: judge its
        latency by the load fit; the level to act on (0 grow, 1 hold the rate, 2 cut).

        Latency past the knee line on a server slower than ``T.latency_noise`` hands the
        slots to the load fit: they hold a count in flight (the count that answer came with, at
        first), the rate is lifted above what that count serves so that the slots, not the delay,
        pace, and no latency cut follows (the slots answer it). The fit then walks: one more than
        its best load while no higher count was measured, one fewer while no lower one was, else
        the best, or one more where that one serves as much (a spare); and every window it tries
        one more again, measured afresh (a knee may move).
        A page answered in milliseconds has no knee to fit (see :meth:`_cap_queue`).
        """
        fitting = self._knee_hold > 0 or self._queue_cap
        if inflight is None or (level == 0 and not fitting):
            return level
        base = self.baseline()
        if base is None or base < T.latency_noise:
            return level
        best = self.best_load()
        if self._knee_hold == 0:
            # Little's law: the count that serves what this one did at the baseline latency.
            # The best load is no lower (nothing is answered quicker than the baseline) and
            # at most this one, and the walk up from it takes short rounds. A best load measured
            # lower (the start phase's first counts, each seen a round) is no bound: a hard knee of
            # 13 entered at 13 in flight walked up from 3, one count a round, for five seconds.
            latency = max(self.latency or base, sample or base, base)
            entry = max(1, min(inflight, LOAD_COUNTS, round(inflight * base / latency)))
            if best is None or entry > best + 1:
                self._hold_load(now, entry, best)
                return min(level, 1)
        if best is None or (self._knee_hold > best + 1 and self.throughput(self._knee_hold) is None):
            return min(level, 1)  # (the count held above the best is measured before the walk goes on)
        # One more than the best costs nothing where it serves as much, less what the fit's step
        # must gain (a level stretch past the knee): it covers the crawler's own gap between an
        # answer and the next send, which holding the knee exactly leaves the server short of.
        above, at = self.throughput(best + 1), self.throughput(best) or 0.0
        spare = above is not None and above >= at * (1.0 - T.knee_gain / best)
        top = best + 1 if spare else best
        if above is None:
            hold = best + 1
        elif spare and self.throughput(best + 2) is None:
            hold = best + 2
        elif best > 1 and self.throughput(best - 1) is None:
            hold = best - 1
        else:
            hold = top
            if now - self._knee_at >= self.window:
                hold = top + 1  # try one more again, measured afresh: the knee may have moved
                self._forget_load(hold)
        self._hold_load(now, hold, best)
        return min(level, 1)

    def _hold_load(self: _SlotSizingState, now: float, hold: int, best: int | None) -> None:
        """Hold ``hold`` requests in flight: the slots are the load fit's (see :meth:`_judge_load`)."""
        if self._queue_cap:
            self.slot_cap, self._queue_cap = math.inf, False  # the fit, not the latency cut, caps them now
        got = self.throughput(best) if best is not None else None
        if got is None:
            got = hold / max(self.latency or 0.0, 1e-3)
        # The delay must not bind under the slots: pace above what the count held serves (again after
        # a cut: a refusal at a limit past the count held caps the slots, and a hardknee of 9 whose
        # rate was cut under what 9 serve stayed there, at 0.83 of it, for the rest of the crawl).
        serves = got * max(1.0, hold / (best or hold))
        lift = min(self.max_rate, T.knee * serves)
        if (self._belief or self._held_asked) and self.ceiling is not None:
            # A site that asked for silence (a refusal came while a hold was in force, _rampup_search's
            # _held_asked: a Retry-After, a spent budget's reset, even of one second) limits the rate,
            # and the level its refusals set (a bucket fitted after a hold, _rampup_bucket, or the
            # cut) is what it takes: a pace past it buys the next hold, whatever the slots hold. Under
            # lag (a loaded machine, a fleet) the pages look slow, and this lift paced a 5.44/s bucket
            # fitted at 2.3/s at 43/s after every hold, one hold each 11 s for the rest of the crawl
            # (bench/results/lag2.md). Not after a lock-out the scope waited out on its own (hold_learned):
            # a knee's or a cap's 503s draw those, and there the slots, not a rate, are the limit
            # (a hardknee of 14 in a fleet of 4 lost 0.80 -> 0.76 of its capacity, bench/results/lag3.md).
            lift = min(lift, max(self.rate, self.ceiling))
        self.rate = max(self.rate, lift)
        if hold == self._knee_hold:
            return
        before, self._knee_hold = self._knee_hold, hold
        self._load_since = math.inf  # set at the first answer with the count full (_note_load)
        if hold > before or before == 0:
            self._knee_at = now
        self._decide(now, f"knee: holding {hold} in flight (best seen: "
                     f"{'none yet' if best is None else f'{got:.3g}/s at {best}'}; latency "
                     f"{self.latency or 0.0:.3f}s)")
