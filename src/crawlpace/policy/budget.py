"""A budget the server announces (``RateLimit`` fields), learned and spent evenly over its window.

Pure state plus ``now``. A server that sends ``RateLimit-Policy: q=Q;w=W`` and
``RateLimit: r=R;t=T`` says: Q units per window of W seconds, R of them left,
to be used within T seconds. Two things make a naive ``T / R`` pace waste much
of the budget:

* ``T`` comes in whole seconds, rounded up: a 1 s window says ``t=1`` from its
  first answer to its last, so ``T / R`` slows down as ``R`` falls, and a spent
  budget holds sends for a whole second where the window may end in 50 ms;
* a *staged brake* (seed 004) refuses requests before the quota is spent: past
  half the quota, say, half of them get 429. Spending the whole quota evenly
  runs into the brake every window.

So this module learns two things.

**Where the windows begin.** Each answer pins the end of its window to an
interval: the end lies in ``(h + T - 1, h + T]`` for a server time ``h``
between the send and the answer (exactly at ``h + T`` when ``T`` has a
fraction). A remaining count that went *up* between two sends means a window
began between them. Intervals of different windows are moved onto each other
by whole windows and intersected, so the edge gets sharper with every reset
seen; an interval that does not fit (the server changed its windows) replaces
the old one. The end of the current window is taken at the latest time the
interval allows, so the estimate never lets a send go before the reset.

**How much of the quota is usable.** A refusal that arrives while the budget
still shows units left (``R >= 1``) is a brake: the count used when it came,
``Q - R``, becomes the usable budget, and only that much is spent per window
(the lowest such count seen; it is forgotten when the policy changes).

Then the pace is the usable remainder spread over the time left in the window,
``left_time / (R - (Q - usable))``, never faster than the even pace, a little
under ``W / usable`` (:data:`EVEN_SHARE`); a spent usable remainder holds sends
until the window's estimated end.

**Moving windows** fit neither edge: their ``T`` is when the oldest counted
request leaves (0 while units are left), and at their full pace every answer
shows none left. So the time the remainder is spread over, and a hold, never
reach past ``T``; and a spent budget that this process's own answers explain
(``usable`` of them within the window) comes back once the oldest of them
leaves it, within ``T``'s last second.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["EDGE_MARGIN", "EVEN_SHARE", "LOG_MARGIN", "SHARED_LIMIT", "SPREAD_SHARE", "BudgetAdvice",
           "HeaderBudget", "ResetRefiner", "WindowLog"]

#: The even pace is this share of the window per usable unit: a little quicker than
#: exact, since the spacing of sends only ever stretches (jitter, a late event loop),
#: and a budget spent a little early costs only a short hold to the window's end.
EVEN_SHARE = 0.97

_NEVER = float("-inf")
_FOREVER = float("inf")

#: A window's remaining requests, paced over the time to its narrowed reset, are spread over
#: this share of it: each answer spreads what is left over what is left, and spread over all
#: of it the last request would land just past the reset, in the next window (one of every
#: window's requests lost). At 0.9 the last one goes before the end with room for its trip.
SPREAD_SHARE = 0.9

#: Seconds added to a reset the window's length gave: the request that showed the window's
#: start reached the server a little after it was sent, and the next may be quicker.
EDGE_MARGIN = 0.02


class BudgetAdvice:
    """What one answer's budget means for the scope.

    Attributes:
        pace: seconds between sends from now on.
        pace_for: for this many seconds (to the window's estimated end).
        hold: seconds to send nothing (the usable budget is spent), or ``None``.
    """

    __slots__ = ("hold", "pace", "pace_for")

    def __init__(self, pace: float, pace_for: float, hold: float | None) -> None:
        self.pace = pace
        self.pace_for = pace_for
        self.hold = hold

    def __repr__(self) -> str:
        return f"<BudgetAdvice pace={self.pace:.4g}s for {self.pace_for:.3g}s hold={self.hold}>"


class HeaderBudget:
    """The announced budget of one scope.

    Attributes:
        quota: ``Q``, units per window (0 before the first answer).
        window: ``W``, the window in seconds (0 before the first answer).
        usable: units usable per window before the server brakes (``inf``: no brake seen).
        edge_lo: the earliest time a window edge may lie at ...
        edge_hi: ... and the latest (``-inf``/``inf``: not known yet).
        last_left: the remaining count of the latest answer taken (-1: none).
        last_sent: when the request of that answer was sent.
        answers: when the scope's latest answers came, refusals too, at most ``usable`` of
            them, oldest first: one process's own, or a fleet's, every worker's (the scope's
            shared state in a shared store, while ``quota`` is at most :data:`SHARED_LIMIT`).
        sends_seen: True once the answers and the requests in flight are all the scope's: one
            process's store reports each send (:meth:`on_send`); a shared store counts the
            fleet's requests in flight with each answer and keeps the answers shared (:meth:`shared`).
    """

    __slots__ = ("answers", "edge_hi", "edge_lo", "last_left", "last_sent", "quota", "sends_seen", "usable",
                 "window")

    def __init__(self) -> None:
        self.quota = 0.0
        self.window = 0.0
        self.usable = _FOREVER
        self.edge_lo = _NEVER
        self.edge_hi = _FOREVER
        self.last_left = -1.0
        self.last_sent = _NEVER
        self.answers: deque[float] = deque()
        self.sends_seen = False

    def on_send(self) -> None:
        """The store reported a send of the scope (one process's store reports each one)."""
        self.sends_seen = True

    def shared(self) -> None:
        """A shared store applied an answer: its answers log is the fleet's and each answer comes with
        the fleet's requests in flight, so a spent budget they explain comes back as in one process
        (:meth:`_oldest_counted`). A budget above :data:`SHARED_LIMIT` keeps no log in the shared
        state: its spent budget waits for the header's reset, as it did per worker."""
        if self.quota <= SHARED_LIMIT:
            self.sends_seen = True
        else:
            self.answers.clear()

    # -- the window's edge -----------------------------------------------------

    def _pin(self, lo: float, hi: float) -> None:
        """Narrow the known edge with one more interval holding an edge."""
        window = self.window
        if not hi - lo < window:
            return  # as wide as a window: it says nothing
        if self.edge_hi == _FOREVER:
            self.edge_lo, self.edge_hi = lo, hi
            return
        # Move the known interval by whole windows next to the new one, then intersect.
        shift = round(((lo + hi) - (self.edge_lo + self.edge_hi)) / (2.0 * window)) * window
        old_lo, old_hi = self.edge_lo + shift, self.edge_hi + shift
        new_lo, new_hi = max(lo, old_lo), min(hi, old_hi)
        if new_lo <= new_hi:
            self.edge_lo, self.edge_hi = new_lo, new_hi
        else:
            self.edge_lo, self.edge_hi = lo, hi  # the server's windows moved: start over

    def window_end(self, now: float, *, latest: bool = True) -> float | None:
        """When the window holding ``now`` ends: at the latest (or the earliest); ``None`` while unknown."""
        if self.edge_hi == _FOREVER or self.window <= 0.0:
            return None
        edge = self.edge_hi if latest else self.edge_lo
        steps = math.ceil((now - edge) / self.window)
        end = edge + steps * self.window
        return end + self.window if end <= now else end

    # -- answers -----------------------------------------------------------------

    def observe(self, now: float, *, sent_at: float, remaining: float, quota: float, window: float,
                span: float | None, refused: bool, inflight: int | None = None) -> BudgetAdvice:
        """Take one answer's budget and say how to pace from here.

        Args:
            now: when the answer arrived.
            sent_at: when its request was sent.
            remaining: ``R``, the units left.
            quota: ``Q``, units per window.
            window: ``W``, the window in seconds.
            span: ``T``, seconds within which ``R`` may be used, when given.
            refused: the answer was a refusal (429, 503).
            inflight: the scope's requests in flight as it came, this one included, when known.
        """
        if quota != self.quota or window != self.window:
            if window != self.window:
                self.edge_lo, self.edge_hi = _NEVER, _FOREVER
            self.quota, self.window, self.usable = quota, window, _FOREVER
        if span is not None and span > 0.0:
            whole = span == math.floor(span)
            self._pin(sent_at + span - (1.0 if whole else 0.0), now + span)
        if self.last_left >= 0.0 and sent_at > self.last_sent:
            rose = remaining > self.last_left if refused else remaining >= self.last_left
            if rose:
                self._pin(self.last_sent, sent_at)
        if sent_at >= self.last_sent:
            self.last_left, self.last_sent = remaining, sent_at
        if refused and remaining >= 1.0:
            # Refused with units left: the server brakes before its quota is spent.
            self.usable = min(self.usable, max(1.0, quota - remaining))
        usable = min(self.usable, quota)
        answers = self.answers
        if answers and now < answers[-1]:
            # (A fleet's worker may apply its answer after another's later one: kept in time order.)
            ordered = sorted((*answers, now))
            answers.clear()
            answers.extend(ordered)
        else:
            answers.append(now)  # a refusal too: a moving window may count it
        while len(answers) > usable:
            answers.popleft()
        left = remaining - (quota - usable)
        # Once the window's edge is known a budget spent a little early costs only a short
        # hold to that edge, so the even pace may be a little quicker (see EVEN_SHARE).
        even = (window if self.edge_hi == _FOREVER else EVEN_SHARE * window) / usable
        if left < 1.0:
            # Spent: nothing may go before the end (at its latest) of the window that counted the send.
            end = self.window_end(sent_at)
            if end is None:
                end = now + (span if span is not None and span > 0.0 else window)
            elif span is not None and span > 0.0:
                # Nor before what the header itself says: the reset comes after the send plus T
                # (less the second T was rounded up by). A wide edge interval seen a whole window
                # away can put its end earlier: t=2 of w=2 pins it to (1, 2.05] after a send at
                # 0, and the end "0.05" let the next send go at 1.94 s, into a moving window's
                # refusal (one request per 2 s got 0.22 of its capacity).
                soonest = sent_at + span - (1.0 if span == math.floor(span) else 0.0)
                if end <= soonest:
                    end += math.ceil((soonest - end) / window + 1e-9) * window
                end = min(end, now + span)  # never past what the header itself says
            oldest = self._oldest_counted(now, window, usable, inflight)
            if span is not None and span >= 1.0 and oldest is not None:
                # This process's own answers explain the spent budget: a unit comes back once the
                # oldest of them leaves the window (a moving window at its full pace shows none left
                # on every answer, and its whole-second T would hold each for up to a second more).
                # The header's T is rounded up, so the reset lies within its last second.
                end = min(end, max(oldest + window, now + span - 1.0))
                if usable <= 1.0:
                    # A budget of one: the next request may go once this one has left the window,
                    # never sooner, whatever the window's kind. Sends a window apart lose nothing on
                    # fixed windows, and an edge learned from earlier windows can end a moving
                    # window's hold before its one request left it (1 per 2 s: up to 4 refusals in 20 s).
                    end = max(end, min(oldest + window, now + span))
            return BudgetAdvice(even, max(end - now, 0.0) + window, max(end - now, 0.0))
        # Units left may go at any time before the end, so the earliest end sets the pace:
        # the even pace, or slower when the scope got ahead of it (the rest spread evenly).
        end = self.window_end(sent_at, latest=False)
        if end is None:
            end = now + (span - 1.0 if span is not None and span >= 1.0 else window)
        time_left = max(end - now, 0.0)
        if span is not None:
            # R units within T seconds, as the header says: a moving window's T is when its oldest
            # request leaves (0 while units are left), never a window's edge to save units for.
            time_left = min(time_left, span)
        # The pace lasts into the next window: should the next answer come late, a scope
        # with many slots must not find itself unpaced and send them all at once.
        return BudgetAdvice(max(even, EVEN_SHARE * time_left / left), time_left + window, None)

    def _oldest_counted(self, now: float, window: float, usable: float, inflight: int | None) -> float | None:
        """The answer whose leaving the window frees a unit, when this process's own requests spent it.

        Requests still in flight were counted too, after every answer taken:
        with ``k`` of them, the ``usable - k``-th latest answer is the oldest
        the server may still count. ``None`` unless the store reports every
        send, and that answer lies within the window (else others spent it).
        """
        if not self.sends_seen or inflight is None:
            return None
        wanted = int(usable) - max(inflight - 1, 0)
        answers = self.answers
        if wanted < 1 or len(answers) < wanted:
            return None
        oldest = answers[len(answers) - wanted]
        return oldest if oldest > now - window else None

    def __repr__(self) -> str:
        return (f"<HeaderBudget {self.quota:g}/{self.window:g}s usable={self.usable:g} "
                f"edge=[{self.edge_lo:.3f}, {self.edge_hi:.3f}]>")


class ResetRefiner:
    """Narrows a reset given in whole seconds with the window's length, learned.

    ``X-RateLimit-Reset`` is a moment in whole seconds, rounded up: Flask-Limiter
    sends the reset's second plus one, so the reset lies up to a second before
    the header's moment. For a window of a minute that second hardly matters;
    for one of a second it halves the rate: held to the header's moment, a
    client waits half a window, on average, for nothing.

    A window that starts at its first request (Flask-Limiter's fixed window)
    tells its length: an answer showing one request used (``remaining ==
    limit - 1``) was the window's first, so the window began after it was
    sent and ends by the header's reset, and the window before it had ended:
    its length is at most that reset less the send, and at most the time
    since the previous window's first send. The smallest such bound is the
    length, and the window's first send plus the length is its end, when that
    end is one the header allows (within its last second, and still ahead).
    Other windows (a moving window, whose reset is its oldest request's)
    seldom give such an end, and keep the header's reset.

    A refusal of a request sent before the reset the header gave, once a
    narrower one was used, says the server rounds otherwise: the header's
    resets are used from then on.

    Attributes:
        limit: the budget's limit the length was learned for.
        length: the learned window length (``inf``: not yet).
        start: when the current window's first request was sent.
        trusted: False once a narrowed reset let a request go too early.
        early_until: the header's reset the latest narrowed one came before.
    """

    __slots__ = ("early_until", "length", "limit", "start", "trusted")

    def __init__(self) -> None:
        self.limit = 0.0
        self.length = _FOREVER
        self.start = _NEVER
        self.trusted = True
        self.early_until = _NEVER

    def reset(self, now: float, *, sent_at: float, remaining: float, limit: float, reset: float,
              refused: bool) -> float:
        """Seconds from ``now`` to the reset, as exact as the learned window allows.

        Args:
            now: when the answer arrived.
            sent_at: when its request was sent.
            remaining: requests left, as the answer said.
            limit: the budget's limit.
            reset: seconds to the reset as the header gave it (whole-second moment).
            refused: the answer was a refusal.
        """
        if refused and sent_at < self.early_until:
            self.trusted = False
        if limit != self.limit:
            self.limit, self.length, self.start = limit, _FOREVER, _NEVER
        coarse = now + reset
        if remaining >= limit - 1.0 and reset > 0.0 and not refused:
            # The window's first request: the window ends by the header's reset, and the one
            # before it ended before this one began.
            self.length = min(self.length, coarse - sent_at)
            if self.start < sent_at:
                self.length = min(self.length, sent_at - self.start)
            self.start = max(self.start, sent_at)
        if not self.trusted or self.length == _FOREVER:
            return reset
        learned = self.start + self.length + EDGE_MARGIN
        # An end already past, while the header says the reset is ahead, is a stale start's
        # (a moving window, or requests of other clients): the header's reset stands.
        if max(coarse - 1.0, now) < learned < coarse:
            self.early_until = max(self.early_until, coarse)
            return learned - now
        return reset

    def __repr__(self) -> str:
        return (f"<ResetRefiner limit={self.limit:g} length={self.length:.3f} start={self.start:.3f} "
                f"trusted={self.trusted}>")


#: Seconds added to a window's length in :class:`WindowLog`: an answer comes after the server
#: counted its request, so none is needed in principle; this covers clocks that tick at
#: slightly different rates.
LOG_MARGIN = 0.005


#: The largest budget whose :class:`WindowLog` a shared store keeps with the scope's state: the log
#: holds three numbers per request of the budget, and every answer writes it back (a budget of 5,000
#: an hour would write 120 kB per answer). A fleet on a larger budget keeps the header's narrowed
#: reset and pace (:class:`ResetRefiner`): its sends are spread thin over a long window anyway.
SHARED_LIMIT = 256


def _whole_in(lo: float, hi: float) -> bool:
    """Whether ``[lo, hi]`` holds a whole number of seconds, one at least."""
    return math.floor(hi) >= max(1, math.ceil(lo))


class WindowLog:
    """A window limiter of ``limit`` requests per ``length`` seconds, kept in the client's own log.

    Fixed windows (however they are aligned, or started by their first
    request, as Flask-Limiter's are) and moving windows (a log of the
    requests of the last ``length`` seconds) have one rule in common: no
    interval of ``length`` seconds holds more than ``limit`` requests. So a
    client that keeps the times its requests were *answered* (each came after
    the server counted its request) and sends only while fewer than
    ``limit`` of them, with those in flight, lie within the last ``length``
    seconds is never refused by either kind, and loses only the time between
    a window's first request reaching the server and its answer. Its sends
    come in bursts: a window's whole budget at its start.

    **The window's length** comes from the headers. ``X-RateLimit-Reset`` is
    the end of the window in whole seconds, rounded up (Flask-Limiter sends
    the end's second plus one): the end lies in the second before it. An
    answer that shows one request counted (``remaining == limit - 1``) was
    the first of its window (or, in a moving window, alone in it), which
    began when it reached the server, between its send and its answer; so
    the length lies between the header's end less a second less the answer,
    and the header's end less the send. The intervals of several windows are
    intersected, and so is the bound of each accepted answer that spent the
    budget (its window began after the ``limit``-th latest accepted request
    was sent: :meth:`_spent`). Limiters count in whole seconds (every Flask-Limiter window
    does), so the length is the longest whole number of seconds the interval
    holds, never too short as far as the server's clock agrees with this one
    (while it holds two, the longer: a window's first request that crossed a
    second on its way leaves that doubt, until another window's first
    answer settles it); an interval that holds none gives its upper end.

    **Windows that follow the clock** (or a server's period) rather than
    their first request break that rule: a window's first request may come
    late in it, the crawl's very first most of all (it meets a window part
    spent in time), so its interval's upper end is too short. A first answer
    that leaves less than a second between its send and the header's end
    shows them (no window of whole seconds is that short; a budget of one,
    whose every answer is a window's first, keeps the first-request rule).
    The log then forgets the upper ends learned and bounds each window's
    length by the requests answered before its first was sent (the window
    began after the server counted them) and by the time since the previous
    window's such request; the lower ends hold for either kind. The log's
    rule holds for any alignment: only the length is needed. Two first
    answers whose intervals share no length turn the log off.

    **A moving window** says its reset is 0 while requests are left (no
    request has to leave it before the next may come) and, once spent, the
    seconds until its oldest counted request leaves. Such an answer that was
    accepted and spent the budget was the ``limit``-th counted: the oldest is
    this log's ``limit``-th latest accepted request, which reached the server
    between its send and its answer, so the length lies between this send plus
    the reset (less a second when the reset is whole seconds) less that
    answer, and this answer plus the reset less that send. (A window that
    counts refusals too holds later ones: the length it gives is then too
    long, never too short.) Headers that give the reset in seconds from now
    (``X-RateLimit-Reset-After``, the ``RateLimit-*`` trio) are learned from
    this way only, since their windows need not last whole seconds. (A reset
    moment in whole seconds, ``X-RateLimit-Reset``, names the end of the
    current second for such a window, as a fixed window's last second does:
    not told apart, it is left to the first-request rule.) A moving window
    that names its oldest request's end, requests left or not (``limits``),
    never says 0: it is told by its budget coming back in part instead
    (:meth:`_partly_back`), with those seconds-from-now headers.

    A refusal this log did not foresee, or an answer that counts more
    requests in the window than the log holds, says the model is wrong for
    this server (another client spends the same budget, the clocks disagree,
    the window is not whole seconds): the whole-second length is dropped for
    the interval's upper end, and a second such surprise turns the log off.

    The log works where each send is seen (``on_send``): one process's
    store, with rampup on or off (the log's pace stands in for rampup's
    search while it gates). A fleet sharing a Redis store sees no send of
    the other workers, but every answer comes with the fleet's requests in
    flight (``inflight``), and the log is part of the scope's shared state
    (``policy/state.py``): each worker's answers join the one log, which
    gates through the hold the store keeps (:meth:`shared`). Between two
    answers its count of requests in flight lags the sends made since; the
    pace (a little under ``length / limit``) keeps those few.

    Attributes:
        limit: the budget's limit the log was learned for.
        lo: the shortest the window may be ...
        hi: ... and the longest (``inf``: not known yet).
        answers: the latest answer times, at most ``limit + 1`` of them, oldest first.
        inflight: requests sent and not answered yet.
        sends_seen: True once a send was reported: the log may gate.
        whole: False once a refusal showed the whole-second length was wrong (or the resets
            came in seconds from now: no whole seconds to round the length to).
        trusted: False once a second unforeseen refusal turned the log off.
        clocked: True once a window's first answer showed windows that follow the clock.
        first_before: the latest send answered before the latest window's first was sent (``-inf``: none).
        moving: True once an answer with requests left said its reset was 0 (a moving window).
        accepted: ``(sent, answered)`` of the latest accepted requests, at most ``limit``.
    """

    __slots__ = ("accepted", "answers", "clocked", "first_before", "hi", "inflight", "last", "limit", "lo",
                 "moving", "refused_since", "sends_seen", "trusted", "whole")

    def __init__(self) -> None:
        self.limit = 0.0
        self.lo = 0.0
        self.hi = _FOREVER
        self.answers: deque[float] = deque()
        self.inflight = 0
        self.sends_seen = False
        self.whole = True
        self.trusted = True
        self.moving = False
        self.clocked = False
        self.first_before = _NEVER
        self.accepted: deque[tuple[float, float]] = deque()
        self.last: tuple[float, float, float] | None = None
        self.refused_since = 0

    def length(self) -> float | None:
        """The window's length as the log uses it; None while unknown (or the log is off)."""
        if not self.trusted or self.hi == _FOREVER:
            return None
        if self.whole:
            # The longest whole second the interval holds (a window lasts a second at least).
            last = math.floor(self.hi)
            if last >= max(1, math.ceil(self.lo)):
                return float(last)
        return self.hi

    @property
    def active(self) -> bool:
        """True when the log gates the scope's sends (the length known, sends seen)."""
        return self.sends_seen and self.length() is not None

    def on_send(self) -> None:
        """A request of the scope was sent."""
        self.sends_seen = True
        self.inflight += 1

    def on_abandon(self) -> None:
        """A request of the scope ended without an answer."""
        self.inflight = max(0, self.inflight - 1)

    @property
    def shareable(self) -> bool:
        """Whether a shared store keeps this log with the scope's state (:data:`SHARED_LIMIT`)."""
        return self.limit <= SHARED_LIMIT

    def shared(self) -> None:
        """A shared store applied an answer: it counts the fleet's requests in flight with each
        answer instead of reporting each send, and a log it keeps may gate (the store holds the
        scope until :meth:`ready_at`)."""
        if self.shareable:
            self.sends_seen = True

    def observe(self, now: float, *, sent_at: float, remaining: float, limit: float, reset: float,
                refused: bool, inflight: int | None, whole: bool = True) -> None:
        """Take one answer that carried the budget's headers.

        Args:
            now: when the answer arrived.
            sent_at: when its request was sent.
            remaining: requests left, as the answer said.
            limit: the budget's limit.
            reset: seconds from ``now`` to the header's reset (a whole-second moment).
            refused: the answer was a refusal.
            inflight: the scope's requests in flight as it came, this one included, when known.
            whole: the reset came as a whole-second moment; False: exact seconds from now.
        """
        self.inflight = max(0, (self.inflight if inflight is None else inflight) - 1)
        if limit != self.limit:
            self.limit, self.lo, self.hi = limit, 0.0, _FOREVER
            self.answers.clear()
            self.accepted.clear()
            self.whole = self.trusted = True
            self.moving = self.clocked = False
            self.first_before = _NEVER
            self.last, self.refused_since = None, 0
        # (Before this answer joins them: the requests answered before this one was sent.)
        before = max((sent for sent, answered in self.accepted if answered <= sent_at), default=_NEVER)
        if not whole and reset != int(reset):
            self.whole = False  # seconds with a fraction: the window need not last whole seconds
        answers = self.answers
        if answers and now < answers[-1]:
            # (A fleet's worker may apply its answer after another's later one: kept in time order.)
            ordered = sorted((*answers, now))
            answers.clear()
            answers.extend(ordered)
        else:
            answers.append(now)
        while len(answers) > limit + 1.0:  # (a refusal's check counts it with the limit before it)
            answers.popleft()
        if not refused:
            self.accepted.append((sent_at, now))
            while len(self.accepted) > limit:
                self.accepted.popleft()
        if self.active and self._surprised(sent_at, remaining, refused):
            if self.whole and self.length() != self.hi:
                self.whole = False
            else:
                self.trusted = False
        if not refused and not whole and not self.moving and (
                (remaining >= 1.0 and reset <= 0.0) or self._partly_back(now, sent_at, remaining, reset)):
            # No reset while requests are left (in seconds from now: a moment in whole seconds names
            # the current second's end, which a fixed window's last second names too), or a budget
            # partly back: a moving window. What the first-request rule learned (or the surprises it
            # drew) was a fixed window's; the length is learned anew from the spent answers.
            self.moving, self.trusted, self.lo, self.hi = True, True, 0.0, _FOREVER
        if refused:
            self.refused_since += 1
        else:
            # (The latest the window's end may be: the server's reset counts from before the answer.)
            self.last, self.refused_since = (sent_at, remaining, now + reset), 0
        if self.moving:
            if not refused and remaining < 1.0 and reset > 0.0 and len(self.accepted) >= limit:
                # The limit-th counted: the oldest counted is the limit-th latest accepted, or (with
                # requests still out, sent before this one and counted before it) a later one.
                oldest = self.accepted[0][0]
                later = int(limit) - self.inflight
                lo = 0.0
                if later >= 1:
                    # (A reset in whole seconds is rounded up: the true one may be up to a second shorter.)
                    rounded = whole or reset == int(reset)
                    lo = sent_at + (reset - 1.0 if rounded else reset) - self.accepted[-later][1]
                self._pin(max(lo, 0.0), now + reset - oldest)
        elif whole and remaining == limit - 1.0 and not refused and reset > 0.0:
            self._first(now, sent_at, now + reset, before)
        elif whole and remaining < 1.0 and not refused and reset > 0.0 and not self.clocked:
            self._spent(now + reset)

    def _partly_back(self, now: float, sent_at: float, remaining: float, reset: float) -> bool:
        """Whether an accepted answer shows a window that did not start anew: a moving window's oldest left.

        A moving window that announces its oldest request's end while requests
        are left (``limits``' moving window, whatever header carries it) gives
        its budget back one request at a time, and its end moves on by the gap
        to the next oldest. A fixed window (however aligned) gives it back
        whole: an answer with more left than the previous accepted one's, or
        an end surely after that one's, was counted in a new window, which
        holds only requests counted after that one: at most those sent since
        (this one, the accepted ones after it and the refusals since, and those
        still out). Counting more than that, the window still holds older
        requests. (Called once this answer joined ``accepted``.)
        """
        last = self.last
        if last is None:
            return False
        # The earliest this answer's end may be (a reset in whole seconds is rounded up).
        earliest = sent_at + (reset - 1.0 if reset == int(reset) else reset)
        if remaining <= last[1] and earliest <= last[2]:
            return False
        since = sum(1 for sent, _answered in self.accepted if sent > last[0]) + (sent_at <= last[0])
        return self.limit - remaining > since + self.refused_since + self.inflight

    def _first(self, now: float, sent_at: float, end: float, before: float) -> None:
        """Take a window's first answer: its end lies in the second before ``end``.

        ``before``: the latest send of a request answered before this one was sent (``-inf``:
        none), which the server counted in an earlier window.
        """
        lo, hi = end - 1.0 - now, end - sent_at
        began_after, self.first_before = self.first_before, before
        if not self.clocked and self.whole and hi < 1.0 and self.limit >= 2.0:
            # No window of whole seconds ends within a second of its first request: this one began
            # before it, on the clock. The upper ends learned so far say nothing (the crawl's first
            # window was met part spent); the lower ends hold.
            self.clocked = True
            self.hi = _FOREVER
        if self.clocked:
            # This window began after ``before`` reached the server, and by this answer; the previous
            # one began after its own ``before``: a window lasts no longer than that spacing.
            self._pin(lo, min(end - before, now - began_after))
            return
        self._pin(lo, hi)

    def _spent(self, end: float) -> None:
        """Take an accepted answer that spent the budget, its window ending by ``end``.

        The window (a moving one's oldest counted request, or a window begun by
        its first request) began no earlier than the ``limit``-th latest
        accepted request reached the server: the server counted ``limit``
        requests in it, and those it counted are these accepted ones and any
        others (refusals it counts, requests still out), which only come
        later. So the window lasts at most ``end`` less that request's send.
        A scope that spreads its budget evenly over the window never sees a
        window's first answer again (the previous request is always still in
        it), and without this bound a moving window of 3 per 2.7 s stayed paced
        at the first answers' whole-second resets, 3 per 3 s (0.90 of the
        site; 0.96 with it). (Windows on the clock began before their first
        request: no such bound; see :meth:`_first`.)
        """
        if len(self.accepted) < self.limit:
            return
        self._pin(0.0, end - self.accepted[0][0])

    def _pin(self, lo: float, hi: float) -> None:
        """Narrow the length to ``[lo, hi]``, or turn the log off when that interval shares none with it."""
        if hi < self.lo or lo > self.hi:
            # A window begun by its first request holds its length in every such interval:
            # these windows follow the clock (or the server changed them). Off, as surprised.
            self.lo, self.hi = lo, hi
            self.trusted = False
        else:
            self.lo, self.hi = max(self.lo, lo), min(self.hi, hi)

    def _surprised(self, sent_at: float, remaining: float, refused: bool) -> bool:
        """Whether an answer contradicts the log: a refusal it left room for, or more used than it holds.

        The server counted this request on its arrival, after ``sent_at``,
        with those that arrived less than ``length`` seconds before; each of
        them was answered after it arrived, so after ``sent_at - length``, or
        is still in flight. A server that counts more than that (``limit -
        remaining``) sees requests the log does not, or a longer window. (Not
        the answers of the last ``length`` seconds before this one: an answer
        slower than an older one's would leave that one out, and the log would
        be turned off by the spread of its own round trips.)
        """
        length = self.length()
        assert length is not None
        ours = sum(1 for t in self.answers if t > sent_at - length) + self.inflight
        if refused:
            return ours <= self.limit  # this answer included: there was room for it
        return self.limit - remaining > ours

    def ready_at(self, now: float) -> float | None:
        """The earliest time the next send may go (``-inf``: now); None until an answer comes."""
        length = self.length()
        if length is None or not self.sends_seen:
            return _NEVER
        window = length + LOG_MARGIN
        answers, limit = self.answers, int(self.limit)
        free = limit - self.inflight
        if free <= 0:
            return None
        if len(answers) < free:
            return _NEVER
        # The free-th latest answer must have left the window.
        at = answers[len(answers) - free] + window
        return at if at > now else _NEVER

    def __repr__(self) -> str:
        return (f"<WindowLog limit={self.limit:g} length=[{self.lo:.3f}, {self.hi:.3f}] "
                f"inflight={self.inflight} trusted={self.trusted} clocked={self.clocked}>")
