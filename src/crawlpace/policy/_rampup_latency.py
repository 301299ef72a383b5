"""Rampup's latency watch: the smoothed latency, its baseline, and where it stands against it.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the rules):
past ``T.knee`` times the baseline the rate stops growing, past ``T.high`` times it
the rate is cut, so an overloaded server is caught at its knee, before it
starts to refuse.

Load slows every answer; a site's own outlier slows one. An answer slow enough to
move the verdict by itself (a request that hung for seconds, then answered 200)
that a later send overtook (answered quickly before it) is an outlier
(:meth:`LatencyWatch._outlier`): a queue serves in turn, so what is overtaken
was held by the site, not by a queue. It stays out of the smoothed latency, and
the slots make room for such answers as they do for hangs.

**A cut that the latency does not follow** (:meth:`LatencyWatch._latency_unmoved`). A knee's latency
follows the rate: cut it, fewer requests are in flight, and the next answers come quicker. A server
slowed by others (its other clients, a loaded machine) answers as slowly at any rate. So a latency cut
goes on only while the answers sent since the last one come quicker than those sent just before it;
otherwise the rate holds until the latency is down (then climbs back quickly to where the cuts began:
:meth:`LatencyWatch._latency_back`) or a refusal comes (the limit's: the ordinary rules answer it).

**The load fit.** Latency that grows with the requests in flight is not overload
by itself: a server that serves each request a little slower the more it holds
may still serve more of them per second. By Little's law a scope holding ``n``
requests in flight, each answered in ``L(n)`` seconds, gets ``n / L(n)`` answers a
second. The watch keeps ``L(n)`` for every ``n`` it has seen (a smoothed latency
per count in flight, each sample clipped to twice the count's estimate so that one
slow answer among quick ones does not move it far), and :meth:`best_load` is the
count past which more in flight bought no more throughput: each step up from the
best must gain at least ``T.knee_gain`` of the ``1 / n`` that one more request
in flight adds at a server that does not queue at all.

**The line in front of a fixed rate** (:meth:`LatencyWatch.queue_fit`). A limiter that holds the
excess in line and serves it at a fixed rate (nginx's ``limit_req`` with a ``burst`` and no
``nodelay``) answers the requests in turn, one ``1 / rate`` apart, whatever the pace they came at:
each request waits for the one ahead, so the wait grows by the gap the sends outran the rate by,
and shrinks by the gap they left. Its latency past the cut line is no overload a cut relieves:
the answers leaving at the rate *are* the limit. The watch reads the rate off the departures (send
time plus latency, in send order) of the recent answers that waited, when they left in turn, evenly
spaced, at a spacing the sends' own did not set; rampup then paces at that rate (just under it
while the line drains) instead of cutting by a share.

**The full line** (:meth:`LatencyWatch.line_full`). Such a line refuses a request that finds it full
(nginx's 503 by default), at once. Where the site's pages cost nothing (static files, a simulated
site on loopback) that refusal takes as long as a page, no quicker, so it is no refusal on arrival
by its time, and the errors rule weighed it as one of the site's own 5xx. The line shows in what was
out with it instead: the latest accepted answer waited past the knee line, and the latest request
sent before the refused one is still out past it (waiting its turn). A backend's own 5xx come
whether or not anything waits; these come only when something does. Such a refusal is load, rampup's
to answer, as a cap's refusal on arrival is.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import pairwise
from typing import Protocol

from ._rampup_sends import NEVER
from ._rampup_tuning import TUNING as T
from ._shared_rules import LATENCY_WEIGHT

__all__ = ["LOAD_COUNTS", "LatencyWatch"]

#: The counts in flight the load fit keeps a latency for (higher counts share the last): a memory
#: bound on the shared state, not a number the pace depends on (slots stop far below it).
LOAD_COUNTS = 64


def _median(values: list[float]) -> float:
    """The median of a non-empty list."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def _put(values: tuple[float, ...], index: int, value: float) -> tuple[float, ...]:
    """``values`` with ``value`` at ``index`` (the fit's tables are tuples: the shared state stores them)."""
    return (*values[:index], value, *values[index + 1:])


