"""Everything a scope learns, combined into the limits and gates it admits by.

A scope's effective throttling comes from separate inputs, each kept apart
so that none erases another; the strictest wins:

* the configured concurrency and delay (or AutoThrottle's delay, when on),
  or, with rampup on, the rate rampup settled on;
* a robots.txt Crawl-Delay (one slot, and a floor under every jittered delay);
* the scope manager's adjustment (backoff by default, or a custom manager);
* the pace a server's announced budget allows (also a floor);
* gates that hold every send until a time: a server-announced hold
  (``Retry-After``), the circuit breaker, and the quota;
* gradual slots (off by default): a scope with several slots and no delay
  opens them as its site answers well (:mod:`._gradual_slots`);
* a metered API's budget scope whose size is neither set nor learned yet sends
  one request at a time until its first answer (:func:`.tokens.awaits_first_answer`);
* the verdict on its errors: 5xx answers and failures whose share did not
  fall when the scope slowed down stop slowing it (:mod:`._load_errors`).

Pure state plus ``now``, like the rest of :mod:`crawlpace.policy`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Sequence

from .._settings._config_types import AutoThrottleConfig, ScopeConfig
from ._gradual_slots import GradualSlots, in_force
from ._gradual_slots import applies as gradual_applies
from ._load_errors import LoadErrors, is_error
from ._scope_gates import ScopeGates
from .admission import Limits
from .autothrottle import AutoThrottle
from .breaker import Breaker
from .budget import SPREAD_SHARE, HeaderBudget, ResetRefiner, WindowLog
from .quota import QuotaBucket
from .rampup import RAMPUP_JITTER, Rampup
from .scope_manager import ThrottlingScopeManager, ThrottlingScopeManagerProtocol
from .signals import AnnouncedQuota, ScopeFeedback
from .tokens import awaits_first_answer, budget_kind, learned_bucket

__all__ = ["ScopePolicy", "ThrottlingScopeManager", "ThrottlingScopeManagerProtocol"]

logger = logging.getLogger(__name__)

_NEVER = float("-inf")
_FOREVER = float("inf")


@functools.lru_cache(maxsize=1024)
def _limits(concurrency: int, delay: float, delay_per_slot: float, floor: float, rest: float = 0.0) -> Limits:
    """One shared :class:`Limits` per distinct value: most scopes have the same ones."""
    return Limits(concurrency, delay, delay_per_slot, floor, rest)


class ScopePolicy(ScopeGates, GradualSlots):
    """The adaptive state of one scope and the limits it yields.

    The parts that only matter once something happened (the default scope
    manager, the circuit breaker) are created on first use, so that the many
    scopes of a broad crawl that never see trouble stay small.

    Args:
        scope: the scope's name (for log lines).
        config: the scope's settings.
        concurrency_cap: ``CONCURRENT_REQUESTS``, which caps every scope.
        autothrottle: the AutoThrottle settings (used when enabled).
        manager: the scope manager; the default backoff when ``None``.
        rampup_target: ``RAMPUP_BACKOFF_TARGET``, for a scope with rampup on.

    Attributes:
        limits: the limits in force.
        jitter: the spread for the next send (``BACKOFF_JITTER`` while backing off).
        gated: True when :meth:`gate` may hold a send back (a quota, a server's
            hold, or a breaker that is not closed); the hot path skips it otherwise.
        watches: True when :meth:`on_admit` must hear of every send (gated, or
            rampup measuring the send rate).
        rampup: the rampup controller, when the scope has rampup on.
        generation: the scope manager's generation.
        wake_at: when the limits may change with no new feedback.
        gradual, opened, opened_good, opened_threshold: whether the
            gradual-slots rule governs the scope, the slots it opened (all
            when off), the good answers toward the next step, the threshold.
        opened_good_sent: when the latest request answered well was sent
            (a failure sent before it is not load; see ``_gradual_slots``).
        load_errors: the verdict on the scope's errors, from its first error that
            asked to slow down on (``_load_errors``); stored state, so a fleet judges once.
        awaiting: a metered API's budget scope whose size is not known yet, waiting for
            its first answer with one slot (:func:`.tokens.awaits_first_answer`).
    """

    __slots__ = ("_base", "announced", "autothrottle", "autothrottle_log_level", "awaiting", "breaker",
                 "budget", "concurrency", "config", "crawl_delay", "gated", "generation", "gradual",
                 "hold_until", "jitter", "limits", "load_errors", "manager", "opened", "opened_good",
                 "opened_good_sent", "opened_threshold", "pace", "pace_until", "quota", "rampup", "refiner",
                 "scope", "server_concurrency", "wake_at", "watches", "window_log")

    def __init__(self, scope: str, config: ScopeConfig, *, concurrency_cap: int,
                 autothrottle: AutoThrottleConfig | None = None,
                 manager: ThrottlingScopeManagerProtocol | None = None,
                 rampup_target: tuple[float, float] = (1.0, 1.0)) -> None:
        self.scope = scope
        self.config = config
        self.concurrency = min(config.concurrency, concurrency_cap)
        self.manager = manager
        self.rampup = _rampup(scope, config, concurrency_cap, rampup_target) if config.rampup else None
        self.generation = manager.generation if manager is not None else 0
        self.autothrottle = None
        # AUTOTHROTTLE_DEBUG shows every adjustment without turning on debug logging.
        debug = autothrottle is not None and autothrottle.debug
        self.autothrottle_log_level = logging.INFO if debug else logging.DEBUG
        if autothrottle is not None and autothrottle.enabled and self.rampup is None:
            self.autothrottle = AutoThrottle(start_delay=autothrottle.start_delay,
                                             min_delay=config.delay, max_delay=autothrottle.max_delay,
                                             target_concurrency=autothrottle.target_concurrency)
        self.crawl_delay: float | None = None
        self.gradual = gradual_applies(config.gradual_slots, self.concurrency, config.delay,
                                       rampup=bool(self.rampup), autothrottle=bool(self.autothrottle))
        self.opened = 1 if self.gradual else self.concurrency
        self.opened_good, self.opened_threshold = 0, self.concurrency
        self.opened_good_sent = _NEVER  # the latest send of a request answered well
        self.hold_until = _NEVER
        self.pace = 0.0
        self.pace_until = _NEVER
        # A server's own cap on requests in flight (RateLimit's concurrent-requests unit).
        self.server_concurrency: int | None = None
        self.quota: QuotaBucket | None = None
        if config.quota is not None:
            # A budget scope's quota is a server's budget: its bucket mirrors the server's
            # (see policy/tokens.py); any other quota is a cap of the user's own.
            self.quota = (learned_bucket(config.quota, config.window) if budget_kind(scope) is not None
                          else QuotaBucket(config.quota, config.window))
        # A metered API's budget learned from its answers, as (limit, window), when no quota is set.
        self.announced: tuple[float, float] | None = None
        # A budget scope of unknown size: one request at a time until the first answer.
        self.awaiting = awaits_first_answer(scope, config.quota)
        self.breaker: Breaker | None = None
        self.load_errors: LoadErrors | None = None
        # The server's announced budget, learned (created with the first answer that has one).
        self.budget: HeaderBudget | None = None
        # The window length behind X-RateLimit-Reset's whole seconds (created with the first such answer).
        self.refiner: ResetRefiner | None = None
        # The same budget as a log of this process's answers, once the window's length is known.
        self.window_log: WindowLog | None = None
        self.gated = self.quota is not None
        self.watches = self.gated or self.rampup is not None
        self.jitter = config.jitter
        self.wake_at = _FOREVER
        self._base = self._compute_base(0.0)
        self.limits = self._compute(_NEVER)

    # -- limits --------------------------------------------------------------

    def base(self) -> Limits:
        """The limits before the manager's adjustment and the server's pace."""
        return self._base

    def _compute_base(self, now: float) -> Limits:
        config = self.config
        concurrency, delay, floor = self.concurrency, config.delay, 0.0
        per_slot = config.delay_per_slot
        rampup = self.rampup
        if rampup is not None:
            rampup.note_hung(now)
            rate = rampup.allowed_rate(now)
            if now < self.pace_until and self.pace > 0.0:
                # A budget the server announced needs no search: its pace is the rate,
                # not rampup's (which may still be in its start phase).
                rate = max(rate, min(1.0 / self.pace, rampup.max_rate))
            concurrency, delay = rampup.concurrency(rate), 1.0 / rate
            # A page sent early in the start (at once after robots.txt) does not move the schedule.
            delay = rampup.door_gap(delay, announced=now < self.pace_until and self.pace > 0.0)
            # Slots only cap what is in flight: each may send as often as the scope.
            per_slot = min(per_slot, delay)
        elif self.autothrottle is not None:
            delay = max(delay, self.autothrottle.delay)
        elif self.opened < concurrency:
            concurrency = in_force(self.opened, self.opened_good, concurrency)
        if self.crawl_delay is not None:
            concurrency, floor = 1, self.crawl_delay
            delay = max(delay, floor)
        if self.awaiting:
            concurrency = 1
        if rampup is not None:
            return Limits(concurrency, delay, per_slot, floor, rampup.slot_rest())
        return _limits(concurrency, delay, per_slot, floor)

    def _compute(self, now: float) -> Limits:
        base = self._base
        manager = self.manager
        limits, wake = base, _FOREVER
        if manager is not None:
            limits = manager.adjust(base, now)
            wake = manager.wake_at()
        if now < self.pace_until:
            floor = max(limits.floor, self.pace)
            limits = _limits(limits.concurrency, max(limits.delay, floor), limits.delay_per_slot, floor,
                             limits.rest)
            wake = min(wake, self.pace_until)
        if self.rampup is not None:
            # A request out far longer than the site's answers take frees its slot then (hung_out).
            wake = min(wake, self.rampup.hung_out(now)[1])
        cap = self.server_concurrency
        if cap is not None and limits.concurrency > cap:
            limits = _limits(cap, limits.delay, limits.delay_per_slot, limits.floor, limits.rest)
        self.wake_at = wake
        self._set_jitter(limits, base)
        return limits

    def _set_jitter(self, limits: Limits, base: Limits) -> None:
        # Near a server's limit a wide spread of delays turns into refusals: scopes
        # backing off use the narrow backoff jitter, and rampup scopes, which pace at
        # the limit itself, one that only lengthens delays (see RAMPUP_JITTER), unless
        # BACKOFF_JITTER is off, which turns it off too.
        if self.rampup is not None:
            backoff_jitter = self.config.backoff.jitter
            self.jitter = RAMPUP_JITTER if backoff_jitter.enabled else backoff_jitter
        else:
            narrow = limits.delay > base.delay
            self.jitter = self.config.backoff.jitter if narrow else self.config.jitter

    def restored(self) -> None:
        """Bring derived values in line after learned state was written in (see ``policy/state.py``)."""
        self._set_jitter(self.limits, self._base)
        announced = self.announced
        if announced is not None and self.config.quota is None:
            # Another worker learned the budget: keep a bucket of it here too (its credit is
            # the store's to count).
            learned, quota = learned_bucket(*announced), self.quota
            if quota is None or learned is None or (quota.quota, quota.window, quota.capacity) != (
                    learned.quota, learned.window, learned.capacity):
                self.quota = learned
        self._update_gated()

    def refresh(self, now: float) -> bool:
        """Recompute the limits; True when they changed."""
        if self.rampup is not None and self.pace_until != _NEVER and now >= self.pace_until:
            # The announced budget ran out: rampup's own rate takes over again.
            self.pace_until = _NEVER
            self._base = self._compute_base(now)
        elif self.rampup is not None and self.rampup.note_hung(now):
            self._base = self._compute_base(now)  # a request out has hung since: its slot is free
        limits = self._compute(now)
        if limits == self.limits:
            return False
        self.limits = limits
        return True

    def ensure_manager(self) -> ThrottlingScopeManagerProtocol:
        """The scope manager, creating the default one on first use."""
        manager = self.manager
        if manager is None:
            manager = self.manager = ThrottlingScopeManager(scope=self.scope, config=self.config)
        return manager

    # -- transitions ---------------------------------------------------------

    def on_admit(self, now: float, use: float, *, every_send: bool = True, due: float | None = None) -> None:
        """Record a send of ``use`` quota (only needed when :attr:`watches`).

        ``every_send`` is False where the store reports only some sends (a shared
        store, a rampup scope's door pass): the window log must not gate on those.
        ``due``: when the scope's delay let this send go (rampup counts its gap from it).
        """
        rampup = self.rampup
        if rampup is not None:
            rampup.on_send(now, due)
            if every_send:
                rampup.note_slot_send(now)
            rampup.out(now)
            self.wake_at = min(self.wake_at, rampup.hung_out(now)[1])  # (when this send may hang: _compute)
            # Only the send-rate cap can have moved, or an early send set the next one's time
            # (door_gap); the limits follow when they did.
            if (1.0 / rampup.allowed_rate(now) != self._base.delay or self.crawl_delay is not None
                    or rampup.went_early):
                base = self._compute_base(now)
                if base != self._base:
                    self._base = base
                    self.refresh(now)
        if self.quota is not None and use > 0.0:
            self.quota.consume(now, use)
        if self.breaker is not None and self.breaker.state != "closed":
            self.breaker.on_send(now)
        if every_send:
            if self.window_log is not None:
                self.window_log.on_send()
            if self.budget is not None:
                self.budget.on_send()

    def on_outcome(self, now: float, feedback: ScopeFeedback | None, *, generation: int,
                   sent_at: float, expected_use: float, inflight: int | None = None,
                   out: Sequence[float] | None = None) -> bool:
        """Apply one outcome of a request sent at ``sent_at`` under ``generation``.

        ``feedback`` is ``None`` for a request released without an outcome
        (cancelled): only its probe slot, if it was the breaker's probe, frees.
        ``inflight`` is the scope's requests in flight as it came, this one
        included, when the store knows it (rampup learns a limit on them).
        ``out``: when each request out over a fleet was sent, this one included,
        read from the shared store as the answer came (``None`` when not read).

        Returns:
            True when this outcome made the circuit breaker give the scope up.
        """
        breaker = self.breaker
        if self.rampup is not None:
            self.rampup.settled(sent_at)  # out no more, whatever came of it
            if feedback is not None and feedback.left is not None:
                self.rampup.note_left(feedback.left, more=feedback.more)
        if feedback is None:
            if breaker is not None:
                breaker.on_abandon(sent_at)
            if self.window_log is not None:
                self.window_log.on_abandon()
            return False
        if now >= self.wake_at:
            # A recovery that fell due since the last look applies first, whoever looked: the
            # outcome must not move the scope differently because a dashboard read it meanwhile.
            self.refresh(now)
        if feedback.coarse is not None:
            feedback = self._refine(now, feedback, sent_at, inflight)
        elif self.window_log is not None:
            # An answer without the budget's headers (an error page, a redirect) is no longer in
            # flight either: counted as still out, a few of them held the scope for good.
            self.window_log.on_abandon()
        # Errors whose share does not fall with the pace are not pushback (_load_errors), except a
        # refusal on arrival with several in flight: a cap on them is load, which rampup caps the
        # slots for (a cut of the rate would not lower such refusals, and they would seem the site's);
        # nor a full line's refusal, which comes only while a request waits in it (line_full).
        # Once the site's 5xx are judged its own, a quick one is one of them too: a flaky backend
        # fails at once whatever is in flight (a 502 at 3 in flight capped such a site at 2 slots,
        # which its hangs then filled). Should the share climb clearly past the one learned, the
        # errors are believed again, and such refusals with them. A slot freed late (held_late) is
        # no reading once the errors are judged the site's own at all, learned or not: the verdict is
        # a sequential test's (_load_errors), and one quick 5xx sent right after an answer is
        # evidence of a slot still held by no more than 1 / share against it. Read so, the first
        # quick 503 after the verdict (2 in flight) cut a flaky site to a ceiling of 20/s for 8 s
        # (errors06: 11.5 s, 1.4 clean). (A refusal on arrival still waits for the share to be
        # learned: a line of one refusing with 503 drew 5 refusals where 3 is its bound.)
        rampup = self.rampup
        errors = self.load_errors
        late = errors is None or not errors.plain
        # How long the refusal took: the answer's own latency where it is shorter. A fleet's worker
        # writes its request a moment after the store granted it (0.1-0.25 s on a loaded machine),
        # and a cap's instant 503 taken for a slow error was judged the site's own, for every
        # worker: a fleet of 4 then drew 70-92 refusals from a cap of 4 where one process drew 3.
        took = now - sent_at
        if feedback.latency is not None and 0.0 <= feedback.latency < took:
            took = feedback.latency
        # Quick 5xx weighed by the count in flight they met (_load_errors' crowded and scattered):
        # refused mostly, and clearly more often, from some count on, they are a cap's, however the
        # site's own errors were judged; at a count whose requests mostly passed, and not sent so soon
        # after an answer that a slot freed late explains it (held_late), none of a cap's: the site's
        # own errors come at any count, and rampup reads no cap on requests in flight from them. (Nor a
        # fleet's with another lease out at its send, until the site refuses one alone: cap_in_transit.)
        crowded = scattered = False
        met: int | None = None
        if rampup is not None and feedback.status is not None:
            met = rampup.met_at_send(inflight, sent_at, now, out)
            if met is not None:
                quick = is_error(feedback) and rampup._quick(True, took)
                rampup.tally_crowd(met, quick)
                crowded = quick and rampup.crowded(met, now)
                scattered = (quick and not crowded and rampup.scattered(met)
                             and not rampup.held_late(True, took, inflight, now - took)
                             and not rampup.cap_in_transit(True, took, met))
        own = errors is not None and errors.learned() and is_error(feedback) and not crowded
        if rampup is not None and feedback.backoff:
            # (From the write: the refusal met what was out then, see SlotSizing._met.)
            rampup.note_refusal(feedback.status is not None, took, inflight, sent_at=now - took)
        error = is_error(feedback) and not (
            rampup is not None and feedback.backoff and not own and not scattered
            and (rampup.refused_on_arrival(feedback.status is not None, took, inflight, sent_at=now - took,
                                           out=out)
                 or (late and rampup.held_late(feedback.status is not None, took, inflight, now - took))
                 or (late and rampup.cap_in_transit(feedback.status is not None, took, met))
                 or rampup.line_full(feedback.status is not None, sent_at, now)))
        # A refusal on arrival not read as a cap's (one alone in flight): a rate limiter's as likely as
        # the site's own; the cut it makes is judged by whether any recurs (_load_errors' slowed).
        quick = error and rampup is not None and rampup._quick(feedback.status is not None, took)
        if error and feedback.backoff and errors is None:
            errors = self.load_errors = LoadErrors()
        # A 5xx at the start's polite pace, before any rise: its cut is no evidence of load (judged at once).
        unrisen = error and rampup is not None and rampup.start_unrisen(now, sent_at)
        # (Before the record: the verdict falls in it, and what turned plain here is what to forgive.)
        was_plain = errors is not None and errors.plain
        if errors is not None:
            was_judging = errors.judging
            errors.record(self.scope, sent_at=sent_at, error=error)
            if was_judging and not (errors.judging or errors.plain) and rampup is not None:
                rampup.keep_cuts()  # judged about load: the cut stands
            # Believed again here, a verdict of plain errors at this outcome's cut is a new one: its
            # cuts are forgiven (a knee of 7 with 3 % of its requests failing at once, believed again
            # and judged its own at one refusal, kept the slot cap of 5 it read from it: 0.58).
            was_plain = was_plain and errors.plain
            if error and feedback.backoff and not errors.slows():
                # The site's own errors, or a cut being judged: failures (breaker, retries), not pushback.
                feedback = dataclasses.replace(feedback, backoff=False, failed=True)
        generation_before = self.generation
        if feedback.hold is not None and feedback.hold > 0.0:
            self.hold_until = max(self.hold_until, now + self.hold_for(feedback.hold))
            if self.rampup is not None:
                self.rampup.hold(self.hold_until)
        if feedback.budget is not None:
            self._take_budget(now, feedback, sent_at, inflight)
        elif feedback.pace is not None:
            # The newest announcement of the budget replaces older ones.
            self.pace, self.pace_until = feedback.pace, now + feedback.pace_for
            if self.rampup is not None:
                self._base = self._compute_base(now)
        if self.awaiting:
            # The first answer (or failure) came: the budget is known now, or the API does not say it.
            self.awaiting = False
            self._base = self._compute_base(now)
        if feedback.concurrency is not None:
            # The newest announcement counts; it lasts until another one changes it.
            self.server_concurrency = max(1, feedback.concurrency)
        if feedback.announced is not None:
            self._take_announced(feedback.announced)
        if self.gradual:
            self._open_slots(now, feedback, sent_at)
        if feedback.consumed_quota is not None and self.quota is not None:
            self.quota.adjust(now, feedback.consumed_quota - expected_use)
        autothrottle = self.autothrottle
        if autothrottle is not None and feedback.latency is not None and feedback.status is not None:
            before = autothrottle.delay
            changed = autothrottle.observe(feedback.latency, feedback.status)
            if changed is not None:
                self._base = self._compute_base(now)
                logger.log(self.autothrottle_log_level,
                           "scope %s: AutoThrottle delay %.3fs -> %.3fs (latency %.3fs, status %d)",
                           self.scope, before, changed, feedback.latency, feedback.status)
        ramp_generation = 0
        if rampup is not None:
            if feedback.failed and not feedback.backoff and feedback.status is None and error:
                rampup.on_hang(now, now - sent_at)  # judged the site's own: only its slot counts
            elif feedback.failed and not feedback.backoff and error:
                rampup.let_through(now, sent_at)  # the site's own 5xx: its limiter let the request through
            elif feedback.backoff or (feedback.status is not None and not feedback.failed):
                rampup.on_response(now, pushback=feedback.backoff, current=generation == self.generation,
                                   latency=feedback.latency, answered=feedback.status is not None,
                                   elapsed=now - sent_at, inflight=None if scattered else inflight,
                                   lag=feedback.lag, error=is_error(feedback), out=out)
                self._base = self._compute_base(now)
                if not feedback.backoff:
                    # A late answer at a site that counts arrival gaps: the next send waits a gap
                    # after the late arrival (Rampup.spaced_until), held as a server's hold is.
                    until = rampup.spaced_until(sent_at, feedback.latency, feedback.lag)
                    if until > now and until > self.hold_until:
                        self.hold_until = until
                        self._update_gated()
            ramp_generation = rampup.generation
        manager = self.manager
        if feedback.budget is not None and feedback.backoff and (
                manager is None or isinstance(manager, ThrottlingScopeManager)):
            # A refusal that comes with the server's budget is the budget's to answer (the
            # brake or the window it taught, above): the default backoff would only slow the
            # scope to one request a second for a whole window on top of it.
            feedback = dataclasses.replace(feedback, backoff=False)
        if manager is not None or (feedback.backoff and rampup is None):
            # With rampup on, rampup answers pushback; a custom manager still adjusts the result.
            manager = self.ensure_manager()
            if isinstance(manager, ThrottlingScopeManager):  # the default backoff measures the pace refused
                manager.round_trip(now - sent_at, inflight)
            manager.feedback(feedback, now=now, generation=generation - ramp_generation, base=self._base)
        self.generation = (manager.generation if manager is not None else 0) + ramp_generation
        if errors is not None and error and self.generation != generation_before:
            seen = None if breaker is None else breaker.snapshot(now)
            errors.slowed(now, None if seen is None else (seen.error_share or 0.0),
                          0 if seen is None else seen.outcomes, self.scope, at_once=rampup is not None,
                          quick=quick, unrisen=unrisen)
            if rampup is not None and not (errors.judging or errors.plain):
                rampup.keep_cuts()  # a cut not judged (nothing to compare with) has nothing to put back
        if errors is not None and errors.plain and not was_plain:
            if isinstance(manager, ThrottlingScopeManager):
                manager.backoff.forgive(now)  # its cuts answered errors that were never about the pace
            if rampup is not None:
                # A slot cap stays where the site's quick 5xx follow the count it caps: the cut judged
                # was the site's own errors', not the cap's.
                cap = rampup.slot_cap
                rampup.forgive(now, keep_cap=math.isfinite(cap) and rampup.crowded(int(cap) + 1))
            self._base = self._compute_base(now)
        self.refresh(now)
        gave_up = self._breaker_outcome(now, feedback, sent_at)
        breaker = self.breaker
        if rampup is not None and breaker is not None and breaker.state == "open":
            # The pause is the breaker's silence, not the scope's choice: without this the measured
            # send rate falls to nothing in it, and the scope starts over at 1/s once it closes.
            rampup.hold(breaker.snapshot(now).open_until or now)
        if errors is not None and errors.plain and self.breaker is not None:
            self.breaker.tolerate(errors.tolerable)
        return gave_up

    def counts_only(self, feedback: ScopeFeedback) -> bool:
        """True when :meth:`on_outcome` would do no more with ``feedback`` than count it in the breaker.

        So it is for a plain policy (no AutoThrottle, rampup, scope manager,
        quota, header budget, server pace or generation; nothing gated;
        every slot open) hearing an answer that asks for nothing (no backoff,
        failure, hold, pace, budget or cap): the stores skip the rest for it
        (the breaker counts a success, if any).
        """
        return not (feedback.backoff or feedback.failed or (feedback.hold is not None and feedback.hold > 0.0)
                    or feedback.pace is not None or feedback.concurrency is not None
                    or feedback.budget is not None or feedback.announced is not None
                    or feedback.coarse is not None
                    or self.gated or self.manager is not None
                    or self.rampup is not None or self.autothrottle is not None or self.quota is not None
                    or self.budget is not None or self.generation or self.pace_until != _NEVER
                    or self.awaiting
                    or self.opened < self.concurrency or self.load_errors is not None)

    def _refine(self, now: float, feedback: ScopeFeedback, sent_at: float,
                inflight: int | None) -> ScopeFeedback:
        """Narrow the hold and pace of a reset given in whole seconds.

        Once the window's length is known and the store reports each send, the
        scope's own log of answers gates its sends (:class:`.budget.WindowLog`)
        in place of the header's pace and the hold of a spent budget; until
        then (and in a shared store) the reset is narrowed with the window
        learned so far (:class:`.budget.ResetRefiner`).

        Only a success's hold is the spent budget's to narrow: a refusal's
        stands as the server sent it. Its ``Retry-After`` is a demand, in whole
        seconds rounded up, and the refusal itself shows the model wrong (a
        moving window of 9.1 s learned as 9 from whole-second resets was sent
        its next 1.7 s after a ``Retry-After: 2``).
        """
        coarse = feedback.coarse
        assert coarse is not None
        refused = feedback.status in (429, 503)
        # (A redirect's or refusal's hold: Retry-After applies there, see _responses/_feedback.py.)
        demanded = feedback.status is None or feedback.status >= 300
        log = self.window_log
        if log is None:
            log = self.window_log = WindowLog()
            self._update_gated()
        known = log.length()
        log.observe(now, sent_at=sent_at, remaining=coarse.remaining, limit=coarse.limit, reset=coarse.reset,
                    refused=refused, inflight=inflight, whole=coarse.whole)
        if log.length() != known:
            length = log.length()
            logger.debug("scope %s: window log %s (%r)", self.scope, "off: the header's reset is used"
                         if length is None else f"gates the sends: {coarse.limit:g} per {length:g}s", log)
        if log.active and coarse.remaining < 1.0 and logger.isEnabledFor(logging.DEBUG):
            at = log.ready_at(now)
            logger.debug("scope %s held %s: its window log has the budget of %g spent", self.scope,
                         "until an answer" if at is None else f"{max(at - now, 0.0):.3f}s", coarse.limit)
        if log.active:
            hold = feedback.hold
            if hold is not None and hold <= coarse.reset and not demanded:
                hold = None  # the spent budget's: the log holds the next send until a slot frees
            # Spread over most of the window (sends come late, never early): the log keeps the count.
            length = log.length()
            assert length is not None
            return dataclasses.replace(feedback, hold=hold, pace=SPREAD_SHARE * length / coarse.limit,
                                       pace_for=2.0 * length)
        if not coarse.whole:
            return feedback  # seconds from now need no narrowing: the header's pace and hold stand
        refiner = self.refiner
        if refiner is None:
            refiner = self.refiner = ResetRefiner()
        reset = refiner.reset(now, sent_at=sent_at, remaining=coarse.remaining, limit=coarse.limit,
                              reset=coarse.reset, refused=refused)
        if reset >= coarse.reset:
            return feedback
        hold, pace = feedback.hold, feedback.pace
        if hold is not None and hold == coarse.reset and not demanded:
            hold = reset  # the spent budget's hold, not a longer Retry-After
        if pace is not None:
            # After a spent budget's hold, one at a time; otherwise the window's rest, spread.
            pace = reset if coarse.remaining < 1.0 else SPREAD_SHARE * reset / coarse.remaining
        return dataclasses.replace(feedback, hold=hold, pace=pace)

    def _take_announced(self, announced: AnnouncedQuota) -> None:
        """Keep a bucket of a metered API's budget (:mod:`.tokens`), unless the settings give a quota."""
        if self.config.quota is not None:
            return  # the settings win
        value = (announced.limit, announced.window)
        if value == self.announced and self.quota is not None:
            return
        bucket = learned_bucket(*value)
        if bucket is None:
            return
        if self.announced is not None:
            logger.info("scope %s: the server's budget is now %g per %gs (was %g per %gs)", self.scope,
                        value[0], value[1], *self.announced)
        else:
            logger.debug("scope %s: the server announces a budget of %g per %gs", self.scope, *value)
        self.announced, self.quota = value, bucket
        self._update_gated()

    def hold_for(self, hold: float) -> float:
        """Seconds a refusal's hold of ``hold`` seconds holds the scope: a manager's hold is
        capped like a header's, never more than ``BACKOFF_MAX_DELAY``."""
        return min(hold, self.config.backoff.max_delay)

    def _take_budget(self, now: float, feedback: ScopeFeedback, sent_at: float, inflight: int | None) -> None:
        """Pace by an announced budget, its window and brake learned (:mod:`.budget`)."""
        reading = feedback.budget
        assert reading is not None
        budget = self.budget
        if budget is None:
            budget = self.budget = HeaderBudget()
            self._update_gated()  # its own answers explain a spent budget once it hears of each send
        advice = budget.observe(now, sent_at=sent_at, remaining=reading.remaining, quota=reading.quota,
                                window=reading.window, span=reading.span, refused=feedback.backoff,
                                inflight=inflight)
        cap = self.config.backoff.max_delay
        self.pace, self.pace_until = min(advice.pace, cap), now + min(advice.pace_for, cap)
        if advice.hold is not None and advice.hold > 0.0:
            self.hold_until = max(self.hold_until, now + min(advice.hold, cap))
            if self.rampup is not None:
                self.rampup.hold(self.hold_until)
        if self.rampup is not None:
            self._base = self._compute_base(now)

    def summary(self) -> tuple[object, ...]:
        """What other workers of a shared store must see: the state that changes admissions.

        A shared store writes the policy back when this changes, not on every
        outcome (the breaker's tally of recent outcomes, say, stays with the
        worker that saw them until something that matters changes).
        """
        manager, breaker, rampup, errors = self.manager, self.breaker, self.rampup, self.load_errors
        log = self.window_log
        backoff = manager.backoff if isinstance(manager, ThrottlingScopeManager) else None
        # The backoff's level, and when it last heard pushback: a pushback at the deepest level
        # changes no limit but restarts the recovery window, which every worker must wait out.
        return (self.limits, self.generation, self.hold_until, self.crawl_delay, self.pace, self.pace_until,
                self.opened,
                None if backoff is None else (backoff.level, backoff.last_feedback, backoff.ceiling,
                                              backoff.interval, backoff.probing),
                # A failed probe opens the breaker again for a longer pause: the same state, a new end.
                None if breaker is None else (breaker.state,
                                              breaker.pause_end if breaker.state == "open" else None),
                None if self.autothrottle is None else self.autothrottle.delay,
                # resumed_at: a silence not its own; fit_record: each accepted send once the bucket
                # fit reads the record (after a hold), which every worker's answers must reach.
                None if rampup is None else (rampup.rate, rampup.phase, rampup.ceiling, rampup.generation,
                                             rampup.resumed_at, rampup.fit_record()),
                # The verdict on the errors, and each outcome of the cut it judges: one judgement for
                # a fleet, fed by every worker (policy/_load_errors.py).
                None if errors is None else (errors.plain, errors.judging, errors.after_n),
                # The window log: every answer of the window's budget, which every worker's log must
                # count (and the hold it sets, policy/budget.py WindowLog).
                None if log is None or not log.shareable else (
                    log.answers[-1] if log.answers else None, len(log.accepted), log.length(), log.inflight,
                    log.trusted))

    def set_crawl_delay(self, delay: float | None, *, max_delay: float, explicit: bool,
                        now: float) -> None:
        """Apply a robots.txt Crawl-Delay (``None`` removes it).

        A value above ``max_delay`` is clamped to it; a negative or non-finite
        one is ignored. When the scope's rate was set explicitly, the settings
        win and a warning says so, unless the scope has ``ignore_robots_txt``.
        """
        if delay is not None and not (math.isfinite(delay) and delay >= 0.0):
            logger.warning("scope %s: ignoring invalid Crawl-Delay %r", self.scope, delay)
            return
        if delay is not None and delay > max_delay:
            logger.warning("scope %s: Crawl-Delay %gs clamped to THROTTLING_ROBOTSTXT_MAX_DELAY (%gs)",
                           self.scope, delay, max_delay)
            delay = max_delay
        if delay is not None and explicit:
            if not self.config.ignore_robots_txt:
                logger.warning("scope %s: robots.txt asks for Crawl-Delay %gs and one request at a "
                               "time; THROTTLING_SCOPES sets concurrency %d and delay %gs, which win "
                               "(set ignore_robots_txt to silence this)", self.scope, delay,
                               self.config.concurrency, self.config.delay)
            return
        self.crawl_delay = delay
        self._base = self._compute_base(now)
        self.refresh(now)

    def is_idle(self, now: float) -> bool:
        """True when a fresh policy would behave the same from now on."""
        if self.crawl_delay is not None or self.hold_until > now or self.pace_until > now:
            return False
        # AutoThrottle's learned delay may go: a new scope starts at the start
        # delay, which is the cautious end.
        if self.quota is not None and not self.quota.is_idle(now):
            return False
        if self.breaker is not None and not self.breaker.is_idle(now):
            return False
        if self.rampup is not None and not self.rampup.is_idle(now):
            return False
        return self.manager is None or self.manager.is_idle(now)


def _rampup(scope: str, config: ScopeConfig, concurrency_cap: int, target: tuple[float, float]) -> Rampup:
    """The rampup controller of a scope, within the scope's configured bounds."""
    start = 1.0 / config.delay if config.delay > 0.0 else 1.0
    floor_delay = config.backoff.max_delay
    return Rampup(start_rate=start,
                  min_rate=1.0 / floor_delay if floor_delay > 0.0 else start,
                  max_rate=1.0 / config.rampup_min_delay if config.rampup_min_delay > 0.0 else math.inf,
                  max_concurrency=min(config.rampup_max_concurrency, concurrency_cap),
                  window=config.window, target=target, scope=scope)
