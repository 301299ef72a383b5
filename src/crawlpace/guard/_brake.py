"""A staged brake on a windowed request quota: the pure decision core.

Nothing here reads a clock, sleeps or awaits: the caller passes ``now`` (POSIX
seconds, in practice) to every call, and chance comes from an injected
:class:`random.Random`, so a seeded generator makes every decision repeatable.

The quota is counted per key in fixed windows aligned on multiples of
``window`` from 0. For a daily window fed with ``time.time()`` that is the UTC
day, which is how paid APIs usually count their daily allowance. Because every
key shares the same window boundaries, the whole table is dropped when a new
window begins: keys from the ended window are forgotten at once, at a cost
spread over the requests that created them.

Inside a window a key moves through stages as its count grows. Past a stage's
share of the quota, that stage's fraction of requests is refused. Whatever the
stages say, a request that would take the count above the quota is refused, so
allowed requests never exceed the quota. Refused requests are not counted: they
never reached the costly backend.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

__all__ = [
    "DEFAULT_STAGES",
    "OVERFLOW_KEY",
    "BrakeStats",
    "Decision",
    "KeyStats",
    "Stage",
    "StagedBrake",
    "Totals",
]

_log = logging.getLogger(__name__)

#: The key that new clients share once the table holds ``max_keys`` keys.
OVERFLOW_KEY = "<overflow>"

# Counts are whole numbers while thresholds are products of floats (0.1 * 30
# is 3.0000000000000004); this slack lets a count equal to a threshold pass it.
_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class Stage:
    """One step of the brake.

    Attributes:
        share: once this share of the quota is used (in ``(0, 1]``), the stage applies.
        reject: the fraction of requests refused while it applies (in ``[0, 1]``).

    Raises:
        ValueError: when either number is outside its range.
    """

    share: float
    reject: float

    def __post_init__(self) -> None:
        if not 0.0 < self.share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {self.share!r}")
        if not 0.0 <= self.reject <= 1.0:
            raise ValueError(f"reject must be in [0, 1], got {self.reject!r}")


#: Half the requests refused past half the quota, three quarters past three
#: quarters, all of them once the quota is spent.
DEFAULT_STAGES: tuple[Stage, ...] = (Stage(0.5, 0.5), Stage(0.75, 0.75), Stage(1.0, 1.0))


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on one request.

    Attributes:
        allowed: the request may go on to the costly backend.
        used: requests counted for the key in the current window, this one
            included when it is allowed.
        remaining: quota left for the key in the window (never negative).
        reset: seconds until the window ends and the count starts again.
        retry_after: for a refused request, seconds the client should wait;
            ``None`` for an allowed one. See :meth:`StagedBrake.decide`.
        stage: the stage in force for the request, 1-based; 0 means no brake.
            The hard stop at the quota holds at every stage, so with stages
            that end below a full refusal (or none at all) a request can be
            refused at a stage that would otherwise let it through.
        entered: this is the key's first request at this stage in the window.
    """

    allowed: bool
    used: float
    remaining: float
    reset: float
    retry_after: float | None
    stage: int
    entered: bool = False


class KeyStats(TypedDict):
    """What one key did in the current window."""

    used: float
    rejected: int
    stage: int


class Totals(TypedDict):
    """The sums over every key of the current window."""

    keys: int
    used: float
    rejected: int


class BrakeStats(TypedDict):
    """A snapshot of the brake; ``window_start`` is None before any request."""

    window_start: float | None
    keys: dict[str, KeyStats]
    totals: Totals


class _KeyState:
    """The count of one key in the current window."""

    __slots__ = ("rejected", "stage", "used")

    def __init__(self) -> None:
        self.used = 0.0
        self.rejected = 0
        self.stage = 0  # the highest stage reached in the window


def _finite_positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