class _LatencyWatchState(Protocol):
    """What the methods of :class:`LatencyWatch` use of the controller."""

    latency: float | None
    window: float
    _baseline: deque[float]
    _window_min: float
    _window_start: float
    _samples: int
    _level: int
    _quick_sent: float
    _slow_last: bool
    _load_latency: tuple[float, ...]
    _load_count: tuple[float, ...]
    _load_n: int
    _load_since: float
    _knee_hold: int
    _held_over: float
    _ok_lat: deque[float]
    _lat_cut_at: float
    _lat_from: float
    _lat_held: bool

    rate: float
    phase: str
    generation: int
    above_since: float
    ceiling: float | None
    min_rate: float
    max_rate: float
    _cut_rate: float
    _quiet_until: float
    _gentle: bool
    _top: float
    _k: float
    _climb: float
    _line_until: float
    _outstanding: deque[float]

    def baseline(self) -> float | None: ...
    def queue_fit(self) -> tuple[float, float] | None: ...
    def _start_climb(self, now: float, *, fast: bool) -> None: ...
    def _climb_time(self, *, fast: bool) -> float: ...
    def _decide(self, now: float, decision: str) -> None: ...
    def _outlier_span(self, early: bool = False) -> float | None: ...
    def throughput(self, inflight: int) -> float | None: ...
    def _freeze(self, now: float) -> None: ...
    def _knee_slots(self, now: float) -> None: ...


