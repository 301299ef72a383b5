"""Rampup's cut: what one pushback or one answer far too slow does to the rate.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module and
``docs/concepts/rampup.md`` for the rules). A cut takes the rate the scope was
sending at (the rate allowed, in the start phase, where doubling outruns the
measured rate), multiplies it by a depth and sets the *ceiling* the climb back
levels out at:

* an ordinary refusal: ``T.cut`` (0.9), the ceiling ``T.ceiling_share`` of the
  failing rate;
* more refusals than the band allows in the last window: ``T.cut_over`` (0.8);
* a refusal the previous cut did not prevent, or the start phase's first:
  ``T.cut_deep`` (a half), the ceiling at the geometric middle (the start
  phase's at ``T.start_ceiling_share``, or under its good rate);
* but the first such refusal in the steady phase that comes near the previous
  refusal's rate (at least ``T.near_share`` of it) is *gentle*: the ordinary
  depth and ceiling, counted from its own send rate. The limit is known to lie
  just under it (a token bucket paying back the burst that let the rate pass
  its limit), and a halving would leave the scope at half its rate while the
  search climbs back. A second refusal the gentle cut did not prevent is deep,
  unless it comes once the climb has held its level (then it is ordinary);
* a refusal on arrival with several in flight (the slots were too many): the
  ordinary depth, the slot cap does the rest;
* latency past the cut line: deeper the further past the knee it is
  (``_latency_beta``), counted from the rate allowed, never a refusal.

Each cut starts a new generation and a quiet spell of two latencies (or one
gap at the new rate), during which answers to earlier sends cannot cut again.

**A refusal the arrivals explain** (:meth:`CutRules._jitter_refused`) is no cut at all. A
bucket with no burst refuses two requests that *arrive* closer than its gap, and the crawler
knows only when it *sent* them: a request its own machine (or the network) delayed arrives
late, and the next one, sent on time, reaches the site too soon after it. So a refusal in the
steady phase whose send gap to the last accepted send is one the site has accepted before
(at least the shortest accepted gap), while that accepted send's answer took longer than the
site's quickest answers by enough that the two arrivals may have come closer than that
shortest gap, says nothing of the level, when that delay was a stall (longer than the
arrivals' usual spread) or the scope has shown a bucket with no burst (a refusal just under
the shortest gap accepted): the limit's gap is still at most the shortest one accepted. The
pace keeps its level, spaced at least that shortest gap plus the arrivals' measured jitter
(:meth:`CutRules._arrival_jitter`), and no probe wait follows. A bucket with a burst, a window
or a counter accepts gaps far shorter than the ones they refuse, so their refusals are seldom
explained this way (a stall longer than the gap they refused), and cut as before.

An answer's delay counts from the send the scope recorded (its admission): the latency plus the
caller's ``lag`` before the fetch (``ScopeFeedback.lag``), which in a fleet is each worker's wait
for the shared store's reply and its loop's turn, and which the fetch's latency does not hold.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

from ._rampup_sends import NEVER
from ._rampup_tuning import TUNING as T

__all__ = ["LATENCIES_KEPT", "CutRules"]

#: Accepted answers whose latency the arrivals' jitter is measured over (a send time and a latency each).
LATENCIES_KEPT = 16


class _CutState(Protocol):
    """What :meth:`CutRules._cut` uses of the controller."""

    phase: str
    rate: float
    min_rate: float
    max_rate: float
    ceiling: float | None
    target: tuple[float, float]
    generation: int
    above_since: float
    last_pushback_rate: float | None
    latency: float | None
    slot_cap: float
    _pushbacks: deque[float]
    _cut_rate: float
    _gentle: bool
    _quiet_until: float
    _epoch: float
    _k: float
    _gap_ok: float
    _ok_lat: deque[float]
    _lat_cut_at: float
    _lat_from: float
    _lat_held: bool
    _ok_sends: deque[float]
    _no_burst: bool
    _spaced: bool

    def allowed_rate(self, now: float) -> float: ...
    def sent_rate(self, now: float) -> float: ...
    def pushbacks(self, now: float) -> int: ...
    def _latency_beta(self) -> float: ...
    def _start_ceiling(self, now: float, refused: float, rate: float, ceiling: float) -> float: ...
    def _start_resume(self, now: float, rate: float, ceiling: float) -> float: ...
    def _start_refused(self, now: float, at: float, allowed: float) -> float: ...
    def _start_strict(self, now: float, sent_at: float | None) -> str: ...
    def _start_past_gaps(self, sent: float) -> float: ...
    def _start_climb(self, now: float, *, fast: bool) -> None: ...
    def _after_cut(self, now: float, *, sent: float, allowed: float, cascade: bool, steady: bool,
                   refused: bool, pace: float = 0.0) -> None: ...
    def _decide(self, now: float, decision: str) -> None: ...
    def _last_ok_before(self, sent: float) -> float | None: ...
    def _arrival_jitter(self) -> float: ...
    def _page_latencies(self) -> list[float]: ...
    def _latency_of(self, sent: float) -> float | None: ...
    def _late_by(self, took: float | None) -> float: ...
    def _just_under(self, sent_at: float | None, took: float | None) -> bool: ...


class CutRules:
    """The cut part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    # declared for the assignments below, which might narrow them
    ceiling: float | None
    last_pushback_rate: float | None

    def _note_latency(self: _CutState, sent: float, latency: float | None, lag: float = 0.0) -> None:
        """An accepted send at ``sent`` answered in ``latency``: kept for the arrivals' jitter.

        ``lag`` is the caller's delay from the send to the moment its request went out, which
        ``latency`` does not hold: the record keeps the sum, the time from the send the scope
        knows to the answer, as in one process where the fetch follows the admission at once.
        In a fleet the admission is the shared store's and each worker's request goes out a
        varying while after it, so sends granted a full gap apart reach the site closer; without
        the lag no refusal of a strict bucket looked explained by a late arrival, and each was cut.
        """
        if latency is not None and math.isfinite(latency) and latency >= 0.0:
            self._ok_lat.extend((sent, latency + (lag if math.isfinite(lag) and lag > 0.0 else 0.0)))

    def _page_latencies(self: _CutState) -> list[float]:
        """The recent accepted answers' latencies, the scope's first answer left out while on record.

        That first answer is robots.txt's in a crawl (a static file, answered well before a page is),
        or a first page over a new connection: neither is a page's usual time. Kept as the quickest,
        it made every page look that much late (45 ms of a 50 ms page after a 5 ms robots.txt), and a
        clock window's refusal at the pace, a gap no shorter than one it accepted, was taken for the
        arrivals' jitter: the next send went a gap later, into the same window, and was refused too
        (fixed25 of seed 1132014971: 5 requests in a window of 3 per second). It is still on record
        while every accepted send is (each noted both ways) and none has left the record.
        """
        latencies = list(self._ok_lat)[1::2]
        if 2 <= len(latencies) == len(self._ok_sends) <= LATENCIES_KEPT:
            return latencies[1:]
        return latencies

    def _arrival_jitter(self: _CutState) -> float:
        """How much later than its send a request typically reaches the site, beyond the quickest.

        Twice the mean of the recent accepted answers' latencies over the quickest of them: the
        spread a crawler's own delays (a busy event loop, the network) add to each request, of
        which the share on the way in moves its arrival. (Twice the mean: a delay spread evenly
        from 0 to ``J`` has a mean of ``J / 2``.) 0 before two answers.
        """
        latencies = self._page_latencies()
        if len(latencies) < 2:
            return 0.0
        quickest = min(latencies)
        return 2.0 * sum(lat - quickest for lat in latencies) / len(latencies)

    def _note_refused_gap(self: _CutState, sent_at: float | None, took: float | None = None) -> None:
        """A refusal of a send made at ``sent_at``, answered ``took`` after it (latency and lag, when
        known): whether it is a sign of a bucket with no burst.

        It is when its gap to the last accepted send was just under the shortest one accepted (at
        least :data:`T.strict_near` of it): such a bucket refuses the first gap shorter than its
        own. A window or a counter that the crawl reached at its pace cap with no refusal, and a
        bucket whose burst let shorter gaps through, show none, and their refusals are not taken
        for the arrivals' jitter.
        """
        if self._just_under(sent_at, took):
            self._no_burst = True

    def _just_under(self: _CutState, sent_at: float | None, took: float | None) -> bool:
        """Whether a refused send made at ``sent_at`` and answered ``took`` after it reached the site just
        under the shortest accepted gap after the last accepted send (at least :data:`T.strict_near`
        of it), as the site saw it: the refused send may have arrived as late as its own delay, the
        accepted one before it as late as its delay (:meth:`_late_by`); only a gap that lay there
        whatever the delays were counts."""
        shortest = self._gap_ok
        before = None if sent_at is None else self._last_ok_before(sent_at)
        if sent_at is None or before is None or not math.isfinite(shortest):
            return False
        gap = sent_at - before
        return (T.strict_near * shortest <= gap - self._late_by(self._latency_of(before))
                and gap + self._late_by(took) < shortest)

    def _late_by(self: _CutState, took: float | None) -> float:
        """How much later than its stamp a send answered ``took`` after it (latency and lag) may have
        reached the site: its delay past the quickest recent answer, when that is more than a timer's
        slack (``T.knee_slack``, the slack the fits already read a stamp with), else 0.

        The answer's whole delay bounds the way in, since no part of the way back or of the site's
        service can be told from it. Within the slack it is the site's own spread (3-ms pages that
        vary by 10 %), which counted shifted a bucket of 25/s with no burst's fit by 0.5 ms a gap.
        """
        if took is None or not math.isfinite(took):
            return 0.0
        late = took - min(self._page_latencies(), default=took)
        return late if late > T.knee_slack else 0.0

    def _latency_of(self: _CutState, sent: float) -> float | None:
        """The latency of the accepted send made at ``sent``, if it is still on record."""
        record = self._ok_lat
        for i in range(len(record) - 2, -1, -2):
            if record[i] == sent:
                return record[i + 1]
        return None

    def _jitter_refused(self: _CutState, now: float, sent_at: float | None) -> bool:
        """A steady-phase refusal the arrivals' jitter explains: pace on, spaced for the jitter, no cut.

        True when the refused send's gap to the last accepted send was no shorter than the shortest
        gap the site accepted, and that accepted send's answer was late enough (its latency over the
        quickest on record) that its request may have reached the site that much later than sent,
        so the two arrivals came closer than any gap the site accepted; and the delay was a stall
        (more than the arrivals' usual spread) or the scope has shown a bucket with no burst. The
        level stands; its gap is at least the shortest accepted one plus the measured jitter (see
        the module's rules).
        """
        shortest = self._gap_ok
        if sent_at is None or self.phase != "steady" or not math.isfinite(shortest):
            return False
        before = self._last_ok_before(sent_at)
        late = None if before is None else self._latency_of(before)
        if before is None or late is None:
            return False
        latencies = self._page_latencies()
        if not latencies:
            return False
        refused = sent_at - before
        delayed = late - min(latencies)
        jitter = self._arrival_jitter()
        # A stall (an answer later than the usual spread) explains it whatever the limiter; a delay
        # within the usual spread only once the scope has shown a bucket with no burst (a server's
        # own service times spread too, and a counter's refusal at the pace cap is no one's jitter).
        if not shortest <= refused < shortest + delayed or not (self._no_burst or delayed > jitter):
            return False
        # Never deeper than an ordinary cut: a jitter that large is the refusal's cause only seldom.
        rate = max(self.min_rate, T.cut * self.rate, min(self.rate, 1.0 / (shortest + jitter)))
        self.last_pushback_rate = 1.0 / refused
        self._spaced = True  # (the site counts arrival gaps: late answers space the next send, spaced_until)
        if rate < self.rate:
            self.rate = rate
            self.ceiling = rate if self.ceiling is None else min(self.ceiling, rate)
            self._start_climb(now, fast=False)
        self._decide(now, f"jitter: refused {refused:.4g}s after an accepted send whose answer took "
                     f"{delayed:.3g}s longer than the quickest; the site accepted {shortest:.4g}s: "
                     f"no cut, paced at {self.rate:.3g}/s (arrivals spread {jitter:.3g}s)")
        return True

    def _cut(self: _CutState, now: float, *, reason: str, sent_at: float | None = None) -> None:
        """Cut the rate for a pushback (``reason``: ``pushback``, ``slots``) or a slow answer (``latency``).

        Picks the depth (see the module's rules), sets the ceiling the climb
        levels out at, starts a new generation and the climb back, and lets the
        search and hold rules (``_rampup_search``) note the cut.

        The rates it starts from are those of ``sent_at``, when the request that
        drew the pushback was sent, if that is known: a timeout comes seconds
        later, and when hanging requests held every slot the scope sent nothing
        in between, so its measured send rate then (one send in ten seconds, say)
        says nothing of the rate the server saw.
        """
        at = now if sent_at is None else min(now, sent_at)
        allowed = self.allowed_rate(at)
        sent = min(allowed, self.sent_rate(at))
        if self.phase == "start":
            # Doubling outruns the measured send rate (a mean of recent gaps, which lags
            # by a few sends): the refusal answers the rate allowed, so cut from that.
            # (Later, the lag is what keeps the ceiling a little under the limit.) Too many in
            # flight is no rate: the slot cap answers it, so the cut starts from what went out
            # at least (a fleet's worker may hold a stale, low allowance for a shared scope).
            # (After a long hold, at most twice what the last round's sends showed: _start_refused.)
            sent = (max(allowed, self.sent_rate(at)) if reason == "slots"
                    else self._start_refused(now, at, allowed))
            sent = self._start_past_gaps(sent)  # (a start past what gaps pace: from the gap cap)
        elif reason == "latency" and self.ceiling is not None:
            # A queueing server answers slowly, so the measured send rate (held back by
            # full slots) understates the rate that overloaded it: cut from the rate
            # allowed, at most the ceiling, step by step, as a gradient would.
            sent = max(sent, min(self.rate, self.ceiling))
        slots = reason == "slots"
        refused = reason in ("pushback", "slots")
        if refused:
            self._pushbacks.append(now)
            # A refusal is the limit's: the latency cuts before it were not spells (_rampup_latency).
            self._lat_cut_at, self._lat_from, self._lat_held = NEVER, 0.0, False
        count = self.pushbacks(now)
        low, high = self.target
        # A slow answer is a hint, not a refusal: it never cuts deep.
        # Too many slots, not too high a rate: the cap answers it, and the cut stays gentle.
        cascade = refused and not slots and (self.phase == "start" or (
            self._cut_rate > 0.0 and sent < self._cut_rate * (1.0 + T.tolerance)))
        if cascade and self._gentle and now >= self._epoch + self._k:
            # A gentle cut's level is only a few per cent over its rate, so the growth test
            # cannot tell: a refusal once the climb held its level says the level is a little
            # high, not that the limit fell far. An ordinary cut answers it.
            cascade = False
        # Near the previous refusal's rate, the first cascade of a streak is gentle (see the rules).
        gentle = cascade and self.phase == "steady" and not self._gentle and (
            self.last_pushback_rate is not None and sent >= T.near_share * self.last_pushback_rate)
        cascade = cascade and not gentle
        if cascade:
            beta = T.cut_deep
        elif slots or gentle:
            beta = T.cut
        elif count > high and refused:
            beta = T.cut_over
        elif not refused:
            beta = self._latency_beta()
        else:
            beta = T.cut
        # After a cascade the limit lies between the new rate and the one that failed:
        # climb quickly to the middle (geometrically), then probe quickly beyond.
        # Otherwise the refusal came only once the server's allowance for bursts was
        # spent, so the rate that drew it is above the limit: level out a little below.
        steady = self.phase == "steady"
        if self.phase == "start" and not slots:
            ceiling = sent * T.start_ceiling_share
        else:
            ceiling = sent * (math.sqrt(beta) if cascade else T.ceiling_share)
        if refused:
            self.last_pushback_rate = sent
        rate = max(self.min_rate, min(self.max_rate, sent * beta))
        if self.phase == "start" and refused and not slots:
            ceiling = self._start_ceiling(now, sent, rate, ceiling)  # at most under the good rate
            rate = self._start_resume(now, rate, ceiling)  # a hold pays the burst's debt
        self.generation += 1
        self.phase = "steady"
        self.above_since = NEVER
        previous, self.ceiling = self.ceiling, ceiling
        self.rate = rate
        self._cut_rate = self.rate
        self._gentle = gentle
        self._quiet_until = now + max(2.0 * (self.latency or 0.0), 1.0 / self.rate if self.rate > 0 else 0.0)
        self._start_climb(now, fast=cascade or gentle)  # a gentle cut's level is near: no need to dawdle
        self._after_cut(now, sent=sent, allowed=min(allowed, previous or allowed), cascade=cascade,
                        steady=steady, refused=refused, pace=allowed)
        # The start's refusal of a gap just under the shortest accepted fits a bucket with no burst: the
        # climb levels out at the accepted gap's rate and searches up to the refused one's (_rampup_start).
        fitted = self._start_strict(now, sent_at) if not steady and refused and not slots else ""
        # A long hold resumes at the level (_after_cut): a refusal there, before any growth, is one
        # the cut did not prevent, not a new limit above it.
        self._cut_rate = max(self._cut_rate, self.rate)
        capped = f"refused on arrival, slots capped at {self.slot_cap:g}"
        what = {"pushback": "pushback near the last one's rate" if gentle else "pushback",
                "slots": capped}.get(reason, f"latency {self.latency or 0.0:.3f}s")
        # The rules after the cut (a hold's bucket fit, a relapse's halving) may leave the rate under the
        # cut's own: said, since the cut's figure alone read as the pace raised hold after hold under lag
        # when the fit had set it lower (bench/results/lag2.md).
        resumed = (" (the hold is the cut: at the level after it)" if self.rate > rate
                   else f"; {self.rate:.3g}/s after the hold's rules" if self.rate < rate else "")
        self._decide(now, f"cut: {what} at {sent:.3g}/s ({count} in the window, band "
                     f"{low:g}-{high:g}); rate x{beta:.3g} -> {rate:.3g}/s{resumed}, ceiling {ceiling:.3g}/s"
                     f"{fitted}")
