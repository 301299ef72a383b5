"""A staged brake on a windowed request quota: the pure decision core.

Nothing here reads a clock, sleeps or awaits: the caller passes ``now`` (POSIX
seconds, in practice) to every call, and chance comes from an injected
:class:`random.Random`, so a seeded generator makes every decision repeatable.

**One quota.** The quota is one counter for the whole brake (the site, or one
group of costly pages), counted in fixed windows aligned on multiples of
``window`` from 0. For a daily window fed with ``time.time()`` that is the UTC
day, which is how paid APIs usually count their daily allowance. Clients are
told apart by a key (their user agent's class, their address...), but a key is
only a *share inside* the quota, never a quota of its own: a client that
invents a new key per request still draws on the one counter, so nothing gets
past the quota.

**Stages.** As the counter grows, the brake moves through stages: past a
stage's share of the quota, that stage's fraction of requests is refused (by
chance). Whatever the stages say, a request that would take the counter above
the quota, or a key above its ``share`` of it, is refused. Refused requests
are not counted: they never reached the costly backend.

**Pacing, honestly.** Every answer tells the client what it may really do:
its allowance (what is left of the quota, or of its share if that is
smaller) to spread over the rest of the window, that is one request every
``t / r`` seconds (:meth:`StagedBrake.pace`). A key that comes back no
sooner than that (within :data:`TOLERANCE` of it) is *paced*, and a paced
request is never refused by chance: only the hard stops apply to it. So a
client that follows the ``RateLimit`` header is never braked, and spends the
rest of the quota over the rest of the window, while one that hammers meets
the stages. A key seen for the first time in the window has announced
nothing yet, so it meets the stages like any hammering client: inventing keys
gains nothing.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypedDict

__all__ = [
    "DEFAULT_STAGES",
    "OVERFLOW_KEY",
    "TOLERANCE",
    "BrakeStats",
    "Decision",
    "KeyStats",
    "Stage",
    "StagedBrake",
    "Totals",
    "WindowSummary",
    "check_stages",
]

_log = logging.getLogger(__name__)

#: The key that new clients share once the table holds ``max_keys`` keys.
OVERFLOW_KEY = "<overflow>"

#: A request counts as paced when it comes at most this fraction of the announced
#: spacing early (the client's timer, rounding and the network all jitter a little).
TOLERANCE = 0.1

# Counts are whole numbers while thresholds are products of floats (0.1 * 30
# is 3.0000000000000004); this slack lets a count equal to a threshold pass it.
_SLACK = 1e-9


def _fraction(name: str, value: object, low_open: bool) -> str | None:
    """The problem with a share or reject fraction, or None."""
    interval = "(0, 1]" if low_open else "[0, 1]"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"{name} must be a number in {interval}, got {value!r}"
    if (0.0 < value <= 1.0) or (not low_open and value == 0.0):
        return None
    hint = ""
    if 1.0 < value <= 100.0:
        hint = f" ({value:g} looks like a percentage: {value / 100.0:g})"
    return f"{name} must be a fraction in {interval}, got {value!r}{hint}"


@dataclass(frozen=True, slots=True)
class Stage:
    """One step of the brake.

    Attributes:
        share: once this share of the quota is used (in ``(0, 1]``), the stage applies.
        reject: the fraction of requests refused while it applies (in ``[0, 1]``).

    Raises:
        ValueError: when either number is outside its range (a percentage such
            as ``Stage(50, 50)`` is named, with the fraction to write instead).
    """

    share: float
    reject: float

    def __post_init__(self) -> None:
        problems = [p for p in (_fraction("share", self.share, True), _fraction("reject", self.reject, False))
                    if p]
        if problems:
            values = (self.share, self.reject)
            fixed = ""
            numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
            if numbers and all(0.0 <= v <= 100.0 for v in values) and max(values) > 1.0:
                share, reject = (v / 100.0 if v > 1.0 else v for v in values)
                fixed = f"; write Stage({share:g}, {reject:g})"
            raise ValueError(f"Stage({self.share!r}, {self.reject!r}): {'; '.join(problems)}{fixed}")


#: Half the requests refused past half the quota, three quarters past three
#: quarters, all of them once the quota is spent.
DEFAULT_STAGES: tuple[Stage, ...] = (Stage(0.5, 0.5), Stage(0.75, 0.75), Stage(1.0, 1.0))


def _spell(item: object) -> str:
    if isinstance(item, tuple | list) and len(item) == 2:
        return f"Stage({item[0]!r}, {item[1]!r})"
    return repr(item)


def check_stages(stages: Iterable[Any]) -> tuple[Stage, ...]:
    """The stages as a tuple, checked: :class:`Stage` objects, shares and refusals rising.

    Raises:
        ValueError: naming the problem and the code to write instead: pairs
            given as tuples (``(0.5, 0.5)``), shares that do not increase, or a
            refused fraction that goes down from one stage to the next (a brake
            refuses more as the quota runs out, never less).
    """
    steps = tuple(stages)
    if not all(isinstance(step, Stage) for step in steps):
        written = ", ".join(_spell(step) for step in steps)
        raise ValueError(f"stages must be Stage objects, got {list(steps)!r}; write "
                         f"stages=[{written}] (from crawlpace.guard import Stage)")
    if any(later.share <= earlier.share for earlier, later in itertools.pairwise(steps)):
        ordered = sorted(steps, key=lambda s: s.share)
        raise ValueError(f"stages: shares must increase strictly from one stage to the next, got "
                         f"{[s.share for s in steps]}; give each share once, in order, e.g. "
                         f"stages=[{', '.join(_spell((s.share, s.reject)) for s in ordered)}]")
    for earlier, later in itertools.pairwise(steps):
        if later.reject < earlier.reject:
            raise ValueError(f"stages: the refused fraction goes down from {earlier.reject:g} (share "
                             f"{earlier.share:g}) to {later.reject:g} (share {later.share:g}); a brake must "
                             f"refuse more as the quota runs out: give the later stage a reject of at least "
                             f"{earlier.reject:g}")
    return steps


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on one request.

    Attributes:
        allowed: the request may go on to the costly backend.
        used: requests counted against the quota in the current window, this
            one included when it is allowed.
        remaining: quota left in the window (never negative).
        reset: seconds until the window ends and the count starts again.
        retry_after: for a refused request, seconds the client should wait;
            ``None`` for an allowed one. See :meth:`StagedBrake.decide`.
        stage: the stage in force for the request, 1-based; 0 means no brake.
            The hard stop at the quota holds at every stage.
        entered: this is the first request at this stage in the window (the
            moment to tell the owner).
        allowance: what this client may still use in the window (the quota
            left, or its share's rest when that is smaller): the ``r`` of the
            ``RateLimit`` header.
        horizon: the ``t`` of the ``RateLimit`` header, whole seconds: the
            client is asked to spread ``allowance`` over this time.
        key: the key the request was counted against (``<overflow>`` past
            ``max_keys``).
        paced: the request came no sooner than the client was told it might.
    """

    allowed: bool
    used: float
    remaining: float
    reset: float
    retry_after: float | None
    stage: int
    entered: bool = False
    allowance: float = 0.0
    horizon: int = 0
    key: str = ""
    paced: bool = False


