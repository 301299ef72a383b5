"""Rampup: find the fastest rate a scope's server accepts, and stay near it.

Pure state plus ``now``. The controller steers one number, the scope's *rate*
(sends per second); the scope's delay is its inverse and its slots follow the
rate times the latency. It has two phases:

``start``
    A new scope doubles its rate once per round trip (``_rampup_start``) until
    the first pushback, which leaves it just under the last rate that drew
    none, until latency climbs, or until the rate reaches its cap.

``steady``
    Every pushback (a backoff answer: 429, 503, a timeout...) cuts the rate
    and remembers the rate that failed, the *ceiling*. The rate then climbs
    back along a cubic curve (as TCP CUBIC and AWS's adaptive client do):
    quickly at first, flattening out as it nears the ceiling, level there,
    and then probing beyond it ever faster. The curve is scaled to the
    ceiling, so a 2 req/s site and a 200 req/s site both see the same share
    of their rate probed per second, and about one probe per
    ``window / target`` seconds.

How the band of ``RAMPUP_BACKOFF_TARGET`` (``[low, high]`` pushbacks per
window) steers it:

* the time the curve takes to return to the ceiling is ``window / (2 *
  mid)``, where ``mid`` is the middle of the band, so that a server whose
  limit stays put pushes back about ``mid`` times per window;
* more pushbacks than ``high`` in the last window: the cut is deeper and the
  ceiling is lowered below the failing rate (the limit is falling);
* fewer than ``low``, for a whole window spent above the ceiling: the
  ceiling is stale (the limit rose), so the scope goes back to ``start``.

Three more rules keep it honest:

* Feedback counts once per generation. Every cut starts a new generation,
  and only a pushback from a request sent under the current one can cut
  again, so a burst of refusals answering one burst of sends counts once,
  whether one worker or eight sent them.
* The rate only grows while the scope uses it (its measured send rate is at
  least half the rate), and what the scope may send is capped at twice the
  measured send rate (never below the starting rate): an idle scope neither
  learns nor banks a rate it never tried.
* Latency: when the smoothed latency climbs past ``1.6 *`` the scope's
  baseline (its lowest smoothed latency over the last ten windows) plus 10
  ms, the rate stops growing; past ``2 *`` baseline plus 50 ms it is cut as
  for a pushback. An overloaded server is caught at its knee, before it
  starts to refuse. A latency cut is deeper the further latency is past the
  knee (down to a half, like a gradient controller), and it starts from the
  rate the scope was allowed, not from the measured send rate: slow answers
  hold the slots, so the send rate understates the rate that overloaded the
  server, and a cut from it would starve the scope. The slots follow the
  baseline latency, not the smoothed one, so a queueing server is not handed
  more requests to queue.

A failure without an answer (a timeout, a reset) is pushback only when the
server looks loaded (latency past the knee, or none seen yet; a page
answered in milliseconds has no knee, only the cut line: a busy crawler
machine puts most of its answers past 1.6 times a millisecond); otherwise
it is the site's own fault and ignored, though the slots grow by the
requests such failures are expected to hold (rate x share x duration). A
cut for one starts from the rates of the moment its request was sent (hangs
may have held every slot since).

A server may limit the requests it holds at once rather than their rate (a
slow site answering 503 past six in flight, say): a pushback answered in less
than half the baseline latency with at least three in flight caps the slots
at one fewer (at that count when as many were accepted before: a slot freed
late; with one or two in flight, only then), and cuts the rate only gently.
The cap rises by one after every window without a pushback.

Latency past the knee on a server slower than 50 ms hands the slots to the
load fit (``_rampup_latency``, ``_rampup_slots``): by Little's law ``n`` in
flight answered in ``L(n)`` serve ``n / L(n)`` a second, so the slots walk to
the count past which one more bought no more throughput and hold it, with the
rate lifted above what it serves: the slots pace the server, and latency no
longer cuts. (Where the count in flight is unknown, a latency cut in the steady
phase caps the slots at what the rate needs unqueued, ``rate * baseline``.)

A cut that follows the previous one before the rate had grown back (the
previous cut was not enough) halves the rate, and the next climb is six
times quicker; then a search (``_rampup_search``) climbs by halves to where
an ordinary cut would have levelled out. The first such refusal near the
previous refusal's rate is cut gently instead (``_rampup_cut``). A refusal
with a ``Retry-After`` hold of seconds is read against a token bucket fitted to
the sends on record (``_rampup_bucket``): the scope resumes after the hold at the
pace with the best expected gain, a failed step costing a whole hold, and steps
above it only when the time crawled makes a step worth that risk. Without a fit,
it is not probed past for ``hold / 5 %`` seconds, and in the steady phase a long
hold resumes at the level.

The refusals one overshoot draws are one piece of evidence
(``_rampup_episode``): until a send made after the first refusal is accepted,
no other refusal cuts, and the scope probes at a doubling gap. A lock-out (a
window's rest, a counter draining) sets the level to the rate its cycle let
through; a refusal just under the shortest accepted gap is a bucket with no
burst, paced evenly at that gap; a held refusal soon after resuming halves
the level.

A refusal at or under the level the scope held says the limit fell; the rate
held before it is remembered, and after a quiet spell a search climbs back
towards it (``_rampup_recall``), so a limit that comes back is found again in
seconds rather than at the probe's pace.

The controller's state is one record, :class:`RampupState` (the fields
``policy/state.py`` shares between workers); :class:`Rampup` adds its settings
and the rules, with its parts in rooms of their own: the send record in
``_rampup_sends``, the latency watch in ``_rampup_latency``, the slots and
their cap in ``_rampup_slots``, the cuts' depths and the cubic climb in
``_rampup_climb``, the cut itself in ``_rampup_cut``, the search and the holds
in ``_rampup_search``, the episodes and fits in ``_rampup_episode``, the bucket fit
after a hold in ``_rampup_bucket``, the memory of a level held before a fall in
``_rampup_recall``. This
module keeps the phases and the decisions.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from .._jitter import Jitter
from ._load_errors import CROWD
from ._rampup_bucket import REFUSALS_KEPT, BucketFit
from ._rampup_climb import CubicClimb
from ._rampup_counter import SENDS_KEPT
from ._rampup_cut import LATENCIES_KEPT, CutRules
from ._rampup_episode import Episodes
from ._rampup_latency import LatencyWatch
from ._rampup_recall import LevelRecall
from ._rampup_search import SearchClimb
from ._rampup_sends import NEVER as _NEVER
from ._rampup_sends import SendRecord
from ._rampup_slots import SlotSizing
from ._rampup_start import StartPhase
from ._rampup_tuning import TUNING as T
from ._shared_rules import LATENCY_WEIGHT

__all__ = ["RAMPUP_JITTER", "Rampup", "RampupState", "RampupStats"]

logger = logging.getLogger(__name__)

#: The spread of a rampup scope's delays: only ever longer, by up to one ``T.tolerance``
#: (5 %, a share too small to matter). A token bucket with no room for bursts refuses any
#: gap shorter than its own, so a symmetric spread of +/-10 % would hold the mean rate 10 %
#: under a limit that one-sided jitter gets within 2.5 % of, with as few refusals.
RAMPUP_JITTER = Jitter(0.0, T.tolerance)
#: Accepted sends kept to find the one before a refused send (more than are in flight at once).
OK_SENDS_KEPT = 64
#: What a cut moves and what a verdict "not load" puts back (:meth:`Rampup.forgive`): the pace, the
#: ceiling and the climb to it, the search, the episode and the fits under way, the level
#: remembered before a fall. Not what the answers showed (latency, the sends and their gaps), nor the
#: generation (feedback from before the cut still counts once).
_PACE = ("rate", "phase", "ceiling", "last_pushback_rate", "above_since", "_pushbacks", "_cut_rate",
         "_gentle", "_good_rate", "_epoch", "_k", "_climb", "_probe_c", "_top", "_lift", "_probe_after",
         "_ep_since", "_ep_gap", "_fitted", "_fit_span", "_strict_gap", "_no_burst", "_recall",
         "_recall_wait", "_recall_from", "_recall_span", "_recall_last", "_recall_next", "_recall_next_span")


@dataclass(frozen=True, slots=True)
class RampupStats:
    """What rampup knows about one scope, for stats and live views.

    Attributes:
        phase: ``start`` (doubling) or ``steady`` (holding near the ceiling).
        rate: the sends per second the scope may make now (lower than the
            learned rate while the scope has been sending less than it).
        target: the band of pushbacks per window rampup aims at.
        pushbacks: pushbacks counted in the last window.
        last_pushback_rate: the send rate when the last counted pushback came.
        ceiling: the rate the climb levels out at.
        concurrency: the slots the rate and latency call for.
        baseline_latency: the lowest smoothed latency of the recent windows.
        latency: the smoothed latency.
        decision: the last decision, with its reason.
    """

    phase: str
    rate: float
    target: tuple[float, float]
    pushbacks: int
    last_pushback_rate: float | None
    ceiling: float | None
    concurrency: int
    baseline_latency: float | None
    latency: float | None
    decision: str
    #: The rate rampup has learned the site takes, whatever the scope sent lately.
    learned_rate: float = 0.0


@dataclass(slots=True, eq=False, repr=False)
class RampupState:
    """Everything one scope's rampup controller has learned: the state its rules read and move.

    One record, with the rules over it in the mixins of :class:`Rampup` (each
    module's docstring says which fields it moves). ``policy/state.py`` shares
    these fields between workers (its ``FIELDS["r"]``); :class:`Rampup` adds only
    its settings and the text of its last decision.
    """

    rate: float  #: the rate the controller settled on (before the send-rate cap)
    phase: str = "start"
    generation: int = 0  #: incremented by every cut
    ceiling: float | None = None  #: the rate the climb levels out at
    last_pushback_rate: float | None = None
    latency: float | None = None  #: the smoothed latency
    above_since: float = _NEVER  #: when the rate went above the ceiling with no pushback
    _pushbacks: deque[float] = field(default_factory=deque)
    # The send record (_rampup_sends): the mean gap, the last send, when growth was last counted.
    _gap: float | None = None
    _sent_at: float = _NEVER
    _last_growth: float = _NEVER
    _cut_rate: float = 0.0
    _gentle: bool = False  # the last cut was a gentle one of a refusal it did not prevent (_rampup_cut)
    _good_rate: float = 0.0  # the start phase's highest rate whose send was answered
    _door: float = _NEVER  # after the send robots.txt let go at once: when the send after it is due
    _low_latency: float = 0.0  # the lowest latency seen (0: none yet), for the start phase's round
    # The cubic climb: from the rate at `_epoch` up to the ceiling in `_k` seconds.
    _epoch: float = 0.0
    _k: float = 0.0
    _climb: float = 0.0
    _probe_c: float = 0.0
    # The latency watch (_rampup_latency): the windows' minimums, the window under way, the answers
    # seen, and the last verdict (0 fine, 1 at the knee, 2 too high).
    _baseline: deque[float] = field(default_factory=lambda: deque(maxlen=T.baseline_windows))
    _window_min: float = math.inf
    _window_start: float = _NEVER
    _samples: int = 0
    _level: int = 0
    _quick_sent: float = _NEVER  # the latest send answered under the knee (_rampup_latency)
    _line_until: float = _NEVER  # a line's backlog drains until then, its wait no load (_rampup_latency)
    # The latest latency cut (sends from then on met its rate), the rate before the run of latency cuts
    # it belongs to (0: none), and whether the answers since one of them came no quicker: latency the
    # rate does not cause, held rather than cut, and climbed back from once it is gone (_rampup_latency).
    _lat_cut_at: float = _NEVER
    _lat_from: float = 0.0
    _lat_held: bool = False
    # The send times of the requests still out, and how many of them were stragglers (out far longer
    # than the site's answers take) at the last quick answer (_rampup_sends, _rampup_slots).
    _outstanding: deque[float] = field(default_factory=lambda: deque(maxlen=OK_SENDS_KEPT))
    _stragglers: int = 0
    _hung: int = 0  # requests out far longer than the site's answers take, at the last look (_rampup_slots)
    _slow_last: bool = False  # the latest accepted answer was past the knee line (_rampup_latency)
    _merged: bool = False  # the requests out are merged from a fleet's workers (also_out): none is known hung
    # Failures without an answer that were not taken for overload: their share of the
    # outcomes and how long each held its slot (both smoothed).
    _stuck_share: float = 0.0
    _stuck_time: float = 0.0
    _quiet_until: float = _NEVER
    # When the last hold the server asked for (Retry-After) ends: the silence it
    # imposed is not a gap in the scope's sending, see hold().
    _resumed_at: float = _NEVER
    # The slots a server that limits requests in flight was seen to allow (inf: no such limit
    # seen), and when that was last learned or raised.
    slot_cap: float = math.inf
    _cap_at: float = _NEVER
    # The search's top after a deep cut (0: no search), and the hold rule (_rampup_search).
    _top: float = 0.0
    # A top past the search's, to search on to once that is held (_rampup_episode's lock-out pace).
    _lift: tuple[int, float, float] = (0, 0.0, 0.0)
    _probe_after: float = _NEVER
    hold_learned: float = 0.0
    _held_asked: bool = False  # a refusal came while a hold was in force (Retry-After; _rampup_search)
    _queue_cap: bool = False  # the slot cap came from latency (_cap_queue), not from refusals
    # The overshoot episode under way (since its first refusal; NEVER: none) and its probe gap,
    # and the cycle since the last episode ended: when, and the answers accepted (_rampup_episode).
    _ep_since: float = _NEVER
    _ep_gap: float = 0.0
    _cycle_start: float = _NEVER
    _cycle_ok: int = 0
    _cycle_rate: float = 0.0
    _cycle_refused: int = 0  # refusals answered in the cycle: a counter counts them (_rampup_episode)
    # The level is the last lock-out's fit, and that fit's cycle length (_rampup_episode).
    _fitted: bool = False
    _fit_span: float = 0.0
    # -- counters3 -- a cut of a level refused within a fitted cycle of the last episode's end, and
    # when a refusal after it was last excused as the counter's drain (_rampup_episode).
    _early_cut: float = _NEVER
    _drain_at: float = _NEVER
    # -- counters6 -- the least gap before the first probe of an episode opened by a refusal on
    # arrival (0: none), and until when a refusal at the level the lock-out after it set is still
    # that lock-out's drain, excused once (_rampup_episode).
    _ep_drain: float = 0.0
    _drain_until: float = _NEVER
    # -- counters7 -- the start of a cycle opened by the accepted first probe of a drain wait (_NEVER:
    # none): a counter still full there, and the cycle to its next refusal no measure (_rampup_episode).
    _drain_passed: float = _NEVER
    # -- fleets14 -- when the last lock-out ended (_NEVER: none), and the answers accepted since then
    # before the cycle under way: cycles begun at plain cuts are fitted from there (_rampup_episode).
    _lock_end: float = _NEVER
    _lock_ok: int = 0
    # -- counters4 -- every answered send, accepted or refused (a counter counts both), oldest dropped,
    # how many were ever noted, and the rate of the counter they pinned (0: none) (_rampup_episode).
    # Not shared by a fleet: a worker sees only its own sends.
    _counted: deque[tuple[float, bool]] = field(default_factory=lambda: deque(maxlen=SENDS_KEPT))
    _counted_n: int = 0
    _pinned: float = 0.0
    _counter_lo: float = 0.0  # the slowest and fastest counters that fit the last refusal, per second
    _counter_hi: float = 0.0
    _counter_span: float = 0.0  # the longest lock-out cycle seen: the periods the fit tries follow it
    _counter_open: float = _NEVER  # when half the counters that fit let a send through again
    _inflight_ok: int = 0  # the most requests in flight at an accepted answer (_rampup_slots)
    _answered_at: float = _NEVER  # when the latest accepted answer came (_rampup_slots)
    # -- slots3 -- when the answer that set _inflight_ok came, and the most before it: a request out then
    # and refused on arrival later was counted in it, never held by the server (_rampup_slots).
    _ok_at: float = _NEVER
    _ok_below: int = 0
    # -- fleet7 -- the shortest time after the latest answer that a request accepted at the most in
    # flight (``_inflight_ok``) was sent: a slot freed late refuses only sooner sends (_slot_reused).
    _ok_since: float = math.inf
    # -- conncap2 -- a cap whose slots are freed late (_rampup_slots' slot_rest): the latest accepted
    # answers' times, oldest first; the longest rest after an answer that was refused and the shortest
    # that was accepted at the full count (0: none seen), bracketing how long a slot stays held after
    # its answer; and the send whose acceptance would bound it from above, with its rest.
    _answers: tuple[float, ...] = ()
    _lag_lo: float = 0.0
    _lag_hi: float = 0.0
    _lag_probe: float = _NEVER
    _lag_gap: float = 0.0
    # -- slots4 -- the probe's count in flight at its send: its acceptance bounds the lag from above only
    # where that count is still the most accepted (a cap of more takes any rest).
    _lag_at: int = 0
    # Whether the store's admission sees every send and rests the slots (a memory store). A Redis
    # store's release rests a slot by the stored rest too (release.lua), but a fleet's workers do
    # not run the model: on a loaded machine their sends reach the site 0.1-0.25 s after the grant,
    # and a rest counted from the release did not keep a cap's slots apart (bench/results/fleet6.md).
    _rests: bool = False
    _lag_seen: int = 0  # refusals at the full count that bounded the lag (slots rest from the second)
    # -- errors6 -- answers and quick 5xx by the count in flight their requests met (_load_errors' crowded):
    # a cap's refusals follow the count, the site's own errors do not.
    _crowd_n: tuple[float, ...] = (0.0,) * CROWD
    _crowd_quick: tuple[float, ...] = (0.0,) * CROWD
    # -- knee2 -- accepted answers and refusals on arrival by the count in flight each came with (at the
    # answer; a refusal's is the count it met): where the refusals outnumber the acceptances, the count is
    # past the cap, however many were once read accepted at it (_rampup_slots' _miscounted).
    _slot_ok: tuple[float, ...] = (0.0,) * CROWD
    _slot_refused: tuple[float, ...] = (0.0,) * CROWD
    # -- fleetknee1 -- the mean seconds a slot is held past its request's time at the site: the
    # crawler's own, from the admission to the write and from the answer to the release (a fleet's
    # worker: a store round trip and a busy event loop each way). The slots a rate needs count it.
    _held_over: float = 0.0
    # -- storm6 -- a fleet worker's own smoothed lease time per answer (grant to release), and the same
    # with a refusal on arrival's counted as 0: their ratio is the share of the store's lease set that
    # requests held at the site fill (_rampup_slots' _accepted_leases). The worker's, not shared state:
    # kept by its store across the versions it reads (Cached.leases).
    _lease_on: float = 0.0
    _lease_all: float = 0.0
    _lease_at: float = _NEVER  # (its latest answer noted)
    # A shared store's count of the scope's accepted answers at the cycle's start, and the
    # cycle it belongs to (NEVER: none yet): see _rampup_sends' sync_accepted.
    _acc_base: int = 0
    _acc_cycle: float = _NEVER
    # The load fit: a smoothed latency and a sample count per count in flight (_rampup_latency), and
    # the count in flight it holds the slots at (0: none) since when (_rampup_slots).
    _load_latency: tuple[float, ...] = ()
    _load_count: tuple[float, ...] = ()
    _knee_hold: int = 0
    _knee_at: float = _NEVER
    _load_n: int = 0  # the count in flight the last answers saw, since when
    _load_since: float = _NEVER
    # The slots opened past T.open_slots on evidence that requests in flight bind the site, and when
    # the last one opened (_rampup_slots).
    _slots_open: int = 0
    _opened_at: float = _NEVER
    _lone_refused: bool = False  # a refusal on arrival came with nothing else in flight (_rampup_slots)
    _sustained: float = 0.0  # the fastest pace kept up for a hold's length (_rampup_episode)
    # The last accepted sends, the shortest gap between two of them, and the one a bucket-with-no-
    # burst fit last used (inf: none), for the strict-bucket fit (_rampup_episode).
    _ok_sends: deque[float] = field(default_factory=lambda: deque(maxlen=OK_SENDS_KEPT))
    _gap_ok: float = math.inf
    _strict_gap: float = math.inf
    # The last accepted sends and their latencies, flat (send, latency, ...), for the arrivals' jitter
    # (_rampup_cut).
    _ok_lat: deque[float] = field(default_factory=lambda: deque(maxlen=2 * LATENCIES_KEPT))
    _no_burst: bool = False  # a refusal came just under the shortest accepted gap (_rampup_cut)
    # A refusal the arrivals' jitter explained (_rampup_cut): the site counts the gaps between arrivals,
    # so a late answer spaces the next send from the late arrival (:meth:`spaced_until`).
    _spaced: bool = False
    # A level held before the limit fell under it (0: none), the quiet before the next search
    # back up to it, and the level that search started from (_rampup_recall).
    _recall: float = 0.0
    _recall_wait: float = 0.0
    _recall_from: float = 0.0
    _recall_span: float = 0.0  # how long the remembered level had been held when the limit fell
    _recall_last: float = 0.0  # the level the recall's search reached last
    # A later fall's level that the memory outweighed, and how long it had been held: the memory
    # if a lock-out shows the remembered level was held for less time than it lasted.
    _recall_next: float = 0.0
    _recall_next_span: float = 0.0
    # The bucket fit's record (_rampup_bucket): the accepted sends ever, the first one, the sends
    # whose refusal started a hold, and when the last such hold ended.
    _ok_count: int = 0
    _first_send: float = _NEVER
    _hold_end: float = _NEVER
    _held_refusals: deque[float] = field(default_factory=lambda: deque(maxlen=REFUSALS_KEPT))
    # What the fit believes of the limit (rate, chance it is at least that, ...) and the highest
    # fitted level kept up for a step's wait (_rampup_bucket).
    _belief: tuple[float, ...] = ()
    _refit_at: float = _NEVER
    _kept: float = 0.0
    # The scope's requests the caller still held to send at the last answer (-1: not told), and whether
    # more may come (the count is then a floor): the work a step after a hold is weighed for
    # (_rampup_bucket). This process's own queue, not shared: a fleet's worker holds a part of it.
    _left: int = -1
    _more: bool = True
    # -- errors7 -- a refusal that is no 5xx (a 429) cut the rate: a limiter's, whatever the errors are.
    _limited: bool = False
    # -- holds17 -- each burst's interval of rates the bucket fits have left, (burst, lo, hi, weight, ...):
    # every stretch on record narrows it, so a record of 64 sends (two seconds at 30/s) no longer
    # forgets what the stretches before it showed (_rampup_bucket).
    _fits: tuple[float, ...] = ()
    # The accepted sends stamped since the last hold's end (all of them before the first hold): a bucket
    # holds at most its burst then, so ``n`` sends in ``t`` seconds show a rate of at least ``(n - b) / t``.
    _ok_after_hold: int = 0
    # The pace before the first cut drawn by 5xx on a limited scope (_load_errors), which a verdict "not
    # load" puts back (forgive): empty when none is pending; and whether a limiter's refusal cut the rate
    # since (its evidence is newer, and stands). This process's own, not shared.
    _undo: tuple[object, ...] = ()
    _undo_void: bool = False
    # -- fleeterr2 -- a fleet's hangs (_rampup_slots.hung_out): the send times of the requests its workers
    # found hung, shared (each worker adds and takes out its own); and, not shared, this worker's own
    # record, set by a shared store (None in one process, whose ``_outstanding`` is exact): the requests
    # it has out (the store's live list) and those it has put among the hung.
    _hung_sends: tuple[float, ...] = ()
    _own: tuple[list[float], list[float]] | None = None


def _took(latency: float | None, lag: float) -> float | None:
    """The time from a send the scope recorded to its answer: the latency and the caller's lag before
    the fetch (as the arrivals' record keeps it, ``_rampup_cut``); None without a latency."""
    if latency is None or not math.isfinite(latency):
        return None
    return latency + (lag if math.isfinite(lag) and lag > 0.0 else 0.0)


def _copied(value: object) -> object:
    """A value of the controller's state as it is now (a deque is copied: the state goes on moving it)."""
    return deque(value, maxlen=value.maxlen) if isinstance(value, deque) else value


class Rampup(RampupState, SendRecord, SlotSizing, CubicClimb, CutRules, LatencyWatch, StartPhase, SearchClimb,
             Episodes, LevelRecall, BucketFit):
    """The rampup controller of one scope: its settings, its state (:class:`RampupState`), and the rules.

    Args:
        start_rate: the rate a new scope starts at (sends per second).
        min_rate: the lowest rate a cut may reach.
        max_rate: the highest rate rampup may choose (``inf``: no cap).
        max_concurrency: the most slots rampup may open.
        window: the window pushbacks are counted over, in seconds.
        target: the band ``(low, high)`` of pushbacks per window.
        scope: the scope's name, for log lines.
    """

    __slots__ = ("decision", "max_concurrency", "max_rate", "min_rate", "scope", "start_rate", "target",
                 "window")

    def __init__(self, *, start_rate: float, min_rate: float, max_rate: float, max_concurrency: int,
                 window: float, target: tuple[float, float], scope: str = "") -> None:
        self.scope = scope
        self.min_rate = min_rate
        self.max_rate = max(max_rate, min_rate)
        self.start_rate = min(self.max_rate, max(start_rate, min_rate))
        self.max_concurrency = max(1, max_concurrency)
        self.window = window
        self.target = target
        RampupState.__init__(self, rate=self.start_rate)
        self.decision = "start: doubling the rate every round until the server pushes back"

    def pushbacks(self, now: float) -> int:
        """Pushbacks counted in the last window."""
        pushbacks = self._pushbacks
        while pushbacks and pushbacks[0] <= now - self.window:
            pushbacks.popleft()
        return len(pushbacks)

    def stats(self, now: float) -> RampupStats:
        """A snapshot for stats and live views."""
        allowed = self.allowed_rate(now)
        return RampupStats(phase=self.phase, rate=allowed, target=self.target,
                           pushbacks=self.pushbacks(now), last_pushback_rate=self.last_pushback_rate,
                           ceiling=self.ceiling, concurrency=self.concurrency(allowed),
                           baseline_latency=self.baseline(), latency=self.latency,
                           decision=self.decision, learned_rate=self.rate)


    # -- events ----------------------------------------------------------------

    def on_response(self, now: float, *, pushback: bool, current: bool, latency: float | None,
                    answered: bool = True, elapsed: float | None = None, inflight: int | None = None,
                    lag: float = 0.0, error: bool = False, out: Sequence[float] | None = None) -> bool:
        """Take one outcome.

        Args:
            now: when it arrived.
            pushback: the outcome is a backoff trigger (429, 503, a timeout...).
            current: the request was sent under the current generation.
            latency: its latency, when a response arrived.
            answered: a response arrived (False: a timeout, a reset connection...).
            elapsed: seconds from the send to this outcome.
            inflight: the scope's requests in flight when it came, this one included, when known.
            lag: seconds from its send to the moment the caller began to send it, which
                ``latency`` does not hold (a fleet worker's wait for the store's reply): its
                arrival came that much later (the arrivals' spread, ``_rampup_cut``).
            error: the pushback is a 5xx or a failure, whose cut the scope's error rule may judge
                not about load (``_load_errors``), not a limiter's refusal (a 429): see :meth:`forgive`.
            out: a fleet's sends out as it came, read from its store (``ScopePolicy.on_outcome``'s): a
                refusal on arrival's hangs are counted from them (:meth:`_slots_refused`). None in one
                process, whose record of sends out is exact.

        Returns:
            True when :attr:`rate` changed.
        """
        before, generation = self.rate, self.generation
        undo = pushback and error and self._limited and not self._undo
        pace = tuple(_copied(getattr(self, name)) for name in _PACE) if undo else ()
        self._on_response(now, pushback=pushback, current=current, latency=latency, answered=answered,
                          elapsed=elapsed, inflight=inflight, lag=lag, error=error, out=out)
        if self.generation != generation and pushback:
            if pace:
                self._undo = pace  # the first cut of the errors under judgement
            elif not error:
                self._limited = True
                # A limiter's refusal cut since: the pace before the errors is no better.
                self._undo_void = bool(self._undo)
        return self.rate != before

    def spaced_until(self, sent_at: float, latency: float | None, lag: float = 0.0) -> float:
        """The earliest next send after an accepted send made at ``sent_at`` (``-inf``: no bound).

        Once a refusal came that the arrivals' jitter explains (``_jitter_refused``: a site that counts
        the gaps between arrivals, nginx's ``limit_req`` with no burst), an accepted answer that came
        late (its latency and lag past the quickest recent answer, more than a timer's slack:
        ``_late_by``) says its request may have reached the site that much later than sent; the next
        send then goes one gap of the pace after that arrival, not after the stamp. On real nginx at
        load 24, every refusal in the steady phase followed an accepted send whose answer came 18-260 ms
        late, known before the refused send went, and nginx's own log put that request as late on the
        way in (bench/results/real4.md): the site saw the two 35-96 ms apart where the pace was 106 ms.
        The bound costs a late answer's delay on the next gap only, where the delay was on the way back.
        """
        if not self._spaced or self.rate <= 0.0:
            return -math.inf
        late = self._late_by(_took(latency, lag))
        return sent_at + late + 1.0 / self.rate if late > 0.0 else -math.inf

    def _on_response(self, now: float, *, pushback: bool, current: bool, latency: float | None,
                     answered: bool, elapsed: float | None, inflight: int | None, lag: float,
                     error: bool, out: Sequence[float] | None = None) -> None:
        if self.phase == "start" and not pushback:  # a refusal on arrival says nothing of service time
            self._start_latency(latency)
        inflight = self._accepted_leases(inflight, now)  # (a fleet's lease count less refusals in transit)
        # Like TCP, cut at most once per round trip: answers to requests that were
        # sent before the server saw the last cut take effect still say "too fast".
        can_cut = current and now >= self._quiet_until
        # (At the start's polite pace a hang is the site's own however few answers came: _rampup_start.)
        stuck = pushback and not answered and self._level == 0 and (
            self._samples >= T.confirm or self.start_unanswered(now))
        # A slow answer among quick ones hung at the site and then answered: it held its slot as a
        # hang does, and its latency is no load (_rampup_latency).
        # A failure answers the rate its request was sent at: a timeout comes long after,
        # perhaps after a silence forced by slots that hangs held (see _cut).
        sent_at = now - elapsed if elapsed is not None and math.isfinite(elapsed) and elapsed > 0.0 else None
        outlier = not pushback and self._outlier(latency, now if sent_at is None else sent_at,
                                                 alone=inflight is not None and inflight <= 1)
        # (A hang before any answer makes no room for more: nothing shows the site answers at all, and
        # a site whose every request hangs was sent 20 in 31 s by slots grown for hangs, 8 without.)
        held = stuck and self._samples > 0
        self._stuck_share += T.stuck_share_weight * ((held or outlier) - self._stuck_share)
        # A 5xx answered by a site whose limiter refuses with 429s: the limiter let the request through
        # and the backend failed it. The limiter's books count it accepted (a probe it ends an episode,
        # its gap was allowed), and its cut is a plain one, which the error rule judges: taken for a
        # refused probe, a backend's 502 doubled an episode's probe gap, and the lock-out fit paced a
        # bucket of 3/s at 1.5/s (with 20 % of its pages failing: 0.67 of its capacity, 0.98 without).
        passed = pushback and error and answered and self._limited
        if answered:
            self._note_counted(now if sent_at is None else sent_at, not pushback or passed)
        if pushback:
            self.note_refusal(answered, elapsed, inflight, sent_at=sent_at)
            inflight = self._met(inflight, sent_at, elapsed)  # (the count it met, not the one at its answer)
            if answered and not passed:
                self._note_refusal_held(now, sent_at, self._resumed_at)
                self._note_refused_gap(sent_at, _took(latency, lag))
        cap, most = self.slot_cap, self._inflight_ok  # (before a refusal's slot event: _slot_explained)
        if stuck:
            # No answer, yet the answers that do come are as quick as ever: not overload.
            self._note_stuck(now, elapsed)
            self._decide(now, "ignored: a request failed without an answer while latency is normal; "
                         "not taken for overload")
        elif pushback and answered and self._door_refused(sent_at):
            # The page robots.txt let go at once was refused: its gap to robots.txt (a few ms) was
            # too short for a limit with no room for a burst, which says nothing of the rate.
            self._decide(now, "door: the page sent at once after robots.txt was refused; its gap, "
                         "not the rate, was too short")
        elif pushback and answered and self._early_refused(sent_at):
            # The same for the send made at once on a first answer that took long (_rampup_start).
            self._decide(now, "early: the send made at once on the first answer was refused; its gap as "
                         "the site saw it is unknown, nothing to cut")
        elif pushback and answered and self._first_refused(sent_at):
            # No gap was sent yet: a cut would halve a rate the site never saw (_rampup_start).
            self._decide(now, "first: the scope's first send was refused; no rate was sent yet, "
                         "nothing to cut")
        elif pushback and answered and not passed and self._counter_pinned(now):
            pass  # (paced under the counter every send fits, after its reading falls: no cut)
        elif pushback and answered and not passed and not self._episode_opens(now, can_cut, sent_at):
            self._decide(now, "episode: a refusal of the same overshoot; probing, one send per "
                         f"{self._ep_gap:.3g}s, until one is accepted")
        elif pushback and self._slots_refused(now, answered, elapsed, inflight, out):
            explained = self._slot_explained(now, elapsed, inflight, cap, most)
            if can_cut and not explained:  # (explained: past the cap the slots hold now, the rate stays)
                steady = self.phase == "steady"
                self._cut(now, reason="slots", sent_at=sent_at)
                self._slots_pace(now, inflight)
                if steady and answered and not error:
                    # A 429 on arrival at a gap just under the shortest accepted one fits a bucket with
                    # no burst as well as a cap: nginx limit_req in front of pages of 30-70 ms answers
                    # its refusals at once, with a page in flight. Cut as a cap only, the level was the
                    # measured rate's share (6/s on 10/s) for the rest of the crawl; the strict fit lifts
                    # it to the accepted gap's rate (the slot cap stays, for a cap's own refusals).
                    self._strict_fit(now, sent_at, took=_took(latency, lag))
            # A cap on requests in flight, not a rate's overshoot: the slot cap answers it at once, so
            # no episode probes after it, and its cycle is no lock-out to pace at (a conncap of 7 at
            # 0.4 s was paced at 11/s, the start phase's mean, for the rest of the crawl).
            self._ep_since, self._ep_gap = _NEVER, 0.0
            if not can_cut and answered and not (inflight is not None and inflight > self.slot_cap):
                # (Unless the capped slots explain it; sent with more in flight than they are capped at now,
                # they do: a cap of 6 refusing a second send at 7, accepted once, opened an episode, and
                # its end was fitted as a lock-out at half what the 6 serve.)
                self._slot_cut_missed(now, sent_at, inflight)
            elif can_cut and answered and not error and not explained:
                # A 429 on arrival, a rate's refusal: before any lock-out it may be a counter's that
                # counts refusals, still over its limit (_rampup_episode's _slot_cut_drain).
                self._slot_cut_drain(now, sent_at)
        elif passed:
            self._let_through(now, now if sent_at is None else sent_at)
            if can_cut:
                self._cut(now, reason="pushback", sent_at=sent_at)
        elif pushback and can_cut and answered and self._jitter_refused(now, sent_at):
            self._episode_cut()  # (no cut: probes at the level until one is accepted)
        elif pushback:
            if can_cut:
                # (Not in the start phase: its doubling shortens every gap, so a bursty bucket's
                # first refusal looks strict too.)
                steady, step = self.phase == "steady", self.ceiling or 0.0
                self._note_fall(now, sent_at)
                self._cut(now, reason="pushback", sent_at=sent_at)
                self._recall_refused(now)
                self._close_slot(now)
                if steady and answered:  # (a timeout says nothing of a gap)
                    self._strict_fit(now, sent_at, step, _took(latency, lag))
                self._episode_cut(self._quick(answered, elapsed), sent_at, _took(latency, lag))
                self._counter_bound(now)
            elif self._quick(answered, elapsed):
                # Refused on arrival in the quiet after a slot cut, with too few in flight to be read as
                # the cap's: the overshoot may still be counted, as after one that is (the episode's
                # first probe). (Not a refusal as slow as a page: a bucket's, a fleet's worker that
                # does not see the others' sends; probing there cost a fleet of 3 on a bucket 0.88 x
                # one process's rate.)
                self._slot_cut_missed(now, sent_at, inflight)
        else:
            shortest = self._gap_ok
            self._note_accepted(now if sent_at is None else sent_at, _took(latency, lag))
            if self._door_refused(sent_at):
                # The page robots.txt let go at once: its gap to robots.txt is none of the limiter's
                # (a site seldom counts robots.txt), and as the shortest accepted gap it hid every
                # strict bucket's gap (15 ms on a bucket of 23/s: no refusal was ever "just under" it).
                self._gap_ok = shortest
            self._note_latency(now if sent_at is None else sent_at, latency, lag)
            self._note_ok_send(now if sent_at is None else sent_at)
            # (Sent when written: the answer's own latency, where shorter, tells when; a fleet's grant
            # comes a moment before it.)
            written = sent_at if latency is None or sent_at is None else max(sent_at, now - latency)
            self._note_held(now, sent_at, latency)
            self._note_inflight(now, inflight, written)
            self._lag_accepted(sent_at)
            self._episode_answer(now, now if sent_at is None else sent_at)
            if outlier:
                self._note_stuck(now, elapsed if elapsed is not None else latency)
                level = self._level
                self._decide(now, f"outlier: one answer took {latency or 0.0:.3g}s while the others stay "
                             "quick; the site's own, not load")
            else:
                level = self._observe_latency(now, latency)
                self._note_load(now, inflight, latency, sent_at)
                level = self._judge_load(now, level, inflight, latency)
            # The requests out far longer than the site's answers take, overtaken by a later send answered
            # quickly, are stragglers: the slots make room for them before they end (or the first few
            # hangs silence the scope). None while latency shows load.
            span = self._outlier_span()
            span = None if span is None else span + self._held_over  # (from the admission: _out_span)
            self._stragglers = self._count_stragglers(now, self._quick_sent, span) \
                if span is not None and level == 0 else 0
            if level > 0 and now < self._line_until:
                # The wait of a line in front of a fixed rate, draining on the queue pace's climb: the
                # climb goes on (frozen, it paced under the line's rate until the smoothed latency fell).
                level = 0
            if level == 2 and inflight is not None and inflight <= 1:
                # Alone in flight, this crawler queues nothing at the site: a latency past the cut
                # line is the site's own or the crawler's (a loaded machine reads answers late),
                # not load a cut would relieve. Hold the rate instead (latency2: a strict bucket in
                # a loaded fleet was cut from 3.8/s to 0.32/s this way, one request in flight).
                level = 1
            # Answers sent since the last latency cut no quicker than those just before it: the latency
            # does not follow the rate, so no further cut would bring it down (_rampup_latency).
            unmoved = level == 2 and self._latency_unmoved(now)
            if level == 2 and can_cut and not unmoved:
                # A line in front of a fixed rate (nginx's limit_req with a burst) spaces its answers at
                # that rate: pace at it rather than cut a share (_rampup_latency).
                line = self.queue_fit()
                if line is not None:
                    self._pace_queue(now, *line)
                else:
                    self._cap_queue(now)
                    self._note_latency_cut(now)
                    self._cut(now, reason="latency")
            elif level == 0:
                self._latency_back(now)
                self._grow(now)
                if not outlier:
                    self._open_slot(now, inflight, level, latency)
            else:
                self._knee_slots(now)
                self._freeze(now)


    # -- moves -----------------------------------------------------------------

    def _grow(self, now: float) -> None:
        self._skip_hold(now)
        step = min(now - self._last_growth, T.round)
        self._last_growth = now
        if step <= 0.0:
            return
        self._raise_cap(now)
        # Compared with the rate itself: what the scope may send is capped at twice what
        # it sends, so against that cap the test could never fail, and a scope held back
        # by its slots (a server answering slowly) would double its rate for nothing.
        used = T.used_share * self.rate if self.phase != "start" else self._start_used(self.rate)
        if self.sent_rate(now) < used or self.rate >= self.max_rate:
            self._epoch += step  # not using its rate: the curve waits
            return
        if self.phase == "start":
            cap = self._rate_cap()
            if self.rate < cap:
                self._start_grow(now, step, self._start_round(), cap)
            if self.rate >= cap and (cap >= self.max_rate or not self._window_known()):
                self._decide(now, f"start: reached the cap of {cap:.3g}/s")
                self._enter_steady(now, self.rate)
            return
        self._recall_step(now)
        self._search_step(now)
        self._fit_step(now)
        curve, ceiling = self._curve(now), self.ceiling or self.rate
        if curve > ceiling and self._probe_held(now):
            self._epoch += step  # a held refusal's wait is not over: the curve stays at its level
            curve = ceiling
        self.rate = min(self.max_rate, max(self.rate, curve))
        if self.rate > ceiling:
            if self.above_since == _NEVER:
                self.above_since = now
                self._decide(now, f"probe: above the ceiling of {ceiling:.3g}/s with no pushback")
            elif now - self.above_since >= self.window and self.pushbacks(now) < self.target[0]:
                self._start_again()
                self._decide(now, "start: a whole window above the ceiling with no pushback, "
                             "the limit has moved up")

    @property
    def shortest_ok_gap(self) -> float:
        """The shortest gap between two accepted sends the site took (inf before two)."""
        return self._gap_ok

    def door_page_accepted(self, shortest: float) -> None:
        """The page robots.txt let go at once was accepted, and :meth:`on_response` could not tell
        (a fleet's copy, which hears of the other workers' sends through the store, may have taken
        the scope to be sending still, which forgets the door): its gap to robots.txt is none of
        the limiter's, so the shortest accepted gap is ``shortest`` again, as it was before."""
        self._gap_ok = shortest

    def on_hang(self, now: float, elapsed: float | None) -> None:
        """A request failed without an answer, and it is known not to be about load (the site's own
        errors, ``_load_errors``): no pushback, but it held a slot, which the slots make room for."""
        self._stuck_share += T.stuck_share_weight * (1.0 - self._stuck_share)
        self._note_stuck(now, elapsed)

    def _note_stuck(self, now: float, elapsed: float | None) -> None:
        if elapsed is not None and math.isfinite(elapsed) and elapsed > 0.0:
            held = self._stuck_time
            self._stuck_time = held + LATENCY_WEIGHT * (elapsed - held) if held else elapsed
        self.hung_silence(now, elapsed)

    def forgive(self, now: float, *, keep_cap: bool = False) -> None:
        """The errors that cut the rate were judged the site's own, not load (``_load_errors``): undo
        their cuts. With no 429 seen (below), climb again, as the start phase does, with no ceiling,
        from the rate they left or the start
        phase's good rate (the rate in force at its last answered send, at least the starting rate),
        whichever is higher: their cuts answered nothing, and a quick site doubling again from half
        its starting rate took seconds to climb back (a 15 ms site with 20 % 503s: 0.75 of the clean
        pace over 15 s, 0.9 from the good rate). Under ``T.confirm`` per second (one-second rounds) the
        error that brought the verdict takes the doubling step of the answer it was: without it a 3 ms
        site whose second answer was a 503 resumed at 1/s and waited a whole round for its next answer
        (31-36 sends in its first 5 s where the clean site gets 125; 115-124 with the step).

        Their cuts set a ceiling and a search under the pace the site takes, and the cubic
        climb would spend a window under them. A cap on the slots read from quick refusals goes
        too: the scope takes the site's quick 5xx for its own errors from now on (the scope
        policy), and a flaky backend failing at once looks like a cap's refusal with several in
        flight. A cap read from latency (a queue) stays, and so does one the site's quick 5xx are
        seen to follow (``keep_cap``: refused mostly past it, and seldom under it).

        Where a refusal that is no 5xx (a bucket's 429) had cut the rate before the errors' first
        cut, the ceiling and the pace are a limiter's, which the verdict on the 5xx does not touch:
        the pace is put back as it was before that cut (:meth:`on_response`'s ``error``), the slot
        cap as above, and a limiter's cut since stands. Dropped with the rest, a bucket's ceiling
        of 25/s was doubled past to 99/s, and the bucket's refusals of that overshoot fitted a pace
        under half its rate (0.44-0.61 of its capacity with 5-20 % of its pages failing). (A ceiling
        read from quick 5xx is as suspect as the slot cap they set: it goes with the errors' cuts.)
        """
        undo, void = self._undo, self._undo_void
        self.keep_cuts()
        if undo:
            if not void:
                for name, value in zip(_PACE, undo, strict=True):
                    setattr(self, name, value)
            if not (self._queue_cap or keep_cap):
                self.slot_cap = math.inf
            self._decide(now, "steady: the errors that cut the rate are the site's own, not load; "
                         f"back to {self.rate:.3g}/s, the ceiling the limiter set stands")
            return
        if not (self._queue_cap or keep_cap):
            self.slot_cap = math.inf
        self._pushbacks.clear()
        self.ceiling = self.last_pushback_rate = None
        self._top, self._lift, self._probe_after = 0.0, (0, 0.0, 0.0), _NEVER
        self._ep_since, self._ep_gap = _NEVER, 0.0
        # Their cuts undone: back to the start phase's good rate, if they had cut under it, or to
        # the starting rate when no send was answered yet (two 503s first: doubling from half the
        # starting rate cost a quick site two seconds at 0.5/s, 0.84 of the clean sends in 30 s).
        self.rate = max(self.rate, min(self.max_rate, max(self._good_rate, self.start_rate)))
        self._start_again()
        if 0.0 < self.rate < T.confirm / T.round:
            # The error that drew the cut was an answer, and under a few per second an answer's
            # doubling is worth a whole round: the rate takes the step the answer would have given.
            self._start_grow(now, 1.0 / self.rate, self._start_round(), self._rate_cap())
        self._decide(now, "start: the errors that cut the rate are the site's own, not load; "
                     "doubling again from here")

    def let_through(self, now: float, sent_at: float) -> None:
        """A 5xx judged the site's own (no pushback), answered at ``now`` to a send at ``sent_at``: where
        the site's limiter refuses with 429s, it let this request through (see :meth:`on_response`).

        (Left out of the record of counted sends, as before: added, a bucket of 10/s with 20 % of its
        pages failing was fitted to a request-rate counter of 23-28/s, 30 refusals in 40 s.)"""
        if self._limited:
            self._let_through(now, sent_at)

    def _let_through(self, now: float, sent: float) -> None:
        """The limiter's books for a request it let through that the backend failed: an accepted gap, an
        accepted send for the bucket fit, a probe that ends the episode under way."""
        self._note_accepted(sent)
        self._note_ok_send(sent)
        self._episode_answer(now, sent)

    def keep_cuts(self) -> None:
        """The errors' cuts were judged about load (or forgiven): they stand, with nothing to put back."""
        self._undo, self._undo_void = (), False

    def _freeze(self, now: float) -> None:
        """Latency at the knee: hold the rate, and end the start phase there."""
        step = min(now - self._last_growth, T.round)
        self._last_growth = now
        if step > 0.0:
            self._epoch += step
        if self.phase == "start":
            self._decide(now, f"hold: latency {self.latency or 0.0:.3f}s is past the knee "
                         f"(baseline {self.baseline() or 0.0:.3f}s)")
            self._enter_steady(now, self.rate)

    def _decide(self, now: float, decision: str) -> None:
        self.decision = decision
        logger.debug("scope %s: rampup %s", self.scope, decision)

    def __repr__(self) -> str:
        return f"<Rampup {self.phase} rate={self.rate:.3g}/s ceiling={self.ceiling} gen={self.generation}>"
