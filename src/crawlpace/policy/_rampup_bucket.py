"""Rampup's bucket fit: after a refusal that cost a hold, pace at what the evidence makes worth keeping.

Part of :class:`~crawlpace.policy.rampup.Rampup` (see its module for the other
rules). A site that answers an overshoot with a hold (``Retry-After`` of
``T.fit_hold`` seconds or more, or a shorter one of ``T.hold_long`` or more from the
second on; ``_rampup_search`` calls in here) charges the
whole hold for every refusal, so its refusals are few, costly, and each worth
reading closely.

**The fit.** A token bucket of rate ``r`` and burst ``b`` is known by its level
over time: it gains ``r`` tokens a second up to ``b``, an accepted request takes
one, a refused one none. Given the scope's accepted sends on record and the sends
whose refusal started a hold (the bucket was empty then, so the replay empties it
there), the level at every send rises with ``r`` for each ``b``; so each accepted
send puts a floor under ``r`` and each refusal a ceiling over it, and
:func:`bucket_fit` finds by bisection,
for every burst, the interval of rates that fit the whole record. One overshoot
says little (a large burst at a low rate explains it as well as no burst at a high
one); two stretches at different paces, with a hold between, pin both numbers.

**The belief.** Bursts, like rates, are taken as equally likely on a log scale: a
burst that fits is as likely as any other in proportion to ``1 / b`` (a slow start's
forty accepted sends fit every burst up to forty, each with a lower rate, and
counted alike they made a burst over ten, and so a limit under a third of the
true one, the likely fit), and within its interval every rate is as likely on a
log scale, from one token per hold up (:func:`_least`: a server that asks for
``H`` seconds of quiet lets a send through after them, so its bucket refills at
least a token in ``H``; three decades under the top of its interval before, and a
0.9/s bucket with no burst and 59 s holds, whose record bounds the rate from above
only, was paced at 0.1/s); the chance that the limit is at
least a rate is kept at :data:`KNOTS` rates (:func:`belief_of`), and a refused
pace drops the chance above it (the limit is under a pace that drew a hold).

**The trade-off.** After the hold, the scope paces at the rate that finishes the
work ahead soonest on average (:func:`best_level`). The work ahead is what the caller says it
still holds for the scope (``crawlpace crawl``'s queued pages, :meth:`BucketFit.note_left`), and
otherwise a guess: the sends accepted so far, at
the rate they came between the holds, over the time it has crawled (at least a window: a crawl that
has run a minute is likely to run about as long again). A pace that holds takes
the work over itself; one that does not costs the hold, and then the best pace
under it, weighed the same way. So a pace ten times too low costs ten times the
time and is no safe bet (the rule before weighed a pace's gain over a fixed time,
and a wide belief made it pace a 0.9/s bucket with 59 s holds at 0.012/s for
four minutes). A *step* above the pace is weighed the same way each round, on the
same model: the buckets the fit kept, each told the stretch since the hold (a
burst ``b`` that let ``n`` sends through in ``t`` seconds refills at least
``(n - b) / t``), so the step comes once the stretch has ruled out enough of the
slow buckets; a step that fails costs the hold and the pace under it (where the work
ahead is a guess, the step waits as it did: :meth:`BucketFit._guessed_step`). A long
hold makes the scope careful and a short one bold; the work ahead makes steps worth
more as the crawl goes on. A refusal at or under a pace kept up (a send the
crawler's own delays bunched, or a limit that moved down) is cut by the ordinary
share under it, so a falling limit is followed down hold by hold.

A send's time is the crawler's stamp; the server sees it a little later. An
accepted send is read :data:`FIT_SLACK` later than its stamp (more tokens, the
looser floor), a refusal at its stamp (fewer tokens, the looser ceiling), so
a loopback's timing noise widens the fit rather than making it wrong. A record
no bucket fits (no refusal on record after its first accepted send) gives no fit,
and the ordinary held rules (``_rampup_search``, ``_rampup_start``) stand.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from itertools import pairwise
from typing import Protocol

from ._rampup_sends import NEVER
from ._rampup_tuning import TUNING as T

__all__ = ["FIT_SLACK", "KNOTS", "REFUSALS_KEPT", "BucketFit", "belief_of", "best_level", "bucket_fit",
           "chance"]

#: Seconds: an accepted send may reach the server this long after the crawler stamped it (the
#: connection's own latency, a loaded machine's delays), so it is read this much later: the
#: crawler's timing slack, the knee line's too (``T.knee_slack``).
FIT_SLACK = T.knee_slack
#: Bisection steps per bound, on a log scale over a factor of ``exp(_RANGE)`` (a million): the bound
#: is found within 0.1 %.
_STEPS = 14
_RANGE = math.log(1e6)
#: Bursts up to this many are each tried; larger ones are sampled geometrically (a fit takes a few
#: milliseconds, not the tenths of a second 64 bursts took).
EVERY_BURST = 12
#: Rates the belief (the chance the limit is at least each) is kept at.
KNOTS = 8
#: The log-width given an interval of one rate (a burst the record pins exactly): the bisection's
#: own precision, 0.1 % (:data:`_STEPS`).
_NARROWEST = 1e-3
#: Refusals that started a hold kept on record (a refusal older than the accepted sends kept says
#: nothing the fit can use).
REFUSALS_KEPT = 8


def _level_ok(events: Sequence[tuple[float, bool]], rate: float, burst: float, start: float,
              slack: float) -> tuple[bool, bool]:
    """Replay the bucket (``rate``, ``burst``, ``start`` tokens at the first event) over ``events``.

    Returns:
        (every accepted send found a token, every refusal found none).
    """
    level, last = start, events[0][0]
    accepts = refusals = True
    for at, ok in events:
        when = at + slack if ok else at
        level = min(burst, level + max(0.0, when - last) * rate)
        last = max(last, when)
        if ok:
            if level < 1.0:
                accepts = False
                level = 1.0  # it was accepted: the bucket had the token (the rate is too low)
            level -= 1.0
        else:
            if level >= 1.0:
                refusals = False
            level = min(level, 1.0)  # it was refused: the bucket had no token, whatever it held before
    return accepts, refusals


def _bound(events: Sequence[tuple[float, bool]], burst: float, start: float, top: float, slack: float,
           *, floor: bool) -> float:
    """The least rate under which every acceptance fits (``floor``), or the greatest under which
    every refusal does; both by bisection on a log scale over ``[top * 1e-6, top]`` (the level
    rises with the rate), 0 for a bound under that range."""
    low, high = math.log(top) - _RANGE, math.log(top)
    for _ in range(_STEPS):
        mid = 0.5 * (low + high)
        accepts, refusals = _level_ok(events, math.exp(mid), burst, start, slack)
        fits = accepts if floor else refusals
        if fits == floor:  # a floor that fits, or a ceiling that does not: look lower
            high = mid
        else:
            low = mid
    bound = high if floor else low
    return 0.0 if bound <= math.log(top) - _RANGE + 1e-9 else math.exp(bound)


def _bursts(most: int) -> list[tuple[int, float]]:
    """The bursts tried, 1 to ``most``: every one up to :data:`EVERY_BURST`, then a geometric
    sample (each stands for the bursts up to the next), with the weight of the bursts each stands
    for, ``1 / b`` apiece (log-uniform: a burst twice as large is half as likely)."""
    tried = list(range(1, min(most, EVERY_BURST) + 1))
    burst = float(EVERY_BURST)
    while round(burst) < most:
        burst = min(float(most), burst * 1.25)
        tried.append(round(burst))
    tried = sorted(set(tried))
    ends = [*tried[1:], tried[-1] + 1]
    return [(b, sum(1.0 / k for k in range(b, end))) for b, end in zip(tried, ends, strict=True)]


def bucket_fit(accepted: Sequence[float], refused: Sequence[float], *, first: bool,
               slack: float = FIT_SLACK, dropped: int | None = None) -> list[tuple[int, float, float, float]]:
    """The token buckets that fit a scope's record of sends.

    Args:
        accepted: the times of accepted sends on record.
        refused: the times of the sends whose refusal started a hold (the bucket was empty);
            those before the first accepted send on record are left out.
        first: the first accepted send on record is the scope's first send (the bucket was full);
            otherwise it may have had as little as one token then.
        dropped: when not ``first``, the accepted sends left off the record since the bucket was
            last known full (the scope's first send, with no refusal since): it then held at least
            ``burst - dropped`` tokens at the record's first send (a token taken by each of them, and
            none refused). ``None``: not known (one token).
        slack: seconds an accepted send is read later than its stamp.

    Returns:
        ``(burst, lo, hi, weight)`` for every burst tried that some bucket with a refill rate in
        ``[lo, hi]`` fits with (``weight``: the bursts it stands for), the smallest burst first;
        empty when none fits or no refusal bounds the rate.
    """
    if not accepted:
        return []
    oks = sorted(accepted)
    start = oks[0]
    nos = [at for at in refused if at > start]
    if not nos:
        return []
    events = sorted([(at, True) for at in oks] + [(at, False) for at in nos])
    # No refill rate above one token per the shortest gap between two events matters more than that.
    shortest = min((b[0] - a[0] for a, b in pairwise(events) if b[0] > a[0]), default=1.0)
    top = 2.0 * len(events) / max(shortest, 1e-4)
    fits = []
    for burst, weight in _bursts(len(oks)):
        floor = _bound(events, burst, float(burst), top, slack, floor=True)
        least = float(burst) if first else 1.0 if dropped is None else max(1.0, burst - dropped)
        ceiling = _bound(events, burst, least, top, slack, floor=False)
        if floor <= ceiling:
            fits.append((burst, floor, ceiling, weight))
    return fits


def _least(lo: float, hi: float, least: float) -> float:
    """The lowest rate a burst's interval ``[lo, hi]`` keeps: no lower than three decades under its
    top, nor than ``least``, the hold's promise (one token per hold), unless no rate of the interval
    keeps that promise (then the interval is read as it is)."""
    low = max(lo, hi * 1e-3)
    return max(low, least) if least < hi else low


def joint_fit(fits: Sequence[tuple[int, float, float, float]],
              before: Sequence[float]) -> list[tuple[int, float, float, float]]:
    """The buckets that fit both the record now (``fits``) and every stretch before it (``before``:
    the intervals left then, flattened as ``(burst, lo, hi, weight, ...)``).

    A bucket's rate and burst do not change between holds, so each burst's rates are those both
    intervals keep. A record of :data:`OK_SENDS_KEPT` accepted sends spans two seconds at 30/s: at the
    second hold of a 28.5/s bucket of 5 it held only the step's last sends, which fit every burst
    up to 64, each with a lower rate, and the pace after it was 14.7/s where the start's stretch had
    left the burst of 5 alone with the second's. A burst larger than any the earlier fit kept is
    read as its largest (a record too short to tell large bursts apart fits them alike: the start's
    36 sends, refused at the 37th, leave a burst of 64 no rate the burst of 36 would not have had).
    When no burst fits both, the limit moved: the record now stands alone.
    """
    if not before:
        return list(fits)
    earlier = {round(before[i]): (before[i + 1], before[i + 2]) for i in range(0, len(before) - 3, 4)}
    most = max(earlier)
    joint = []
    for burst, lo, hi, weight in fits:
        if burst in earlier or burst > most:
            was_lo, was_hi = earlier[min(burst, most)]
            lo, hi = max(lo, was_lo), min(hi, was_hi)
        else:
            continue  # tried then, and no rate fitted it
        if lo <= hi:
            joint.append((burst, lo, hi, weight))
    return joint or list(fits)


def flat_fits(fits: Sequence[tuple[int, float, float, float]]) -> tuple[float, ...]:
    """``fits`` flattened for the scope's state (:func:`joint_fit` reads them back)."""
    return tuple(float(x) for fit in fits for x in fit)


