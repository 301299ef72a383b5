"""Rampup's start phase: how a fresh scope climbs, and where its first refusal leaves it.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the other rules).
A fresh scope starts at its polite starting rate and doubles it once per *round*:

* a round is the lowest latency the scope has seen, within ``[T.min_round,
  T.round]``: a site answering in 50 ms doubles every half second of
  sending, one taking seconds every second. Under
  ``T.latency_signal`` latency says nothing of a server's load (there is no
  queue to see), so such a site's round is ``T.confirm`` answers at the pace
  it doubles, within the same bounds: under ``T.confirm`` per second the
  one-second round (a limit of a few per second, perhaps one that holds
  seconds after a refusal, is met no sooner), half a second from twice that;
* one answer doubles the rate at most once, however long it took: growth is
  clocked by answers, as TCP's slow start is by acknowledgements, so a scope
  that sends little learns little, and one whose slots hold its sends back
  (its measured send rate under ``T.start_used_share`` of the rate) stops.

Two floors make the first round trips count (:meth:`StartPhase._start_floor`):

* *a window of one*: a site whose answers take ``T.latency_signal`` or more
  may always have one request in flight back to back, the rate at which
  AutoThrottle with a target concurrency of 1 settles (``1 / latency``). Once
  ``T.confirm`` answers have shown such a latency, the doubling starts
  from there, so a 50 ms site (20/s at once) has four in flight within half a
  second instead of four seconds, and its latency (which grows with what is in
  flight) stops the climb at its knee. (A single slow answer lets one more
  send go at once, and no more: the next answer confirms or lowers the
  latency.) A first answer slower than ``T.latency_signal`` plus
  ``T.latency_noise`` (what a busy crawler adds) needs no confirming: that
  much is the server's own time, and a later answer can only lower the latency
  and raise the window, so the doubling starts from it at once
  (:meth:`StartPhase._window_known`; a quick answer before the third sends the
  rate back to the starting rate: the slow one was a connection's set-up);
* *robots.txt opens the door*: when a scope's first answer has no latency to
  measure (a robots.txt fetch, whose latency is not the pages'), the send that
  follows goes as soon as that answer is in, not a whole starting gap after
  the first send: the first page follows its robots.txt at once, as large
  crawlers do. One request is in flight at a time either way. A first answer
  that is a page opens nothing: two pages back to back may be just what a
  limit with no room for a burst refuses. And when the page through the door
  is refused (nginx's ``limit_req`` with no burst refuses a page 9 ms after
  robots.txt), that refusal is about its gap, not the rate: it cuts nothing.
  The page through the door is the one extra request of the polite start: the
  next keeps the starting gap after it (``SendRecord.door_gap``).

*The ceiling*: gaps pace sends only down to the timing slack (``T.knee_slack``, 10 ms): past 100/s
only the slots pace, and they need a latency to go by. A site answering in under
``T.latency_signal`` ends its start at 100/s (:meth:`StartPhase._rate_cap`); one whose window of one
is known keeps doubling, once per round trip as TCP's slow start does, up to what its slots serve at
its lowest latency (``slot_limit() / latency``; a slot opens on evidence: every slot in use, latency
flat, nothing refused), and its start stays open there. A refusal of a start past 100/s is cut from
100/s (:meth:`StartPhase._start_past_gaps`): the rate past it was the doubling's, and a limiter with
an allowance (a request-rate counter) lets it through until the allowance is spent. An unlimited site
answering in 30 ms is sent about 1,450 pages in its first 5 s of virtual time where a 100/s cap sent 459.

*The first send*: a refusal of a scope's first send, answered before anything else was, cuts
nothing (:meth:`StartPhase._first_refused`). No gap was sent yet, so it says nothing of a rate, and
halving the starting rate answered a flaky backend's first 5xx (an API client fetches no
robots.txt) with half the polite pace while the errors rule (``_load_errors``) judged it: its
outcomes at 0.5/s took seconds to come, and the one error "before" the cut outweighed any share
after it, so the scope stayed at 0.5/s (12-94 sends in 15 s where a clean site got 243-287). A
limiter already full from earlier traffic refuses the next send too, which cuts as usual.

*The first error*: a 5xx that answers a send at the polite starting pace, before any rise (the rate
allowed under twice the starting rate, or on a quick site under ``T.confirm`` per round, where each
answer is a round's evidence; :meth:`StartPhase.start_unrisen`), still cuts, but the errors
rule judges that cut the site's own at once (``LoadErrors.slowed``'s ``unrisen``), and the start
doubles again from the starting rate. Whether the errors follow the rate is the question, and at
the starting pace it cannot be asked: halving it and waiting for ten outcomes at 0.5/s cost a 3 ms
site with 15 % of its answers 503 at once 0.98 of its sends in its first 8 s. A limiter under the
starting rate that answers 5xx is none a polite crawler meets; a site that is down is the breaker's.

*A hang at the start*: a request that fails without an answer (a timeout) while the start has not
risen past its polite starting pace (:meth:`StartPhase.start_unanswered`) cuts nothing, the first
send's included: it is the site's own, as the first error is. A hang is no refusal, and at one
request a second a server does not fall silent for ten seconds from load; before ``T.confirm``
answers a timeout was read as pushback (no latency to call it normal by), and a 7 ms site whose
first two pages hung (2 % of its requests hang 11 s, 10 % fail) was cut to 0.5/s and then to
0.24/s at the 10-s timeouts, its breaker paused it, and the verdict that the errors were its own
came at 19 s: 41 s for 210 pages where its crawls without such a start took 17-18 s. A site that
is down is the breaker's (every outcome a failure: paused, probed, given up).

The first refusal ends the phase. The rate is halved, as before; the climb back
levels out under the *good rate* (the rate in force at the last answered send)
when that is lower than the usual share of the refused rate: the limit lies
between the two. After a refusal that came with a hold of ``T.hold_long`` or
more (``Retry-After: 2``, say), the rate resumes at ``T.cut`` of that
ceiling instead of half the refused rate: the hold paid the burst's debt. Such a
refusal's cut starts from at most twice the rate the accepted sends of the last
round showed (:meth:`StartPhase._start_refused`): the window of one may have
allowed far more than any send showed, and each overshoot of that site costs a
hold.

A refusal whose gap to the last accepted send is just under the shortest gap accepted fits a
bucket with no burst, whose rate lies between the two gaps': the climb back then levels out at the
accepted gap's fit and searches up to the refused gap's rate from there, within seconds
(:meth:`StartPhase._start_strict`). The halving stays: every start's refusal fits (its doubling
shortens each gap), a burst's, a window's or a counter's too, and those owe a debt first.

The state is two numbers on the controller: the good rate (``_good_rate``) and
the lowest latency seen (``_low_latency``, 0 for none); the send record
(``_rampup_sends``) keeps when the send before the door's went.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

from ._rampup_sends import NEVER
from ._rampup_tuning import TUNING as T
from ._shared_rules import GAP_WEIGHT

__all__ = ["DOOR_SLACK", "StartPhase"]

#: A refusal answers the door's send when its request went out at most this long (seconds) before
#: the latest send recorded (the throttler stamps the send and the record a moment apart).
DOOR_SLACK = 0.001


def _gap_cap() -> float:
    """The fastest even pace gaps can set: one send per ``T.knee_slack`` (100/s), the timing slack
    of a send's stamp. Past it a scope's sends are paced only by its slots (requests in flight
    answered at a latency), which need a latency to go by."""
    return 1.0 / T.knee_slack


class _StartPhaseState(Protocol):
    """What the methods of :class:`StartPhase` use of the controller."""

    phase: str
    above_since: float
    rate: float
    max_rate: float
    min_rate: float
    latency: float | None
    _good_rate: float
    _low_latency: float
    _resumed_at: float
    _gap: float | None
    _sent_at: float
    _last_growth: float
    _samples: int
    _door: float
    start_rate: float
    _ok_sends: deque[float]
    _answers: tuple[float, ...]
    ceiling: float | None
    _gap_ok: float
    _top: float

    def allowed_rate(self, now: float) -> float: ...
    def _last_ok_before(self, sent: float) -> float | None: ...
    def _start_climb(self, now: float, *, fast: bool) -> None: ...
    def _start_round(self) -> float: ...
    def _start_floor(self, door: bool = True) -> float: ...
    def _door_open(self) -> bool: ...
    def _first_refused(self, sent_at: float | None) -> bool: ...
    def _window_known(self) -> bool: ...
    def _unrisen_below(self) -> float: ...
    def _rate_cap(self) -> float: ...
    def slot_limit(self) -> int: ...
    def _arrival_jitter(self) -> float: ...


class StartPhase:
    """The start-phase part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    ceiling: float | None  # declared for the assignment below, which might narrow it

    def _start_round(self: _StartPhaseState) -> float:
        """Seconds per doubling, within ``[T.min_round, T.round]``: the lowest latency seen, or
        for a quick site (under ``T.latency_signal``) the time ``T.confirm`` sends take at the
        rate; ``T.round`` while no answer has shown a latency.

        The lowest latency, not the smoothed: a first answer slowed by its connection's
        set-up (or by a busy crawler) must not make a quick site look slow. A quick site's
        latency says nothing of its load, so its round is counted in answers instead: a
        doubling waits for ``T.confirm`` answers at the pace it doubles, the evidence that
        the pace holds. Under ``T.confirm`` per second that is the whole one-second round
        (a limit of a few per second, perhaps one that holds seconds after a refusal, is
        met no sooner than before); above it the climb speeds up to half-second rounds.
        """
        low = self._low_latency
        if low <= 0.0:  # nothing answered with a latency yet
            return T.round
        if self.rate >= _gap_cap() and self._window_known():
            return min(T.round, low)  # past what gaps can pace: the slots pace, doubling per round trip
        if low < T.latency_signal:  # too quick to say anything: the round is T.confirm sends
            low = T.confirm / self.rate if self.rate > 0.0 else T.round
        return min(T.round, max(T.min_round, low))

    def _rate_cap(self: _StartPhaseState) -> float:
        """The highest rate the start phase doubles to and the climb reaches: the configured cap
        (``max_rate``), and where the site's latency is under ``T.latency_signal`` (or not yet
        confirmed), no more than gaps can pace (:func:`_gap_cap`, 100/s): see the module's *ceiling*."""
        if self._window_known():
            return min(self.max_rate, max(_gap_cap(), self.slot_limit() / self._low_latency))
        return min(self.max_rate, _gap_cap())

    def _start_past_gaps(self: _StartPhaseState, sent: float) -> float:
        """The rate a refusal in the start phase is cut from, given the rate it answers (``sent``): at
        most what gaps can pace (:func:`_gap_cap`), where the start doubled past it.

        Past the gap cap the start doubled once per round trip on the evidence of its slots alone,
        which a limiter with an allowance (a request-rate counter, a window) lets through until it is
        spent: the refused rate says only that the limit is under it, and the doubling may have run
        far past it within a few round trips. Cut from that rate, the sends went on at 0.9 of it
        until the refusal's cut took hold (a counter of 100 per 10 s behind 80 ms pages: six refused
        sends at 149/s where the start capped at 100/s drew three), each one counted. From the gap cap
        the scope is where a start capped there would be: the overshoot past it was one piece of
        evidence, its refusals one episode.
        """
        return min(sent, max(_gap_cap(), self.start_rate))

    def _start_floor(self: _StartPhaseState, door: bool = True) -> float:
        """The least rate the start phase allows (0 outside it): see the module's two floors.

        The window of one: ``1 / latency`` for a site whose lowest latency is at
        least ``T.latency_signal``. The first answer: while the scope has sent
        once and that send was answered without a latency to measure (a
        robots.txt fetch: its latency is not the pages'), one send per that round
        trip, so the next send may go at once (the send that follows sets the gaps,
        and the floor is gone); ``door=False`` leaves this one out. Never above the
        rate's cap.
        """
        if self.phase != "start":
            return 0.0
        low = self._low_latency
        floor = 1.0 / low if low >= T.latency_signal else 0.0
        if door and self._door_open():
            floor = max(floor, 1.0 / (self._last_growth - self._sent_at))
        return min(floor, self.max_rate, _gap_cap())  # (the door's send: no sooner than gaps pace)

    def _door_open(self: _StartPhaseState) -> bool:
        """One send so far, answered without a latency (robots.txt): the next may go at once,
        on one slot (a fleet's workers all read the door open before any of them sends)."""
        return (self.phase == "start" and self._low_latency == 0.0 and self._gap is None
                and self._last_growth > self._sent_at)

    def _door_refused(self: _StartPhaseState, sent_at: float | None) -> bool:
        """Whether a refusal answers the send that went through the door (the latest send, which
        went sooner than the rate allowed because robots.txt had just been answered)."""
        return self._door != NEVER and sent_at is not None and sent_at >= self._sent_at - DOOR_SLACK

    def _early_refused(self: _StartPhaseState, sent_at: float | None) -> bool:
        """Whether a refusal answers the scope's second send, made at once on its first answer (within
        ``T.knee_slack``): the site may have seen the two back to back, whatever that answer took.

        The first answer's time is no gap the site saw: a loaded crawler's first connection (robots.txt
        answered in 1.7 s, nginx logging it 18 ms before the page that followed) spends it on the way
        there, and the second request then arrives right behind the first. A bucket with no burst
        refuses that as it refuses the page through robots.txt's door (:meth:`_door_refused`, which
        covers a first answer quicker than the starting gap only): about its gap, not the rate. Cut, it
        was read as a limit of about one a second (the first answer's pace): nginx ``limit_req`` with
        no burst at 10/s crawled at 0.95/s for 40 s, 0.36 of the oracle.

        Only after a first answer that took ``T.latency_signal + T.latency_noise`` or more: a quicker
        one is the door's, whose own record (``_door``, which keeps the starting gap after the page)
        excuses it. A fleet worker whose copy missed the door's write cut that refusal; excused here
        instead, nothing kept the gap, and a fleet sent 7 requests in a second to a bucket of 1/s.
        """
        if self.phase != "start" or sent_at is None or sent_at < self._sent_at - DOOR_SLACK:
            return False
        before = [at for at in self._ok_sends if at < sent_at]
        answers = [at for at in self._answers if at <= sent_at]
        return (len(before) == 1 and len(answers) == 1 and sent_at - answers[0] <= T.knee_slack
                and answers[0] - before[0] >= T.latency_signal + T.latency_noise)

    def _first_refused(self: _StartPhaseState, sent_at: float | None) -> bool:
        """Whether a refusal answers the scope's first send, with nothing answered before it: no gap
        was sent yet, so it says nothing of a rate (see the module's *first send*)."""
        return (self.phase == "start" and self._gap is None and self._good_rate == 0.0
                and self._sent_at != NEVER and (sent_at is None or sent_at >= self._sent_at - DOOR_SLACK))

    def start_unrisen(self: _StartPhaseState, now: float, sent_at: float | None) -> bool:
        """Whether a refusal answers a send at the start phase's polite starting pace, before any rise
        (the rate allowed under twice the starting rate; on a quick site, under ``T.confirm`` per
        round, where its round is still the whole one), and not the scope's first send (which
        :meth:`_first_refused` spares already): see the module's *first error*. Asked before the
        refusal's cut (which lowers the rate)."""
        return (self.phase == "start" and self.allowed_rate(now) < self._unrisen_below()
                and not self._first_refused(sent_at))

    def _unrisen_below(self: _StartPhaseState) -> float:
        """The rate under which the start has not risen from its polite starting pace: twice the
        starting rate, and on a quick site (lowest latency under ``T.latency_signal``) at least
        ``T.confirm`` answers a round, the pace at which its round is the whole ``T.round``. Under it
        each answer is a round's evidence, fewer than ``T.confirm`` come in one, and a 5xx among them
        is no rate found: halving such a pace left the errors rule to judge the cut at about one
        answer a second (an unlimited 3 ms site with 16 % 503s, cut at 2/s: 8 s at 1.2-1.7/s before
        the verdict, 13.6 s for 114 pages where a clean site takes 5)."""
        unrisen = 2.0 * self.start_rate
        if 0.0 < self._low_latency < T.latency_signal:
            unrisen = max(unrisen, T.confirm / T.round)
        return unrisen

    def start_unanswered(self: _StartPhaseState, now: float) -> bool:
        """Whether a failure without an answer (a timeout, a reset) at ``now`` is no evidence of load:
        the start phase has not risen past its polite starting pace (the rate allowed under twice the
        starting rate), the scope's first send included. See the module's *a hang at the start*."""
        return self.phase == "start" and self.allowed_rate(now) < 2.0 * self.start_rate

    def door_open(self: _StartPhaseState) -> bool:
        """Whether robots.txt's door is open (see :meth:`_door_open`): a shared store closes it
        as the send through it goes, as :meth:`on_send` does for one process."""
        return self._door_open()

    def _start_latency(self: _StartPhaseState, sample: float | None) -> None:
        """Note an answer's latency: the start phase's round follows the lowest one.

        An answer quicker than ``T.latency_signal`` before ``T.confirm`` answers, after answers past
        the noise that started the doubling from the window of one (:meth:`_window_known`): those
        answers were slowed by something else (a connection's set-up, a name lookup, a stalled
        crawler), the site has no window of one, and the rate goes back to the starting rate.
        """
        if sample is not None and sample > 0.0 and math.isfinite(sample):
            low = self._low_latency
            self._low_latency = sample if low <= 0.0 else min(low, sample)
            if (self._samples < T.confirm and low >= T.latency_signal + T.latency_noise
                    and self._low_latency < T.latency_signal):
                self.rate = min(self.rate, self.start_rate)

    def _start_resume(self: _StartPhaseState, now: float, rate: float, ceiling: float) -> float:
        """The rate after the start phase's first refusal: ``rate`` (the halved one), or, when
        the refusal came with a hold of ``T.hold_long`` or more that the scope is still in,
        ``T.cut`` of ``ceiling``.

        A token bucket refuses only once it is empty, and refused requests take
        nothing from it, so after a silence of at least one gap at the ceiling (a
        gap at its limit or longer) it holds a token again: sends under its limit
        from then on never find it empty. The halving's reason (the burst's debt)
        is paid by the hold, and a climb back from half the rate would cost the
        site seconds on top of the silence (a 2 s hold at a site allowing 2/s:
        about 4 s more to climb back from 1/s). A hold that long is a penalty,
        not a bucket's wait for its next token (see ``T.hold_long``).
        """
        held = self._resumed_at - now
        if ceiling <= 0.0 or held < T.hold_long or held < 1.0 / ceiling:
            return rate
        return min(ceiling, max(rate, T.cut * ceiling))

    def _start_again(self: _StartPhaseState) -> None:
        """Back to the start phase (the limit moved up): the rate in force is the good rate now."""
        self.phase = "start"
        self.above_since = NEVER
        self._good_rate = self.rate

    def _sent_weight(self: _StartPhaseState) -> float:
        """The weight of the newest gap in the measured send rate (see ``T.start_sent_weight``)."""
        quick = self.phase == "start" and self._start_round() < T.round
        return T.start_sent_weight if quick else GAP_WEIGHT

    def _window_known(self: _StartPhaseState) -> bool:
        """Whether the start phase doubles from the window of one (``1 / latency``): once
        ``T.confirm`` answers have shown a latency of ``T.latency_signal`` or more, or at once when
        the lowest is past ``T.latency_signal + T.latency_noise``.

        The confirming guards against one answer slowed by the crawler (a busy machine adds up to
        ``T.latency_noise``) on a site answering in milliseconds, which has no window of one: the
        doubling would start tens a second up. Past the noise the latency is the server's own, and
        later answers can only lower the lowest latency, so the window they show is at least this
        one: waiting for them left a server answering in 0.2-0.4 s (a cap on requests in flight, a
        knee) at one request in flight for its first second, 0.02-0.04 of its capacity in a
        20 s crawl.
        """
        low = self._low_latency
        if low < T.latency_signal:
            return False
        return self._samples >= T.confirm or low >= T.latency_signal + T.latency_noise

    def _start_used(self: _StartPhaseState, rate: float) -> float:
        """The send rate below which the start phase does not grow: the sends lag one doubling."""
        return T.start_used_share * rate

    def _start_grow(self: _StartPhaseState, now: float, step: float, round_: float, cap: float) -> None:
        """An answer in the start phase: note the good rate, then double at most once, up to ``cap``
        (:meth:`_rate_cap`)."""
        # The rate the answered send went at: the door after a first answer is no rate sent at.
        allowed = min(self.allowed_rate(now), max(self.rate, self._start_floor(door=False)))
        if allowed > self._good_rate:
            self._good_rate = allowed
        if self._window_known():
            self.rate = max(self.rate, 1.0 / self._low_latency)  # the window of one: double from there
        self.rate = min(cap, self.rate * 2.0 ** (min(step, round_) / round_))

    def _start_refused(self: _StartPhaseState, now: float, at: float, allowed: float) -> float:
        """The rate a refusal in the start phase answers, for a request sent at ``at``: the rate
        allowed then, but after a hold of ``T.hold_long`` or more at most twice what the sends
        accepted in the round before showed.

        Growth is clocked by answers: a rate doubling once a round has sent about
        0.7 of its final rate in its last round, so the bound leaves such a climb
        alone. It holds a rate no sends showed: the window of one lets a site
        whose answers take 30 ms (a loaded crawler's, or an API's distance) send at
        33/s from its first answer, and a bucket of 5/s with no burst refuses the
        second page. That says its limit is under 33/s, not near it, and where the
        refusal brought a long hold, every overshoot of the level costs another:
        the cut from 33/s resumed at 28/s after the hold, and 10 holds of 5 s came in
        a minute (0.24 of the limit). Without such a hold an overshoot costs one
        quick refusal, and a limit near the rate allowed (a bucket of 12/s, the
        window of one at 20/s) is found at once. (A record full of sends within the
        round says nothing here: the rate is that high at least.)
        """
        if self._resumed_at - now < T.hold_long:
            return allowed
        round_ = self._start_round()
        sends = self._ok_sends
        shown = sum(1 for sent in sends if at - round_ <= sent < at)
        if shown == sends.maxlen:
            return allowed
        return min(allowed, max(self.start_rate, 2.0 * shown / round_))

    def _start_ceiling(self: _StartPhaseState, now: float, refused: float, rate: float,
                       ceiling: float) -> float:
        """Where the climb after the start phase's first refusal (at ``refused``) levels out.

        ``rate`` and ``ceiling`` are the ordinary cut's: half the refused rate,
        and ``T.start_ceiling_share`` of it. The climb levels out at ``T.good_ceiling`` of the good
        rate instead when that is lower and the good rate is at least ``T.good_share``
        of the refused one: the limit lies between the two, and near the good one
        when the server allows no burst. (A good rate about a whole doubling below
        says no more than the halving does.) The rate itself is still halved: a server
        that allows a burst lets the good rate pass its limit, and a fall back to
        just under it drew more refusals while the burst's debt was paid (unless a hold
        paid it: :meth:`_start_resume`).

        A refusal that came with a hold of ``T.hold_long`` or more levels out at
        ``T.cut`` of the good rate: the good rate is the rate allowed at the
        last answered send, which the sends seldom reached, and another refusal costs a
        whole hold again.
        """
        good = min(self._good_rate, refused)
        if good < T.good_share * refused:
            return ceiling
        share = T.cut if self._resumed_at - now >= T.hold_long else T.good_ceiling
        return max(rate, min(ceiling, good * share))

    def _start_strict(self: _StartPhaseState, now: float, sent_at: float | None) -> str:
        """After the start phase's first refusal (halved as usual): where a bucket with no burst fits
        it, level out at that fit and search up to the refused gap's rate from there; returns what it
        did, for the cut's log line ("": nothing).

        The refused send's gap to the last accepted one was under the shortest gap accepted: a bucket
        with no burst refuses the first gap shorter than its own, so its rate lies between the two
        gaps' rates, and pacing at ``T.fit_share`` of the accepted one's is safe. However far under
        (the steady phase's fit has no floor either): the doubling's last step may jump past the
        bucket's gap (accepted 0.150 s, refused 0.112 s on an 8/s bucket; 0.165 s and 0.098 s on real
        nginx at 10/s), and left to the start's ceiling with no search, such a crawl stayed at 0.86 of
        an 8/s limit, and at 0.68 of nginx's for 45 s (the probe above a ceiling is slow). The search
        from the start's ceiling up to the refused gap's rate costs one refusal where it reaches the
        limit. The climb back levels out there (if that is higher than the start's
        own ceiling), and once it has held it, the search (``_rampup_search``) climbs by halves to the
        refused gap's rate: within seconds, where the probe beyond a ceiling takes most of a window
        (nginx ``limit_req`` with no ``burst`` sat at 0.84 of its limit for the rest of the crawl). A
        refusal on the way is the steady phase's, and its strict fit paces at the gap accepted.

        Such a bucket judges the gaps between arrivals, and sends one gap apart arrive up to the spread
        of their delays on the way closer (``_rampup_cut``'s ``_arrival_jitter``): the level is the
        accepted gap plus that spread where that is wider than the fit's share allows (a loaded
        machine's; the share covers a quiet one's), and the search stops short of the refused gap by
        it too (at the refused gap itself, the last step drew refusal after refusal where sends reached
        the site a few milliseconds late: 10-11 in 20 s on buckets of 19-25/s). A bracket too narrow to
        search (its top within a ``tolerance`` of the level) still lifts the level to the accepted gap's
        fit (it stayed at the start's ceiling, 0.85 of the refused rate).

        The halving stays: the start's doubling shortens every gap, so a bucket with a burst, a window
        or a counter fits just as well, and each of those has a debt to pay back first (pacing at the
        fit at once drew a second refusal from each, and cost a counter that counts refusals a longer
        lock-out). A refusal that came with a hold of ``T.hold_long`` or more is left to the hold's
        rules. A shorter one is a bucket's wait for its next token rounded up to a whole second (the
        random farm's strict buckets send ``Retry-After: 1``, and were held at the start's ceiling,
        0.83 of their limit, for the rest of a 20 s crawl): the level is the accepted gap's fit, with
        no search above it, since each step refused would cost another hold (searching, the fake
        clock's buckets of 9-29/s gained as much as they lost, and a loaded crawl drew one or two
        refusals more per site).
        """
        shortest = self._gap_ok
        before = None if sent_at is None else self._last_ok_before(sent_at)
        if sent_at is None or before is None or not math.isfinite(shortest) or (
                self._resumed_at - now >= T.hold_long):
            return ""
        refused = sent_at - before
        if not 0.0 < refused < shortest:
            return ""
        jitter = self._arrival_jitter()
        cap = self._rate_cap()
        fit = min(cap, T.fit_share / shortest, 1.0 / (shortest + jitter))
        top = min(cap, 1.0 / (refused + jitter))
        level = max(self.ceiling or 0.0, fit)
        if self._resumed_at > now or top <= level * (1.0 + T.tolerance):
            # Held (a step refused costs another hold), or too narrow to search: the level is the fit.
            if level <= (self.ceiling or 0.0):
                return ""
            top = 0.0
        self.ceiling, self._top = level, top
        self._start_climb(now, fast=True)
        search = f", then searching up to {top:.3g}/s" if top else ""
        return (f"; a bucket with no burst fits the gaps (refused {refused:.4g}s, accepted {shortest:.4g}s): "
                f"level {level:.3g}/s{search}")