class KeyStats(TypedDict):
    """What one key did in the current window."""

    used: float
    rejected: int


class Totals(TypedDict):
    """The sums over the current window."""

    keys: int
    used: float
    rejected: int


class WindowSummary(TypedDict):
    """What a whole window came to (kept for the previous window: yesterday's totals)."""

    window_start: float
    used: float
    rejected: int
    keys: int
    stage: int
    crawlers: dict[str, int]


class BrakeStats(TypedDict):
    """A snapshot of the brake; ``window_start`` is None before any request."""

    window_start: float | None
    quota: float
    stage: int
    keys: dict[str, KeyStats]
    crawlers: dict[str, int]
    totals: Totals
    previous: WindowSummary | None


class _KeyState:
    """One key's count and pace in the current window."""

    __slots__ = ("due", "rejected", "spacing", "used")

    def __init__(self) -> None:
        self.used = 0.0
        self.rejected = 0
        self.due: float | None = None  # when the key may come again, as last announced
        self.spacing = 0.0  # the spacing announced with it


def _finite_positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


class StagedBrake:
    """Ration one windowed quota, refusing more requests as it runs low.

    Args:
        quota: requests allowed per window, for every client together.
        window: the window length in seconds (86400 for a daily quota).
        stages: the brake steps (see :func:`check_stages`); may be empty,
            which leaves only the hard stop at the quota.
        rng: the source of chance for partial stages; a fresh unseeded
            generator when omitted.
        max_keys: the most keys tracked at once. Further new keys in the same
            window share one counter, :data:`OVERFLOW_KEY`, which bounds memory.
        share: the most of the quota one key may use in a window, in
            ``(0, 1]``; 1 (the default) lets one client use all of it.

    Raises:
        ValueError: naming the parameter that is out of range.
    """

    __slots__ = ("_cap", "_crawlers", "_keys", "_max_keys", "_overflowing", "_previous", "_quota",
                 "_rejected", "_rng", "_share", "_stage", "_stages", "_start", "_thresholds", "_used",
                 "_window")

    def __init__(self, quota: float, window: float, stages: Iterable[Stage] = DEFAULT_STAGES,
                 rng: random.Random | None = None, *, max_keys: int = 100_000, share: float = 1.0) -> None:
        self._quota = _finite_positive("quota", quota)
        self._window = _finite_positive("window", window)
        steps = check_stages(stages)
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ValueError(f"max_keys must be a positive integer, got {max_keys!r}")
        problem = _fraction("share", share, True)
        if problem:
            raise ValueError(f"{problem} (the most of the quota one client may use)")
        self._share = float(share)
        self._cap = self._share * self._quota
        self._stages = steps
        self._thresholds = tuple(step.share * self._quota - _SLACK for step in steps)
        self._rng = random.Random() if rng is None else rng
        self._max_keys = max_keys
        self._keys: dict[str, _KeyState] = {}
        self._start: float | None = None
        self._overflowing = False
        self._used = 0.0
        self._rejected = 0
        self._stage = 0
        self._crawlers: dict[str, int] = {}
        self._previous: WindowSummary | None = None

    @property
    def quota(self) -> float:
        """Requests allowed per window."""
        return self._quota

    @property
    def window(self) -> float:
        """The window length in seconds."""
        return self._window

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The brake steps, in order."""
        return self._stages

    @property
    def share(self) -> float:
        """The most of the quota one key may use."""
        return self._share

    @property
    def cap(self) -> float:
        """The most requests one key may have counted in a window (``share * quota``)."""
        return self._cap

    def __len__(self) -> int:
        """The number of keys tracked in the current window."""
        return len(self._keys)

    def _summary(self) -> WindowSummary | None:
        if self._start is None:
            return None
        return {"window_start": self._start, "used": self._used, "rejected": self._rejected,
                "keys": len(self._keys), "stage": self._stage, "crawlers": dict(self._crawlers)}

    def _roll(self, now: float) -> float:
        """Move to the window holding ``now`` and return its start.

        A clock that steps back keeps the current window: counts are never
        handed back because the wall clock was corrected. The ended window's
        totals are kept as :attr:`previous` (yesterday's, for a daily window).
        """
        start = self.window_start(now)
        if self._start is None or start > self._start:
            if self._start is not None:
                summary = self._summary()
                # Only the window just before counts as "previous": an idle day in between is empty.
                self._previous = summary if start - self._start <= self._window + _SLACK else None
            if self._keys:
                _log.debug("window at %.0f: forgetting %d keys", start, len(self._keys))
                self._keys.clear()
            self._start = start
            self._overflowing = False
            self._used = 0.0
            self._rejected = 0
            self._stage = 0
            self._crawlers = {}
        return self._start

    def preload(self, now: float, used: float) -> None:
        """Start counting at ``used`` in the window holding ``now`` (a fallback taking over a count)."""
        self._roll(now)
        self._used = max(self._used, min(float(used), self._quota))
        self._stage = max(self._stage, self.stage_of(self._used))

    @property
    def previous(self) -> WindowSummary | None:
        """The totals of the window before the current one, or None."""
        return self._previous

    def _state(self, key: str) -> tuple[str, _KeyState]:
        state = self._keys.get(key)
        if state is not None:
            return key, state
        if len(self._keys) >= self._max_keys:
            if not self._overflowing:
                self._overflowing = True
                _log.warning("brake tracks %d keys: new keys share the %r counter until the window ends",
                             self._max_keys, OVERFLOW_KEY)
            key = OVERFLOW_KEY
            state = self._keys.get(key)
            if state is not None:
                return key, state
        state = self._keys[key] = _KeyState()
        return key, state

    def decide(self, key: str, now: float) -> Decision:
        """Decide on one request of ``key`` at ``now`` and count it if allowed.

        The stage is the last one whose share of the quota had been used
        before this request. Refused whatever the stage: a request that would
        take the count past the quota, or the key past its share; every
        request while a stage refuses everything. Refused by chance, at a
        partial stage's fraction: a request that is not paced (see the
        module's notes). Everything else is allowed and counted.

        A refused request gets a ``retry_after``: the time to the end of the
        window when the quota (or the key's share) is spent or the stage
        refuses everything; otherwise the time until the key is paced again.

        Raises:
            ValueError: when ``now`` is not finite.
        """
        start = self._roll(now)
        key, state = self._state(key)
        used = self._used
        stage = self.stage_of(used)
        entered = stage > self._stage
        if entered:
            self._stage = stage
        reject = self._stages[stage - 1].reject if stage else 0.0
        spent = self.spent(used, state.used, stage)
        paced = state.due is not None and now >= state.due - TOLERANCE * state.spacing
        if spent:
            allowed = False
        elif paced or reject <= 0.0:
            allowed = True
        else:
            allowed = self._rng.random() >= reject
        if allowed:
            self._used = used + 1.0
            state.used += 1.0
        else:
            self._rejected += 1
            state.rejected += 1
        decision, state.due, state.spacing = self.answer(
            allowed, paced, stage, self._used, state.used, state.due, state.spacing, start, now, entered, key)
        return decision

    def spent(self, used: float, key_used: float, stage: int) -> bool:
        """Whether a request is refused whatever its chance or pace, with these counts before it."""
        full = stage > 0 and self._stages[stage - 1].reject >= 1.0
        return full or used + 1.0 > self._quota + _SLACK or key_used + 1.0 > self._cap + _SLACK

    def answer(self, allowed: bool, paced: bool, stage: int, used: float, key_used: float,
               due: float | None, spacing: float, start: float, now: float, entered: bool,
               key: str) -> tuple[Decision, float | None, float]:
        """The :class:`Decision` for a request once counted (or not), and the key's new pace.

        Args:
            allowed: whether the request was let through.
            paced: whether it came no sooner than announced.
            stage: the stage in force for it.
            used: the quota's count after it.
            key_used: the key's count after it.
            due: when the key was told it may come again (None: never told).
            spacing: the spacing announced with ``due``.
            start: the start of the request's window.
            now: the time of the request.
            entered: the request was the first at ``stage``.
            key: the key it was counted against.

        Returns:
            The decision, and the key's ``due`` and ``spacing`` from now on.
        """
        reset = min(max(start + self._window - now, 0.0), self._window)
        remaining = max(self._quota - used, 0.0)
        spent = not allowed and self.spent(used, key_used, stage)
        allowance = 0.0 if spent else self.allowance(used, key_used)
        rate, horizon, step = self.pace(allowance, reset)
        if allowed or due is None or due <= now or spent:
            # Announce the next time this key is welcome: after the spacing, or at the window's end.
            spacing = step if rate else reset
            due = now + spacing
        retry_after = None if allowed else reset if spent else max(due - now, 0.0)
        decision = Decision(allowed, used, remaining, reset, retry_after, stage, entered, float(rate),
                            horizon, key, paced)
        return decision, due, spacing

    def allowance(self, used: float, key_used: float) -> float:
        """What a key that has ``key_used`` counted may still use, with ``used`` counted in all."""
        return max(min(self._quota - used, self._cap - key_used), 0.0)

    @staticmethod
    def pace(allowance: float, reset: float) -> tuple[int, int, float]:
        """The ``RateLimit`` fields for an allowance, and the spacing they ask for.

        Returns:
            ``r`` (the allowance, whole requests), ``t`` (the seconds left in
            the window, rounded down) and ``t / r``: a client that sends one
            request every ``t / r`` seconds spends its allowance by the end of
            the window. With nothing left, ``r`` is 0, ``t`` the time to the
            window's end rounded up, and the spacing 0.
        """
        rate = int(min(math.floor(allowance + _SLACK), 1e15)) if allowance > 0.0 else 0
        if rate <= 0:  # nothing left: come back when the window ends, rounded up
            return 0, int(min(math.ceil(max(reset, 0.0)), 1e15)), 0.0
        horizon = int(min(math.floor(max(reset, 0.0)), 1e15))
        return rate, horizon, horizon / rate

    def note_crawler(self, name: str, now: float) -> None:
        """Count one request of a confirmed allow-listed crawler (on top of the quota)."""
        self._roll(now)
        self._crawlers[name] = self._crawlers.get(name, 0) + 1

    # -- the rule in parts, for a brake whose counts live elsewhere (a shared store) -------------

    @property
    def thresholds(self) -> tuple[float, ...]:
        """The count at which each stage starts (a hair under ``share * quota``)."""
        return self._thresholds

    def stage_of(self, used: float) -> int:
        """The stage in force with ``used`` requests counted: 0 for none."""
        for index in range(len(self._thresholds), 0, -1):
            if used >= self._thresholds[index - 1]:
                return index
        return 0

    def refusing(self, chance: float) -> tuple[bool, ...]:
        """For each stage, whether it refuses an unpaced request that drew ``chance`` in ``[0, 1)``."""
        return tuple(step.reject >= 1.0 or (step.reject > 0.0 and chance < step.reject)
                     for step in self._stages)

    def window_start(self, now: float) -> float:
        """The start of the window holding ``now`` (no state is changed)."""
        if not math.isfinite(now):
            raise ValueError(f"now must be finite, got {now!r}")
        window = self._window
        start = math.floor(now / window) * window
        # The division may round down across a boundary.
        return start + window if start + window <= now else start

    def stats(self, now: float | None = None) -> BrakeStats:
        """The current window: the quota's count, each key's, confirmed crawlers', and the last window's.

        Args:
            now: when given, the window is first moved to the one holding
                ``now``, so keys of an ended window are not reported.
        """
        if now is not None:
            self._roll(now)
        keys: dict[str, KeyStats] = {key: {"used": state.used, "rejected": state.rejected}
                                     for key, state in self._keys.items()}
        totals: Totals = {"keys": len(keys), "used": self._used, "rejected": self._rejected}
        return {"window_start": self._start, "quota": self._quota, "stage": self._stage, "keys": keys,
                "crawlers": dict(self._crawlers), "totals": totals, "previous": self._previous}

    def __repr__(self) -> str:
        return (f"<StagedBrake quota={self._quota:g} window={self._window:g}s "
                f"stages={len(self._stages)} keys={len(self._keys)}>")
