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
          "tolerated_share", "_sampling", "_probe_at"),  # the circuit breaker
    "r": ("rate", "phase", "generation", "ceiling", "last_pushback_rate", "latency", "above_since",
          "_pushbacks", "_gap", "_sent_at", "_last_growth", "_cut_rate", "_epoch", "_k", "_climb",
          "_probe_c", "_baseline", "_window_min", "_window_start", "_samples", "_quiet_until", "_level",
          "_stuck_share", "_stuck_time", "_resumed_at", "slot_cap", "_cap_at", "_good_rate", "_door",
          "_low_latency", "_top", "_probe_after", "hold_learned", "_queue_cap", "_gentle", "_ep_since",
          "_ep_gap", "_cycle_start", "_cycle_ok", "_cycle_rate", "_cycle_refused", "_ok_sends", "_gap_ok",
          "_strict_gap", "_ok_lat", "_no_burst", "_spaced",
          "_fitted", "_fit_span", "_early_cut", "_drain_at", "_ep_drain", "_drain_until", "_drain_passed",
          "_lock_end", "_lock_ok",
          "_inflight_ok",
          "_sustained", "_lone_refused",
          "_quick_sent", "_outstanding", "_stragglers", "_hung", "_merged", "_slow_last", "_load_latency",
          "_line_until", "_lat_cut_at", "_lat_from", "_lat_held",
          "_load_count", "_load_n",
          "_load_since", "_knee_hold", "_knee_at", "_answered_at", "_acc_base",
          "_acc_cycle", "_recall", "_recall_wait", "_recall_from", "_recall_span", "_recall_last",
          "_recall_next", "_recall_next_span",
          "_ok_count", "_first_send", "_held_refusals", "_hold_end", "_belief", "_kept", "_refit_at",
          "_slots_open", "_opened_at", "_answers", "_lag_lo", "_lag_hi", "_lag_probe", "_lag_gap",
          "_lag_at", "_rests", "_lag_seen", "_ok_at", "_ok_below", "_ok_since", "_crowd_n", "_crowd_quick",
          "_slot_ok", "_slot_refused", "_held_over",
          "_pinned", "_counter_lo", "_counter_hi", "_counter_span", "_counter_open", "_limited",
          "_fits", "_ok_after_hold", "_hung_sends", "_lift", "_held_asked"),  # rampup
    # The announced budget; its answers are the fleet's, every worker's, so that a spent budget those
    # answers explain comes back once the oldest leaves the window, in a fleet as in one process (kept
    # per worker, a fleet, even of one, held each spent budget to the header's whole-second reset:
    # 1 per s on a moving window of 5 per 3 s, bench/results/fleetstrict2.md).
    "h": ("quota", "window", "usable", "edge_lo", "edge_hi", "last_left", "last_sent", "answers"),
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
          "in_place", "reason"),
    "r": ("decision", "max_concurrency", "max_rate", "min_rate", "scope", "start_rate", "target", "window",
          "_counted", "_counted_n", "_left", "_more", "_undo", "_undo_void", "_own", "_lease_on",
          "_lease_all", "_lease_at"),
    # (this process's own sends, for the counter fit, its own queue: the work a step after a hold is
    # weighed for, the pace its errors' cut would put back, a fleet worker's own sends out and its own
    # lease times)
    "h": ("sends_seen",),  # (a shared store sets it once its answers are the fleet's: HeaderBudget.shared)
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


# How each field travels, worked out once per part from the tables above (not per call): the field's
# name, its key in the mapping, and its way (_WORD: an index in its words; _LIMITS_WAY: a Limits as
# five numbers; _GROUP: tuples stored flat; _INT: a whole number whose fresh value is None; _PLAIN:
# a number, None, or a sequence of numbers).
_PLAIN, _WORD, _LIMITS_WAY, _GROUP, _INT = range(5)
_Plan = tuple[tuple[str, str, int, Any], ...]


