"""A scope policy's learned state as a flat mapping of numbers, and its compact, versioned bytes.

A shared store keeps what one worker learned about a scope (a backoff level,
a server's hold, rampup's rate, the breaker's tally) where every worker reads
it. This module says which attributes that is, and how it travels:

* :func:`export_state` turns a :class:`~crawlpace.policy.scope.ScopePolicy`
  into a flat mapping ``"part.field" -> number`` (or a tuple of numbers for a
  short history, or ``None``); the settings are never part of it, so a worker
  started with new settings applies them to the state it reads.
* :func:`restore_state` writes such a mapping into a fresh policy built from
  the settings.
* :func:`encode` / :func:`decode` give the mapping as bytes (layout below).

What belongs to the state is listed once, in :data:`FIELDS`; a field added to
a policy class joins the shared state by adding its name there (or, for a
setting or a derived value, to :data:`SETTINGS`: a test fails until it is in
one of the two). Values must be
numbers (``bool`` and ``int`` come back as such, from the fresh object's type),
``None``, a word from :data:`WORDS`, or a sequence of numbers.

Compatibility rule (``docs/redis.md``): a reader ignores names it does not
know (a newer version added them) and leaves fields the bytes lack at the
fresh policy's value (an older version did not have them). A field whose
meaning changes gets a new name. :data:`LAYOUT` changes only when the framing
does; a reader refuses a layout newer than its own with
:class:`StateFormatError`, and so do readers of bytes from before this layout
(crawlpace 0.6 stored a pickle).

Byte layout (all numbers little-endian):

    b"cp" LAYOUT(u8), then per field:
    name length (u8), name (ASCII), kind (u8), value
    kind 0: None (no value); 1: one float64; 2: count (u16) then count float64;
    3: one u8 (an integer 0..255, or a word's index)
"""

from __future__ import annotations

import logging
import math
import struct
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from .._exceptions import StateFormatError
from ._load_errors import LoadErrors
from .admission import Limits
from .budget import HeaderBudget, ResetRefiner, WindowLog
from .scope import ScopePolicy, ThrottlingScopeManager

__all__ = ["FIELDS", "LAYOUT", "SETTINGS", "WORDS", "StateFormatError", "StateValue", "decode", "encode",
           "export_state", "is_fresh", "restore_state"]

logger = logging.getLogger(__name__)

#: The version of the byte framing; readers refuse a newer one.
LAYOUT = 1
_MAGIC = b"cp"

#: One value of the flat mapping.
StateValue = float | int | bool | None | tuple[float, ...]