def _chance_at_least(fits: Sequence[tuple[int, float, float, float]], rate: float,
                     least: float = 0.0, *, evidence: bool = False) -> float:
    """The chance the refill rate is at least ``rate``: each burst that fits by its weight, and
    within a burst's interval (from ``least`` up: :func:`_least`) every rate equally likely on a log
    scale. ``evidence``: each burst's weight is also times the log-width of its interval, the share
    of a log-uniform rate prior the record leaves it (:func:`belief_of`)."""
    total = weights = 0.0
    for _, lo, hi, weight in fits:
        lo = _least(lo, hi, least)
        if evidence:
            weight *= max(math.log(hi / lo), _NARROWEST) if hi > lo > 0.0 else _NARROWEST
        weights += weight
        if rate <= lo:
            total += weight
        elif rate < hi:
            total += weight * math.log(hi / rate) / math.log(hi / lo)
    return total / weights


def belief_of(fits: Sequence[tuple[int, float, float, float]], least: float = 0.0, *,
              evidence: bool = False, exact: bool = False) -> tuple[float, ...]:
    """The chance the refill rate is at least each of :data:`KNOTS` rates over the fits' span, as
    ``(rate, chance, rate, chance, ...)``, the lowest rate first (a compact, shareable summary).
    ``least``: one token per hold, the rate a server's hold promises (:func:`_least`).

    ``evidence``: weigh each burst by how much of the rate prior the record leaves it as well (the
    log-width of its interval, from ``least`` up), as Bayes weighs it under a rate log-uniform from one
    token per hold: what the first hold's fit does. There the record is the start's sends and one
    refusal: ``N`` sends accepted in ``T`` seconds. Each burst under ``N`` explains them only with a
    narrow band of rates near ``(N - b) / T``; the burst of ``N`` with any rate under about ``1 / T``,
    down to the hold's promise. By ``1 / b`` alone the narrow bands of the small bursts outweighed it:
    a 0.81/s bucket of 4 with 50 s holds, whose start had 4 sends through in 0.19 s, was paced at
    3.4/s with a stated chance of 0.88, and on the random farm's holds sites (seeds 11-25) no first
    fit stated at 0.7 or more held, 0 of 12 (bench/results/holds15.md)."""
    lo = min(_least(low, high, least) for _, low, high, _ in fits)
    hi = max(high for _, _, high, _ in fits)
    if hi <= lo:
        return (lo, 1.0)
    rates = {lo * (hi / lo) ** (i / (KNOTS - 1)) for i in range(KNOTS)}
    if exact:
        # The chance is log-linear between the ends of the bursts' intervals: knots there keep a
        # narrow band whole. Two stretches pinned a 28.5/s bucket of 5 to [27.9, 29.7]/s beside a
        # burst of 64 under 0.25/s; the even knots (0.03, ..., 10.9, 29.7/s) read a chance of 0.06 at
        # 27.9/s where it was 0.93, and the pace after the second hold was 13.7/s.
        rates.update(x for _, low, high, _ in fits for x in (_least(low, high, least), high) if lo < x < hi)
    out: list[float] = []
    for rate in sorted(rates):
        out += [rate, _chance_at_least(fits, rate, least, evidence=evidence)]
    return tuple(out)