def _plan(prefix: str) -> _Plan:
    steps: list[tuple[str, str, int, Any]] = []
    for name in FIELDS[prefix]:
        key = f"{prefix}.{name}"
        if key in WORDS:
            steps.append((name, key, _WORD, WORDS[key]))
        elif key in _LIMITS:
            steps.append((name, key, _LIMITS_WAY, None))
        elif key in _GROUPED:
            steps.append((name, key, _GROUP, _GROUPED[key]))
        elif key in _INTS:
            steps.append((name, key, _INT, None))
        else:
            steps.append((name, key, _PLAIN, None))
    return tuple(steps)


_PLANS: dict[str, _Plan] = {prefix: _plan(prefix) for prefix in FIELDS}
_SEQUENCES = (deque, list, tuple)
_SCALARS = frozenset({float, int, bool, type(None)})


def export_state(policy: ScopePolicy) -> dict[str, StateValue]:
    """The learned state of ``policy`` as a flat mapping (see the module's docstring)."""
    out: dict[str, StateValue] = {}
    for prefix, part in _parts(policy).items():
        if part is None or (isinstance(part, WindowLog) and not part.shareable):
            continue
        if prefix == "m":
            out.update({f"m.{name}": value for name, value in _manager_fields(part).items()})
            continue
        for name, key, way, extra in _PLANS[prefix]:
            value = getattr(part, name)
            if way in (_PLAIN, _INT):
                if type(value) in _SCALARS:
                    out[key] = value
                elif isinstance(value, _SEQUENCES):
                    out[key] = tuple(map(float, value))
                else:
                    out[key] = value
            elif way == _WORD:
                if value not in extra:
                    logger.error("state field %s holds %r, which policy/state.py WORDS does not list: "
                                 "left out of the shared state", key, value)
                    continue
                out[key] = extra.index(value)
            elif way == _LIMITS_WAY:
                out[key] = (float(value.concurrency), value.delay, value.delay_per_slot, value.floor,
                            value.rest)
            else:
                out[key] = tuple(float(x) for item in value for x in item)
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


# Each field's step by its key, for a restore that walks the stored fields (a policy stores only
# those that differ from a new one: a few dozen of the 250 or so).
_STEPS: dict[str, tuple[str, str, int, Any]] = {
    key: (prefix, name, way, extra) for prefix, plan in _PLANS.items() for name, key, way, extra in plan}


def _restore_fields(parts: Mapping[str, object], state: Mapping[str, StateValue]) -> None:
    # A field the bytes lack (written by a version without it) keeps the fresh value.
    steps = _STEPS
    for key, value in state.items():
        step = steps.get(key)
        if step is None:
            continue  # a custom manager's ("m."), or a newer version's: ignored
        prefix, name, way, extra = step
        part = parts[prefix]
        if part is None:
            continue
        if way == _PLAIN:
            current = getattr(part, name)
            kind = type(current)
            if value is None or type(value) is tuple:
                if kind is deque:
                    if value is not None:
                        current.clear()
                        current.extend(value)
                else:
                    setattr(part, name, value)
            elif kind is float:
                setattr(part, name, float(value))  # type: ignore[arg-type]
            elif kind is not deque:  # (a number where a history belongs: the fresh value stays)
                setattr(part, name, _coerce(current, value))
        elif way == _WORD:
            if not isinstance(value, int | float) or not 0 <= int(value) < len(extra):
                logger.warning("state field %s: %r names no known word; the fresh value stays", key, value)
                continue
            setattr(part, name, extra[int(value)])
        elif way == _LIMITS_WAY:
            # (Four values: written before the rest after an answer was stored; no rest.)
            if isinstance(value, tuple) and len(value) in (4, 5):
                setattr(part, name, Limits(int(value[0]), *value[1:]))
        elif way == _GROUP:
            if isinstance(value, tuple):
                current = getattr(part, name)
                width = len(extra)
                items = [tuple(kind(x) for kind, x in zip(extra, value[i:i + width], strict=True))
                         for i in range(0, len(value) - width + 1, width)]
                if isinstance(current, deque):
                    current.clear()
                    current.extend(items)
                else:
                    setattr(part, name, items)
        else:  # _INT
            current = getattr(part, name)
            if isinstance(current, deque):
                if isinstance(value, tuple):
                    current.clear()
                    current.extend(value)
            elif isinstance(value, int | float):
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
    parts = _parts(policy)
    manager = parts["m"]
    if manager is not None and "m" in prefixes:
        restore = getattr(manager, "restore", None)
        fields = {key[2:]: value for key, value in state.items() if key.startswith("m.")}
        if callable(restore):
            restore(fields)
        else:
            for name, value in fields.items():
                if hasattr(manager, name):
                    setattr(manager, name, _coerce(getattr(manager, name), value))
    _restore_fields(parts, state)
    breaker = policy.breaker
    if breaker is not None and breaker.state == "given_up" and not breaker.reason:
        breaker.reason = "given up by another worker's circuit breaker"
    policy.restored()
    return policy


