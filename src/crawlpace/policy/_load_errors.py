"""Errors that are not about load: 5xx answers and failures whose share does not fall with the rate.

A 503 or a timeout may mean "too fast" (an overloaded server sheds load) or
nothing of the kind (a flaky backend fails a share of its requests, whatever
the pace). Both look the same one at a time; the difference shows only in what
slowing down does. So the first such errors are believed: they slow the scope
(backoff or rampup) like any backoff answer. Then this rule measures:

1. **Before.** When an error slows the scope, the error share just before the
   cut is kept: the share of the last :data:`MEMORY` outcomes, or the circuit
   breaker's window when this rule knows too few.
2. **After.** The outcomes of the requests sent after the cut, at the slower
   pace, are counted until :data:`JUDGE` of them are known. Meanwhile errors
   do not cut again: the experiment is one cut, measured at one pace.
3. **Verdict.** The errors were about load only if slowing *clearly* reduced
   them: the share after is below :data:`SAME` of the share before, by more
   than two standard deviations of chance (both shares are samples), and
   never against a share on fewer than :data:`EARLY` outcomes (two errors
   in a row are a share of 1 whose spread is no share's). The
   verdict comes before :data:`JUDGE` outcomes once :data:`EARLY` are known
   and the rest could not make it "fell" even if every one succeeded (a share
   before measured on four outcomes can never be clearly beaten: at 0.5/s,
   waiting for ten outcomes cost a flaky site 20 s at that pace); under rampup
   at once, with no outcome after the cut, when none could (the verdict is known). If not,
   the errors are the site's own: from then on they are *plain errors*.
   They no longer slow the scope (they still count as failures: the circuit
   breaker sees them, and the crawl resends them within ``--retries``), the
   default backoff forgets the cuts they caused, and the breaker is told to
   tolerate that share. If the share fell, the errors were
   about load, and the rule waits for the next cut to judge again.

Under rampup the same verdict sends rampup back to its start phase (``Rampup.forgive``; where a 429
had cut the rate before, to the pace before the errors' first cut: the limiter's evidence stands), and a
refusal on arrival with several requests in flight is not weighed here: it is a cap on requests
in flight, whose refusals a slower rate does not lower (the scope policy leaves it out), nor is one
that may be a cap's whose slot is freed late (``Rampup.held_late``).

Refusals on arrival that stopped after a cut are load only once the clean outcomes after it tell the
errors before it from chance, both shares samples (:func:`_none_after`, the exact conditional test of two
binomial shares): two quick 502s in a site's first five outcomes ask for 26 clean ones, not ten; where no
patience of ``3 * JUDGE`` outcomes could tell (3 errors in 33), the verdict is the site's own at once.
A cut judged load because its quick refusals stopped (``slowed``'s ``quick``) is watched too: an error
among as many outcomes again, sent after the cut, judges it afresh with them (``doubt``): a limiter below
its rate refuses nothing, the site's own errors recur at their share.

A site judged flaky is watched: once the share of its last :data:`MEMORY`
outcomes is clearly above :data:`RETURN` times the share learned (by two
standard deviations), the errors are believed again and the next cut is
judged afresh. A verdict reached on fewer than :data:`_KNOWN` outcomes learns
no share from them (two 503s first are a share of 1, which no share is twice
of, and their errors were what made the cut): its share is learned from the
error that made the cut and the outcomes after the verdict, until it rests on
:data:`_KNOWN`, and until then a quick refusal with several requests in flight
is still a cap's (``learned``), not one of the site's own errors; but from the
verdict on, not a slot freed late (the scope policy): a verdict is a sequential
test's, and one quick 5xx sent right after an answer is evidence of a slot still
held by no more than one over the share against it. A site whose
answers are nearly all errors is the circuit breaker's: it never tolerates a
share of :data:`~.breaker.STEADY_MAX` or more, so it still pauses, probes and
gives up such a site (seed 003).

A worked timeline (a site with no limit answering 25 % of its requests 503):
at 20/s the first 503s cut the pace to 10/s; the 20 answers sent after the
cut hold 5 errors (25 %, against 25 % before): not load. The pace climbs back
by evidence (successes at the new pace), and later 503s no longer cut it. On
an overloaded site instead, the share before the cut (say 40 %) falls after it
(say 5 %): load, and the cut stands.

Pure: no clock, no I/O; the scope policy feeds it outcomes and times.
"""

from __future__ import annotations

import logging
import math

from .signals import ScopeFeedback

