"""Rampup's tuning: every number its rules use, in one place, each with its reason.

One frozen dataclass, :class:`RampupTuning`, and its one instance, :data:`TUNING`,
which the rampup modules read as ``T``. The fields are grouped by the part of the
model they belong to (docs/concepts/rampup.md has the same numbers for users, each with its
kind and reason, and ``tests/test_rampup_tuning.py`` holds the two together). Each number is a
*model* one (it follows from how limiters and HTTP work: ``round``, ``cut_deep``),
a *measured* one (set against other values on the cases its comment
names), or a *chosen* one (a design choice with its reason that no case has yet compared with
other values: the first candidates for a fit of the limiter to replace). The rules for the
numbers:

* a number that is the same idea in two rules is one field (one second is the
  *round* of every rule that measures per round; one threshold says when a hold
  is long, in both phases; the ordinary cut is also where rampup sits after a
  long hold; one *tolerance* is a share too small to matter; a quarter of a
  silence is how late its end is seen; one *latency noise* is what a busy
  machine adds to an answer; three is the least count that is evidence; the knee
  line sizes the slots too; a hang's duration is smoothed as a latency is);
* a number that follows from others is a property (the properties after the fields),
  whose formula states the reason;
* a number the stores share with rampup is defined once, in ``_shared_rules``
  (the weights of the newest gap between two sends in their mean, ``GAP_WEIGHT``, and of the
  newest latency in a scope's mean latency, ``LATENCY_WEIGHT``: rampup smoothed latency with 0.3
  until the limiter cases showed the same figures with the stores' 0.2);
* implementation bounds that are not tuning (a sentinel time, how many sends a
  record keeps, a clock tolerance, when an unused record may be dropped) stay in
  the module that needs them.

Changing a field changes rampup's behaviour everywhere it is read: the figures
in bench/results/ were measured with these values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._shared_rules import GAP_WEIGHT

__all__ = ["TUNING", "RampupTuning"]


@dataclass(frozen=True, slots=True)
class RampupTuning:
    """The numbers rampup's rules use (see each field's comment for its reason)."""

    # -- the round and the send record --
    #: Seconds: the round of every rule that measures per round when nothing quicker is known (model:
    #: limits are stated per second, ``Retry-After`` in whole seconds). The
    #: start phase doubles at least once per round while used; one answer advances a climb by at most
    #: a round; the gap assumed after a scope's first send; the sends of a round may be in flight
    #: before any latency is known (a server taking seconds per page would otherwise get one request
    #: at a time until its first answer).
    round: float = 1.0

    # -- the start phase --
    #: Answers with a latency before one is trusted: an answer may be slow for reasons of its own (a
    #: new connection, a busy crawler; in a fleet each worker opens its own connections). The start
    #: phase's window of one waits for them before the doubling starts from it (unless the first is past
    #: ``latency_signal + latency_noise``, the server's own time: ``_rampup_start``), and the latency
    #: baseline is taken after them. (With two, three workers on one store at 0.2 s answers drew 8
    #: refusals in the fleet-learning test, where one process drew 2; with three, 3. The baseline
    #: waited for 5 until the limiter cases showed the same figures with 3.) Three is the least count
    #: that is evidence rather than chance wherever rampup counts: a refusal on arrival caps the
    #: slots only with at least three requests in flight (``quick_refusal``; with one or two it may
    #: be a backend failing at once), a cap on requests in flight read from latency is at least
    #: three, and the start phase doubles blind for three doublings before slots need evidence
    #: (``open_slots``).
    #: A quick site's start phase doubles once this many answers have come at the pace it doubles
    #: (under 3/s, a whole round): with two, a 5/s limit with 5 s holds refused a crawl of 5 pages
    #: (the hard farm's embargo) and a second 20 s hold came at 0.87/s; four or six took most of the
    #: gain away.
    confirm: int = 3
    #: The start phase grows only while the measured send rate is at least this share of the rate
    #: (under a half: the last gap was sent at the rate before the last doubling, and jitter
    #: lengthens it; a scope held back by its slots falls far below it and stops doubling for nothing).
    #: (Measured: ``used_share * (1 - tolerance)``, 0.475, drew 103 refusals on 20 seeds of a 10/s
    #: bucket with bursts of 5, where 0.4 drew 80.)
    start_used_share: float = 0.4

    # -- cuts and the cubic climb --
    #: The ordinary cut: after a pushback that ends a probe, and after a long hold (``hold_long``),
    #: where rampup sits as a share of the rate known good. The climb after the start phase's held
    #: refusal levels out at this share of the good rate, and the rate resumes at this share of that
    #: level: a site that demands seconds of silence charges a whole hold for each refusal, and the
    #: good rate is a rate allowed, not one the sends reached (at 0.95 of it a 5/s site that allows no
    #: burst and holds 5 s refused again within seconds of the first hold, in every round of the hard
    #: farm on an idle machine).
    cut: float = 0.9
    #: The cut after a pushback in the start phase, or one the previous cut did not prevent (model):
    #: a half undoes one doubling, the start phase's step; a refusal the previous cut did not prevent
    #: says the rate is at least one such step too high.
    cut_deep: float = 0.5
    #: Where the climb levels out after an ordinary cut, as a share of the failing rate: over the
    #: cut, so the climb gains back part of it, and under the rate that failed. (Measured: the
    #: geometric middle of the cut and the failing rate, ``sqrt(cut)`` = 0.949, as a cascade's cut
    #: has, drew 10 refusals where a late-released cap of requests in flight allows 8, and a limit
    #: that fell part-way and came back got 0.61 of capacity, not 0.71.)
    ceiling_share: float = 0.92
    #: How much quicker the climb is after a deep cut: the limit then lies between the cut rate and
    #: the refused one, near, so the climb takes a sixth of the usual time. (Measured: with 4 and with
    #: 8 the recall after a deep cut found 9.5/s and 8.7/s where the case needs 11/s, and 8 drew 4
    #: refusals on a limit that halves and comes back, where 2 are allowed.)
    fast_climb: float = 6.0
    #: A share too small to matter. Two rates within it of each other are one rate: a cut counts
    #: as "not enough" when the rate has grown less than this since the last one, and the search
    #: after a deep cut ends when the level is within this share of its top. After a refusal that
    #: cost a hold (or a lock-out), the probe beyond the level waits until a failed one costs at most
    #: this share of the time. And the climb after the start phase's first refusal levels out this
    #: share under the good rate (``good_ceiling``). A rampup scope's delays are lengthened by at most
    #: this share (``RAMPUP_JITTER``, one-sided: sends spread without ever going over the pace).
    tolerance: float = 0.05

    # -- overshoot episodes and fits --
    #: A share of a silence (an episode's lock-out, a hold): how late its end may be seen, and how
    #: soon after it ends a refusal still belongs to it. A long episode's probe gap grows to this
    #: share of the episode so far: a window of a minute costs about a dozen refused probes rather
    #: than thirty, and its end is seen at most a quarter late. A held refusal within this share of
    #: a hold after the last one's end is a burst's relapse (a bucket far over its limit spends its
    #: burst in a moment); later, it may be a send that a loaded machine bunched at a pace a little
    #: under a bucket with no burst (5/s, 5 s holds).
    late_share: float = 0.25

    # -- latency --
    #: Latency: stop growing past ``knee * baseline + knee_slack`` (seconds) ... The slots are sized
    #: for the same line: enough requests in flight for the rate at up to ``knee`` times the baseline
    #: latency (a latency past it stops the growth anyway), and the load fit paces ``knee`` times
    #: over what the count it holds serves, so that the slots, not the delay, bind.
    #: (Past the baseline's noise, short of the cut line at ``high``. Measured: halfway to the cut
    #: line, ``(1 + high) / 2`` = 1.5, gave a server of 5 in flight that slows 37 ms per request held
    #: 0.91 of its capacity with 52 refusals over six fake-clock crawls, where 1.6 gives 0.93 with
    #: 31, and two random farms' hard knees 0.72-0.77 where 1.6 got 0.84-0.86.)
    knee: float = 1.6
    #: Seconds of slack on a time the crawler measures: a timer's and an event loop's jitter. On the
    #: knee line it covers an answer of a few milliseconds, which 1.6 times the baseline would not;
    #: the bucket fit reads an accepted send this much after its stamp (``FIT_SLACK``, the same
    #: slack: the server may see the send that much later). (Measured: ``latency_signal``, 20 ms,
    #: took a server with a knee from 0.670 to 0.646 of its capacity.)
    knee_slack: float = 0.010
    #: Windows of smoothed-latency minimums the baseline is the minimum of: the baseline's memory; a
    #: server slower for this many windows in a row (loaded by others, or slower for good) raises it,
    #: and the knee line with it. (Measured: ``confirm``, 3, was tried as its formula; on a server 8 in
    #: flight at most, 0.25 s a page and 20 ms more per request held, twice as slow from its third
    #: minute on, it drew 27 refusals in 30 minutes of fake clock where 10 draws 20, for the same
    #: pages: a raised knee line only leads to the hard limit. 5 and 20 move no fake-clock case.)
    baseline_windows: int = 10

    # -- slots --
    #: (The mean time a failure without an answer held its slot is smoothed as latencies are, with
    #: ``LATENCY_WEIGHT``: a hang is a latency that ended without an answer.)
    #: Weight of the newest outcome in the share of failures without an answer (hangs): a few hangs
    #: in a hundred answers are a steady trait of a site, and a memory of about twenty outcomes
    #: forgot each within a second at 20/s, leaving no slot for the next ones (the scope fell silent
    #: till they ended).
    stuck_share_weight: float = 0.005

    # -- the load fit --
    #: The load fit (``_rampup_latency``): one more request in flight is worth holding when it adds at
    #: least this share of the throughput it adds at a server that does not queue (``1 / n`` at ``n``
    #: in flight). A fifth: a knee's level stretch adds nothing, a server slowing a little per request
    #: held still adds most of it, and the fit's noise (a few % on a smoothed latency) stays under it.
    #: (Measured: 0.3 took a server slowing 20 ms per request held from 0.94 to 0.91 of its capacity;
    #: 0.1 and 0.05, the ``tolerance``, gave the fake-clock knee servers the same shares as 0.2, but
    #: on two random farms of knees and caps 0.05 dropped two hard knees to 0.75 and 0.82 of their
    #: capacity with 3-5 refusals, where 0.2 kept 0.84-0.91 with one.)
    knee_gain: float = 0.2

    # -- derived: numbers that follow from the fields above, by the formula that states their reason --

    @property
    def used_share(self) -> float:
        """A scope uses its rate while its measured send rate is at least this share of it: within one
        doubling of what the sends showed, the step rampup tells rates apart by (``cut_deep``, 0.5).
        The rate grows only then, and what the scope may send is capped where it would stop counting
        as used (``sent_cap``). An idle scope neither learns nor banks a rate it never tried."""
        return self.cut_deep

    @property
    def high(self) -> float:
        """Latency past ``high * baseline + latency_noise`` is cut: an overloaded server is caught at
        its knee, before it starts to refuse. Latency one doubling over the service time, the step
        rampup tells rates and latencies apart by, is a queue as long as the service, one request
        waiting for each one served (``1 / cut_deep``, 2)."""
        return 1.0 / self.cut_deep

    @property
    def cut_over(self) -> float:
        """The cut when the last window already had more pushbacks than the band allows: two ordinary
        steps off the rate that failed (``1 - 2 * (1 - cut)``, 0.8). The window says one step did not
        bring the rate under the limit; the second is taken from the same rate, not from the first
        one's result. (That, ``cut ** 2`` = 0.81, drew as many refusals on the fake clock's buckets, 8 %
        more at 50/s with bursts of 10, and one over a test's bound. 0.8 was a measured field until
        tuning5; the formula gives it bit for bit.)"""
        return 1.0 - 2.0 * (1.0 - self.cut)

    @property
    def latency_noise(self) -> float:
        """Seconds: what a busy crawler machine (its own event loop, its neighbours) may add to an
        answer's latency and still say nothing of the server: a ``tolerance`` of the ``round``, a delay
        that moves a rate per round by a share too small to matter (``tolerance * round``, 50 ms). The
        cut line is this far above ``high * baseline``; a latency cut is the deeper the further past
        ``knee * baseline + knee_slack + latency_noise`` it is (a site answering in milliseconds is not
        cut deep for the machine's delays); and a scope whose baseline is under it has no knee to see:
        only the cut line speaks for it, and a latency cut does not cap its slots. (With 20 ms a 25/s
        bucket on a loaded machine got 4 % of its capacity, with 50 ms 87 %. 0.05 was a measured field
        until tuning5; the formula gives it bit for bit.)"""
        return self.tolerance * self.round

    @property
    def min_round(self) -> float:
        """The shortest round, in seconds: a round shortened by one doubling's step, so the start
        phase at most quadruples its rate within the round a limit is stated per (``round *
        cut_deep``, 0.5 s). Not a round trip of 50 ms: a limit on a window or a bucket shows nothing
        until its burst is spent, and a rate doubling every 50 ms is far past it by then (a window of
        11 per second drew 15 refusals in a second at 50 ms rounds, 3 at 0.5 s)."""
        return self.round * self.cut_deep

    @property
    def probe_gap_max(self) -> float:
        """The longest probe gap in an episode's first seconds, in seconds: a lock-out that ends (a
        window's boundary, a counter drained) is seen at most this late, at the cost of one refused
        probe per this long (or, later in a long one, ``late_share`` of the episode so far). A round
        lengthened by one doubling's step: a limit stated per round is probed at most every other
        round (``round / cut_deep``, 2 s). (With a round, 1 s, a fixed window of 30 per 10 s drew 37
        refusals in 5 minutes, where 25 are allowed; with no floor at all, seven fake-clock cases of
        windows and counters broke their bounds.)"""
        return self.round / self.cut_deep

    @property
    def hold_long(self) -> float:
        """Seconds: a hold at least this long is a penalty, not a token bucket's wait for its next
        token (``Retry-After: 1``, the least a header in whole seconds can say). After such a hold the
        rate resumes at ``cut`` of the level in the start phase and at the level in the steady phase:
        the silence paid the burst's debt. (Resuming just under a ceiling after a one-second hold drew
        a second refusal at once on the mixed farm's buckets of 2/s and 4/s with bursts of 2.) The
        middle of a round and a round one doubling longer, of ``Retry-After: 1`` and ``2``, so a header
        in whole seconds falls on one side or the other (``round * (1 + 1 / cut_deep) / 2``, 1.5 s)."""
        return self.round * (1.0 + 1.0 / self.cut_deep) / 2.0

    @property
    def start_sent_weight(self) -> float:
        """Weight of the newest gap in the measured send rate while the round is shorter than
        ``round``: doubling every round trip outruns the steady weight's mean within a few sends, so
        the steady mean's weights are swapped, the newest gap weighing what the older ones weigh there
        (``1 - GAP_WEIGHT``, 0.75). (With one-second rounds the lagging mean is what tempers the
        overshoot into a token bucket's burst, so the steady weight stays. With the steady weight,
        0.25, in quick rounds too, eleven fake-clock cases broke their bounds, among them a 12.2/s
        bucket with 8 s holds, 0.65 of capacity to 0.649, and a 10 per 1 s counter of refusals, 0.83
        to 0.77.)"""
        return 1.0 - GAP_WEIGHT

    @property
    def latency_signal(self) -> float:
        """Latency under this many seconds says nothing of a server's load (no queue to see): a
        latency is two stamps, the send's and the answer's, each off by up to the timing slack, so an
        answer this quick may be the crawler's own jitter (``2 * knee_slack``, 20 ms). Under it the
        start phase's round is ``confirm`` answers at the pace it doubles (within ``[min_round,
        round]``): only a refusal could stop the climb, and a round of a few answers keeps the first
        refusal's good rate near the limit. From this latency up, the round follows the latency and
        one request may be in flight back to back. (As ``latency_noise``, 50 ms, sites answering in
        20-50 ms lost the window of one, and the limiter cases' buckets with holds of 3-30 s fell from
        0.65, 0.48 and 0.25 of capacity to 0.47, 0.32 and 0.14.)"""
        return 2.0 * self.knee_slack

    @property
    def fit_hold(self) -> float:
        """Seconds: a refusal with a hold at least this long is read against the bucket fit
        (``_rampup_bucket``); shorter holds (from ``hold_long``) keep the held rules until the second,
        where two stretches pin the bucket (on a 7.43/s bucket with 3 s holds the ordinary cuts took
        six holds in 30 s to come down, 0.52 of capacity; 0.67 and four). Holds are told apart by
        doublings of a round, as rates are: one round is a bucket's next token, one doubling more a
        penalty (``hold_long`` lies between), two doublings a penalty long enough to fit at once
        (``round / cut_deep ** 2``, 4 s). A wrong pace after a short hold costs little, and the fit's
        first pace, cautious by design, cost more than it saved there: the mixed farm's 2/s site with
        2 s holds fell from 0.63 to 0.36 of the oracle with the fit, and on 24 random buckets with
        holds of 2-60 s the fit from 4 s up did as well as from 1.5 s (0.62 and 0.61 of capacity,
        against 0.53 without it)."""
        return self.round / (self.cut_deep * self.cut_deep)

    @property
    def sent_cap(self) -> float:
        """What a scope may send, as a multiple of its measured send rate: the most at which it still
        counts as using its rate (``1 / used_share``, 2)."""
        return 1.0 / self.used_share

    @property
    def good_ceiling(self) -> float:
        """Where the climb after the start phase's first refusal levels out, as a share of the good rate
        (see ``good_share``): just under it, one ``tolerance`` (``1 - tolerance``, 0.95)."""
        return 1.0 - self.tolerance

    @property
    def start_ceiling_share(self) -> float:
        """Where the quick climb after the start phase's first refusal levels out, as a share of the
        failing rate: the ordinary ceiling taken twice, since that rate was reached by doubling, not
        held, and the refusal came only once a burst was spent (``ceiling_share ** 2``, 0.85)."""
        return self.ceiling_share * self.ceiling_share

    @property
    def good_share(self) -> float:
        """After the start phase's first refusal the climb levels out just under the good rate
        (``good_ceiling``, if lower than the usual level) when the good rate is at least this share of
        the refused one. One answer may double the rate, so the good rate lies between half the refused
        one and all of it; past the middle of that doubling (geometrically: the square root of the
        deep cut, a half) it says more than the halving does (``sqrt(cut_deep)``, 0.71)."""
        return math.sqrt(self.cut_deep)

    @property
    def near_share(self) -> float:
        """A refusal the previous cut did not prevent is cut gently, once, when its send rate is at
        least this share of the previous refusal's: the limit is near, not far below. Near is where a
        cut that was not deep left the rate (``cut_over`` at the deepest), within ``tolerance``
        (``cut_over * (1 - tolerance)``, 0.76); a deep cut leaves it at half."""
        return self.cut_over * (1.0 - self.tolerance)

    @property
    def climb_share(self) -> float:
        """The time to climb back to the ceiling, as a share of the window per target pushback: the
        climb takes all but the last ``late_share`` of the time the band allows per pushback, and
        that last share probes beyond the ceiling, so the probe's refusal is the band's one and a
        limit that rose is found at most that share of the time late, as a silence's end is
        (``1 - late_share``, 0.75)."""
        return 1.0 - self.late_share

    @property
    def search_pace(self) -> float:
        """How much quicker a climb of the search is than the quick climb after a deep cut: each step
        of the search halves the interval the limit lies in, as a bisection does, the same halving
        that undoes one doubling (``1 / cut_deep``, 2)."""
        return 1.0 / self.cut_deep

    @property
    def quick_refusal(self) -> float:
        """A refusal answered in less than this share of the baseline latency was refused on arrival,
        and caps the slots when at least ``confirm`` requests were in flight (fewer may be a backend
        failing at once; a cap read from latency is never under that count either). Quicker by more
        than one doubling, the step rampup tells rates apart by, is another kind of answer: no
        service time, only the way there and back (``cut_deep``, 0.5)."""
        return self.cut_deep

    @property
    def strict_near(self) -> float:
        """A refused gap at least this share of the shortest accepted one is a bucket with no burst
        refusing: its limit lies between the two gaps (a bursty bucket accepts gaps many times
        shorter). A gap is a rate turned over, and near is one idea: the refused rate is near the
        accepted one as a refusal's rate is near the last refusal's (``near_share``, 0.76; 0.8 before,
        with the same outcome in every fake-clock limiter crawl)."""
        return self.near_share

    @property
    def fit_share(self) -> float:
        """The level after an episode is at least this share of the cycle's accepted rate (and a
        fitted bucket's or gap's rate is paced at this share of it): the rate was achieved, lock-out
        included, so it is safe, and the sends should average one ``tolerance`` under it, the margin
        a window or a bucket at its limit needs. The one-sided jitter (``RAMPUP_JITTER``) lengthens
        each delay by half a tolerance on average, so the level is the rest of that margin
        (``(1 - tolerance) * (1 + tolerance / 2)``, 0.974; 0.98 before, a chosen number: on the
        fake-clock limiter crawls of tests/test_rampup*.py the mean share of capacity went from
        0.805 to 0.807 and the refusals from 519 to 510)."""
        return (1.0 - self.tolerance) * (1.0 + self.tolerance / 2.0)

    @property
    def lockout_gaps(self) -> float:
        """An episode that outlasts this many gaps at the cut rate was a lock-out (a window's rest, a
        counter draining), not a bucket refilling (whose first or second probe is accepted): the
        cycle's accepted rate is then the limit itself, and the level follows it down as well as up.
        It is the episode's length at which its probe gap, ``late_share`` of the episode so far,
        outgrows one gap at the cut rate: a bucket refilling has let a probe through by then, a
        lock-out is paced from then on by its own length (``1 / late_share``, 4)."""
        return 1.0 / self.late_share

    @property
    def open_slots(self) -> int:
        """The slots rampup opens without evidence that requests in flight, not a rate, bind the site
        (a rate limiter's pace); past them, up to ``rampup_max_concurrency``, one more opens per round
        trip while every slot is used, latency stays under the knee line and nothing is refused
        (``_rampup_slots``). The start phase doubles blind from one request in flight; it may do so
        for ``confirm`` doublings, the least count that is evidence, before the slots say more than its
        rate does (``2 ** confirm``, 8). (Measured: one doubling more, 16, held 14-16 in flight when
        a 25/s bucket's first refusal came back at 0.2 s, and drew 17 refusals, not 10. 8 was a
        measured field until tuning5; the formula gives it exactly.)"""
        return int(2 ** self.confirm)


#: The tuning every rampup controller reads.
TUNING = RampupTuning()