#: Per part of a policy (its prefix), the attributes that hold learned state.
FIELDS: dict[str, tuple[str, ...]] = {
    # The policy itself: what it combined, and its own learned inputs.
    "p": ("generation", "crawl_delay", "hold_until", "pace", "pace_until", "wake_at", "limits", "_base",
          "server_concurrency", "opened", "opened_good", "opened_threshold", "opened_good_sent",
          "announced", "awaiting"),
    # The default scope manager's backoff.
    "b": ("level", "generation", "anchor", "last_feedback", "last_change", "interval", "ceiling", "good",
          "answers", "answers_good", "probing", "probe_misses", "probe_hits"),
    "a": ("delay",),  # AutoThrottle
    "q": ("_credit", "_at"),  # the quota bucket
    "k": ("_state", "_open_until", "_opened_at", "_half_open_since", "_probe_out", "_buckets", "_total",
          "_failed",
          "consecutive_failures", "_recent", "_recent_n", "_next_pause", "_opened_share", "_opened_n",
          "tolerated_share", "_sampling"),  # the circuit breaker
    "r": ("rate", "phase", "generation", "ceiling", "last_pushback_rate", "latency", "above_since",
          "_pushbacks", "_gap", "_sent_at", "_last_growth", "_cut_rate", "_epoch", "_k", "_climb",
          "_probe_c", "_baseline", "_window_min", "_window_start", "_samples", "_quiet_until", "_level",
          "_stuck_share", "_stuck_time", "_resumed_at", "slot_cap", "_cap_at", "_good_rate", "_door",
          "_low_latency", "_top", "_probe_after", "hold_learned", "_queue_cap", "_gentle", "_ep_since",
          "_ep_gap", "_cycle_start", "_cycle_ok", "_cycle_rate", "_cycle_refused", "_ok_sends", "_gap_ok",
          "_strict_gap", "_ok_lat", "_no_burst",
          "_fitted", "_fit_span", "_early_cut", "_drain_at", "_ep_drain", "_drain_until", "_drain_passed",
          "_lock_end", "_lock_ok",
          "_inflight_ok",
          "_sustained", "_lone_refused",
          "_quick_sent", "_outstanding", "_stragglers", "_hung", "_merged", "_slow_last", "_load_latency",
          "_line_until",
          "_load_count", "_load_n",
          "_load_since", "_knee_hold", "_knee_at", "_answered_at", "_acc_base",
          "_acc_cycle", "_recall", "_recall_wait", "_recall_from", "_recall_span", "_recall_last",
          "_recall_next", "_recall_next_span",
          "_ok_count", "_first_send", "_held_refusals", "_hold_end", "_belief", "_kept", "_refit_at",
          "_slots_open", "_opened_at", "_answers", "_lag_lo", "_lag_hi", "_lag_probe", "_lag_gap",
          "_lag_at", "_rests", "_lag_seen", "_ok_at", "_ok_below", "_ok_since", "_crowd_n", "_crowd_quick",
          "_slot_ok", "_slot_refused", "_held_over",
          "_pinned", "_counter_lo", "_counter_hi", "_counter_span", "_counter_open", "_limited"),  # rampup
    "h": ("quota", "window", "usable", "edge_lo", "edge_hi", "last_left", "last_sent"),  # announced budget
    "c": ("limit", "length", "start", "trusted", "early_until"),  # a whole-second reset, narrowed
    # The verdict on the scope's errors (policy/_load_errors.py): one judgement for a fleet, made from
    # every worker's outcomes, as one process makes it from its own (each worker judging alone cut a
    # flaky site's shared rate once per worker, and few outcomes each left most workers no verdict).
    "e": ("plain", "share", "learned_n", "learned_bad", "tolerable", "judging", "since", "before", "before_n",
          "after_n", "after_bad", "recent", "recent_n", "quick", "doubt"),
    # The window log (policy/budget.py): every worker's answers of a window's budget, so that a fleet's
    # log brackets the window's length and gates the sends from all of them, as one process's log does
    # from its own (kept per worker, it never gated: a fleet of one got 0.55-0.69 of a site one
    # process paced at 0.85-0.97).
    "w": ("limit", "lo", "hi", "answers", "inflight", "sends_seen", "whole", "trusted", "moving", "clocked",
          "first_before", "accepted", "last", "refused_since"),
}

#: Per part, the attributes that are *not* learned state: settings, values derived from them
#: or from the fields above, and text for humans. Every attribute of a part's class is in
#: exactly one of FIELDS and SETTINGS (``tests/test_policy_state.py`` checks it), so a new
#: attribute cannot be left out of the shared state by accident.
SETTINGS: dict[str, tuple[str, ...]] = {
    "p": ("autothrottle", "autothrottle_log_level", "breaker", "budget", "concurrency", "config", "gated",
          "gradual", "jitter", "load_errors", "manager", "quota", "rampup", "refiner", "scope", "watches",
          "window_log"),
    "b": ("concurrency_factor", "factor", "floor", "max_delay", "min_delay", "window"),
    "a": ("max_delay", "min_delay", "target_concurrency"),
    "q": ("_capacity", "_quota", "_rate", "_window"),
    "k": ("_error_share", "_first_pause", "_give_up_after", "_min_requests", "_pause", "_width", "_window",
          "reason"),
    "r": ("decision", "max_concurrency", "max_rate", "min_rate", "scope", "start_rate", "target", "window",
          "_counted", "_counted_n", "_left", "_more", "_undo", "_undo_void"),  # (this process's own sends,
    # for the counter fit, its own queue: the work a step after a hold is weighed for, and the pace its
    # errors' cut would put back)
    "h": ("answers", "sends_seen"),  # this process's own answers: a fleet's other sends are not in them
    "c": (),
    "e": (),
    "w": (),
}

#: Fields that hold a word from a fixed list: stored as the word's index.
WORDS: dict[str, tuple[str, ...]] = {
    "r.phase": ("start", "steady"),
    "k._state": ("closed", "open", "half_open", "given_up"),
}

# Sequences of tuples stored flat: the tuple's element types.
_GROUPED: dict[str, tuple[Callable[[float], Any], ...]] = {"k._buckets": (float, int, int),
                                                             "w.accepted": (float, float)}