__all__ = ["CROWD", "EARLY", "JUDGE", "MEMORY", "RETURN", "SAME", "STOPPED", "LoadErrors", "crowded",
           "is_error", "scattered", "tallied"]

logger = logging.getLogger("crawlpace.policy.scope")  # the scope policy's log lines

#: Outcomes remembered for the error share now (one bit each).
MEMORY = 40
#: Outcomes of requests sent after a cut needed to judge it (the test of significance weighs how few).
JUDGE = 10
#: Outcomes after a cut before the verdict may come early (see the module's rule 3).
EARLY = 3
#: A share after the cut at least this share of the one before: slowing did not help.
SAME = 0.5
#: A learned share is trusted until errors are clearly above this multiple of it.
RETURN = 2.0
#: The chance, at the share before a cut, of no error in the outcomes after it (:data:`JUDGE` or more, up
#: to three times as many) under which refusals on arrival that stopped are load (:meth:`LoadErrors.slowed`).
STOPPED = 0.1
# The chance of a normal draw past two standard deviations above its mean: the level of the exact test
# :func:`crowded` makes where the two deviations of a share are no measure (three answers past a count).
_TWO_SD = 0.5 * math.erfc(2.0 / math.sqrt(2.0))
# Outcomes known before the share in memory is used rather than the breaker's window.
_KNOWN = 10
#: Counts in flight told apart by the crowding test (:meth:`LoadErrors.crowded`); the last stands for
#: that many or more. Past rampup's most slots (16), every count a site may refuse at has its own.
CROWD = 17


def is_error(feedback: ScopeFeedback) -> bool:
    """Whether an outcome is an error this rule weighs: a failure or a 5xx, not a 429 or a soft block."""
    status = feedback.status
    if status is None:
        return feedback.failed or feedback.backoff
    return status >= 500 and (feedback.failed or feedback.backoff)


def tallied(counts: tuple[float, ...], met: int) -> tuple[float, ...]:
    """``counts`` (one per count in flight, :data:`CROWD` of them) with one more at ``met``."""
    i = min(max(met, 1), CROWD) - 1
    return (*counts[:i], counts[i] + 1.0, *counts[i + 1:])


def crowded(answers: tuple[float, ...], quick: tuple[float, ...], met: int) -> bool:
    """Whether quick 5xx follow the count in flight from ``met`` on, by the answers (``answers``) and
    quick 5xx (``quick``) counted at each count in flight their requests met (:func:`tallied`): the
    requests that met ``met`` or more were refused on arrival mostly (at least half: a cap refuses
    every request past it) and clearly more often than those that met fewer: as many quick 5xx among
    them would come by chance, at the share of all the answers, less often than a normal draw lands
    two standard deviations above its mean (the binomial tail, :func:`_tail`), on at least
    :data:`EARLY` answers each side.

    (Two standard deviations of a share on three answers are no measure of it: two quick 503s among
    the first three answers at a count, against 7 in 51 under it, passed them, which a site failing
    22 % of its requests at once shows one time in eight at each count it reaches; the exact tail of
    2 in 3 at the pooled share is 7 %. A real cap's 3 in 3 still passes at once.)

    The site's own errors come at one share whatever is in flight; a cap on requests in flight (a
    server's door, a connection cap) refuses past its count and seldom under it. The verdict of
    :class:`LoadErrors` weighs the share against the rate, which a cap's refusals do not follow
    alone while the site's own errors come with them: a door of 6 in flight plus 10 % random 502s
    was judged "not load" (33 % after the cut against 45 % before), its slot cap dropped and its
    refusals taken for the site's own from then on (0.07-0.66 of its capacity). The count in flight
    is their own evidence.
    """
    n_hi, n_lo, q_hi, q_lo = _split(answers, quick, met)
    if n_hi < EARLY or n_lo < EARLY or q_hi / n_hi < 0.5:
        return False
    return _tail(round(n_hi), round(q_hi), (q_hi + q_lo) / (n_hi + n_lo)) < _TWO_SD