class LatencyWatch:
    """The latency part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    latency: float | None  # declared for the assignments below, which might narrow them
    ceiling: float | None

    def baseline(self: _LatencyWatchState) -> float | None:
        """The lowest smoothed latency of the recent windows, if any was seen."""
        low = min(self._baseline, default=math.inf)
        low = min(low, self._window_min)
        return None if low == math.inf else low


    def _outlier_span(self: _LatencyWatchState, early: bool = False) -> float | None:
        """Seconds past which one answer alone moves the smoothed latency past the knee (None: no base).

        With ``early``, before a baseline is known (fewer than ``T.confirm`` answers) the smoothed
        latency of the answers so far stands for it.
        """
        smooth, base = self.latency, self.baseline()
        if smooth is None:
            return None
        if base is None or self._samples < T.confirm:
            if not early:
                return None
            base = smooth
        line = T.knee * base + T.knee_slack
        return smooth + max(line - smooth, 0.0) / LATENCY_WEIGHT

    def _outlier(self: _LatencyWatchState, sample: float | None, sent_at: float, alone: bool = False) -> bool:
        """Whether an accepted answer sent at ``sent_at`` is the site's own outlier, not load (see module).

        Notes when a quick answer's request was sent; call it once per accepted answer. This holds
        from the second answer on: an answer overtaken by a quick one is no queue's, baseline or
        not (a 4.3-s hang among the first three answers of a 13-ms site, smoothed in, ended the
        start phase at 0.5/s, and the steady climb from there took a minute: 0.01 of the oracle).
        With ``alone`` (no other request of the scope was out at its answer) it queued behind
        nothing of the crawler's, overtaken or not, if the answer before it was quick (one slow
        answer, not a shift: a loaded machine that reads every answer late still moves the
        latency): a fleet's slot cap of 1 held by an 8.9-s hang let no send overtake it, and
        smoothed in, it ended the start phase at 0.32/s.
        """
        span = self._outlier_span(early=True)
        if sample is None or span is None or not math.isfinite(sample):
            return False
        base = self.baseline()
        if base is None or self._samples < T.confirm:
            base = self.latency if self.latency is not None else sample
        slow_before, self._slow_last = self._slow_last, sample > T.knee * base + T.knee_slack
        if not self._slow_last:
            self._quick_sent = max(self._quick_sent, sent_at)
            return False
        # (One 6-s answer on a 20-ms site smoothed in read as a queue and cut the rate three times.)
        return sample > span and ((alone and not slow_before) or sent_at < self._quick_sent)

    def _observe_latency(self: _LatencyWatchState, now: float, sample: float | None) -> int:
        """Smooth ``sample`` in; 0: latency fine, 1: at the knee, 2: too high."""
        if sample is None or not sample >= 0.0 or math.isinf(sample):
            return 0
        smooth = self.latency
        smooth = sample if smooth is None else smooth + LATENCY_WEIGHT * (sample - smooth)
        self.latency = smooth
        self._samples += 1
        if self._samples < T.confirm:
            return 0  # one odd first answer must not become the baseline
        if now - self._window_start >= self.window:
            if self._window_min != math.inf:
                self._baseline.append(self._window_min)
            self._window_min = math.inf
            self._window_start = now
        self._window_min = min(self._window_min, smooth)
        base = self.baseline()
        level = 0
        if base is not None and smooth > T.high * base + T.latency_noise:
            level = 2
        elif base is not None and smooth > T.knee * base + T.knee_slack and base >= T.latency_noise:
            # (A page answered in milliseconds has no knee to see: a busy crawler machine adds
            # more than T.knee times its latency to many answers. Only the cut line, with its
            # slack, speaks for it.)
            level = 1
        self._level = level
        return level

    def _note_load(self: _LatencyWatchState, now: float, inflight: int | None, sample: float | None,
                   sent_at: float | None) -> None:
        """An accepted answer's latency ``sample``, sent at ``sent_at``, with ``inflight`` in flight at the
        answer (this one included), into the load fit.

        The count labels the sample only when every answer since before its send saw the same
        count: while the slots change, a request's answer comes with a count it never shared
        the server with. Once the load fit holds the slots, it takes the answers that came with
        the count held, to sends made since it was set (a shared store's counts swing by one
        as slots refill). The sample is clipped to twice the count's smoothed latency (one slow answer
        among quick ones is not load).
        """
        if inflight is None or inflight < 1 or sample is None or not 0.0 < sample < math.inf:
            return
        n = min(inflight, LOAD_COUNTS)
        if self._knee_hold > 0:
            if n != min(self._knee_hold, LOAD_COUNTS):
                return  # (a slot not yet refilled: the count is not the one held)
            if self._load_since == math.inf:
                # The first answer with the count held full: the sends from now on share the server
                # with that count. The sends between the hold's change and now went with fewer (the
                # slots added fill one by one) and were answered with the count full: a knee of 2
                # measured "7.2/s at 3" where 3 serve 4/s, and the fit walked 3, 4, 3, 1, 3, 2.
                self._load_since = now
                return
        elif n != self._load_n or self._load_since == math.inf:
            self._load_n, self._load_since = n, now
            return
        if sent_at is None or sent_at < self._load_since:
            return
        seen, counts = self._load_latency, self._load_count
        if len(seen) < n:
            seen += (0.0,) * (n - len(seen))
            counts += (0.0,) * (n - len(counts))
        old = seen[n - 1]
        new = sample if old <= 0.0 else old + LATENCY_WEIGHT * (min(sample, 2.0 * old) - old)
        self._load_latency = _put(seen, n - 1, new)
        self._load_count = _put(counts, n - 1, counts[n - 1] + 1.0)

    def _forget_load(self: _LatencyWatchState, inflight: int) -> None:
        """Drop what the fit knows of ``inflight`` in flight, to measure it afresh."""
        if 1 <= inflight <= len(self._load_latency):
            self._load_latency = _put(self._load_latency, inflight - 1, 0.0)
            self._load_count = _put(self._load_count, inflight - 1, 0.0)

    def throughput(self: _LatencyWatchState, inflight: int) -> float | None:
        """Answers a second with ``inflight`` in flight, by Little's law, once that count was seen a
        round's worth of times (``inflight``, at least ``T.confirm``; None before)."""
        if (not 1 <= inflight <= len(self._load_latency)
                or self._load_count[inflight - 1] < max(T.confirm, inflight)):
            return None
        # Each slot is held its answer's latency and the crawler's own time past it (_note_held: none
        # in one process): a fleet's 12 slots held 0.2 s past a soft knee's 0.19 s pages were read as
        # 64/s where they served 31/s, and the load fit held the count that had them.
        latency = self._load_latency[inflight - 1]
        return inflight / (latency + self._held_over) if latency > 0.0 else None

    def best_load(self: _LatencyWatchState) -> int | None:
        """The count in flight past which more bought no more throughput (None: no count seen enough).

        Walking up the counts seen, a count replaces the best when its throughput beats the
        best's by ``T.knee_gain`` of what the extra requests would add at a server that does
        not queue (``(m - n) / n`` of the best's), so a level stretch past a knee is not taken.
        """
        best: int | None = None
        top = 0.0
        for n in range(1, len(self._load_latency) + 1):
            got = self.throughput(n)
            if got is None:
                continue
            if best is None or got >= top * (1.0 + T.knee_gain * (n - best) / best):
                best, top = n, got
        return best


    def _note_latency_cut(self: _LatencyWatchState, now: float) -> None:
        """A latency cut at ``now``: the sends from then on meet the lower rate; the first of a run keeps
        the rate it cut from, to climb back to if the latency turns out not to follow the rate."""
        self._lat_cut_at = now
        if self._lat_from <= 0.0:
            self._lat_from = self.rate

    def _latency_unmoved(self: _LatencyWatchState, now: float) -> bool:
        """Whether the answers to the sends made since the last latency cut came no quicker than the
        answers to those made just before it (the median of each, as many before as after, at least
        ``T.confirm`` of each): the cut lowered the rate, not the latency. While fewer than that came since
        the cut, it holds too (the cut's effect is not known yet); with fewer before it, False.

        At a knee the latency follows the load: fewer requests sent, fewer in flight, and the next
        answers come quicker (a server slower with each request it holds, one whose latency grows
        past a count in flight). A server slowed by others (its other clients, a loaded machine)
        answers as slowly at any rate: every further cut costs rate and buys nothing, and a spell of
        seconds cut a bucket of 44/s seven times, to 8/s (bench/latency_spells.py). Noted once per
        run of cuts: the run then holds, and climbs back once the latency is down (:meth:`_latency_back`).
        """
        if self._lat_cut_at == NEVER:
            return False
        if self._lat_held:
            # Held until the latency is down or a refusal comes: the answers kept soon all postdate the
            # cut, and a run judged anew from them cut a spell's 0.1-s answers six more times.
            self._knee_slots(now)
            self._freeze(now)
            return True
        kept = list(self._ok_lat)
        before = [latency for sent, latency in zip(kept[0::2], kept[1::2], strict=False)
                  if sent < self._lat_cut_at]
        after = [latency for sent, latency in zip(kept[0::2], kept[1::2], strict=False)
                 if sent >= self._lat_cut_at]
        if len(before) < T.confirm:
            return False
        if len(after) < T.confirm:
            # The last cut's answers are not in yet: no evidence that another cut is needed, none
            # that it is not (three cuts of a spell 2 ms apart, each before any answer to its rate).
            self._knee_slots(now)
            self._freeze(now)
            return True
        before = before[-len(after):]
        if _median(after) < _median(before):
            return False
        if not self._lat_held:
            self._lat_held = True
            self._decide(now, f"hold: latency {self.latency or 0.0:.3f}s did not fall with the last cut "
                         f"(answers since {_median(after):.3f}s, before it {_median(before):.3f}s): not "
                         f"this rate's; no further cut (back to {self._lat_from:.3g}/s once it falls)")
        self._knee_slots(now)
        self._freeze(now)
        return True

    def _latency_back(self: _LatencyWatchState, now: float) -> None:
        """The latency back under the knee line: a run of latency cuts ends. Where the latency did not
        follow the cuts (:meth:`_latency_unmoved`) and no refusal came since, the rate climbs back to
        where the run started, on the quick climb (the cuts were not the limit's)."""
        if self._lat_from <= 0.0:
            return
        back, held = self._lat_from, self._lat_held
        self._lat_cut_at, self._lat_from, self._lat_held = NEVER, 0.0, False
        if not held or back <= self.rate:
            return
        self.ceiling = back if self.ceiling is None else max(self.ceiling, back)
        self._start_climb(now, fast=True)
        self._decide(now, f"latency back at {self.latency or 0.0:.3f}s after cuts it did not follow, with no "
                     f"refusal: climbing back to {back:.3g}/s in {self._k:.3g}s")

    def queue_fit(self: _LatencyWatchState) -> tuple[float, float] | None:
        """The rate a line in front of the site serves at, and the last answer's wait in it, read off
        the recent answers (None: they show no such line).

        The answers kept for the arrivals' jitter (send, latency) that waited (latency past the knee
        line over the baseline), in send order, the last run of them: at least ``T.confirm + 1``
        answers, leaving (send plus latency) in turn (none earlier than the one sent before it by more
        than a quarter of the mean spacing) and evenly (each spacing within half the mean of it). A
        server slowed by load answers its requests in flight in no such order: their times swing with
        the count each met, and later sends overtake earlier ones. The wait is the latest sent
        answer's latency over the baseline.
        """
        base = self.baseline()
        kept = list(self._ok_lat)
        if base is None or not kept:
            return None
        line = max(T.knee * base, min(kept[1::2])) + T.knee_slack
        run: list[tuple[float, float]] = []
        for sent, latency in sorted(zip(kept[0::2], kept[1::2], strict=False)):
            if latency > line:
                run.append((sent, sent + latency))
            else:
                run.clear()  # (an answer that did not wait: the line was empty when it came)
        if len(run) < T.confirm + 1:
            return None
        left = [served for _, served in run]
        spacing = (left[-1] - left[0]) / (len(left) - 1)
        sends = (run[-1][0] - run[0][0]) / (len(run) - 1)
        if spacing <= 0.0 or abs(spacing - sends) < T.tolerance * spacing:
            return None
        gaps = [b - a for a, b in pairwise(left)]
        if min(gaps) < -spacing / 4.0 or max(abs(gap - spacing) for gap in gaps) > spacing / 2.0:
            return None
        return 1.0 / spacing, max(left[-1] - run[-1][0] - base, 0.0)

    def line_full(self: _LatencyWatchState, answered: bool, sent_at: float, now: float) -> bool:
        """Whether a refusal of a request sent at ``sent_at``, answered at ``now``, is a full line's (see
        the module): the latest accepted answer waited past the knee line over the baseline, and the
        latest request sent before it is still out past that line at the refusal (waiting in the line,
        overtaken by the refusal). The refusal's own time is no part of it: a loaded crawler reads a
        2-ms refusal 29 ms late, past a knee line of 16 ms.

        On a line of 15.6/s whose third request waits (nginx's ``burst=3 delay=2``), pages and refusals
        alike in 2 ms: every 503 came so, each was weighed as the site's own error, the first judged
        so at once (1 of 22 outcomes: no share after a cut could be clearly lower), and the breaker
        paused the site for 10 s again and again: 0.02-0.11 of its rate.
        """
        base = self.baseline()
        if not answered or base is None or not self._slow_last:
            return False
        line = T.knee * base + T.knee_slack
        before = [at for at in self._outstanding if at < sent_at]
        return bool(before) and now - max(before) > line

    def _pace_queue(self: _LatencyWatchState, now: float, served: float, wait: float) -> None:
        """Pace at ``served``, the rate a line in front of the site serves at (:meth:`queue_fit`), where
        the latency rule would cut: a new generation, as a cut starts, with ``served`` its ceiling.

        The line holds ``served * wait`` requests ahead of the next send. Left to stand it fills with
        the sends' jitter and, past its burst, refuses; drained, it costs nothing (it serves its
        backlog meanwhile). So the pace drops under ``served`` and climbs back to it along the cubic
        curve, whose shortfall over a climb of ``k`` seconds is a quarter of the drop times ``k``: that
        shortfall is the backlog. The drop is ``1 - T.cut_deep`` of ``served`` and ``k = 4 * wait / (1 -
        T.cut_deep)`` while that is within a quick climb's time; a longer wait keeps the quick climb's
        time and drops further (to ``min_rate`` at most: a backlog past a quarter of the climb's worth
        is not drained by it). The answers to sends made meanwhile still queue behind the backlog: they
        neither cut (nor fit again) nor hold the climb before it is served.
        """
        self.generation += 1
        self.phase = "steady"
        self.above_since = NEVER
        self.ceiling = served
        k = min(self._climb_time(fast=True), 4.0 * wait / (1.0 - T.cut_deep))
        drop = min(1.0, max(1.0 - T.cut_deep, 4.0 * wait / k)) if k > 0.0 else 1.0 - T.cut_deep
        self.rate = max(self.min_rate, min(self.max_rate, served * (1.0 - drop)))
        self._cut_rate = self.rate
        self._gentle = False
        self._top = 0.0
        self._start_climb(now, fast=True)
        if k > 0.0:
            self._k, self._climb = k, (served - self.rate) / k ** 3
        self._quiet_until = self._line_until = now + max(self._k, 1.0 / self.rate)
        self._decide(now, f"queue: answers leave in turn one {1.0 / served:.3g}s apart, a line served at "
                     f"{served:.3g}/s (the last waited {wait:.3f}s); paced at {self.rate:.3g}/s, back to "
                     f"{served:.3g}/s in {self._k:.3g}s (latency {self.latency or 0.0:.3f}s: no cut)")