def chance(belief: Sequence[float], rate: float) -> float:
    """The chance the refill rate is at least ``rate``, by the belief's knots (log-linear between)."""
    rates, chances = belief[0::2], belief[1::2]
    if not rates or rate <= rates[0]:
        return 1.0
    for (r0, c0), (r1, c1) in pairwise(zip(rates, chances, strict=True)):
        if rate <= r1:
            share = math.log(rate / r0) / math.log(r1 / r0) if r1 > r0 else 1.0
            return c0 + share * (c1 - c0)
    return 0.0


def _below(belief: Sequence[float], rate: float) -> tuple[float, ...]:
    """The belief told that the limit is under ``rate`` (a pace was refused there)."""
    gone = chance(belief, rate)
    if gone >= 1.0:
        return ()
    out = [x for r, c in zip(belief[0::2], belief[1::2], strict=True) if r < rate
           for x in (r, max(0.0, (c - gone) / (1.0 - gone)))]
    return (*out, rate, 0.0)


def best_level(belief: Sequence[float], hold: float, work: float,
               floor: float = 0.0) -> tuple[float, float]:
    """The pace that finishes ``work`` sends soonest on average, given the belief and that the rate
    is at least ``floor`` (kept up).

    A pace ``p`` holds when the refill rate is at least ``p``, and then the work takes ``work / p``.
    When it does not hold it costs the hold, and the scope paces again under it, knowing the rate is
    under ``p``: the expected time of that next choice, worked out the same way down the candidates
    (the floor, or the belief's lowest rate, always holds). A pace ten times too low costs ten times
    the time, so it is no safer than a bold one that costs a hold.

    Returns:
        ``(level, chance)``: the pace with the least expected time and the chance it holds.
    """
    base = chance(belief, floor) if floor > 0.0 else 1.0
    if base <= 0.0:
        return floor, 1.0
    rates = ([floor] if floor > 0.0 else []) + [r for r in belief[0::2] if r > floor]
    candidates = [r0 * (r1 / r0) ** (i / 8) for r0, r1 in pairwise(rates) if r0 > 0.0
                  for i in range(8)] + rates[-1:]
    candidates = [c for c in candidates if c > 0.0]
    if not candidates:
        return floor, 1.0
    holds = [min(1.0, chance(belief, rate) / base) for rate in candidates]
    holds[0] = 1.0  # the floor kept up, or the belief's lowest rate: the rate is at least that
    work = max(work, 1.0)
    # after[j]: the expected time from the end of a hold drawn at candidates[j] (the best pace under it).
    after: list[float] = []
    best, held, time_best = candidates[0], 1.0, math.inf
    for j, (rate, sure) in enumerate(zip(candidates, holds, strict=True)):
        under = math.inf
        for i in range(j):
            # The chance candidates[i] holds, knowing the rate is under candidates[j].
            left = 1.0 - sure
            cond = 1.0 if left <= 1e-12 else max(0.0, min(1.0, (holds[i] - sure) / left))
            under = min(under, cond * work / candidates[i] + (1.0 - cond) * (hold + after[i]))
        after.append(under if j else work / rate)
        expected = sure * work / rate + (1.0 - sure) * (hold + (under if j else work / rate))
        if expected < time_best:
            time_best, best, held = expected, rate, sure
    return best, held