def scattered(answers: tuple[float, ...], quick: tuple[float, ...], met: int) -> bool:
    """Whether quick 5xx do *not* follow the count in flight at ``met`` (counted as in :func:`crowded`):
    the answers to requests that met ``met`` or more (at least :data:`_KNOWN`) were quick 5xx at a
    share clearly under the half a cap at ``met - 1`` would refuse (by two standard deviations of a
    share of one half, ``1 / sqrt(n)``), and requests that met fewer were refused on arrival too, at a
    share not clearly under it (by two standard deviations, the two shares pooled).

    A backend failing at once answers a quick 5xx with several in flight as a cap does, and one by
    one they were read as a cap's: a knee of 7 with 3 % of its requests failing at once had its slots
    cut from 6 to 3 and its rate cut eleven times before the errors were judged (0.39-0.59 of its
    capacity). A cap whose slots are freed late refuses under its count too, but only at the top
    (a slot still held) and never further down: a cap of 4 freed 10 ms late, reached 0-20 ms after
    each send, refused 2 of 20 requests that met 4 and none of the 15 that met fewer, and taken for
    the site's own errors its refusals cut the rate (0.78 of its capacity, 0.85 before).
    """
    n_hi, n_lo, q_hi, q_lo = _split(answers, quick, met)
    if n_hi < _KNOWN or q_lo < 1 or q_hi / n_hi >= 0.5 - 1.0 / math.sqrt(n_hi):
        return False
    return q_hi / n_hi - q_lo / n_lo <= _spread(n_hi, n_lo, q_hi, q_lo)


def _tail(n: int, k: int, share: float) -> float:
    """The chance of ``k`` or more errors among ``n`` outcomes, each an error at ``share``: how often a
    site whose quick 5xx come at one share whatever is in flight shows as many past a count by chance.

    Each term is taken through its logarithm: ``math.comb`` past about 1,030 outcomes is an integer too
    large for a float: a site answering half of its requests with a quick 5xx at every count, after
    more than a thousand answers at 2 or more in flight, raised ``OverflowError`` in the scope's outcome."""
    k = max(k, 0)
    if k == 0 or share >= 1.0:
        return 1.0 if k <= n else 0.0
    if share <= 0.0:
        return 0.0
    log_p, log_q, log_n = math.log(share), math.log1p(-share), math.lgamma(n + 1)
    return sum(math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)
               for i in range(k, n + 1))


def _fewer_after(bad: int, n: int, bad_after: int, m: int) -> float:
    """The chance of ``bad_after`` errors or fewer among the ``m`` outcomes after a cut, given ``bad``
    among the ``n`` before it, for a site failing at one share whatever the pace: both shares are
    samples. With every outcome of both samples as likely to be an error, the errors after are a
    hypergeometric draw of ``m`` from ``n + m`` holding ``bad + bad_after`` (the exact conditional test
    of two binomial shares, one-sided); each term is taken through its logarithm, as in :func:`_tail`.

    With none after it is ``C(n, bad) / C(n + m, bad)``: all ``bad`` fall among the first ``n``.
    """
    total, whole = bad + bad_after, n + m
    if total <= 0 or m <= 0:
        return 1.0

    def log_comb(a: int, b: int) -> float:
        return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)

    log_all = log_comb(whole, total)
    return min(1.0, sum(math.exp(log_comb(m, i) + log_comb(n, total - i) - log_all)
                        for i in range(max(0, total - n), min(bad_after, m) + 1)))


def _none_after(bad: int, n: int) -> int:
    """The outcomes after a cut, none of them an error, that tell ``bad`` errors among the ``n`` before
    it from chance, for a site failing at one share whatever the pace: the share before is a sample too
    (:func:`_fewer_after` with none after); clearly, where that chance is under what a normal draw two
    standard deviations past its mean has (:data:`_TWO_SD`, the level of :meth:`LoadErrors._fell` and
    :func:`crowded`).

    The share before taken as known (:data:`STOPPED`) asked for far fewer: two 502s in a site's first
    five outcomes (40 %) made ten clean ones after the cut "about load" (0.6 % at 40 %), which all
    errors of both samples falling before shows one time in ten; 3 errors in 33 made 25 clean ones so,
    one time in six; a site failing 11 % of its requests (5123:errors26) took 23 s, 1.4 s clean.

    A lone error before (``bad`` 1) is left to the share before: one error is no share of two samples
    (the chance it fell before is ``n / (n + m)``, which no crawl's patience meets), and a rate
    limiter's first refusal alone in flight is one (``tests/test_rampup_rate_refusals.py``). Returns 0
    where none is asked, and more than ``3 * JUDGE`` where no patience meets it.
    """
    if bad < 2 or n <= bad:
        return 0
    chance, m = 1.0, 0
    while chance >= _TWO_SD and m <= 3 * JUDGE:
        m += 1
        chance = _fewer_after(bad, n, 0, m)
    return m


