"""The ``RateLimit`` and ``RateLimit-Policy`` fields as draft-ietf-httpapi-ratelimit-headers-11 defines them.

Both fields are RFC 9651 lists. ``RateLimit-Policy`` names the server's quota
policies: ``q`` units per window of ``w`` seconds, counted in ``qu`` units
(``"requests"``, ``"content-bytes"`` or ``"concurrent-requests"``), for the
partition ``pk``. ``RateLimit`` says where each policy stands: at most ``r``
units may be used within the next ``t`` seconds.

Reading chosen where the drafts disagree: drafts -08 to -10 defined ``t`` as
the seconds until the quota resets, -11 as the span within which at most
``r`` may be used. Both readings allow the same pace, ``r`` units in ``t``
seconds, so the pace is ``t / r`` seconds a unit either way; the value is
taken as an exact span, not as a rounded-up time to a reset. A policy's
``q / w`` caps that pace: ``r`` may be large just after a reset.

Several policies may apply at once; the strictest binds. A spent budget
(``r`` below one unit) holds sends for its ``t``; otherwise the budget that
allows the slowest pace sets it. Members that do not parse, or lack a
required parameter, are dropped with a log line and the others still count.
Parsing uses the ``http-sf`` package when it is installed, and a lenient
reader of the same grammar otherwise. Nothing here reads a clock.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from types import ModuleType
from typing import Any

_sf: ModuleType | None
try:
    import http_sf as _sf
except ImportError:  # pragma: no cover - without it the lenient reader below does the work
    _sf = None

__all__ = ["Budget", "Policy", "binding", "parse_policies", "parse_ratelimit"]

_log = logging.getLogger(__name__)

UNITS = ("requests", "content-bytes", "concurrent-requests")

_QUOTED = r'"(?:[^"\\]|\\.)*"'
# Members of a list; commas inside quoted strings or byte sequences do not split.
_MEMBER = re.compile(r'(?:"(?:[^"\\]|\\.)*"?|[^,"])+', re.DOTALL)
_NAME = re.compile(rf"{_QUOTED}|[A-Za-z*][A-Za-z0-9:/!#$%&'*+.^_`|~-]*", re.ASCII)
_PARAM = re.compile(rf'[ \t]*;[ \t]*([a-z*][a-z0-9_.*-]*)(?:=({_QUOTED}|:[A-Za-z0-9+/=]*:|[^;"\s]*))?',
                    re.ASCII)
_INTEGER = re.compile(r"-?[0-9]{1,15}", re.ASCII)
_DECIMAL = re.compile(r"-?[0-9]{1,12}\.[0-9]{1,3}", re.ASCII)


@dataclass(frozen=True, slots=True)
class Policy:
    """One member of ``RateLimit-Policy``.

    Attributes:
        name: the policy's name.
        quota: ``q``, units per window (positive).
        window: ``w``, the window in seconds, when given (positive).
        unit: ``qu``, one of ``requests``, ``content-bytes``, ``concurrent-requests``.
        partition: ``pk``, the partition key, when given.
    """

    name: str
    quota: float
    window: float | None = None
    unit: str = "requests"
    partition: bytes | None = None


@dataclass(frozen=True, slots=True)
class Budget:
    """One member of ``RateLimit``, with the policy it reports on when known.

    Attributes:
        name: the policy's name.
        remaining: ``r``, units that may still be used (at least 0).
        span: ``t``, seconds within which they may be used, when given.
        partition: ``pk``, the partition key, when given.
        policy: the matching ``RateLimit-Policy`` member (same name and partition).
    """

    name: str
    remaining: float
    span: float | None = None
    partition: bytes | None = None
    policy: Policy | None = None

    @property
    def unit(self) -> str:
        """The unit ``r`` counts: the policy's, ``requests`` without one."""
        return "requests" if self.policy is None else self.policy.unit

    def seconds_per_unit(self) -> float | None:
        """The slowest pace the budget allows, in seconds per unit; None when unknown."""
        paces: list[float] = []
        span = self.span
        if span is None and self.policy is not None:
            span = self.policy.window
        if span is not None and self.remaining > 0.0:
            paces.append(span / self.remaining)
        policy = self.policy
        if policy is not None and policy.window is not None:
            paces.append(policy.window / policy.quota)
        return max(paces) if paces else None