def is_fresh(policy: ScopePolicy, fresh: ScopePolicy) -> bool:
    """True when ``policy`` holds nothing a ``fresh`` one of the same scope does not."""
    return export_state(policy) == export_state(fresh)


# -- mapping <-> bytes -------------------------------------------------------------


_DOUBLE = struct.Struct("<d")
_COUNT = struct.Struct("<H")
# A field name's framing (length byte and ASCII), and the name read back from it: worked out once
# per name. Bounded, so names a newer version adds (read and ignored) cannot grow them for ever.
_NAMES_KEPT = 4096
_FRAMED: dict[str, bytes] = {}
_READ: dict[bytes, str] = {}


def _framed(key: str) -> bytes:
    framed = _FRAMED.get(key)
    if framed is None:
        name = key.encode("ascii")
        framed = bytes([len(name)]) + name
        if len(_FRAMED) < _NAMES_KEPT:
            _FRAMED[key] = framed
    return framed


def encode(state: Mapping[str, StateValue]) -> bytes:
    """The mapping as bytes in layout :data:`LAYOUT` (module docstring)."""
    out = bytearray(_MAGIC)
    out.append(LAYOUT)
    pack = struct.pack
    double = _DOUBLE.pack
    for key, value in state.items():
        out += _FRAMED.get(key) or _framed(key)
        if type(value) is float:
            out.append(1)
            out += double(value)
        elif value is None:
            out.append(0)
        elif isinstance(value, tuple):
            out.append(2)
            out += _COUNT.pack(len(value))
            out += pack(f"<{len(value)}d", *value)
        elif isinstance(value, int) and 0 <= value <= 255:
            out.append(3)
            out.append(int(value))
        else:
            out.append(1)
            out += double(value)
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
    names = _READ
    double = _DOUBLE.unpack_from
    unpack_from = struct.unpack_from
    nans = []
    try:
        while at < end:
            length = data[at]
            raw = data[at + 1:at + 1 + length]
            key = names.get(raw)
            if key is None:
                if len(raw) != length:
                    raise IndexError("a field name is cut short")
                key = raw.decode("ascii")
                if len(names) < _NAMES_KEPT:
                    names[raw] = key
            at += 1 + length
            kind = data[at]
            at += 1
            if kind == 1:
                (number,) = double(data, at)
                if number != number:  # NaN
                    nans.append(key)
                out[key] = number
                at += 8
            elif kind == 3:
                out[key] = data[at]
                at += 1
            elif kind == 2:
                (count,) = _COUNT.unpack_from(data, at)
                out[key] = unpack_from(f"<{count}d", data, at + 2)
                at += 2 + 8 * count
            elif kind == 0:
                out[key] = None
            else:
                raise StateFormatError(f"stored policy state: field {key!r} has unknown kind {kind}")
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise StateFormatError(f"stored policy state is cut short or damaged: {exc}") from exc
    for key in nans:
        if key in out and isinstance(out[key], float) and math.isnan(out[key]):  # type: ignore[arg-type]
            logger.warning("stored policy state: field %s is not a number; the fresh value stays", key)
            del out[key]
    return out