class _BucketState(Protocol):
    """What the methods of :class:`BucketFit` use of the controller."""

    rate: float
    ceiling: float | None
    min_rate: float
    max_rate: float
    window: float
    phase: str
    hold_learned: float
    _ok_sends: deque[float]
    _ok_count: int
    _held_refusals: deque[float]
    _first_send: float
    _hold_end: float
    _belief: tuple[float, ...]
    _fits: tuple[float, ...]
    _ok_after_hold: int
    _kept: float
    _refit_at: float
    _sustained: float
    _top: float
    _cut_rate: float
    _probe_after: float
    _ep_since: float
    _resumed_at: float
    _recall: float
    _recall_wait: float
    _left: int
    _more: bool
    _outstanding: deque[float]

    def _start_climb(self, now: float, *, fast: bool) -> None: ...
    def _decide(self, now: float, decision: str) -> None: ...
    def _set_level(self, now: float, level: float, held: float, sure: float) -> None: ...
    def _horizon(self, now: float) -> float: ...
    def _model_belief(self, held: float) -> tuple[float, ...]: ...
    def _guessed_step(self, now: float, held: float, level: float) -> bool: ...
    def _level_shown(self, now: float) -> bool: ...
    def _shown(self, fits: list[tuple[int, float, float, float]]) -> list[tuple[int, float, float, float]]:
        ...
    def _work(self, now: float) -> float: ...
    def allowed_rate(self, now: float) -> float: ...
    def _record_fit(self) -> list[tuple[int, float, float, float]]: ...
    def _joint_fit(self) -> list[tuple[int, float, float, float]]: ...