_LIMITS = ("p.limits", "p._base")
# Whole numbers whose fresh value is None (so the fresh object cannot tell their type).
_INTS = frozenset({"p.server_concurrency"})


# -- policy <-> mapping ------------------------------------------------------------


def _parts(policy: ScopePolicy) -> dict[str, object]:
    manager = policy.manager
    return {"p": policy, "b": manager.backoff if isinstance(manager, ThrottlingScopeManager) else None,
            "a": policy.autothrottle, "q": policy.quota, "k": policy.breaker, "r": policy.rampup,
            "h": policy.budget, "c": policy.refiner, "e": policy.load_errors, "w": policy.window_log,
            "m": manager if manager is not None and not isinstance(manager, ThrottlingScopeManager) else None}


def _manager_fields(manager: object) -> dict[str, StateValue]:
    """A custom scope manager's state: its ``state()`` if it has one, else its plain numeric attributes."""
    state = getattr(manager, "state", None)
    if callable(state):
        return dict(state())
    names = list(getattr(manager, "__dict__", {}))
    for cls in type(manager).__mro__:
        names += [n for n in getattr(cls, "__slots__", ()) if n not in names]
    out: dict[str, StateValue] = {}
    for name in names:
        value = getattr(manager, name, None)
        if isinstance(value, int | float) and not name.startswith("__"):
            out[name] = value
    return out


def export_state(policy: ScopePolicy) -> dict[str, StateValue]:
    """The learned state of ``policy`` as a flat mapping (see the module's docstring)."""
    out: dict[str, StateValue] = {}
    for prefix, part in _parts(policy).items():
        if part is None or (isinstance(part, WindowLog) and not part.shareable):
            continue
        if prefix == "m":
            out.update({f"m.{name}": value for name, value in _manager_fields(part).items()})
            continue
        for name in FIELDS[prefix]:
            key = f"{prefix}.{name}"
            value = getattr(part, name)
            if key in WORDS:
                words = WORDS[key]
                if value not in words:
                    logger.error("state field %s holds %r, which policy/state.py WORDS does not list: "
                                 "left out of the shared state", key, value)
                    continue
                out[key] = words.index(value)
            elif key in _LIMITS:
                out[key] = (float(value.concurrency), value.delay, value.delay_per_slot, value.floor,
                            value.rest)
            elif key in _GROUPED:
                out[key] = tuple(float(x) for item in value for x in item)
            elif isinstance(value, deque | list | tuple):
                out[key] = tuple(float(x) for x in value)
            else:
                out[key] = value
    return out


def _coerce(current: object, value: StateValue) -> object:
    """``value`` in the type the fresh attribute has (ints stay ints, flags stay flags)."""
    if value is None or isinstance(value, tuple):
        return value
    if isinstance(current, bool):
        return bool(value)
    if isinstance(current, int):
        return int(value)
    return float(value)


def _restore_part(prefix: str, part: object, state: Mapping[str, StateValue]) -> None:
    for name in FIELDS[prefix]:
        key = f"{prefix}.{name}"
        if key not in state:
            continue  # written by a version without this field: the fresh value stays
        value = state[key]
        current = getattr(part, name)
        if key in WORDS:
            words = WORDS[key]
            if not isinstance(value, int | float) or not 0 <= int(value) < len(words):
                logger.warning("state field %s: %r names no known word; the fresh value stays", key, value)
                continue
            setattr(part, name, words[int(value)])
        elif key in _LIMITS:
            # (Four values: written before the rest after an answer was stored; no rest.)
            if isinstance(value, tuple) and len(value) in (4, 5):
                setattr(part, name, Limits(int(value[0]), *value[1:]))
        elif key in _GROUPED:
            if isinstance(value, tuple):
                kinds = _GROUPED[key]
                width = len(kinds)
                items = [tuple(kind(x) for kind, x in zip(kinds, value[i:i + width], strict=True))
                         for i in range(0, len(value) - width + 1, width)]
                if isinstance(current, deque):
                    current.clear()
                    current.extend(items)
                else:
                    setattr(part, name, items)
        elif isinstance(current, deque):
            if isinstance(value, tuple):
                current.clear()
                current.extend(value)
        elif key in _INTS and isinstance(value, int | float):
            setattr(part, name, int(value))
        else:
            setattr(part, name, _coerce(current, value))