def _dropped(field: str, member: str, why: str) -> None:
    _log.debug("%s: ignoring member %r (%s)", field, member[:80], why)


def _members(field: str, value: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Each parsable member as ``(raw text, name, params)``; the rest are logged and skipped.

    A field that parses whole with ``http-sf`` gives its members from that
    parse. One that does not (RFC 9651 would drop all of it) is read member
    by member, so one malformed member costs only itself.
    """
    if _sf is not None:
        parsed: Any
        try:
            parsed = _sf.parse(value.encode("latin-1"), tltype="list")
        except Exception:
            parsed = None
        if isinstance(parsed, list):
            for item, params in parsed:
                if isinstance(item, str | _sf.Token):
                    plain = {key: str(val) if isinstance(val, _sf.Token) else val
                             for key, val in params.items()}
                    yield str(item), str(item), plain
                else:
                    _dropped(field, repr(item), "the name is not a string or token")
            return
    for raw in _MEMBER.findall(value):
        member = raw.strip(" \t")
        got = _lenient_member(member)
        if got is None:
            _dropped(field, member, "does not parse as a structured-field item")
            continue
        yield member, *got


def _lenient_member(member: str) -> tuple[str, dict[str, Any]] | None:
    head = _NAME.match(member)
    if head is None:
        return None
    params: dict[str, Any] = {}
    pos = head.end()
    while pos < len(member) and (param := _PARAM.match(member, pos)) is not None:
        key, text = param.group(1), param.group(2)
        params[key] = True if text is None else _bare_value(text)
        pos = param.end()
    if pos != len(member):
        return None
    name = head.group()
    if name.startswith('"'):
        name = re.sub(r"\\(.)", r"\1", name[1:-1])
    return name, params


def _bare_value(text: str) -> Any:
    if text.startswith('"'):
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    if len(text) >= 2 and text.startswith(":") and text.endswith(":"):
        import base64
        import binascii

        try:
            return base64.b64decode(text[1:-1], validate=True)
        except (binascii.Error, ValueError):
            return text
    if _INTEGER.fullmatch(text):
        return int(text)
    if _DECIMAL.fullmatch(text):
        try:
            return Decimal(text)
        except InvalidOperation:  # pragma: no cover - the pattern admits only valid decimals
            return text
    return text


def _integer(params: dict[str, Any], key: str, *, minimum: int) -> float | None:
    """A parameter that must be an integer of at least ``minimum``; None when absent or not."""
    value = params.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        return None
    return float(value)


def _seconds(params: dict[str, Any], key: str) -> float | None:
    """A non-negative, finite number of seconds; -11 asks for an integer, a decimal is tolerated."""
    value = params.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds >= 0.0 else None


def _partition(params: dict[str, Any]) -> tuple[bytes | None, bool]:
    """The ``pk`` parameter and whether it is usable (a byte sequence, or absent)."""
    value = params.get("pk")
    if value is None:
        return None, True
    if isinstance(value, bytes | bytearray):
        return bytes(value), True
    return None, False


def parse_policies(value: str | None) -> list[Policy]:
    """Read ``RateLimit-Policy``; members without a valid ``q`` are dropped with a log line."""
    policies: list[Policy] = []
    for raw, name, params in _members("RateLimit-Policy", value or ""):
        quota = _integer(params, "q", minimum=1)
        if quota is None:
            _dropped("RateLimit-Policy", raw, "q must be a positive integer")
            continue
        window = _integer(params, "w", minimum=1)
        if "w" in params and window is None:
            _dropped("RateLimit-Policy", raw, "w must be a positive integer")
            continue
        unit = params.get("qu", "requests")
        if unit not in UNITS:
            _dropped("RateLimit-Policy", raw, f"unknown quota unit qu={unit!r}")
            continue
        partition, usable = _partition(params)
        if not usable:
            _dropped("RateLimit-Policy", raw, "pk must be a byte sequence")
            continue
        policies.append(Policy(name, quota, window, str(unit), partition))
    return policies


def parse_ratelimit(value: str | None, policies: list[Policy]) -> list[Budget]:
    """Read ``RateLimit``, matching each member to its policy by name and partition.

    Args:
        value: the field's value.
        policies: what :func:`parse_policies` read from the same response.

    Returns:
        The budgets, in field order; members without a valid ``r`` (or with an
        invalid ``t`` or ``pk``) are dropped with a log line.
    """
    budgets: list[Budget] = []
    for raw, name, params in _members("RateLimit", value or ""):
        remaining = _integer(params, "r", minimum=0)
        if remaining is None:
            _dropped("RateLimit", raw, "r must be a non-negative integer")
            continue
        span = _seconds(params, "t")
        if "t" in params and span is None:
            _dropped("RateLimit", raw, "t must be a non-negative number of seconds")
            continue
        partition, usable = _partition(params)
        if not usable:
            _dropped("RateLimit", raw, "pk must be a byte sequence")
            continue
        # Two partition keys are two budgets: a policy only describes its own partition.
        policy = next((p for p in policies if p.name == name and p.partition == partition), None)
        if policy is None and partition is not None:
            policy = next((p for p in policies if p.name == name and p.partition is None), None)
        budgets.append(Budget(name, remaining, span, partition, policy))
    return budgets


@dataclass(frozen=True, slots=True)
class Binding:
    """What the strictest of a response's budgets allows the next request.

    Attributes:
        budget: the budget that binds.
        hold: seconds to hold every send (a spent budget's span), if any.
        pace: seconds between requests, if a pace is known.
        pace_for: seconds for which that pace holds.
        concurrency: requests that may be in flight at once, from a
            ``concurrent-requests`` policy.
    """

    budget: Budget
    hold: float | None
    pace: float | None
    pace_for: float
    concurrency: int | None


def binding(budgets: list[Budget], content_length: float | None) -> Binding | None:
    """The strictest of ``budgets`` for the next request.

    A ``content-bytes`` budget turns into a pace per request by assuming the
    next response is as large as this one (``content_length``); without that
    size it only counts when spent. A ``concurrent-requests`` budget caps
    concurrency at its policy's ``q`` (or at what is in flight plus ``r``
    when there is no policy) and holds nothing.
    """
    best: tuple[float, float, Budget, float | None] | None = None
    concurrency: int | None = None
    for budget in budgets:
        if budget.unit == "concurrent-requests":
            cap = budget.policy.quota if budget.policy is not None else budget.remaining + 1.0
            concurrency = int(cap) if concurrency is None else min(concurrency, int(cap))
            continue
        per_unit = budget.seconds_per_unit()
        size = 1.0
        if budget.unit == "content-bytes":
            size = content_length if content_length is not None and content_length > 0 else 0.0
        if budget.unit == "requests":
            spent = budget.remaining < 1.0
        else:
            spent = budget.remaining <= 0.0 or budget.remaining < size
        span = budget.span if budget.span is not None else (
            budget.policy.window if budget.policy is not None else None)
        if spent:
            # A spent budget outranks any pace; the longest hold binds.
            key = (math.inf, span or 0.0)
            pace = None
        else:
            pace = None if per_unit is None or size == 0.0 else per_unit * size
            key = (pace or 0.0, span or 0.0)
        if best is None or key > best[:2]:
            best = (*key, budget, pace)
    if best is None:
        if concurrency is None:
            return None
        budget = next(b for b in budgets if b.unit == "concurrent-requests")
        return Binding(budget, None, None, 0.0, concurrency)
    strictest, pace = best[2], best[3]
    span = strictest.span if strictest.span is not None else (
        strictest.policy.window if strictest.policy is not None else None)
    if best[0] == math.inf:
        return Binding(strictest, span, None, 0.0, concurrency)
    return Binding(strictest, None, pace, span or 0.0, concurrency)