def _split(answers: tuple[float, ...], quick: tuple[float, ...],
           met: int) -> tuple[float, float, float, float]:
    """Answers and quick 5xx to requests that met ``met`` or more in flight, then to those that met fewer."""
    k = min(max(met, 1), CROWD) - 1
    return sum(answers[k:]), sum(answers[:k]), sum(quick[k:]), sum(quick[:k])


def _spread(n_hi: float, n_lo: float, q_hi: float, q_lo: float) -> float:
    """Two standard deviations of the difference of the two shares ``q_hi / n_hi`` and ``q_lo / n_lo``,
    the shares pooled: a difference past it is clear."""
    pooled = (q_hi + q_lo) / (n_hi + n_lo)
    return 2.0 * math.sqrt(pooled * (1.0 - pooled) * (1.0 / n_hi + 1.0 / n_lo))


class LoadErrors:
    """The verdict on one scope's errors, and what it is based on.

    Attributes:
        plain: the errors are judged not about load: they do not slow the scope.
        share: the error share learned when they were judged so (both samples pooled, and the
            outcomes after the verdict until the share rests on :data:`_KNOWN`).
        learned_n, learned_bad: the outcomes and errors ``share`` rests on.
        tolerable: the share the circuit breaker is told to tolerate: the higher of the two
            samples of any verdict of plain errors.
        judging: a cut is being judged; ``since`` is when it began.
        before: the error share before that cut, and ``before_n`` the outcomes it was measured on.
        after_n, after_bad: outcomes and errors of requests sent after it.
        quick: that cut was drawn by a refusal on arrival on a share before that makes its stopping
            telling: the outcomes after it with no error that make it load (0: no such rule).
        doubt: outcomes after a cut judged load because its refusals stopped (``quick``) that are
            still watched: an error among them (sent after the cut, at the slower pace) says the
            stopping was chance, and the cut is judged again with it (0: none watched).
    """

    __slots__ = ("after_bad", "after_n", "before", "before_n", "doubt", "judging", "learned_bad", "learned_n",
                 "plain",
                 "quick", "recent", "recent_n", "share", "since", "tolerable")

    def __init__(self) -> None:
        self.plain = False
        self.share = 0.0
        self.learned_n = 0
        self.learned_bad = 0.0
        self.tolerable = 0.0
        self.judging = False
        self.since = 0.0
        self.before = 0.0
        self.before_n = 0
        self.after_n = self.after_bad = 0
        self.quick = 0
        self.doubt = 0
        self.recent = 0
        self.recent_n = 0

    def learned(self) -> bool:
        """Whether the errors are judged the site's own on a share that rests on enough outcomes
        (:data:`_KNOWN`): until then a quick refusal with several in flight may still be a cap's
        (though no longer a slot freed late: see the module)."""
        return self.plain and self.learned_n >= _KNOWN

    def slows(self) -> bool:
        """Whether an error may slow the scope now: not once judged plain, nor while a cut is judged."""
        return not (self.plain or self.judging)

    def recent_share(self) -> float | None:
        """The error share of the last :data:`MEMORY` outcomes, once :data:`_KNOWN` are known."""
        if self.recent_n < _KNOWN:
            return None
        return self.recent.bit_count() / self.recent_n

    def record(self, scope: str, *, sent_at: float, error: bool) -> None:
        """Count one outcome of a request sent at ``sent_at``."""
        self.recent = ((self.recent << 1) | error) & ((1 << MEMORY) - 1)
        self.recent_n = min(MEMORY, self.recent_n + 1)
        if self.judging and sent_at >= self.since:
            self.after_n += 1
            self.after_bad += error
            # Early when even successes for the rest could not show a fall (not for a refusal on
            # arrival while none recurs: see slowed).
            if (self.after_n >= JUDGE and (self.after_bad or self.after_n >= self.quick)) or (
                    self.after_n >= EARLY and not self._fell(self.after_bad, JUDGE)
                    and (self.after_bad or not self.quick)):
                self._judge(scope)
        elif self.doubt and sent_at >= self.since:
            # A verdict of load because the refusals stopped is one sequential test's first
            # stop, not its last: at a share of 15 % none in ten comes one time in five. While the
            # pace is still the cut's, a limiter below its rate refuses nothing; the site's own
            # errors come at their share. One error among as many outcomes again ends the doubt
            # the other way: the cut is judged again with every outcome after it.
            self.doubt -= 1
            self.after_n += 1
            self.after_bad += error
            if error:
                self.doubt = self.quick = 0
                self._judge(scope)
        elif self.plain and self.learned_n < _KNOWN:
            # A share learned on a few outcomes is no share yet: two 503s first are a share of 1,
            # which no error rate could ever be "clearly above" twice of, so a site whose errors
            # later followed its load was never believed again (a hard knee of 4 with two 503s
            # first, its refusals taken for its own, was sent at 100/s: 0.04 of its capacity).
            # The outcomes after the verdict are its sample, until it rests on enough.
            self.learned_n += 1
            self.learned_bad += error
            self.share = self.learned_bad / self.learned_n
        elif self.plain and error:
            share = self.recent_share()
            if share is not None:
                limit = RETURN * self.share
                if limit < 1.0 and _tail(self.recent_n, self.recent.bit_count(), limit) < _TWO_SD:
                    self.plain = False
                    logger.info("scope %s: errors at %.0f%% of the last %d outcomes, above the %.0f%% "
                                "learned: believed to be about load again", scope, 100 * share,
                                self.recent_n, 100 * self.share)

    def slowed(self, now: float, breaker_share: float | None, breaker_n: int = 0, scope: str = "",
               *, at_once: bool = False, quick: bool = False, unrisen: bool = False) -> None:
        """An error slowed the scope at ``now``: judge the cut by the outcomes of sends after it.

        With ``at_once`` (rampup's cuts), when the share before rests on so few outcomes that no
        sample after the cut could be clearly lower (:data:`JUDGE` successes in a row would not
        do), the verdict is known already and comes at once: waiting for outcomes at the slower
        pace only delays it (a first 502 on a site's second page, 1 of 3 before, cost 6 s at
        0.5/s, then the climb back from there). The default backoff keeps its cut for
        :data:`EARLY` outcomes: a backoff answer doubles its delay, whatever is learned after.

        Args:
            now: when the cut was made.
            breaker_share: the circuit breaker's error share over its window (before the outcome
                that made the cut), if it has one.
            breaker_n: the outcomes that share was measured on.
            scope: the scope's name, for the log.
            at_once: give a verdict that is known at the cut at once.
            unrisen: the error answers a send at the start phase's polite starting pace, before
                any rise (``StartPhase.start_unrisen``): the verdict comes at once, the site's own.
                A limiter refusing the starting pace is none a polite crawler can meet, and judged
                by whether the errors stopped at half that pace the cut took ten outcomes at 0.5/s
                (a 3 ms site with 15 % of its answers 503 at once: 0.01-0.02 of its clean sends in 8 s).
            quick: the error was a refusal on arrival (a rate limiter's, or a backend failing at
                once). With too few outcomes before for any share after to be clearly lower, the
                share alone can tell nothing, and the verdict is not given at once: the errors are
                about load if none recurs in the outcomes after the cut, as many as a site failing
                at the share before would have none in only by chance (:data:`STOPPED`; at least
                :data:`JUDGE`, and the rule holds only where at most three times that many do:
                a share before of 1 in 13 or more; with two errors or more before, also as many as
                tell them from chance, both shares samples (:func:`_none_after`), and where none
                within ``3 * JUDGE`` could, the verdict comes at once). A rate
                limiter refuses a client alone in flight as quickly, and only above its rate
                (nginx's ``limit_req`` answers 503 by default): its first refusal, 1 of 4 outcomes,
                was judged the site's own at once, the pace climbed with no ceiling, and 64-68 %
                of the crawl's requests were refused (0.03-0.04 of the limit).
        """
        if self.judging:
            return  # a cut during the judgement: the outcomes after the first one still tell
        before, before_n = self.recent_share(), self.recent_n
        if before is None and breaker_share is not None:
            # The breaker has not counted the error that made the cut yet: it belongs to the sample.
            before, before_n = (breaker_share * breaker_n + 1.0) / (breaker_n + 1), breaker_n + 1
        if before is None and at_once and unrisen:
            # No outcome known but the error itself: the verdict at the starting pace needs none (below).
            before, before_n = 1.0, 1
        if before is None:
            return  # nothing to compare with: the next cut is judged
        self.judging, self.since, self.before, self.before_n = True, now, before, before_n
        self.after_n = self.after_bad = self.doubt = 0
        # The outcomes after the cut in which none would be a rarity (STOPPED) at the share before, if
        # at most 3 * JUDGE: a backend failing 3 % of its requests at once has none in ten three times
        # in four, and each such cut would stand. (0: the rule does not apply.)
        needed = math.ceil(math.log(STOPPED) / math.log1p(-before)) if 0.0 < before < 1.0 else JUDGE
        # Both shares are samples: as many again as tell the errors before from chance (_none_after).
        told = _none_after(round(before * before_n), before_n)
        needed = max(needed, told)
        self.quick = max(JUDGE, needed) if quick and needed <= 3 * JUDGE else 0
        # Quick errors before that no clean run within that patience could tell from chance: the
        # verdict is known (the test of the shares, _fell, would call 0 of 10 after 4 of 40 before
        # clearly fewer, where all four fall before by chance 40 % of the time).
        hopeless = quick and told > 3 * JUDGE
        if at_once and unrisen:
            logger.debug("scope %s: a 5xx at the starting pace, before any rise: no evidence of load", scope)
            self._judge(scope)
        elif at_once and (hopeless or (not self.quick and not self._fell(0, JUDGE))):
            self._judge(scope)

    def _fell(self, bad: int, n: int) -> bool:
        """Whether ``bad`` errors among ``n`` outcomes after the cut are clearly fewer than before it:
        under :data:`SAME` of the share before, and fewer than chance would make them with both shares
        samples (:func:`_fewer_after` under :data:`_TWO_SD`, the test :func:`_none_after` makes).

        Never against a share on fewer than :data:`EARLY` outcomes: its spread is no share's. Two
        errors in a row among a site's first sends are a share of 1 with a spread of 0, which one
        error in the ten after the cut "clearly" beat (by Fisher's exact test, one flaky site in
        twenty does as much by chance; one with a fifth of its answers errors has two in a row
        first once in 25): the cut stood at 0.5/s, 12 sends in 15 s. (Two standard deviations of
        the shares, the test this was, are none either where the share after is 0: 0 of 10 after 4
        of 40 was "clearly fewer", which all four errors falling before shows 40 % of the time.)
        """
        if self.before_n < EARLY:
            return False
        before = self.before
        return (bad / n < SAME * before
                and _fewer_after(round(before * self.before_n), self.before_n, bad, n) < _TWO_SD)

    def _judge(self, scope: str) -> None:
        self.judging = False
        after = self.after_bad / self.after_n if self.after_n else self.before
        # Refusals on arrival that stopped once the pace fell are load (see slowed), however few before.
        stopped = bool(self.quick) and self.after_n >= self.quick and not self.after_bad
        if not (self.after_n and (stopped or self._fell(self.after_bad, self.after_n))):
            # The share learned pools both samples: the one after the cut alone is a handful of
            # outcomes (0 of 10 at a 20 % share is no rarity), and a share of 0 would be exceeded
            # by the next error, which would be believed again and cut once more.
            self.learned_n = self.before_n + self.after_n
            self.learned_bad = self.before * self.before_n + self.after_bad
            pooled = self.learned_bad / self.learned_n
            # The breaker is told the higher of the two: slowing did not lower the errors, so the
            # share before is the site's too, and a breaker opened by it pauses a site that is fine.
            # (An early verdict's share after rests on a few outcomes: the pooled one stands for it.)
            self.tolerable = max(self.tolerable, self.before, after if self.after_n >= JUDGE else pooled)
            if self.before_n < EARLY and self.learned_n < _KNOWN:
                # Too few to be a share: the errors before were what made the cut, chosen by it (two
                # 503s first are a share of 1). Only the error that made it is kept; the outcomes
                # after the verdict are the sample (see record). (Not from a share before on more:
                # while the share is learned, a backend's 503s at once with several in flight are
                # read as a cap's, and a 60/s bucket with 30 % of them was capped at 25/s.)
                self.learned_n, self.learned_bad = 1, 1.0
            self.plain, self.share = True, self.learned_bad / self.learned_n
            if self.after_n:
                logger.info("scope %s: errors at %.0f%% after slowing down, %.0f%% before: not about load; "
                            "they no longer slow the scope", scope, 100 * after, 100 * self.before)
            else:
                logger.info("scope %s: errors at %.0f%% of %d outcomes, too few for any share after slowing "
                            "down to be clearly lower: not about load; they no longer slow the scope", scope,
                            100 * self.before, self.before_n)
        else:
            # Stopped refusals: watched for as many outcomes again (see record).
            self.doubt = self.quick if stopped else 0
            logger.debug("scope %s: errors at %.0f%% after slowing down, %.0f%% before: about load", scope,
                         100 * after, 100 * self.before)
