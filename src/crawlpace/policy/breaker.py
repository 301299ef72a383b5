"""Circuit breaker of one scope: stop sending to a source that keeps failing.

Pure state plus ``now``: nothing here reads a clock, sleeps or awaits.

The breaker has four states:

* ``closed``: requests flow. Outcomes of the last ``window`` seconds are
  counted; once at least ``min_requests`` of them are known and the failures
  clearly exceed ``error_share`` of them (by two standard deviations of
  chance, and at least three failures), the breaker opens.
* ``open``: nothing is sent until the pause is over. The switch to
  ``half_open`` is lazy: it happens at the first call whose ``now`` has reached
  the end of the pause.
* ``half_open``: one request, the probe, may go. Its success closes the breaker
  with an empty window; its failure either opens it again for another pause or
  gives the scope up, when ``give_up_after`` consecutive failures have piled up
  *and* the last 20 outcomes (all of them while fewer are known) say the site
  is down: every one failed, or clearly more than half did, by the exact
  binomial tail at the level of two standard deviations (15 of 20).
* ``given_up``: terminal. Nothing is ever sent again.

Outcomes of requests sent before the current half-open period began
(stragglers) still count towards the window, but they never move the breaker
between ``open`` and ``half_open``. A straggler's failure that arrives while
the breaker is not closed, of a request sent before it last opened, does not
lengthen the run of consecutive failures nor the memory of recent outcomes:
it is old news, already weighed when the breaker opened. Without this, a site
that hangs on a few requests has its hung requests time out one after another
during every pause (nothing else arrives then) and is given up at the next
failed probe, although most of its answers are good. As only a failed probe
can give a scope up, a burst of simultaneous failures can at worst open the
breaker: giving up needs failures on both sides of a full pause.

The second condition keeps a site with a steady share of transient errors
from being given up by bad luck: at 10 % errors, five failures in a row and a
failed probe happen about once in 20,000 requests, while fifteen failures
among twenty outcomes practically never do (five of a first nine is chance).
It is the test that sets a pause's length (below), so a site that is given no
full pause is given up neither: with "half of the last 20", a random farm's
site failing 24 % of its requests was given up with 218 of its 265 pages left
(a cluster of failures, then three unlucky probes: 11 of 20, five in a row).
A site dead from the start fails every request and passes both tests at its
first failed probe; a site that dies in the middle of a crawl needs more
failed probes (each after a short pause while it does not look down), until
failures make up three quarters of its recent outcomes.

The window is kept as counts per bucket of ``window / 12`` seconds, so its size
does not depend on the request rate: an outcome counts for between eleven and
twelve twelfths of the window.

Two more rules tell a site that is down from one that merely fails now and then:

* Pauses escalate. The first pause after a close lasts ``first_pause``; each
  failed probe doubles it, up to ``pause``. An opening of a site that is not
  clearly down (some outcome succeeded and not clearly more than half failed,
  by the exact binomial tail: three failures among five outcomes are a flaky
  site's luck as often as not, and seven of eight are a half-failing site's one
  time in 28) pauses only ``SAMPLE_PAUSE_SHARE`` of ``first_pause``: it is the
  sample the next rule compares with, not yet a sign that the site is down.
  So does every later opening from closed that does not look down: the share
  that first opened the breaker was picked by the trip itself, and a share
  after the pause "clearly lower" than it is no sign of load; and after a
  close, the probe's success is one of the outcomes "down" is judged on (the
  quick failures of a burst arrive before its 200s). With ``in_place`` (a scope
  under rampup) such a sample is taken without a pause: the outcomes from then
  on are the ones after it, while the sends go on. Failed probes
  pause as briefly while the recent outcomes are not clearly mostly failures;
  after that, ``first_pause`` and escalation go on as usual. A dead site is
  thus probed early and given up early (with the scope policy's defaults, ten seconds after
  it opened), while a site that keeps failing after a few probes waits the full
  pause between them.
* Errors that do not depend on the pace are tolerated. A pause brings the rate
  to zero; if, once the probe has closed the breaker, failures come back at
  about the same share as the one that opened it (at least ``STEADY_SAME`` of
  it, or not clearly lower: the opening's share may rest on a handful of
  outcomes) while successes still outnumber them, slowing down did not help: the
  errors are the site's own, not overload. The breaker then learns the new
  share (times ``STEADY_MARGIN``, at most ``STEADY_MAX``) as the site's normal
  one and opens again only clearly past it. A site where clearly more than half
  of the requests fail is never tolerated, and a site that dies later is still
  caught (its failures pass any tolerated share). Only a probe that succeeded
  leads here, so a dead site never is.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from ._load_errors import _TWO_SD, _tail

__all__ = ["BUCKETS", "CLOSED", "GIVEN_UP", "HALF_OPEN", "OPEN", "RECENT", "SAMPLE_PAUSE_SHARE", "Breaker",
           "BreakerSnapshot"]

_log = logging.getLogger(__name__)

# Failures a window must hold before its share can open the breaker.
_MIN_FAILURES = 3
#: Outcomes remembered for the give-up test, one bit each (1: failed).
RECENT = _RECENT = 20
_RECENT_MASK = (1 << _RECENT) - 1

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"
GIVEN_UP = "given_up"

#: The scope policy's first pause, as a share of ``BREAKER_PAUSE``.
FIRST_PAUSE_SHARE = 1 / 6
#: A reopening share at least this share of the previous opening's did not fall with the rate.
STEADY_SAME = 0.5
#: A learned share of failures is tolerated up to this multiple of it ...
STEADY_MARGIN = 1.5
#: ... but never when failures are at least this share of outcomes (the site is down).
STEADY_MAX = 0.5
#: Outcomes since the pause needed before failures can be judged the site's own.
STEADY_OUTCOMES = 10
#: The pause of an opening while the site is not clearly down, as a share of ``first_pause``: long
#: enough for the rate to fall to zero and be compared with after, short enough not to cost a flaky
#: site with no limit most of its crawl (issue 30: 10 s of a 3 s crawl).
SAMPLE_PAUSE_SHARE = 0.1

#: Buckets a window is counted in.
BUCKETS = _BUCKETS = 12
_NEVER = float("-inf")
_FOREVER = float("inf")


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """A read-only view of a breaker at one moment.

    Attributes:
        state: one of ``closed``, ``open``, ``half_open`` and ``given_up``.
        error_share: failed share of the outcomes in the window, or ``None``
            when the window is empty.
        outcomes: outcomes in the window.
        consecutive_failures: failures since the last success.
        open_until: end of the current pause while open, else ``None``.
    """

    state: str
    error_share: float | None
    outcomes: int
    consecutive_failures: int
    open_until: float | None


class Breaker:
    """Circuit breaker state of one scope.

    Attributes:
        consecutive_failures: failures since the last success, stragglers included.
        reason: why the breaker last opened or gave up; empty until then.
        in_place: an opening that is a sample (the site does not look down) takes it without a
            pause: the outcomes from then on are compared with the share that opened it, as after
            a pause, while sends go on. For a scope under rampup (``ScopePolicy.ensure_breaker``):
            the pace after a breaker's pause is the one from before it (rampup holds it through the
            pause), so the pause compared the share at the same pace anyway, and the pace is
            rampup's to measure (its pushback, the errors rule's cut at half the pace, its hangs);
            a 500 it lets through as the site's own. A pause of 1 s each cost the random farm's
            errors sites 110 s of 1158 (``bench/errors_farm.py``, seeds 1-40). An opening of a site
            that looks down pauses as ever.
    """

    __slots__ = ("_buckets", "_error_share", "_failed", "_first_pause", "_give_up_after", "_half_open_since",
                 "_min_requests", "_next_pause", "_open_until", "_opened_at", "_opened_n", "_opened_share",
                 "_pause",
                 "_probe_at", "_probe_out",
                 "_recent", "_recent_n", "_sampling", "_state", "_total", "_width", "_window",
                 "consecutive_failures", "in_place",
                 "reason", "tolerated_share")

    def __init__(self, *, window: float = 60.0, error_share: float = 0.1, min_requests: int = 5,
                 pause: float = 60.0, give_up_after: int = 5, first_pause: float | None = None,
                 in_place: bool = False) -> None:
        """Set up a closed breaker.

        Args:
            window: seconds of outcomes weighed when deciding to open.
            error_share: the breaker opens when the failed share is above this.
            min_requests: fewer outcomes than this in the window never open it.
            pause: seconds to wait after opening before a probe may go.
            give_up_after: a failed probe gives the scope up once this many
                failures in a row have been seen; 0 never gives up.
            first_pause: the pause after the breaker opens from closed; each
                failed probe doubles it, up to ``pause``. ``None``: ``pause``.
            in_place: take an opening's sample without a pause (see :attr:`in_place`).

        Raises:
            ValueError: when an argument is out of range.
        """
        if not (math.isfinite(window) and window > 0):
            raise ValueError(f"window must be a finite number > 0, not {window!r}")
        if not 0.0 <= error_share < 1.0:
            raise ValueError(f"error_share must be in [0, 1), not {error_share!r}")
        if min_requests < 1:
            raise ValueError(f"min_requests must be >= 1, not {min_requests!r}")
        if not (math.isfinite(pause) and pause >= 0):
            raise ValueError(f"pause must be a finite number >= 0, not {pause!r}")
        if give_up_after < 0:
            raise ValueError(f"give_up_after must be >= 0, not {give_up_after!r}")
        if first_pause is not None and not (math.isfinite(first_pause) and first_pause >= 0):
            raise ValueError(f"first_pause must be a finite number >= 0, not {first_pause!r}")
        self._window = window
        self._width = window / _BUCKETS
        self._error_share = error_share
        self._min_requests = min_requests
        self._pause = pause
        self._give_up_after = give_up_after
        self._first_pause = pause if first_pause is None else min(first_pause, pause)
        self._next_pause = self._first_pause
        # The failed share that last opened the breaker from closed (-1: none yet), and the
        # share learned as the site's normal one (0: none).
        self._opened_share = -1.0
        self._opened_n = 0  # the outcomes that share was measured on
        self.tolerated_share = 0.0
        self.in_place = in_place
        self._state = CLOSED
        self._open_until = _NEVER
        self._opened_at = _NEVER
        self._half_open_since = _NEVER
        self._probe_out = False
        self._probe_at = _NEVER  # when the probe out was sent (-inf: not known here)
        # Whether the current opening is a sample (SAMPLE_PAUSE_SHARE): one of a site not clearly
        # down, and the probes after it while its recent outcomes are not clearly mostly failures.
        self._sampling = False
        # (bucket number, outcomes, failures), oldest first; at most _BUCKETS entries.
        self._buckets: list[tuple[float, int, int]] = []
        self._total = 0
        self._failed = 0
        self.consecutive_failures = 0
        self._recent = 0
        self._recent_n = 0
        self.reason = ""

    # -- queries -----------------------------------------------------------

    @property
    def state(self) -> str:
        """The state as of the last call; an expired pause shows as ``open`` until the next one."""
        return self._state

    def state_at(self, now: float) -> str:
        """The state as of ``now``: a pause that is over shows as ``half_open``."""
        self._advance(now)
        return self._state

    @property
    def pause_end(self) -> float:
        """When the latest pause ends, or ended; -inf before the first."""
        return self._open_until

    @property
    def half_open_since(self) -> float:
        """Start of the latest half-open period (the end of the pause before it); -inf if none yet."""
        return self._half_open_since

    def blocked_until(self, now: float) -> float | None:
        """Return until when sends are held back.

        Args:
            now: the current time.

        Returns:
            -inf when a send may go now; the end of the pause while open;
            while the probe is out, the end of its wait (:meth:`probe_wait`: then another
            probe may go), or ``None`` when its send time is not known here (only its outcome
            can unblock); +inf once the scope is given up.
        """
        self._advance(now)
        state = self._state
        if state == CLOSED:
            return _NEVER
        if state == OPEN:
            return self._open_until
        if state == HALF_OPEN:
            if not self._probe_out:
                return _NEVER
            if self._probe_at == _NEVER or self.probe_wait <= 0.0:
                return None
            until = self._probe_at + self.probe_wait
            return _NEVER if now >= until else until
        return _FOREVER

    @property
    def probe_wait(self) -> float:
        """How long a probe may be out before another may go: the pause it followed.

        A probe that hangs is no answer: the pause asked for one request after that long a rest,
        and a site whose answers take far less is not told more by waiting for this one. Held for
        the hang, a flaky site (30 % 503s, 1 % hangs of 5 s) paused for 1 s waited 6 s. Its answer,
        when it comes, still counts as the probe's (a failure of a site that is down and hangs
        still reopens the breaker and may give the scope up).
        """
        return max(0.0, self._open_until - self._opened_at)

    def is_idle(self, now: float) -> bool:
        """True when the breaker behaves exactly like a fresh one and can be dropped."""
        self._advance(now)
        if self._state != CLOSED or self.consecutive_failures:
            return False
        self._prune(now // self._width)
        return not self._buckets

    def snapshot(self, now: float) -> BreakerSnapshot:
        """Describe the breaker as of ``now``."""
        self._advance(now)
        self._prune(now // self._width)
        total = self._total
        return BreakerSnapshot(
            state=self._state,
            error_share=self._failed / total if total else None,
            outcomes=total,
            consecutive_failures=self.consecutive_failures,
            open_until=self._open_until if self._state == OPEN else None,
        )

    # -- transitions -------------------------------------------------------

    def tolerate(self, share: float) -> None:
        """Tolerate failures up to ``STEADY_MARGIN`` times ``share``, never :data:`STEADY_MAX` or more.

        For errors judged the site's own elsewhere (they did not fall when the scope slowed down,
        ``policy/_load_errors.py``): the breaker then opens only clearly past that share, as it
        does once it learned the share itself after a pause.
        """
        tolerated = min(STEADY_MAX, STEADY_MARGIN * share)
        if tolerated > self.tolerated_share:
            _log.info("breaker: tolerating up to %.0f%% failures (the site's own errors)", 100 * tolerated)
            self.tolerated_share = tolerated

    def absorb(self, tally: tuple[float, ...]) -> None:
        """Take in the successes a compact tally counted before this breaker existed (``policy/tally.py``).

        Only for a fresh breaker: the result is the breaker those successes would have left.
        """
        self._recent_n = min(_RECENT, self._recent_n + int(tally[0]))
        for i in range(1, len(tally) - 1, 2):
            count = int(tally[i + 1])
            self._buckets.append((float(tally[i]), count, 0))
            self._total += count

    def on_send(self, now: float) -> None:
        """Record that a request of the scope was admitted; in half-open it is the probe."""
        self._advance(now)
        if self._state == HALF_OPEN:
            self._probe_out, self._probe_at = True, now

    def on_abandon(self, sent_at: float) -> None:
        """Forget a request released without an outcome; an abandoned probe frees the probe slot.

        Args:
            sent_at: when the abandoned request was sent.
        """
        if self._state == HALF_OPEN and sent_at >= self._half_open_since:
            self._probe_out = False

    def on_outcome(self, now: float, *, failed: bool, sent_at: float) -> bool:
        """Record the outcome of one request.

        Args:
            now: when the outcome arrived.
            failed: whether the request failed.
            sent_at: when the request was sent; tells the probe from stragglers.

        Returns:
            True exactly when this outcome made the breaker give the scope up.
        """
        self._advance(now)
        # A failure of a request sent before the breaker opened, arriving while it is not closed: old news.
        old_news = failed and self._state != CLOSED and sent_at < self._opened_at
        self._record(now, failed, run=not old_news)
        state = self._state
        if state == CLOSED:
            total, bad = self._total, self._failed
            if self._too_many(total, bad):
                verdict = self._after_pause(bad / total)
                if verdict == "steady":
                    self.tolerated_share = min(STEADY_MAX, STEADY_MARGIN * bad / total)
                    _log.info("breaker: %d of %d failed again after a pause, as before it (%.0f%%): the "
                              "errors do not depend on the pace; tolerating up to %.0f%%", bad, total,
                              100 * self._opened_share, 100 * self.tolerated_share)
                if verdict != "wait" and self._too_many(total, bad):
                    # An opening while the site is not clearly down is a sample, not a verdict: a
                    # short pause tells errors that fall with the pace from the site's own. Not only
                    # the first: a reopening compares with a share the trip itself picked (4 of 5 on
                    # a site failing 13 %, whose 23 of 153 after the pause then read as a fall and
                    # cost it the full pause, 10 s of a 15 s crawl); its length is the "down" test's.
                    self._sampling = not _looks_down(bad, total + self._closed_ok())
                    self._opened_share, self._opened_n = bad / total, total
                    self._next_pause = self._first_pause
                    why = f"{bad} of {total} outcomes failed in the last {self._window:g}s"
                    if self._sampling and self.in_place:
                        self._sample(now, why)
                    else:
                        self._open(now, why)
        elif state == HALF_OPEN and sent_at >= self._half_open_since:
            self._probe_out = False
            if not failed:
                self._state = CLOSED
                self._sampling = False
                self._buckets = []
                self._total = self._failed = 0
                _log.debug("breaker closed: the probe succeeded")
            elif self._give_up_after and self.consecutive_failures >= self._give_up_after \
                    and _looks_down(self._recent.bit_count(), self._recent_n):
                self._state = GIVEN_UP
                self.reason = (f"gave up after {self.consecutive_failures} consecutive failures, "
                               f"the last one a probe")
                _log.debug("breaker %s", self.reason)
                return True
            else:
                # A sample goes on while the recent outcomes are not clearly mostly failures: one
                # unlucky probe of a site failing a quarter of its requests is no sign that it is down.
                recent = self._recent.bit_count()
                self._sampling = self._sampling and not _looks_down(recent, self._recent_n)
                self._open(now, f"the probe failed ({self.consecutive_failures} failures in a row)")
        return False

    # -- internals ---------------------------------------------------------

    def _too_many(self, total: int, bad: int) -> bool:
        return (total >= self._min_requests and bad > self._threshold(total)
                and bad >= min(_MIN_FAILURES, self._min_requests))

    def _closed_ok(self) -> int:
        """The success that closed the breaker, if one did (1 once it was ever half-open: only a probe's
        success closes it), for the "down" test of the outcomes since: the window is emptied at the
        close, and the first outcomes after it are the quick failures (a 5xx at once arrives before the
        200s sent beside it), so 6 failures of 6 read as "every one failed" and paused sites failing
        14-29 % of their requests for 10 s (3 of 405 crawls of ``bench/errors_farm.py``)."""
        return 0 if self._half_open_since == _NEVER else 1

    def _after_pause(self, share: float) -> str:
        """Whether failures that came back after a pause look like the site's own errors.

        Returns:
            ``"down"`` when clearly more than half fail (or there was no pause to
            compare with), ``"wait"`` while too few outcomes since the pause tell,
            ``"steady"`` when the share did not fall with the pace, else ``"fell"``.
        """
        opened = self._opened_share
        if opened <= 0.0 or self._half_open_since == _NEVER:
            return "down"  # no pause yet: nothing to compare with
        total = self._total
        # "Most requests fail" must be clear, not a small sample's luck (_clearly_most).
        if _clearly_most(self._failed, total + self._closed_ok()):
            return "down"
        if total < STEADY_OUTCOMES:
            return "wait"
        if share >= STEADY_SAME * min(opened, STEADY_MAX):
            return "steady"
        # Fell only if clearly: a first opening may rest on a handful of outcomes (3 of 9 opened a
        # site failing 15 %, whose 22 of 146 after the pause then read as a fall and paused it 10 s).
        spread = 2.0 * math.sqrt(opened * (1.0 - opened) / max(self._opened_n, 1)
                                 + share * (1.0 - share) / total)
        return "fell" if opened - share > spread else "steady"

    def _threshold(self, total: int) -> float:
        """Failures among ``total`` outcomes that are clearly above the error share.

        The share alone is a poor judge of a small sample: right after a pause
        the window is nearly empty, and two failures among twenty outcomes of a
        site that fails one request in ten are chance, not a trend. So the
        failures must exceed the share by two standard deviations of chance
        (a binomial count), and number at least three.
        """
        share = max(self._error_share, self.tolerated_share)
        return share * total + 2.0 * math.sqrt(total * share * (1.0 - share))

    def _advance(self, now: float) -> None:
        """Turn an open breaker half-open once its pause is over."""
        if self._state == OPEN and now >= self._open_until:
            self._state = HALF_OPEN
            self._half_open_since = self._open_until
            self._probe_out = False

    def _open(self, now: float, why: str) -> None:
        pause = self._next_pause
        self._next_pause = min(self._pause, 2.0 * pause) if pause > 0.0 else self._pause
        if self._sampling:  # a short sample pause; a failed probe after it pauses as usual
            pause, self._next_pause = SAMPLE_PAUSE_SHARE * self._first_pause, self._first_pause
        self._state = OPEN
        self._opened_at = now
        self._open_until = now + pause
        self.reason = f"{why}; paused {pause:g}s"
        _log.debug("breaker opened: %s", self.reason)

    def _sample(self, now: float, why: str) -> None:
        """Take an opening's sample without a pause (:attr:`in_place`): the outcomes from ``now`` on are
        the ones after it, as after a pause that a probe's success ended at once."""
        self._sampling = False
        self._half_open_since = now
        self._buckets = []
        self._total = self._failed = 0
        self.reason = f"{why}; sampled without a pause"
        _log.info("breaker: %s", self.reason)

    def _prune(self, bucket: float) -> None:
        """Drop the buckets that fell out of the window ending in ``bucket``."""
        buckets = self._buckets
        oldest = bucket - _BUCKETS
        while buckets and buckets[0][0] <= oldest:
            _, total, bad = buckets.pop(0)
            self._total -= total
            self._failed -= bad

    def _record(self, now: float, failed: bool, *, run: bool = True) -> None:
        if run:  # the run of consecutive failures and the recent outcomes
            if failed:
                self.consecutive_failures += 1
            else:
                self.consecutive_failures = 0
            self._recent = ((self._recent << 1) | failed) & _RECENT_MASK
            self._recent_n = min(_RECENT, self._recent_n + 1)
        bucket = now // self._width
        self._prune(bucket)
        buckets = self._buckets
        bad = 1 if failed else 0
        # An outcome older than the newest bucket (times out of order) joins the newest.
        if buckets and buckets[-1][0] >= bucket:
            last, total, last_bad = buckets[-1]
            buckets[-1] = (last, total + 1, last_bad + bad)
        else:
            buckets.append((bucket, 1, bad))
        self._total += 1
        self._failed += bad

    def __repr__(self) -> str:
        return (f"<Breaker {self._state} outcomes={self._total} failed={self._failed} "
                f"consecutive_failures={self.consecutive_failures}>")


def _looks_down(failed: int, known: int) -> bool:
    """Whether ``failed`` of ``known`` outcomes say the site is down: every one failed, or clearly more
    than half (:func:`_clearly_most`)."""
    return known > 0 and (failed >= known or _clearly_most(failed, known))


def _clearly_most(failed: int, known: int) -> bool:
    """Whether ``failed`` of ``known`` outcomes are clearly more than :data:`STEADY_MAX` (half) of them:
    a site failing half of its requests would show as many less often than a normal draw lands two
    standard deviations above its mean (the exact binomial tail, as ``_load_errors.crowded`` weighs
    quick 5xx). Two standard deviations of a share on a handful of outcomes are no measure of it: 7
    failures of 8 passed them, which a site failing half of its requests shows 3.5 % of the time
    (and a site failing 28 % did, right after its errors were judged its own: paused 10 s of a 16 s
    crawl); now 8 of 9 or 6 of 6 are needed, and with 20 known the give-up test counts half."""
    return known > 0 and _tail(known, failed, STEADY_MAX) < _TWO_SD
