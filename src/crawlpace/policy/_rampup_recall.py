"""Rampup's memory of a level the site took before its limit fell, and the search back to it.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the other
rules). A limit that falls often comes back: a site under load, an API whose
quota shrinks for a while, a counter shared with other clients. The cuts follow
it down; the climb back is the cubic's, which probes beyond the new ceiling at a
pace made for a limit that stays put (about one refusal per window), so a limit
that rises again from 5/s to 10/s is found a minute or two later, and a crawl
of half a minute stays at the low rate to its end.

**The memory.** A refusal of a send made at or under the ceiling, after the
scope had gone a round (:data:`T.round`) with no pushback, is not a probe that
went too far: the limit fell under a rate the site took. That rate is
remembered (:attr:`_recall`, the highest such rate), a search's level too, once
held a round (the level after a deep cut is where a fall's cuts leave it, and
the next refusal there may be the fall). So is the rate of the sends accepted
in the round before a refused one at that rate, even soon after another
refusal, and in the round before the start phase's first refusal: a fall that
lands with the end of the doubling (the random farm's ``shifting`` sites fall
at a fifth of the run) leaves no level held, only the rate the site took. A
false memory (a bucket's burst swells the start's last round) costs one
refused try, below. A pace the scope was still climbing to counts only as far
as the site took it in the round before: under half that pace, what it took, or
the last fitted lock-out cycle's rate (a round that ends a lock-out holds few
sends for want of time). A
level held for less time than a lock-out lasted (``hold_learned``, with a
lock-out fitted) is forgotten: a window's count or a counter's allowance let
it through, which says nothing of the limit; a level a search above a
lock-out's fit reached only briefly is remembered as the fit, what the site
took over the fit's whole cycle. Nor does a discarded memory outweigh a later
fall's level: a change of the limit is a change point, and the level held
since the last one is the evidence of what the site took before this fall
(a window's start trip left a memory held 0.07 s, which hid the 11 s held at
13/s before the limit fell, and the scope stayed at the lower rate). A level
is judged by the lock-outs known before the refusal that made it a memory,
not by the one that refusal opens: after a fall a counter's reading drains to
the lower limit, so that lock-out lasts longer than any before it, and judged
by it the level before the fall was forgotten. Beside a memory a lock-out may
yet discard stands the rate of the last fitted cycle, which ended in a
lock-out (no allowance explains it). And where a lock-out's fit comes out
under half the rate of the cycle before it (more than a counter's reading of
its refusals explains), with no memory left, the limit fell under that cycle,
whose rate is remembered.

**The recall.** The refusals that lowered the rate are evidence of the lower
limit, and evidence ages. Once the scope has gone a *recall age* with no
pushback, its rate is taken as held and a search (``_rampup_search``: quick
climbs to geometric middles, each held before the next) runs from it up to the
remembered level; a deep cut's search under way takes the remembered level as
its top. A refusal on its first step ends it, back at the level it started from (the
ordinary cut from the search's level would still be over a limit that stayed
low), and the next recall waits twice as long: each failed recall is one more
piece of evidence that the fall lasts; after the try that waited a whole
window, the level is forgotten. A refusal after the search reached a level
above its start is another matter: the limit rose, and the refusal is the
search's overshoot past where it came back to. The ordinary cut answers it
(never under the level held, where the first step's refusal would go back). The first
recall age is the quick climb's time (``window * climb_share / target`` over
``fast_climb``: 7.5 s by default), the longest one window, so a limit that
stays low costs about one refused send per window, the band rampup aims at
anyway. Where a refusal costs more than a send (a ``Retry-After`` hold, a
window's or a counter's lock-out: ``hold_learned``), the age is at least
``hold_learned / late_share``: a failed try may cost a quarter of the time
waited, where a probe into a limit that stays put waits until it costs
``tolerance`` (the hold rule, 20 times the hold: 85 s after a lock-out of 4 s,
longer than most limits stay low). Reaching the remembered level, or a new
start phase, forgets it. A search that reaches it with no refusal says the
limit came back at least that far, and a limit that moved twice may have
moved further: the probe beyond it goes at the quick pace (``fast_climb``
times quicker), once, and waits as the recall did (until a failure costs
``late_share`` of the time since the last refusal), not the hold rule's
``hold_learned / tolerance`` after a lock-out: its premise is a limit that moves.
(Only where the level reached is evidence of a move: over the last refused rate,
and no refusal for a whole lock-out cycle since.)

**A rise is a rise.** A step of the search held over the rate of the last
refusal (the try's own, or the fall's: the limit was under it then) says the
limit rose since. A limit that comes back comes back to where it was as
likely as anywhere between, so the next step goes to the remembered level,
not to the next geometric middle (each a step of a few seconds). Only when the
step is evidence of the limit: held at least a lock-out's length (a window's
count lets anything through for less), and the memory held at least as long
as the step (the start phase's last round, a bucket's burst in it, is weaker
evidence than the step). A limit that came back part-way refuses the climb,
which the ordinary cut answers; the memory stays for the next try.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

from ._rampup_sends import NEVER
from ._rampup_tuning import TUNING as T

__all__ = ["LevelRecall"]

#: The span of a memory no lock-out discards (it was held longer than a lock-out known before the
#: fall lasted, or it is a whole fitted cycle's rate): longer than any lock-out.
_PROVEN = math.inf


class _RecallState(Protocol):
    """What the methods of :class:`LevelRecall` use of the controller."""

    phase: str
    rate: float
    ceiling: float | None
    window: float
    _epoch: float
    _k: float
    _climb: float
    _top: float
    last_pushback_rate: float | None
    _probe_c: float
    _probe_after: float
    _recall: float
    _recall_wait: float
    _recall_from: float
    _recall_span: float
    _recall_last: float
    _recall_next: float
    _recall_next_span: float
    _ok_sends: deque[float]
    hold_learned: float
    _fit_span: float
    _cycle_rate: float

    @property
    def _pushbacks(self) -> deque[float]: ...
    def _climb_time(self, *, fast: bool) -> float: ...
    def _search_step(self, now: float) -> bool: ...
    def _rose(self, now: float) -> bool: ...
    def _start_climb(self, now: float, *, fast: bool) -> None: ...
    def _decide(self, now: float, decision: str) -> None: ...
    def _took(self, at: float) -> float: ...
    def _memory_weak(self) -> bool: ...
    def allowed_rate(self, now: float) -> float: ...
    def sent_rate(self, now: float) -> float: ...


class LevelRecall:
    """The recall part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    ceiling: float | None  # declared for the assignments below, which might narrow it

    def _note_fall(self: _RecallState, now: float, sent_at: float | None) -> None:
        """Before a refusal's cut: remember the rate held when a send at or under the level is refused."""
        ceiling = self.ceiling
        at = now if sent_at is None else min(now, sent_at)
        if self.phase == "start":
            # The start phase's first refusal may be the fall itself (the random farm's shifting sites
            # fall at a fifth of the run, as the doubling ends): what the site took in the round before
            # it is remembered. (Its doubling's overshoot is refused at twice what the site took, and
            # the start's own rules set the level under that; a bucket's burst may swell it, which costs
            # a refused try.)
            took = self._took(at)
            if took > self._recall:
                self._recall, self._recall_span = took, T.round
                self._recall_wait = self._climb_time(fast=True)
            return
        if self.phase != "steady" or ceiling is None or self._recall_from > 0.0:
            return  # (a recall's own refusal goes back to its level: _recall_refused)
        sent = min(self.allowed_rate(at), self.sent_rate(at))
        if sent > ceiling * (1.0 + T.tolerance):
            return  # a probe beyond the level went too far
        last = self._pushbacks[-1] if self._pushbacks else NEVER
        took = self._took(at)
        if now >= self._epoch + self._k:
            held = ceiling  # the climb had reached its level, and no pushback came since
            since = max(self._epoch + self._k, last)
        elif last == NEVER or now - last >= T.round:
            held = sent  # climbing still, but the rate had gone a round with no pushback
            since = self._epoch if last == NEVER else last
            if took < T.cut_deep * sent:
                # The site took under half that pace in the round before: a pace the sends were allowed,
                # not a level held (a strict bucket of 1.5/s paced at 2.04/s after the start's overshoot
                # took one send a second; remembered at 2.04/s, the recall searched back up to it twice
                # in 30 s, refused each time at a limit that never moved). What it took is the level, or
                # what the last fitted cycle let through, where a lock-out was fitted: a round that ends a
                # lock-out holds few sends for want of time, not of room (a counter's start lock-out
                # fitted 28.7/s over 9.2 s, the search from it refused 0.2 s on; remembered at the 6/s of
                # that round, the recall after the limit rose to 11.7/s stopped at 6/s).
                cycle = self._cycle_rate if self._fit_span > 0.0 else 0.0
                held = min(sent, max(took, cycle))
        elif sent <= took * (1.0 + T.tolerance):
            # Soon after another refusal, yet the site had taken this rate for the round before the send:
            # the limit fell under what it took (the start phase's first refusal may be the fall itself).
            held, since = took, at - T.round
        else:
            return  # the same fall's refusals, or a climb's
        span = now - since
        if span < self.hold_learned <= self._fit_span and self._cycle_rate > 0.0:
            # A level a search above a lock-out's fit reached only briefly: the fit is what the site
            # took over its whole cycle, longer than the lock-out, and that is the evidence of the
            # limit before this fall (a counter of 275 per 7.2 s fitted at 35/s fell by a third as
            # the search left the fit; its next lock-out, still full of the old count, fitted 4.6/s).
            held, span = min(held, self._cycle_rate), self._fit_span
        if self._fit_span > 0.0 and span >= self.hold_learned > 0.0:
            # Held longer than a lock-out known before this refusal lasted: no count's allowance let it
            # through, and no later lock-out judges it. The lock-out this refusal opens is no measure of
            # the span the limiter counts over: after a fall its reading drains to the lower limit, longer
            # (a counter of 42 per 12 s that fell to 18 locked the scope out 12 s after lock-outs of 6 s;
            # judged by it, the level before the fall was forgotten and the scope kept the fall's pace
            # for four minutes after the limit rose).
            span = _PROVEN
        # A memory that a lock-out would discard (held for less time than the lock-out lasted) is no
        # evidence of the limit before this fall: the level held since the last change is.
        if held > self._recall or self._memory_weak():
            self._recall, self._recall_span = held, span
            self._recall_next = self._recall_next_span = 0.0
            self._recall_wait = self._climb_time(fast=True)
        elif span > self._recall_span:
            # Lower, but held longer than the memory: if a later lock-out shows the memory was held for
            # less time than a lock-out lasts, this level is the evidence of the limit before the fall
            # (a window's start trip left 21/s held a round; the fall came from 8.6/s held 2.8 s, and
            # the second lock-out, 2.2 s, discarded the memory: 4/s to the end after the rise to 8.8/s).
            self._recall_next, self._recall_next_span = held, span
        cycle = self._cycle_rate if self._fit_span > 0.0 else 0.0
        if self._recall_span < _PROVEN and cycle > self._recall_next and self._recall_next_span < _PROVEN:
            # A memory that a lock-out may yet discard: what the last fitted cycle let through stands
            # beside it. That cycle ended in a lock-out, so no allowance explains its rate: it is what the
            # site took over the span it counts over, before this refusal.
            self._recall_next, self._recall_next_span = min(cycle, self._recall), _PROVEN

    def _recall_fitted(self: _RecallState, refused: float, high: float) -> None:
        """A request-rate counter fit binds every send, at a refusal of a send at ``refused``/s: pinned
        (``high`` 0), or letting no more than ``high`` through.

        The fit is of one counter that never changed, so it reads every refusal as an overshoot past
        that counter. A refusal under a level held longer than a lock-out before it (the memory, proven:
        :data:`_PROVEN`) is the other reading's evidence: the limit fell under a level the site had
        carried, and the sends since are the lower limit's, which the fit mixes with those before: its
        counters bound the mixture, not the level before the fall. The memory survives the fit as it
        was (a limit that falls comes back where it was as often as anywhere), a recall's search under
        way ended. A memory of this refusal's own level or lower (a search's overshoot past a counter
        that stays put, a window's count letting a step through) is the fit's to judge: capped at
        ``high`` while that is a step above the rate, else forgotten, and forgotten under a pin.
        """
        if self._recall_span == _PROVEN and self._recall > refused * (1.0 + T.tolerance):
            # (Capped at ``high`` instead, a counter of 10 per 3.1 s that fell to 2.1/s and rose to
            # 3.9/s kept 1.97/s, within one cut of the rate: no recall, and the hold rule's probe 80 s on.)
            self._recall_from = 0.0
            return
        if high <= 0.0:
            self._recall = self._recall_wait = self._recall_from = 0.0
        else:
            self._recall = high if high > self.rate * (1.0 + T.tolerance) else 0.0

    def _fit_fell(self: _RecallState, fit: float, before: float) -> None:
        """A lock-out's fit of ``fit``/s, where the cycle before it let ``before``/s through (not the
        scope's first lock-out: the start phase's cycle is its doubling's).

        A limiter that stays put gives cycles that agree within what counting refusals explains: a
        counter that counts them lets through over a cycle at least half its rate (``_counter_fit``'s
        divisor is at most 2), the doubling step rampup tells rates apart by (``T.cut_deep``). A fit
        under that share of the cycle before is no steady limiter's: the limit fell. Where no memory
        is left (the counter fit judged the fall's refusal, at the level the scope had climbed to, an
        overshoot past a counter that stays put, and forgot it), the rate of the cycle before becomes
        the memory, held a whole cycle: the recall does the rest, its wait, its search, and
        forgetting it after the try that waited a window. (A counter of 85 per 13 s, x0.55 at 24 s:
        the fall's lock-out fitted 2.2/s where the cycle before had let 7.3/s through, no memory was
        left, and the hold rule's wait, a twentieth of the crawl per probe after a lock-out of 7.4 s,
        kept it at 2.2/s to the end after the limit rose to 8.5/s at 44 s.)
        """
        if self._recall > 0.0 or self.phase != "steady" or fit >= T.cut_deep * before:
            return
        self._recall, self._recall_span = before, _PROVEN
        self._recall_next = self._recall_next_span = 0.0
        self._recall_wait = self._climb_time(fast=True)

    def _memory_weak(self: _RecallState) -> bool:
        """Whether the remembered level was held for less time than a lock-out lasted (a window's
        count or a counter's allowance let it through, which says nothing of the limit)."""
        return self._fit_span > 0.0 and self.hold_learned > self._recall_span

    def _took(self: _RecallState, at: float) -> float:
        """The rate of the accepted sends in the round before ``at``, as far as the record reaches back."""
        count = 0
        for sent in reversed(self._ok_sends):
            if sent < at - T.round:
                break
            count += sent < at
        return count / T.round

    def _recall_step(self: _RecallState, now: float) -> None:
        """With no pushback for the recall age: search from the rate now up to the remembered level."""
        recall = self._recall
        if self._top > 0.0:
            if self._recall_from > 0.0 and now >= self._epoch + self._k:
                # The recall's search reached its level: the one it climbed from is held (the rate
                # stayed above it for a whole step with no refusal), and a refusal from here on goes
                # back there, not to the level the recall started from.
                self._recall_from = max(self._recall_from, self._recall_last)
                self._recall_last = self.ceiling or 0.0
                if self._rose(now):
                    return
            if self._recall_from > 0.0 or self._top >= recall * (1.0 - T.tolerance):
                return  # the recall's own search is under way, or a deep cut's that reaches as high
            # A deep cut's search is under way, to a top under the remembered level: once the recall
            # is due, its top takes over (the search's levels so far were held, and it would climb
            # to its top at a search's pace first, the recall only after).
        elif self._recall_from > 0.0 and now >= self._epoch + self._k:
            # The recall's search reached its top with no refusal: the limit came back at least to the
            # level it had, and a limit that moved twice may have moved further. Probe beyond at the
            # quick pace, not the one made for a limit that stays put. Nor does it wait as a probe into
            # a limit that stays put waits after a lock-out (until a failure costs T.tolerance of the
            # time: 60 s after lock-outs of 3 s), but as the recall did: until a failure costs
            # T.late_share of the time since the last refusal (a counter of 37 per 2.8 s back at its
            # level at 59 s, raised by a fifth, was probed past it at 90 s).
            self._recall_from = 0.0
            self._probe_c *= T.fast_climb ** 3
            last, refused = self._pushbacks[-1] if self._pushbacks else NEVER, self.last_pushback_rate
            if (last != NEVER and refused is not None
                    and (self.ceiling or 0.0) > refused * (1.0 + T.tolerance)
                    and now - last >= max(self.hold_learned, self._fit_span)):
                # Only where the level is evidence that the limit moved: over the last refused rate, and
                # no refusal for a whole lock-out's cycle since (a steady window of 100 per 60 s let its
                # false memory of 1.87/s through for 35 s of its 61 s cycle; probed past at once, two
                # more lock-outs: 54 refusals in 300 s where the hold rule's wait drew 35).
                self._probe_after = min(self._probe_after, max(now, last + self.hold_learned / T.late_share))
            self._decide(now, f"recall: back at {self.ceiling or 0.0:.3g}/s with no pushback; "
                         "probing beyond it quickly, since the limit has moved")
            return
        if recall <= 0.0 or self.phase != "steady":
            return
        level = max(self.rate, self.ceiling or 0.0)
        if level >= recall * (1.0 - T.tolerance):
            self._recall, self._recall_wait = 0.0, 0.0  # back where it was: nothing left to recall
            return
        if level >= T.ceiling_share * recall * (1.0 - T.tolerance):
            # Where one ordinary cut of the remembered rate leaves it: one refusal at a held level
            # is one piece of evidence, which that cut answers (the limit may be just there); only
            # cuts that took the rate further down say the limit fell.
            return
        if self._memory_weak():
            # A lock-out lasted longer than the level was held: the limiter counts over at least that
            # span, and a window's count or a counter's allowance let the level through, which says
            # nothing of the limit (a start phase that reached its cap went 2 s at 100/s into a counter
            # of 253 per 8.2 s, and was locked out for 6 s). A later fall's level held longer is.
            self._recall, self._recall_span = self._recall_next, self._recall_next_span
            self._recall_next = self._recall_next_span = 0.0
            if self._memory_weak():
                self._recall, self._recall_wait = 0.0, 0.0
            return
        # A failed try costs what a refusal costs here: one request, or the hold the server asks
        # for (Retry-After, or a lock-out's length: hold_learned), at the rate held; waiting while the
        # limit is back costs the rise, recall - rate, each second. Where a probe into a limit that
        # stays put waits until a failure costs T.tolerance of the time, a recall, whose premise is that
        # a limit that fell comes back, lets a failure cost up to T.late_share of what the wait would
        # have missed: hold * rate <= late_share * (recall - rate) * wait. A fall to under half the
        # level tries sooner than hold / late_share (a counter of 10/s paced at 3.2/s after its fall,
        # 3.9 s lock-outs, back to 11/s at 20 s: the recall came at 17.8 s instead of 27.6 s); a
        # shallower one waits that long still (measured: waiting longer there cost more than it saved).
        cost = self.hold_learned * min(1.0, self.rate / (recall - self.rate))
        wait = max(self._recall_wait, cost / T.late_share)
        last = self._pushbacks[-1] if self._pushbacks else NEVER
        if last != NEVER and now - last < wait:
            return
        if now < self._epoch + self._k <= self._epoch + self._climb_time(fast=True):
            return  # a quick climb (a search's) is under way: its level first
        # The rate now is held (no pushback for the recall age): the search climbs from it.
        self.ceiling = self._recall_from = self._recall_last = (max(self.rate, self.ceiling or 0.0)
                                                                if self._top > 0.0 else self.rate)
        self._epoch, self._k = now, 0.0
        self._top = recall
        if wait >= self.window:
            self._recall = 0.0  # the last try: the fall has lasted windows
        self._recall_wait = min(2.0 * wait, self.window)  # if it fails, the next waits longer
        self._decide(now, f"recall: no pushback for {now - last if last != NEVER else 0.0:.3g}s; "
                     f"searching back up to {recall:.3g}/s, the level held before the limit fell")
        self._search_step(now)

    def _rose(self: _RecallState, now: float) -> bool:
        """A recall's search held a level above the rate of the last refusal: the limit rose.

        The last refusal, the try's own or the fall's, was of a send at ``last_pushback_rate``: the
        limit was under it then. A level held above it since says the limit moved up, and a limit
        that comes back comes back where it was (the remembered level) as often as anywhere between:
        the search's middles (one step each, a few seconds apiece) are skipped, and it climbs
        quickly to the remembered level at once. A limit that came back only part-way refuses
        there, which the ordinary cut answers (:meth:`_recall_refused`: never under the level held).
        True when the climb was set.
        """
        top, ceiling, refused = self._top, self.ceiling or 0.0, self.last_pushback_rate
        if (top <= 0.0 or refused is None or ceiling <= refused * (1.0 + T.tolerance)
                or ceiling >= top * (1.0 - T.tolerance) or self._k < self.hold_learned
                or self._recall_span < self._k or top > self._recall * (1.0 + T.tolerance)):
            # (A step shorter than a lock-out lasted is no evidence: a window's count or a counter's
            # allowance lets a level through for that long whatever the limit. Measured: a steady
            # window of 30 per 10 s, a memory of 4.2/s from the start's trip, the step to 3.85/s
            # "held" 3.8 s: 24 refusals in 100 s where the search's middles drew 19. Nor is a memory
            # held for less time than the step: the start phase's last round, a bucket's burst in it,
            # left 18.9/s on a bucket of 12.9/s, burst 5; the climb to it drew three refusals and a
            # deep cut, where the middles stopped at 13.4/s.)
            return False
        self.ceiling = top  # (the top stays: the memory is kept until the level is reached)
        self._start_climb(now, fast=True)
        if self._k > 0.0:  # (as a search step: a level just held is safe to climb from at once)
            self._k /= T.search_pace
            self._climb *= T.search_pace ** 3
        self._decide(now, f"recall: {ceiling:.3g}/s held, over {refused:.3g}/s refused since the fall: "
                     f"the limit rose; climbing quickly to {top:.3g}/s, the level held before it fell")
        return True

    def _recall_refused(self: _RecallState, now: float) -> None:
        """After the cut for a refusal: one that ends a recall's search goes back to the level it
        started from, which was held; the cut from the search's level would still be over a limit
        that stayed low, and each refusal that followed would cut again."""
        held = self._recall_from
        if held <= 0.0:
            return
        self._recall_from = 0.0
        if self._recall_last > held:
            # The search had reached a level above the one it started from: the limit rose, and
            # this refusal is the search's overshoot past where it came back to, which the ordinary
            # cut answers (never under the level held). The next try still waits twice as long
            # (a bucket's burst can carry a step past a limit that never moved).
            if self.rate < held:
                self.rate = held
                self.ceiling = max(self.ceiling or held, held)
                self._start_climb(now, fast=False)
            self._decide(now, f"recall refused past {self._recall_last:.3g}/s, a level it reached: "
                         f"the limit rose; at {self.rate:.3g}/s")
            return
        if self.rate > held:
            self.rate = held
        self.ceiling = min(self.ceiling or held, held)
        self._top = 0.0
        self._start_climb(now, fast=False)
        self._decide(now, f"recall refused: back at {held:.3g}/s, the last level it held")