class StagedBrake:
    """Ration a windowed quota per key, refusing more requests as it runs low.

    Args:
        quota: requests allowed per key per window.
        window: the window length in seconds (86400 for a daily quota).
        stages: the brake steps, shares strictly increasing; may be empty,
            which leaves only the hard stop at the quota.
        rng: the source of chance for partial stages; a fresh unseeded
            generator when omitted.
        max_keys: the most keys tracked at once. Further new keys in the same
            window share one counter, :data:`OVERFLOW_KEY`, which bounds memory
            and stops a client from gaining quota by inventing keys.

    Raises:
        ValueError: naming the parameter that is out of range.
    """

    __slots__ = ("_keys", "_max_keys", "_overflowing", "_quota", "_rng", "_stages", "_start",
                 "_thresholds", "_window")

    def __init__(self, quota: float, window: float, stages: Iterable[Stage] = DEFAULT_STAGES,
                 rng: random.Random | None = None, *, max_keys: int = 100_000) -> None:
        self._quota = _finite_positive("quota", quota)
        self._window = _finite_positive("window", window)
        steps = tuple(stages)
        if not all(isinstance(step, Stage) for step in steps):
            raise ValueError("stages must be Stage instances")
        if any(later.share <= earlier.share for earlier, later in itertools.pairwise(steps)):
            raise ValueError(f"stages: shares must increase strictly, got {[s.share for s in steps]}")
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys < 1:
            raise ValueError(f"max_keys must be a positive integer, got {max_keys!r}")
        self._stages = steps
        self._thresholds = tuple(step.share * self._quota - _SLACK for step in steps)
        self._rng = random.Random() if rng is None else rng
        self._max_keys = max_keys
        self._keys: dict[str, _KeyState] = {}
        self._start: float | None = None
        self._overflowing = False

    @property
    def quota(self) -> float:
        """Requests allowed per key per window."""
        return self._quota

    @property
    def window(self) -> float:
        """The window length in seconds."""
        return self._window

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The brake steps, in order."""
        return self._stages

    def __len__(self) -> int:
        """The number of keys tracked in the current window."""
        return len(self._keys)

    def _roll(self, now: float) -> float:
        """Move to the window holding ``now`` and return its start.

        A clock that steps back keeps the current window: counts are never
        handed back because the wall clock was corrected.
        """
        start = self.window_start(now)
        if self._start is None or start > self._start:
            if self._keys:
                _log.debug("window at %.0f: forgetting %d keys", start, len(self._keys))
                self._keys.clear()
            self._start = start
            self._overflowing = False
        return self._start

    def _state(self, key: str) -> _KeyState:
        state = self._keys.get(key)
        if state is not None:
            return state
        if len(self._keys) >= self._max_keys:
            if not self._overflowing:
                self._overflowing = True
                _log.warning("brake tracks %d keys: new keys share the %r counter until the window ends",
                             self._max_keys, OVERFLOW_KEY)
            key = OVERFLOW_KEY
            state = self._keys.get(key)
            if state is not None:
                return state
        state = self._keys[key] = _KeyState()
        return state

    def decide(self, key: str, now: float) -> Decision:
        """Decide on one request of ``key`` at ``now`` and count it if allowed.

        The stage is the last one whose share of the quota the key had already
        used before this request. A request that would go past the quota is
        refused at any stage.

        A refused request gets a ``retry_after``; see :meth:`verdict`.

        Args:
            key: the client the request is counted against.
            now: the time of the request, in the clock the windows are laid on.

        Returns:
            The verdict, with the key's count after it.

        Raises:
            ValueError: when ``now`` is not finite.
        """
        start = self._roll(now)
        state = self._state(key)
        used = state.used
        stage = self.stage_of(used)
        entered = stage > state.stage
        if entered:
            state.stage = stage
        # The hard stop: whatever the stages say, the count never passes the quota.
        over = used + 1.0 > self._quota
        reject = 1.0 if over else self._stages[stage - 1].reject if stage else 0.0
        if reject <= 0.0 or (reject < 1.0 and self._rng.random() >= reject):
            state.used = used = used + 1.0
            return self.verdict(True, used, stage, start, now, entered)
        state.rejected += 1
        return self.verdict(False, used, stage, start, now, entered)

    # -- the rule in parts, for a brake whose counts live elsewhere (a shared store) -------------

    @property
    def thresholds(self) -> tuple[float, ...]:
        """The count at which each stage starts (a hair under ``share * quota``)."""
        return self._thresholds

    def stage_of(self, used: float) -> int:
        """The stage in force for a key that has ``used`` requests counted: 0 for none."""
        for index in range(len(self._thresholds), 0, -1):
            if used >= self._thresholds[index - 1]:
                return index
        return 0

    def refusing(self, chance: float) -> tuple[bool, ...]:
        """For each stage, whether it refuses a request that drew ``chance`` in ``[0, 1)``.

        A stage refusing everything refuses at any chance, one refusing
        nothing at none, and a partial one when the chance falls below its
        fraction: the same draw :meth:`decide` makes.
        """
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

    def verdict(self, allowed: bool, used: float, stage: int, start: float, now: float,
                entered: bool = False) -> Decision:
        """The :class:`Decision` for a request, once counted (or not) against its key.

        A refused request gets a ``retry_after``: the time to the end of the
        window when its stage refuses everything (or the quota is spent), or
        else the window's remaining time divided by the remaining quota, the
        spacing at which the rest of the quota would last until the window
        ends. A client that waits that long spends what is left evenly instead
        of hammering the brake.

        Args:
            allowed: whether the request was let through.
            used: the key's count after the request (before it, for a refusal).
            stage: the stage in force for the request.
            start: the start of the request's window.
            now: the time of the request.
            entered: the request was the key's first at ``stage``.
        """
        reset = min(max(start + self._window - now, 0.0), self._window)
        remaining = max(self._quota - used, 0.0)
        if allowed:
            return Decision(True, used, remaining, reset, None, stage, entered)
        spent = used + 1.0 > self._quota or (stage > 0 and self._stages[stage - 1].reject >= 1.0)
        retry_after = reset if spent else min(reset, reset / max(remaining, 1.0))
        return Decision(False, used, remaining, reset, retry_after, stage, entered)

    def stats(self, now: float | None = None) -> BrakeStats:
        """Report each key's count in the current window, and their sums.

        Args:
            now: when given, the window is first moved to the one holding
                ``now``, so keys of an ended window are not reported.

        Returns:
            The window start, per-key counts and totals.
        """
        if now is not None:
            self._roll(now)
        keys: dict[str, KeyStats] = {
            key: {"used": state.used, "rejected": state.rejected, "stage": state.stage}
            for key, state in self._keys.items()
        }
        totals: Totals = {
            "keys": len(keys),
            "used": sum(entry["used"] for entry in keys.values()),
            "rejected": sum(entry["rejected"] for entry in keys.values()),
        }
        return {"window_start": self._start, "keys": keys, "totals": totals}

    def __repr__(self) -> str:
        return (f"<StagedBrake quota={self._quota:g} window={self._window:g}s "
                f"stages={len(self._stages)} keys={len(self._keys)}>")
