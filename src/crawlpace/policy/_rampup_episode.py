"""Rampup's overshoot episodes: the refusals one overshoot draws are one piece of evidence.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the other
rules). Many limiters go on refusing for a while after the rate that overshot
them has been cut: a window counted to the end of its period, a request-rate
counter that counts the refusals too (HAProxy's ``http_req_rate``), a bucket
paying back the burst it lent, a ``Retry-After`` hold. Taking each of those
refusals as new pushback halves the rate again and again (57 -> 28 -> 14 -> 7
-> 3.6 -> 1.8/s on a 10/s counter) for what was one overshoot.

**The episode.** The first refusal starts an *episode* and cuts as usual. Until
a request sent after that refusal is accepted, the episode lasts, and every
refusal in it is part of the same evidence: none cuts again. Instead the scope
*probes*: its sends are spaced at least ``probe gap`` apart, a gap that starts
at the cut rate's and doubles with every refused probe (a request sent inside
the episode), up to :data:`T.probe_gap_max`, :data:`T.lockout_gaps` gaps at the
cut rate or :data:`T.late_share` of the episode so far, whichever is longer. A
lock-out of unknown length (a window's rest, a counter draining) costs a few
probes, not a cascade of cuts, a counter that counts refusals is not kept full
by them, and the end of a lock-out is seen at most a quarter of its length late.
Where every send fits a window aligned to the clock (``_rampup_window``), a refused probe's next one
goes just after its predicted boundary instead (``_window_probe``).

**The fit.** The stretch between the end of one episode and the end of the
next is a *cycle*; the answers accepted in it over its length are the rate the
limiter let through, lock-out included: a window of ``N`` per ``W`` seconds
gives ``N / W`` exactly, a bucket its refill rate, a counter its limit. That
rate was achieved, so it is safe to pace at; the level after an episode is
never under :data:`T.fit_share` of it. (It only ever lifts a level: where the ordinary cut
leaves the rate higher, the cut stands.) A cycle begun at a cut that was no lock-out, whose
lock-out came within a quarter of its length of that cut, is taken back to twice the lock-out's
length (within the stretch since the last lock-out): the limiter still counted the sends from
before that cut.
A cycle the scope did not send through at that rate (the start phase's ramp) is a floor, and so is any
cycle of a counter that counts refused requests (:func:`_counter_fit`): the level
starts at the counter's estimate and searches up (see ``_episode_answer``), after the start's ramp
on to the pace the limiter took over the lock-out's length before it refused once the search's first
step is held (``SearchClimb._lifted``). The
lock-out's silence is the limiter's, left out of the send record. A cycle whose accepted sends all
went within the timing slack of each other (a burst: the start's window of one at the gap cap) spent
its tokens at once: its count over its length bounds the rate from above only, one send per
lock-out from below, and the level searches between the two (``_at_once``). A cycle that let through only
the probe that ended the last episode, with a probe refused in its own, is a bucket whose burst
is spent (its first cycle looked like a window's): one request per refill, due between the last
refused probe and the accepted one. The level is the geometric middle of the two gaps, searching
up to under the shorter one; it only ever lowers the level.

A refusal within half a cycle's length of a lock-out's end, while the level is
the fitted one (no probe above it yet), opens an episode without a cut: a counter
that blends its last period into the current one (HAProxy's) lets a probe
through before it has drained. (Later in the cycle a refusal at the level is the
level's own: a limit that fell under the fit.) So does a refusal soon after a cut, within the
last lock-out's cycle, with the rate not grown past the cut: the overshoot is
still being counted; that episode's first probe waits two of the level's gaps
(``_DRAIN_COUNTS``): the counter reads over its limit with the refusal counted.
But a counter judges a level only once a period has been sent at it: a level
refused sooner than the fitted cycle after the last episode ended may be far
over (a counter whose periods began before the crawl ends its first lock-out
early, and its fit overshoots), and after its cut one refusal is
excused as the drain, not more: a drain at an even rate only falls, so a refusal
after the excused one's probe got through is the cut rate's own. Nor is a
refusal the drain at a level over the slowest request-rate counter that fits
every send (below): a counter drains only while it is sent less than its rate,
refusals counted, so that one never drains there. A lock-out
within a quarter of the last one's length after it ended is its drain: the
cycle goes on, to be fitted whole.

**Counters fitted to every send.** A counter that counts refusals counts every send, so every
answered send is kept (``_counted``, accepted or refused). At a refusal after a lock-out the sends
are fitted to request-rate counters (``_rampup_counter``): the level after the cut, and the next
lock-out's fit, are not under the slowest counter that fits, the search and the recall climb no
higher than the fastest, and the first probe waits until half of them have drained. When every
counter that fits agrees, the counter is pinned: paced at its rate once its reading falls, with no
search above it. A record that many grid points fit (the fit gives None) is too loose to act on: its
drain wait, between counters 3 to 22/s apart, shortened a second lock-out and lifted its fit over a
counter still draining (100 per 10 s, periods 6 s off the crawl's: 0.87 of capacity -> 0.73).

**A bucket with no burst.** Such a bucket refuses any gap shorter than its
own, whatever the mean rate: the refused send's gap to the last accepted one
is just under the shortest gap it accepted before. When a refusal fits that
(its gap at least :data:`T.strict_near` of the shortest accepted gap, and
shorter), the level is at least :data:`T.fit_share` of the rate that gap gives,
paced evenly (the one-sided jitter only lengthens gaps): the cut from a lagging
mean rate would leave the scope at half its limit. A bucket with a burst accepts
gaps far shorter than the one it refuses, and is left to the ordinary cut. The
same shortest gap is not trusted twice in a row (a second refusal there says
the bucket is not strict after all).

**Held episodes.** A refusal with a hold of ``T.hold_long`` or more that comes
within one hold's length of the previous episode's end, after two sends or
more were accepted since, at a pace above any the scope kept up for a whole
hold's length before, says the level was far too high (a bucket whose burst
the hold refilled, spent in a fraction of a second): the level is halved
rather than cut by the ordinary share. (One accepted send is what a bucket
with no burst takes from a level a little too high, and a pace that held
before was refused for a send that the crawler's own delays bunched: those get
the ordinary cut.) One hold
costs the scope ``H`` seconds of silence; a level a little too high costs a
hold every few seconds.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import pairwise
from typing import Protocol

from ._rampup_counter import SENDS_KEPT, counter_open, fit_counter
from ._rampup_sends import NEVER
from ._rampup_tuning import TUNING as T
from ._rampup_window import fit_window

__all__ = ["Episodes"]

#: A request-rate counter that counts refused sends reads between ``N`` and ``N + 1`` with the refused
#: send counted, and lets a send through once its reading fell to ``N - 1``: a drain of one to two
#: counts, which no counter drains faster than the scope's accepted sends came in (the counter
#: counted them, at most a period's worth blended). A probe sooner is refused and counted, which
#: only lengthens the lock-out. (A model bound, not tuning: a bucket's refill of one token is within
#: it too.) Fewer accepted sends than that say nothing of the pace.
_DRAIN_COUNTS = 2.0
_DRAIN_SENDS = 4


def _counter_fit(fit: float, accepted: int, refused: int) -> float:
    """The limit a lock-out's cycle gives when the limiter counts refused requests too.

    A counter of ``L`` per period ``P`` (HAProxy's ``http_req_rate``) that a burst filled
    refuses until its reading falls under ``L`` again, a period after the burst's first request
    and then some: the ``R`` refusals counted with the ``A`` accepted requests
    (``A`` about ``L``) keep it over ``L`` for a further share ``(R + 1) / (A + R)`` of the period.
    So the cycle's rate ``A / span`` (``fit``) is ``L / P`` divided by ``1 + (R + 1) / (A + R)``:
    a floor under the limit, as the cycle of a window counted to its end is not.
    """
    return fit * (1.0 + (refused + 1) / (accepted + refused))


class _EpisodeState(Protocol):
    """What the methods of :class:`Episodes` use of the controller."""

    rate: float
    ceiling: float | None
    max_rate: float
    min_rate: float
    phase: str
    generation: int
    _ep_since: float
    _ep_gap: float
    _cycle_start: float
    _cycle_ok: int
    _cycle_rate: float
    _cycle_refused: int
    _pushbacks: deque[float]
    _ok_sends: deque[float]
    _gap_ok: float
    _strict_gap: float
    _quiet_until: float
    _resumed_at: float
    _top: float
    _lift: tuple[int, float, float]
    _cut_rate: float
    _probe_after: float
    _fitted: bool
    _fit_span: float
    _early_cut: float
    _drain_at: float
    _ep_drain: float
    _drain_until: float
    _drain_passed: float
    _lock_end: float
    _lock_ok: int
    _sustained: float
    _gap: float | None
    hold_learned: float
    _answers: tuple[float, ...]
    _inflight_ok: int
    _counted: deque[tuple[float, bool]]
    _counted_n: int
    _pinned: float
    _counter_lo: float
    _counter_hi: float
    _counter_span: float
    _counter_open: float
    _recall: float
    _recall_wait: float
    _recall_from: float
    last_pushback_rate: float | None
    _rests: bool
    _sent_at: float

    def hold(self, until: float) -> None: ...
    def slot_rest(self) -> float: ...
    def baseline(self) -> float | None: ...
    def _lockout_resume(self, now: float) -> None: ...
    def _at_once(self, start: float, end: float) -> int: ...
    def _lockout_pace(self, refused_at: float, locked: float) -> float: ...

    def _start_climb(self, now: float, *, fast: bool) -> None: ...
    def _last_ok_before(self, sent: float) -> float | None: ...
    def _arrival_jitter(self) -> float: ...
    def _drain_gap(self, sent_at: float | None, took: float | None = None) -> float: ...
    def _probe_gap(self) -> float: ...
    def _window_probe(self, sent: float) -> None: ...
    def _draining(self, now: float) -> bool: ...
    def _decide(self, now: float, decision: str) -> None: ...
    def _recall_fitted(self, refused: float, high: float) -> None: ...
    def _fit_fell(self, fit: float, before: float) -> None: ...
    def _late_by(self, took: float | None) -> float: ...
    def _just_under(self, sent_at: float | None, took: float | None) -> bool: ...


class Episodes:
    """The episode part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    # declared for the assignments below, which might narrow them
    ceiling: float | None
    _gap: float | None

    def in_episode(self: _EpisodeState) -> bool:
        """Whether the scope is inside an overshoot episode (probing until a send is accepted)."""
        return self._ep_since != NEVER

    def _episode_cap(self: _EpisodeState, allowed: float) -> float:
        """``allowed``, capped at one send per probe gap inside an episode."""
        gap = self._probe_gap()
        if gap <= 0.0:
            return allowed
        return min(allowed, 1.0 / gap)

    def _probe_gap(self: _EpisodeState) -> float:
        """The gap between sends inside an episode (0: none under way): the probe gap, and until a hold
        the server asked for came, at least the overshoot's drain (:meth:`_drain_gap`)."""
        gap = self._ep_gap
        if self._ep_since == NEVER or gap <= 0.0 or self._resumed_at > self._ep_since:
            return gap
        return max(gap, self._ep_drain)

    def _episode_opens(self: _EpisodeState, now: float, can_cut: bool, sent_at: float | None) -> bool:
        """A refusal answered at ``now`` of a send made at ``sent_at``: whether it is new evidence.

        True: no episode is under way, so this refusal is judged as before (it may cut, and
        then opens one). False: it belongs to an overshoot already counted, either the episode
        under way (a refused probe doubles the probe gap) or the one that ended after it was sent.
        """
        sent = now if sent_at is None else sent_at
        self._cycle_refused += 1
        if self._ep_since == NEVER:
            if not can_cut:
                return True
            if self._cycle_start != NEVER and sent < self._cycle_start:
                return False  # sent before the last episode ended, answered since: its tail
            self._ep_since, self._ep_drain = now, 0.0
            if self._draining(now):
                # After a cut (_draining noted it in _drain_at), a counter that counts refusals reads over
                # its limit with this one counted and lets a send through two counts lower: two of the
                # level's gaps at most, as it drains at its own rate, over the cut level. A probe one gap
                # away was refused in pairs (100 per 10 s). (Not at the fitted level: there a limit that
                # fell under the fit never drains, and the longer wait drew 33 -> 38 refusals.)
                counts = _DRAIN_COUNTS if self._drain_at == now else 1.0
                self._ep_gap = counts / max(self.rate, self.min_rate)
                return False
            self._drain_until = NEVER  # (a refusal that cuts is no lock-out's drain)
            self._ep_gap = 0.0  # set from the cut rate (_episode_cut)
            # A counter's verdict on a level comes a period after it began: refused sooner than the
            # fitted cycle, the level may be far over the limit, not just over by its last step.
            since = self._cycle_start
            if self._fit_span > 0.0 and since != NEVER and now - since < self._fit_span:
                self._early_cut = now  # (the cut's time, if this refusal cuts)
            return True
        if sent >= self._ep_since:
            gap = self._probe_gap() if self._ep_gap > 0.0 else 1.0 / max(self.rate, self.min_rate)
            # (At least a lock-out's worth of gaps at the rate: probes at a slow limit's own pace would
            # keep a counter that counts them full.)
            longest = max(T.probe_gap_max, T.late_share * (now - self._ep_since),
                          T.lockout_gaps / max(self.rate, self.min_rate))
            self._ep_gap = max(gap, min(2.0 * gap, longest))
            self._window_probe(sent)
        return False

    def _window_probe(self: _EpisodeState, sent: float) -> None:
        """A refused send at ``sent`` inside an episode: where every send fits a window aligned to the
        clock (:func:`fit_window`), the next probe goes just after its next boundary, the latest over the
        windows that fit, not a doubled gap later (up to 2 s late: 30 per 10 s entered its next window
        1.9 s late, 6 of its 30 lost) nor sooner (a refused probe more). A counter that counts refusals
        fits no window, so its probes double as before."""
        slack = T.knee_slack + self._arrival_jitter()
        # (The record's first period is taken as partial even from the crawl's first send: robots.txt,
        # which no limiter may count, opens it.)
        fit = fit_window(sorted(self._counted), sent, slack, T.late_share, complete=False)
        if fit is None:
            return
        earliest, latest, width = fit
        if latest - sent > width:
            return  # (the refused send was not in the window the fit places it in)
        # Where the fits place the boundary further apart than the episode's late share of the wait,
        # the probe goes halfway between: refused, it rules out every fit whose boundary came before it
        # (its period would hold a refusal and no N accepted), and the next one is placed again.
        if latest - earliest > T.late_share * (latest - sent):
            latest = 0.5 * (earliest + latest)
        self._ep_gap = max(latest + slack - self._sent_at, 1.0 / max(self.rate, self.min_rate, 1e-9))
        self._decide(sent, f"a clock window of {width:.3g}s fits every send: probing at its boundary "
                           f"{latest - sent:.3g}s after the refusal")

    def _slot_cut_missed(self: _EpisodeState, now: float, sent_at: float | None,
                         inflight: int | None) -> None:
        """A refusal on arrival in the quiet after a cut, of a send made after that cut: the overshoot's?

        A refusal that comes at once with several in flight cuts the slots (``_rampup_slots``) and
        opens no episode: a cap on requests in flight is answered by the capped slots, and a request
        refused after that cut was most likely sent into a slot freed a moment after its answer. It
        was not when the answers that would have had to hold their slots still (as many as were in
        flight beyond the send's count, at the most accepted at once) had left half a page's time
        or more before it (the bound ``_rampup_slots`` drops a late release at): then no cap explains
        it, and a rate limiter that answers its refusals at once (HAProxy's 429s come back before a
        page does) is still counting the overshoot. Without an episode the sends went on at the cut
        rate until the quiet ended, each one refused and counted (seven in a row, 12 ms apart, on a
        counter of 100 per 10 s whose pages take 40 ms). The refused send was the episode's first
        probe: the next waits twice the cut rate's gap, doubling as refused probes do. The same holds for
        a refusal on arrival in that quiet with too few in flight to be read as the cap's (a loaded
        machine's sends reach the site late and bunched: seven more refused on real HAProxy before the
        quiet ended), not for one as slow as a page (a bucket's, met by a fleet's worker that does not
        see the others' sends).
        """
        last = self._pushbacks[-1] if self._pushbacks else NEVER
        base = self.baseline()
        if (self._ep_since != NEVER or sent_at is None or last == NEVER or sent_at < last or inflight is None
                or base is None or self.slot_rest() > 0.0):
            return
        held = self._inflight_ok - inflight + 1  # answers that would still hold their slots
        before = [at for at in self._answers if at <= sent_at]
        if 1 <= held <= len(before) and sent_at - before[-held] < T.quick_refusal * base:
            return  # (a slot freed late may explain it)
        self._ep_since, self._ep_drain = now, 0.0
        self._ep_gap = 2.0 / max(self.rate, self.min_rate)

    def _slot_cut_drain(self: _EpisodeState, now: float, sent_at: float | None) -> None:
        """A rate's refusal (a 429) on arrival that cut the slots, before any lock-out: wait out the drain.

        The slot cut answers a cap on requests in flight and opens no episode, so the next send went at
        the cut rate, a gap later (68 ms on a counter of 10 per 2 s). A request-rate counter that counts
        refused requests (HAProxy's ``http_req_rate``) read over its limit with the refusal counted, and
        it counted that send too: the second refusal put it at its limit + 2 before any probe (4 of the 5
        counters ``bench/over_limit.py`` flags; HAProxy's 100 per 10 s refused at once 20 ms apart). Such a
        counter lets a send through once it has drained two counts, which takes no less than two of
        the cycle's mean accepted gaps (``_drain_gap``, the bound the ordinary cut of a refusal on arrival
        waits). So this opens an episode whose first probe waits that drain, at the cut rate's gap: a
        probe refused doubles it as any episode's does, and one accepted ends the episode with no
        lock-out (a probe gap of one cut-rate gap is no lock-out's). A cap's refusal (a 503, which is
        what caps on requests in flight answer: nginx ``limit_conn``, HAProxy ``conn_cur`` deny) does not
        come here; waiting after one lowered the rate its next cut started from (0.89 -> 0.86 of a
        cap of 8 freed 50 ms late, six seeds). Once a lock-out was fitted, the counter's own rules
        (``_draining``, ``_counter_bound``) answer.
        """
        if sent_at is None or self._fit_span > 0.0 or self._ep_since != NEVER:
            return
        self._ep_since = now  # (the drain is reckoned over the cycle up to this refusal)
        drain = self._drain_gap(sent_at)
        if drain <= 0.0:
            self._ep_since = NEVER  # (too few accepted sends in the cycle to tell a pace)
            return
        self._ep_drain, self._ep_gap = drain, 1.0 / max(self.rate, self.min_rate)

    def _draining(self: _EpisodeState, now: float) -> bool:
        """Whether a refusal now is the last lock-out still draining: it comes within half the fitted
        cycle's length of the lock-out's end, at the fitted level, before any probe above it. A counter
        that blends its last period into the current one (HAProxy's) lets a probe through before it has
        drained; refusals later in the cycle are the level's own (a limit that fell under the fit)."""
        if now < self._drain_until:
            # The last lock-out's drain (see _episode_answer): a counter still full until its period
            # turns refuses the fit as it refuses a search's first step above it, which says nothing of
            # the limit: back to the fit, the search's top kept for later.
            if self.rate > self._cycle_rate > 0.0:
                self.rate = self._cycle_rate
                self._start_climb(now, fast=False)
            return True
        if (self._cycle_start != NEVER and self._fitted and now < self._probe_after
                and 2.0 * (now - self._cycle_start) < self._fit_span):
            # (Within half the fitted cycle: a blended counter's drain came back 0.6 and 1.2 s after a
            # 13.6 s cycle's lock-out; a level over a limit that fell kept being refused all through it.)
            return True
        # The same after a cut, once a lock-out that outlasted the sending before it (a window's or a
        # counter's, not a bucket's refill) has shown the limiter counts over a span that long: a
        # refusal soon after the cut, with the rate not grown past it, is the overshoot still counted.
        last = self._pushbacks[-1] if self._pushbacks else NEVER
        if not (self._fit_span > 0.0 and 2.0 * self.hold_learned >= self._fit_span
                and now - last < self._fit_span and self.rate <= self._cut_rate * (1.0 + T.tolerance)):
            return False
        if self._early_cut == last and last < self._drain_at < self._cycle_start:
            return False
        if self._counter_lo > 0.0 and self.rate > T.fit_share * self._counter_lo:
            # A counter drains only while it is sent less than its rate, refusals counted: at a level
            # over the slowest counter that fits every send, that one never drains, and the refusals
            # at the level keep the others full (pairs every half second for five seconds, 93 per
            # 9.2 s paced at 9.9/s). The refusal is the level's own: cut (to that counter, at least).
            return False
        self._drain_at = now
        return True

    def _note_counted(self: _EpisodeState, sent: float, accepted: bool) -> None:
        """An answered send at ``sent``: a request-rate counter counted it, accepted or refused."""
        self._counted.append((sent, accepted))
        self._counted_n += 1

    def _counter_pinned(self: _EpisodeState, now: float) -> bool:
        """A refusal after a lock-out: fit every send on record to request-rate counters (the fit is
        ``_rampup_counter``'s).

        The rates ``N / T`` of the counters that fit bound the limiter's, if it is such a counter: the
        lowest is safe to pace at, none lets more than the highest through (:meth:`_counter_bound`
        applies them after the cut). When they agree (the counter is pinned), the level is that rate
        (at ``T.fit_share``, the margin a limit needs), with no search above it and the hold rule's
        wait (a ``T.tolerance`` share of the crawl per probe, a failed probe costing a period) before
        any probe past it; the refusals this overshoot draws are one episode, whose next send waits
        until the pinned counter's reading falls under ``N`` (each send before that would be refused
        and counted too, keeping it over). True then: the refusal is answered, no cut.
        """
        self._counter_lo = self._counter_hi = 0.0
        if not self._rests or self._fit_span <= 0.0 or self.phase != "steady" or self._ep_since != NEVER:
            return False  # (a refusal inside an episode is the same overshoot: no new fit)
        # (The periods tried follow the longest lock-out's cycle: a drain's short cycle after a cut
        # would leave out the counter's own period.)
        self._counter_span = max(self._counter_span, self._fit_span)
        sends = sorted(self._counted)
        fit = fit_counter(sends, self._counter_span, complete=self._counted_n <= SENDS_KEPT, now=now)
        if fit is None:
            self._pinned = 0.0
            return False
        self._counter_lo, self._counter_hi, self._counter_open = fit.low.rate, fit.high, fit.opens
        if not fit.pinned:
            return False
        counter, refused = fit.low, self.rate
        level = max(self.min_rate, min(self.max_rate, T.fit_share * counter.rate))
        opens = counter_open(counter, (at for at, _ in sends), now)
        self._pinned = self.rate = self.ceiling = self._cycle_rate = level
        self._top, self._cut_rate, self._fitted = 0.0, 0.0, True
        # The refused levels were over the counter, not a limit that fell: nothing to recall, unless a
        # level carried longer than a lock-out before a fall outlives the fit (_rampup_recall).
        self._recall_fitted(refused, 0.0)
        self.hold_learned = max(self.hold_learned, counter.period)
        self._probe_after = max(self._probe_after, now + self.hold_learned / T.tolerance)
        self._ep_since, self._ep_gap, self._ep_drain = now, max(1.0 / level, opens - self._sent_at), 0.0
        self._start_climb(now, fast=False)
        self._decide(now, f"counter: every send fits {counter.limit} per {counter.period:.3g}s; pacing at "
                     f"{level:.3g}/s from {opens:.3g}s, when its reading falls under the limit")
        return True

    def _counter_bound(self: _EpisodeState, now: float) -> None:
        """After the cut of a refusal that request-rate counters fit (:meth:`_counter_pinned`): the level
        is not under the slowest of them, neither the search nor the recall climbs past the fastest, and
        the episode's first probe waits until half of them let a send through again (a counter still
        draining an overshoot refuses the level it is cut to, and counts each refusal).

        No floor whose gap is shorter than any gap the site ever accepted (``_gap_ok``): a counter of
        that rate would have let such gaps through. A bucket with no burst never accepts a gap under
        its own, and its sparse sends fit counters faster than its rate (a counter lets a few through
        back to back): a floor at them lifted every cut of a 1/s bucket back to 1.7/s, one refusal per
        cycle (23 refused for 21 accepted in 30 s). A counter's start sends it gaps of milliseconds."""
        low, high = self._counter_lo, self._counter_hi
        if low <= 0.0:
            return
        if self._ep_since != NEVER and self._counter_open > now:
            self._ep_gap = max(self._ep_gap, self._counter_open - self._sent_at)
        floor = max(self.min_rate, min(self.max_rate, T.fit_share * low))
        if floor > self.rate and floor * self._gap_ok <= 1.0:
            self.rate = self.ceiling = floor
            self._decide(now, f"counter: every send fits a counter letting {low:.3g} to {high:.3g}/s "
                         f"through; pacing at {floor:.3g}/s at least")
        if self._top > high:
            self._top = high if high > self.rate * (1.0 + T.tolerance) else 0.0
        if self._recall > high:
            self._recall_fitted(self.last_pushback_rate or self.rate, high)

    def _episode_cut(self: _EpisodeState, quick: bool = False, sent_at: float | None = None,
                     took: float | None = None) -> None:
        """After the cut that opened an episode: probes go at the cut rate until one is refused, the
        first no sooner than the overshoot's drain after a refusal on arrival (``quick``) of a send
        made at ``sent_at`` and answered ``took`` after it."""
        if self._ep_since != NEVER and self._ep_gap <= 0.0 and self.rate > 0.0:
            self._ep_gap = 1.0 / self.rate
            self._ep_drain = self._drain_gap(sent_at, took) if quick else 0.0

    def _drain_gap(self: _EpisodeState, sent_at: float | None, took: float | None = None) -> float:
        """The earliest a probe after an overshoot's refusal of a send made at ``sent_at`` (answered
        ``took`` after it) can pass: two mean gaps of the cycle's accepted sends (0 when the cycle has
        too few to tell), one where the refused send reached the site just under the shortest gap
        accepted, whatever its delay (``_just_under``; a bucket with no burst fits it: its next token
        comes one gap after)."""
        start, accepted = self._cycle_start, self._cycle_ok
        if start == NEVER or accepted < _DRAIN_SENDS or self._ep_since <= start:
            return 0.0
        counts = _DRAIN_COUNTS
        if self.phase == "steady" and self._just_under(sent_at, took):
            counts = 1.0
        return counts * (self._ep_since - start) / accepted

    def _episode_answer(self: _EpisodeState, now: float, sent_at: float) -> None:
        """An accepted answer: count it in the cycle, and end the episode if it answers a probe."""
        if self._cycle_start == NEVER:
            self._cycle_start = sent_at
        if self._ep_since == NEVER:
            self._cycle_ok += 1
            return
        if sent_at < self._ep_since:
            self._cycle_ok += 1  # a send from before the episode: the lock-out may go on
            return
        if self._ep_since < self._drain_until:
            # The last lock-out's drain ended: the level stands, and the cycle goes on, to be fitted whole.
            self._drain_until = NEVER
            self._ep_since, self._ep_gap = NEVER, 0.0
            self._cycle_ok += 1
            self._lockout_resume(now)
            return
        if self._pinned > 0.0:
            # The pinned counter's reading fell as it said: the level stands, no cycle to fit.
            self._ep_since, self._ep_gap = NEVER, 0.0
            self._cycle_ok += 1
            return
        span, accepted, since = now - self._cycle_start, self._cycle_ok, self._ep_since
        # A lock-out: probes were refused for T.lockout_gaps gaps at the cut rate, and no hold the
        # server asked for explains the silence (a hold is a penalty; a cycle counting it says little).
        gap = 1.0 / max(self.rate, self.min_rate)
        lockout = (self._ep_gap > 1.5 * gap and now - since >= T.lockout_gaps * gap
                   and self._resumed_at <= since)
        # The cycle's rate is the limit's only if the scope sent at least that fast all through it;
        # otherwise (a start phase's ramp, a slow climb) it is only a floor under the limit.
        saturated, late = self._cycle_rate, self._ep_gap  # late: the end was seen up to a probe gap late
        unheld = self._resumed_at <= since
        drained = self._ep_drain
        self._ep_since, self._ep_gap, self._ep_drain = NEVER, 0.0, 0.0
        if lockout:
            self._lockout_resume(now)
            if drained > 0.0:
                self._drain_until = now + (now - since)
        if (self._fitted and span < self._fit_span) or (lockout and span < T.late_share * self.hold_learned):
            self._cycle_ok += 1  # the last lock-out's drain: the cycle goes on, to be fitted whole
            return
        refused, passed = self._cycle_refused, self._drain_passed == self._cycle_start
        # A cycle begun at a cut that was no lock-out, whose lock-out came within a quarter of its own length
        # of that cut (as soon as the scope can tell: a lock-out's end is seen that late): one lock-out, split
        # by a probe that passed. The limiter (a window, a counter) counts over the lock-out's length at
        # least, so it still counted sends from before that cut, and the cycle's count alone is no measure
        # (a fleet overshooting just before a window of 22/s halved fitted 4 in 3.9 s: 1/s). The cycle is
        # taken back to twice the lock-out, within the stretch since the last lock-out ended, counting the
        # accepted sends on record there, or that stretch's accepted pace if more. (Not further: the limit
        # may have fallen within it.)
        spent = self._at_once(self._cycle_start, since) if lockout else 0
        before = self._cycle_start - self._lock_end
        if (lockout and self._lock_end != NEVER and before > 0.0 and accepted >= 2
                and span - (now - since) < T.late_share * (now - since)):
            back = min(2.0 * (now - since), now - self._lock_end) - span
            kept = sum(1 for at in self._ok_sends if self._cycle_start - back <= at < self._cycle_start)
            span, accepted = span + back, accepted + max(kept, round(self._lock_ok * back / before))
        if lockout:
            self._lock_end, self._lock_ok = now, 0
        else:
            self._lock_ok += accepted
        self._cycle_start, self._cycle_ok, self._cycle_refused = now, 1, 0
        self._drain_passed = now if drained > 0.0 and not lockout else NEVER
        if passed and accepted == 1:
            # The cycle opened by the drain wait's first probe, refused at its next send: that probe
            # passed as the counter fell just under its limit, still full. One through in that
            # cycle is no measure of the limiter's rate (10 per 2 s was fitted at 1.15/s).
            self._cycle_rate = self.rate
            return
        # (One send accepted before a lock-out says something only of a scope's first cycle: its
        # second send was refused, a bucket with no burst.)
        # An episode right after the last one's end, with only its ending probe accepted between them and
        # a probe refused in it, is a bucket whose burst is spent: it gives back one request per refill,
        # not a window's count, whatever the cycles before let through.
        refill = accepted == 1 and self.generation >= 2 and late > 1.5 * gap and unheld
        if span <= 0.0 or accepted < (1 if (lockout and saturated <= 0.0) or refill else 2):
            self._cycle_rate = self.rate
            return
        fit = max(self.min_rate, min(self.max_rate, T.fit_share * accepted / span))
        trusted, top, lift = lockout, 0.0, 0.0
        if refill:
            # Its one request came due between the last refused probe and the accepted one: pace at the
            # geometric middle of the two gaps, and search up to under the shorter.
            early = max(span - late, T.late_share * span)
            fit = max(self.min_rate, min(self.max_rate, T.fit_share / math.sqrt(span * early)))
            if fit >= self.rate:
                self._cycle_rate = self.rate
                return
            top, trusted = min(self.max_rate, T.ceiling_share / early), False
        if lockout and fit < self.rate and saturated * T.fit_share < fit:
            # A floor and a ceiling: start from what a counter that counts refusals allows (see
            # _counter_fit) and search up to the geometric middle.
            top = math.sqrt(fit * self.rate)
            if 2.0 * (now - since) >= span:
                # The lock-out outlasted the sending before it: a window or a counter, whose limit
                # the counter's estimate bounds, taking the end as early as the last refused probe.
                early = T.fit_share * accepted / max(span - late, 0.5 * span)
                top = min(top, _counter_fit(early, accepted, refused))
            elif saturated <= 0.0:
                # The start's ramp, whose cycle is only a floor: once the search's first step is held,
                # search on to the pace the limiter took over the lock-out's length before it refused
                # (_lockout_pace; not at once: see SearchClimb._lifted).
                lift = min(self.rate, self._lockout_pace(since, now - since))
            fit = min(top, _counter_fit(fit, accepted, refused))
            trusted = False
        if spent and lockout:
            # A burst's tokens spent at once (see _at_once): its count over the span it fills bounds
            # the limiter's rate from above (a counter's, which counted the burst and its refusals,
            # is about that), one token per lock-out from below (a bucket's): pace at the floor and
            # search up to the count's reading.
            top = max(top, fit)
            fit = max(self.min_rate, min(fit, T.fit_share / span))
            trusted = False
        if self._counter_lo > 0.0:
            # Not under the slowest request-rate counter that fits every send (a short cycle after a
            # cut, two through in a second, is the counter's drain, not its rate).
            fit = max(fit, min(self.max_rate, T.fit_share * self._counter_lo))
        self._cycle_rate = max(self.rate, fit)
        if lockout:
            # The lock-out is what a refusal costs here, as a hold would: probe above the level
            # as rarely as after a hold that long (_rampup_search's hold rule).
            self.hold_learned = now - since
            self._probe_after = max(self._probe_after, now + self.hold_learned / T.tolerance)
        if lockout and self._fit_span > 0.0:
            self._fit_fell(fit, saturated)  # (the recall's: a fit far under the last cycle's is a fall)
        self._fitted = trusted
        if lockout:
            self._fit_span = span  # the span a lock-out's limiter counts over, at most
        if (lockout or refill) and fit != self.rate:
            self._cycle_rate = fit
            self.rate = self.ceiling = fit
            # No search above a trusted fit; a refusal above it is no cascade.
            self._top, self._cut_rate = (top if top > fit * (1.0 + T.tolerance) else 0.0), 0.0
            self._lift = ((self.generation, math.sqrt(fit * self._top), lift)
                          if lift > self._top * (1.0 + T.tolerance) > 0.0 else (0, 0.0, 0.0))
            self._lockout_resume(now)
            self._start_climb(now, fast=False)
            at_once = f", {spent + 1} of them at once" if spent else ""
            self._decide(now, f"fit: the last cycle let {accepted} through in {span:.3g}s{at_once}"
                         f"{' (a lock-out)' if lockout else ''}; pacing at {fit:.3g}/s")

    def _lockout_pace(self: _EpisodeState, refused_at: float, locked: float) -> float:
        """The pace the limiter took over a lock-out's length before the refusal at ``refused_at`` that
        opened it, a lock-out that lasted ``locked`` seconds (at ``T.fit_share``; 0 for no lock-out).

        A request-rate counter that refuses for that long after an overshoot counts over a span about
        that long (its period, refusals counted), and every send of that span before the refusal was let
        through: their count over it is the counter's own rate, as far as one lock-out tells. It is no
        bound (a counter whose period turned during the lock-out ends it early, that count over a short
        span overshoots, and a clock window's lock-out is only its window's rest), so it only lifts the
        top a start's ramp searches to, never above the cut rate, once the search's first step is held
        (``SearchClimb._lifted``). The geometric middle of the ramp's floor and that rate left a counter
        of 10 per 1.4 s searched to 4.74/s, where its even pace is 6.43/s, and held there for the hold
        rule's wait (26 s) before any probe above it (bench/results/counters21.md).
        """
        if locked <= 0.0:
            return 0.0
        seen = sum(1 for at in self._ok_sends if refused_at - locked <= at < refused_at)
        return T.fit_share * seen / locked

    def _at_once(self: _EpisodeState, start: float, end: float) -> int:
        """The accepted sends on record in ``[start, end)`` after the first, when each went within the
        timing slack (``T.knee_slack``) of the one before: the limiter may have seen them all at once,
        tokens spent together (a burst), not sends that show a rate. 0 when any gap was wider, or when
        the record no longer holds the first.

        A cycle of ``A`` accepted sends over ``span`` seconds shows the limiter's rate when the sends
        came at a pace (a window's ``N`` spread over its period, a bucket's refill). A burst that
        spends the allowance at once shows only its depth: a window of 4 per 1.53 s spent by a start's
        sends 10 ms apart locks out until its period ends, 0.6 s later at a random phase, and
        ``5 / 0.647 s`` paced at 11.7/s, and the search above it drew refusal after refusal; a bucket
        of burst ``b`` spent at once locks out for one refill, and its ``b / span`` is ``b`` times its
        rate. So such a cycle's count over its span bounds the rate from above only (a counter that
        counts refusals, whose lock-out lasts about its period, lets about that through), and one
        send per lock-out bounds it from below (a bucket's one token per refill): the level starts at
        the lower and searches up to the upper. (A cycle with sends at a pace in it is read as before:
        a start that climbed to the gap cap over seconds showed a rate on its way.)
        """
        sends = self._ok_sends
        if not sends or sends[0] > start:
            return 0
        times = [at for at in sends if start <= at < end]
        slack = T.knee_slack * (1.0 + T.tolerance)
        if len(times) < 2 or any(later - at > slack for at, later in pairwise(times)):
            return 0
        return len(times) - 1

    def _lockout_resume(self: _EpisodeState, now: float) -> None:
        """A lock-out is over: its silence was the limiter's, not the scope's choice.

        The probes' doubling gaps would leave the measured send rate at a probe's pace, and what
        the scope may send (twice that, ``_rampup_sends``) would take several round trips to climb
        back to the level: the silence is left out of the send record, as a server's hold is, and
        the mean gap is the level's at most.
        """
        self.hold(now)
        gap = 1.0 / max(self.rate, self.min_rate)
        if self._gap is None or self._gap > gap:
            self._gap = gap

    def _last_ok_before(self: _EpisodeState, sent: float) -> float | None:
        """The latest accepted send before ``sent`` on record, looked for from the newest.

        Answers come back nearly in the order of their sends, so the first one found is nearly
        always the latest; when it is not, an earlier one is taken, whose longer gap only makes
        the fits more cautious.
        """
        for at in reversed(self._ok_sends):
            if at < sent:
                return at
        return None

    def _note_accepted(self: _EpisodeState, sent: float, took: float | None = None) -> None:
        """An accepted send at ``sent``, answered ``took`` after it (latency and lag, when known): the
        longest gap its arrival may have had to the accepted send before it may be the shortest.

        The site saw arrivals, not sends. A send that reached it late (a loaded machine, a fleet's
        worker, the network) arrived as much as its answer's delay past the quickest on record
        after its stamp (:meth:`_late_by`), and the one before it no sooner than its own stamp: the
        arrivals' gap was at most the stamps' gap plus that delay, and only that much is known to
        be accepted. (Read from the stamps alone, two sends 70 ms apart under a mean lag of 0.1 s
        made a bucket of 4.26/s with no burst look like one that took 14/s, and the jitter rule
        forgave its refusals at 40/s: bench/results/lag1.md.)
        """
        before = self._last_ok_before(sent)
        if before is not None:
            gap = sent - before + self._late_by(took)
            if gap < self._gap_ok:
                self._gap_ok = gap
        self._ok_sends.append(sent)

    def _strict_fit(self: _EpisodeState, now: float, sent_at: float | None, step: float = 0.0,
                    took: float | None = None) -> None:
        """After a cut: a refusal just under the shortest accepted gap lifts the level to that gap's rate.

        ``step``: the level the scope was climbing to when the refusal came, before the cut. The same
        shortest gap is not trusted twice: a refusal at its fit, or at the probe just past it, says the
        bucket is not strict after all, and the cut stands. But a refusal on the way to a level above
        the fit, a step of the search that the fit set, only says the limit is under the step: the
        fit's gap held, so the level goes back to it, with no second search under the step (one cost
        as many refusals as the fit saved: buckets of 1.2-2.4/s, 424 -> 446 in 72 crawls). Cut by the
        ordinary share instead, a bucket of 4/s fitted at 3.87/s was paced at 3.15/s for the rest of
        the crawl, 0.79 of its limit in 20 s (0.90 at the fit). The step's refused gap may be a little
        longer than the shortest accepted in the crawler's stamps, by the arrivals' spread (sends a
        few milliseconds late arrived closer); a longer one is no strict bucket's (a clock window's
        refusal, which the level must not outlast).

        ``took``: the refused send's latency and lag, when known. Its request may have reached the site
        as late as its delay past the quickest answer (:meth:`_late_by`), so its gap as the site saw it
        may have been that much longer: only a refusal under the shortest accepted gap whatever that
        delay was fits a bucket with no burst (the sign's rule, :meth:`_just_under`, reads it so too).
        Read from the stamps, a send 0.1 s late under a mean lag of 0.05 s made a 5.44/s bucket with
        holds look strict at 4.81/s, twice its fit after the hold (bench/results/lag2.md).
        """
        shortest = self._gap_ok
        if sent_at is None or not math.isfinite(shortest):
            return
        before = self._last_ok_before(sent_at)
        if before is None:
            return
        refused = sent_at - before
        fit = max(self.min_rate, min(self.max_rate, T.fit_share / shortest))
        if shortest == self._strict_gap:
            if step > fit > self.rate and 0.0 < refused < shortest + self._arrival_jitter():
                self.rate = self.ceiling = fit
                self._top, self._cut_rate = 0.0, 0.0
                self._start_climb(now, fast=False)
                self._decide(now, f"fit: the search's step to {step:.3g}/s refused, {refused:.4g}s after "
                             f"an accepted send; back at {fit:.3g}/s, the gap accepted ({shortest:.4g}s)")
            return
        if refused <= 0.0 or refused + self._late_by(took) >= shortest:
            return
        if refused < T.strict_near * shortest:
            # Far under it: the limit's gap lies somewhere between the two. The accepted gap's rate is a
            # floor the cut must not go under, and the search climbs from it to under the refused one's.
            if fit > self.rate:
                self._strict_gap = shortest
                top = max(self._top, min(self.max_rate, T.ceiling_share / refused))
                self.rate = self.ceiling = fit
                self._cut_rate = 0.0
                self._top = top if top > fit * (1.0 + T.tolerance) else 0.0
                self._start_climb(now, fast=False)
                self._decide(now, f"fit: a bucket with no burst; refused a gap of {refused:.4g}s, accepted "
                             f"{shortest:.4g}s: at least {fit:.3g}/s, searching up to {top:.3g}/s")
            return
        self._strict_gap = shortest
        if fit > self.rate:
            self.rate = self.ceiling = fit
            self._top, self._cut_rate = 0.0, 0.0
            self._start_climb(now, fast=False)
            self._decide(now, f"fit: a bucket with no burst; refused a gap of {refused:.4g}s, accepted "
                         f"{shortest:.4g}s: pacing evenly at {fit:.3g}/s")

    def _held_short(self: _EpisodeState, now: float, held: float, pace: float) -> bool:
        """Whether a refusal with a hold of ``held``, of a send paced at ``pace``, is a burst's relapse.

        It is when it came within a quarter of a hold of the last episode's end, with two sends or more
        accepted since (one is what a bucket with no burst takes from a level a little too high),
        at a pace above any the scope kept up for a whole hold's length before: a send that a
        loaded machine's own delays bunched, at a pace that held before, says nothing of the
        level. A stretch that lasted a hold's length is noted as kept up.
        """
        start = self._cycle_start
        if start == NEVER:
            return False
        span = now - start
        if span >= held:
            if span > 0.0:
                self._sustained = max(self._sustained, self._cycle_ok / span)
            return False
        return span < T.late_share * held and self._cycle_ok >= 2 and pace > self._sustained