class BucketFit:
    """The bucket-fit part of a rampup controller (its attributes live on :class:`Rampup`)."""

    __slots__ = ()  # the attributes are slots of Rampup (policy/state.py lists them there)
    ceiling: float | None  # declared for the assignments below, which might narrow it

    def _note_refusal_held(self: _BucketState, now: float, sent_at: float | None, hold_end: float) -> None:
        """A refusal answered at ``now``: when it started a hold (one the scope was not already in when
        the send went), the bucket was empty at its send; note the send's time."""
        sent = now if sent_at is None else sent_at
        if hold_end - now < T.hold_long or sent < self._hold_end:
            return
        if self._held_refusals:
            self._joint_fit()  # the stretch since the last hold, kept before its count starts again
        self._ok_after_hold = 0
        self._held_refusals.append(sent)
        self._hold_end = hold_end
        pace = self.allowed_rate(sent)
        if self._belief and pace > self._kept * (1.0 + T.tolerance):
            # A step above the pace kept up drew the hold: the limit is under the step, whichever rule
            # answers the refusal (the jitter rule forgives a refusal that came just after an accepted
            # send, and then the fit never hears of it, and weighed the same step again after every
            # hold: eight holds where two did, bench/results/holds11.md).
            self._belief = _below(self._belief, pace)

    def _record_fit(self: _BucketState) -> list[tuple[int, float, float, float]]:
        """:func:`bucket_fit` of the scope's record. Once more sends were accepted than the record
        keeps, the oldest are left off; with no refusal before the record (every hold's refusal on
        it), the bucket was full at the scope's first send and each send left off took one token, so
        the replay starts a burst ``b`` with ``b - dropped`` tokens, not with one: from one token, a
        start of 94 accepted sends into a bucket of 4 at 18/s fitted every burst over 30 at any rate
        up to 12.9/s (``tests/test_rampup_bucket.py``). (A refusal before the record, or more holds
        than are kept, leaves the level there unknown: one token, as before.)"""
        oks, held = self._ok_sends, self._held_refusals
        dropped = self._ok_count - len(oks)
        known = bool(oks) and len(held) < REFUSALS_KEPT and all(at > oks[0] for at in held)
        return bucket_fit(oks, held, first=dropped <= 0, dropped=dropped if known else None)

    def _joint_fit(self: _BucketState) -> list[tuple[int, float, float, float]]:
        """:meth:`_record_fit` narrowed by every fit before it (:func:`joint_fit`), and kept as the
        scope's fits from here: each stretch the record has held is evidence on the same bucket."""
        fits = self._shown(joint_fit(self._record_fit(), self._fits))
        if fits:
            self._fits = flat_fits(fits)
        return fits

    def _shown(self: _BucketState,
               fits: list[tuple[int, float, float, float]]) -> list[tuple[int, float, float, float]]:
        """``fits`` told the stretch since the hold: at most ``b`` tokens at its start, then ``n``
        sends in ``t`` seconds. A pace kept up is no proof of the rate (a bucket of 8 at 12.2/s keeps
        12.4/s for 40 s): each burst's rate is at least ``(n - b) / t`` (a burst no rate of which is
        left is dropped, unless none is)."""
        oks = self._ok_sends
        since = self._hold_end if self._hold_end != NEVER else self._first_send
        if fits and oks and self._ok_after_hold > 0 and since != NEVER:
            span = max(oks) + FIT_SLACK - since
            if span > 0.0:
                shown = [(b, max(lo, (self._ok_after_hold - b) / span), hi, w) for b, lo, hi, w in fits]
                fits = [fit for fit in shown if fit[1] <= fit[2]] or fits
        return fits

    def _note_ok_send(self: _BucketState, sent: float) -> None:
        """An accepted send at ``sent`` (kept in ``_ok_sends`` by the episodes' record)."""
        self._ok_count += 1
        if sent >= self._hold_end:
            self._ok_after_hold += 1
        if self._first_send == NEVER:
            self._first_send = sent

    def fit_record(self: _BucketState) -> int:
        """The accepted sends on record once a hold started (0 before): what a shared store must see change.

        After a hold the bucket fit reads the record of accepted sends: its level, its steps
        (:meth:`_fit_step`) and the work they are weighed for (:meth:`_work`). A shared store writes
        a policy back only when its summary changes, and an accepted answer at the fitted level
        changes nothing else, so each worker's copy held the stored record plus its own answers since
        it last read it. A fleet of four fitted the second hold of a 7.88/s bucket to a quarter of
        the sends the bucket took after the first, paced it at 0.8/s, and never stepped: the record
        stopped growing, and so did the work a step was weighed for (bench/results/fleets11.md).
        Before any hold nothing reads the record this way, and a fleet's plain answers stay unwritten.
        """
        return self._ok_count if self._held_refusals else 0

    def note_left(self: _BucketState, left: int, *, more: bool) -> None:
        """The caller still holds ``left`` requests of the scope to send (in flight not counted), and
        ``more`` may come (then ``left`` is only a floor): the work ahead, as the crawl's queue knows it."""
        self._left, self._more = max(0, left), more

    def _work(self: _BucketState, now: float) -> float:
        """The sends a rate decision is weighed for.

        Where the caller told the scope its work left (:meth:`note_left`, a crawl's queue), that
        count with the requests still out, when no more may come; otherwise a guess, at least that
        count: the sends accepted so far, at the rate they came while the site let the scope send
        (the holds on record left out: a hold says when the bucket was empty, not how much work
        there is), over the time a decision is weighed for (:meth:`_horizon`: a crawl that has run
        a minute is likely to run about as long again). The guess was 3 to 9 times the pages a
        20 s crawl had left at its first and second fit (bench/results/holds8.md): every step it
        paid for was a bet on work that was not there, and each lost one cost a hold.
        """
        ahead = self._left + len(self._outstanding) if self._left >= 0 else -1
        if ahead >= 0 and not self._more:
            return float(ahead)
        first = now if self._first_send == NEVER else self._first_send
        held = max(self.hold_learned, T.hold_long)
        silent = sum(min(now, at + held) - at for at in self._held_refusals if at <= now)
        return max(float(ahead), self._ok_count * self._horizon(now) / max(now - first - silent, T.round))

    def _horizon(self: _BucketState, now: float) -> float:
        """The time a rate decision is weighed over: the time crawled so far, at least a window."""
        first = now if self._first_send == NEVER else self._first_send
        return max(now - first, self.window)

    def _fit_holds(self: _BucketState, now: float, held: float, refused: float) -> bool:
        """After a refusal (of a send paced at ``refused``) that started a hold of ``held`` seconds:
        pace at the level the bucket fit makes worth keeping.

        Returns:
            True when the fit set the level.
        """
        kept, belief = self._kept, self._belief
        # The hold promises a send through at its end: at least one token per hold.
        least = 1.0 / max(held, self.hold_learned, T.hold_long)
        if kept > 0.0 and refused > kept and belief:
            # A step above a pace kept up was refused: the limit is under the step, and the pace kept
            # held. The step's own stretch (the burst spent at a pace over the rate, then the refusal)
            # pins the bucket far better than the belief the step was weighed on: the record refitted
            # is the belief from here, and the scope paces at the least rate every bucket of the refit
            # keeps, if that is above the kept pace (a sure level, not a new bet: the next step is
            # weighed as before, on the refit). Back to the kept pace itself, as before, left a 1.27/s
            # bucket of 2 (18 s holds) whose step to 1.43/s was refused paced at 0.99/s for the rest
            # of its crawl; the refit shows 1.22/s (bench/results/holds16.md).
            self._belief = _below(belief, refused)
            refit = self._joint_fit()
            after = _below(belief_of(refit, least, exact=True), refused) if refit else ()
            sure = 0.0
            if after and chance(after, kept) > 0.0:
                self._belief, sure = after, after[0]
            self._set_level(now, max(kept / T.fit_share, sure), held, 1.0)
            return True
        fits = self._joint_fit()
        if not fits:
            return False
        # The pace that drew the refusal, kept up, would draw it again: the limit is under it.
        # At the first hold the record is the start's sends: each burst weighed by its evidence too
        # (belief_of). From the second, two stretches at different paces pin the bursts, and the
        # evidence weights there kept timid paces (holds10/11's HW).
        first = len(self._held_refusals) <= 1
        fitted = belief_of(fits, least, evidence=first, exact=not first)
        belief = _below(fitted, refused) if refused > 0.0 else fitted
        if not belief:
            # Every bucket that fits the record refills faster than the pace refused: no bucket
            # explains it (a fixed window refuses by its clock, whatever the pace). An empty belief
            # has no level above nothing, and the scope fell to its floor rate, one send per
            # BACKOFF_MAX_DELAY (a live site left for 300 s): the ordinary cut answers instead.
            return False
        self._belief = belief
        # A pace kept up for a whole hold's length before (_rampup_episode's note) held; a refusal at
        # it or under is a send the crawler's own delays bunched, or a limit that moved down: the
        # ordinary cut under it, so that a limit that fell is followed down hold by hold.
        kept = self._sustained
        if refused <= kept * (1.0 + T.tolerance):
            kept = T.cut * min(kept, refused)
        self._kept = kept
        level, sure = best_level(self._belief, held, self._work(now), floor=kept)
        self._set_level(now, level, held, sure)
        return True

    def _set_level(self: _BucketState, now: float, level: float, held: float, sure: float) -> None:
        """Pace at ``level`` (from the fit), with no climb above it for two holds' lengths after the
        hold (a step above it is the fit's to weigh: :meth:`_fit_step`)."""
        # The fit answers for the level from here: a rate the recall remembers (``_rampup_recall``) was
        # a refilled burst carrying a pace over the bucket's rate, not a limit that fell, and a search
        # back up to it would buy another hold.
        self._recall = self._recall_wait = 0.0
        self.rate = self.ceiling = max(self.min_rate, min(self.max_rate, T.fit_share * level))
        self._top, self._cut_rate = 0.0, 0.0
        self._start_climb(now, fast=False)
        self._probe_after = max(now, self._resumed_at) + 2.0 * held
        self._decide(now, f"fit: a token bucket; pacing at {self.rate:.3g}/s (it holds with a chance of "
                     f"{sure:.2f}); a step above it weighed each round")

    def _fit_step(self: _BucketState, now: float) -> bool:
        """At the fitted level, once a round: step to the pace now worth keeping, if higher.

        The step is weighed as the fit weighed the level, on the same model of the site: the record
        refitted (:meth:`_joint_fit`: the stretch kept up since the hold is evidence on every burst,
        ``(n - b) / t``), each burst weighed as the fit weighs it (by its evidence too after the first
        hold), under every pace refused, and :func:`best_level` over the work left (a step that fails
        costs the hold, and the pace under it). Stepping is worth it once the stretch has ruled out
        enough of the slow buckets, and the work left is worth the hold's risk: no wait of its own.
        (Weighed on the first fit's belief, told only that the level held, a 2.37/s bucket of 8 with
        40 s holds stepped from 1.47 to 3.34/s with a stated chance of 0.84, the record unread since
        the start's; and waiting out two holds' lengths first kept an 18.45/s bucket of 4 with 53 s
        holds at 6.8/s for all of its 369 pages.)

        Returns:
            True when the level moved up.
        """
        if not self._belief or self.phase != "steady" or self._ep_since != NEVER:
            return False
        held = max(self.hold_learned, T.hold_long)
        level = self.ceiling or self.rate
        if self._left < 0 or self._more:
            return self._guessed_step(now, held, level)
        if now < self._refit_at:
            return False
        self._refit_at = now + T.round
        belief = self._model_belief(held)
        step, sure = best_level(belief, held, self._work(now))
        if step <= level * (1.0 + T.tolerance):
            return False
        self._belief = belief
        self._kept = max(self._kept, level)
        self._set_level(now, step / T.fit_share, held, sure)
        return True

    def _guessed_step(self: _BucketState, now: float, held: float, level: float) -> bool:
        """:meth:`_fit_step` when the work ahead is a guess (no count told, or more may come): the
        guess counts the time crawled again as time ahead, several times the pages a crawl had left
        (bench/results/holds8.md), so a step weighed each round is a bet on work that is not there.
        The step waits until the level has been kept up for two holds' lengths after the hold, or
        one when the sends show it (:meth:`_level_shown`), and is weighed on the fit's belief told
        that the level held."""
        if now < self._probe_after and (now < self._probe_after - held or not self._level_shown(now)):
            return False
        self._kept = max(self._kept, level)
        step, sure = best_level(self._belief, held, self._work(now), floor=level)
        if step <= level * (1.0 + T.tolerance):
            self._probe_after = now + T.round  # weighed again a round later
            return False
        self._set_level(now, step / T.fit_share, held, sure)
        return True

    def _level_shown(self: _BucketState, now: float) -> bool:
        """Whether the sends on record, refitted (once a round), show the bucket likelier than not to
        refill at least the pace (within ``T.tolerance``): the level is kept up, and a step need not
        wait out the second hold's length. The refit weighs the bursts as the fit does; asking every
        burst that still fits to show the pace (as before) kept a large burst's low rates in for a
        long time, and a level under a bucket of 1.47/s, burst 4, 46 s holds, waited two holds'
        lengths at 0.18/s. (Not from the first hold's length: a loaded machine's lag bunches sends
        the bucket still accepts, which shows a burst of one faster than it is, and a 5/s bucket
        with 5 s holds stepped over its limit 1.6 s after the step before.)"""
        if now < self._refit_at:
            return False
        self._refit_at = now + T.round
        fits = self._joint_fit()
        least = 1.0 / max(self.hold_learned, T.hold_long)
        return bool(fits) and chance(belief_of(fits, least), (1.0 - T.tolerance) * self.rate) >= 0.5

    def _model_belief(self: _BucketState, held: float) -> tuple[float, ...]:
        """The belief on the rate: the buckets the last fit kept, told the stretch since its hold
        (:meth:`_shown`), weighed as the fit weighs them (:meth:`_fit_holds`), under the lowest pace
        refused so far (the belief's cap); the belief kept when no bucket is left. (Not the record
        refitted: its bursts over a dozen are sampled afresh as it grows, and one send after the
        hold dropped the start's largest burst, whose slow rates held a tenth of the weight.)"""
        kept = self._fits
        fits = self._shown([(round(kept[i]), kept[i + 1], kept[i + 2], kept[i + 3])
                            for i in range(0, len(kept) - 3, 4)])
        if not fits:
            return self._belief
        first = len(self._held_refusals) <= 1
        refit = belief_of(fits, 1.0 / held, evidence=first, exact=not first)
        rates, chances = self._belief[0::2], self._belief[1::2]
        if chances and chances[-1] <= 0.0:
            refit = _below(refit, rates[-1])
        return refit or self._belief