def restore_state(policy: ScopePolicy, state: Mapping[str, StateValue]) -> ScopePolicy:
    """Write ``state`` (from :func:`export_state`, maybe of another version) into a fresh ``policy``.

    Parts the state mentions but the fresh policy has not created yet (the
    default manager, the breaker) are created first; parts the settings no
    longer have (rampup turned off, say) are skipped.

    Returns:
        ``policy``, for chaining.
    """
    prefixes = {key.split(".", 1)[0] for key in state}
    if "b" in prefixes and policy.manager is None:
        policy.ensure_manager()
    if "k" in prefixes and policy.breaker is None and policy.config.breaker.enabled:
        policy.ensure_breaker()
    if "h" in prefixes and policy.budget is None:
        policy.budget = HeaderBudget()
    if "c" in prefixes and policy.refiner is None:
        policy.refiner = ResetRefiner()
    if "e" in prefixes and policy.load_errors is None:
        policy.load_errors = LoadErrors()
    if "w" in prefixes and policy.window_log is None:
        policy.window_log = WindowLog()
    for prefix, part in _parts(policy).items():
        if part is None or prefix not in prefixes:
            continue
        if prefix == "m":
            restore = getattr(part, "restore", None)
            fields = {key[2:]: value for key, value in state.items() if key.startswith("m.")}
            if callable(restore):
                restore(fields)
            else:
                for name, value in fields.items():
                    if hasattr(part, name):
                        setattr(part, name, _coerce(getattr(part, name), value))
            continue
        _restore_part(prefix, part, state)
    breaker = policy.breaker
    if breaker is not None and breaker.state == "given_up" and not breaker.reason:
        breaker.reason = "given up by another worker's circuit breaker"
    policy.restored()
    return policy


def is_fresh(policy: ScopePolicy, fresh: ScopePolicy) -> bool:
    """True when ``policy`` holds nothing a ``fresh`` one of the same scope does not."""
    return export_state(policy) == export_state(fresh)


# -- mapping <-> bytes -------------------------------------------------------------


def encode(state: Mapping[str, StateValue]) -> bytes:
    """The mapping as bytes in layout :data:`LAYOUT` (module docstring)."""
    out = bytearray(_MAGIC)
    out.append(LAYOUT)
    pack = struct.pack
    for key, value in state.items():
        name = key.encode("ascii")
        out.append(len(name))
        out += name
        if value is None:
            out.append(0)
        elif isinstance(value, tuple):
            out.append(2)
            out += pack("<H", len(value))
            out += pack(f"<{len(value)}d", *value)
        elif isinstance(value, int) and 0 <= value <= 255:
            out.append(3)
            out.append(int(value))
        else:
            out.append(1)
            out += pack("<d", value)
    return bytes(out)


def decode(data: bytes) -> dict[str, StateValue]:
    """Read bytes written by :func:`encode` of this layout or an older one.

    Raises:
        StateFormatError: for a newer layout, or bytes that are not this format.
    """
    if data[:2] != _MAGIC or len(data) < 3:
        what = "a pickle (crawlpace 0.6 or older)" if data[:1] == b"\x80" else "not crawlpace state"
        raise StateFormatError(f"stored policy state is {what}; this version reads state layout {LAYOUT}")
    layout = data[2]
    if layout > LAYOUT:
        raise StateFormatError(f"stored policy state has layout {layout}, written by a newer crawlpace; "
                               f"this version reads layout {LAYOUT} and older: upgrade this worker, or give "
                               "it another namespace")
    out: dict[str, StateValue] = {}
    at, end = 3, len(data)
    try:
        while at < end:
            length = data[at]
            key = data[at + 1:at + 1 + length].decode("ascii")
            at += 1 + length
            kind = data[at]
            at += 1
            if kind == 0:
                out[key] = None
            elif kind == 1:
                (number,) = struct.unpack_from("<d", data, at)
                out[key] = number
                at += 8
            elif kind == 2:
                (count,) = struct.unpack_from("<H", data, at)
                out[key] = struct.unpack_from(f"<{count}d", data, at + 2)
                at += 2 + 8 * count
            elif kind == 3:
                out[key] = data[at]
                at += 1
            else:
                raise StateFormatError(f"stored policy state: field {key!r} has unknown kind {kind}")
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise StateFormatError(f"stored policy state is cut short or damaged: {exc}") from exc
    for key, value in list(out.items()):
        if isinstance(value, float) and math.isnan(value):
            logger.warning("stored policy state: field %s is not a number; the fresh value stays", key)
            del out[key]
    return out
