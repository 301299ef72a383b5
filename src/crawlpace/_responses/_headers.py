"""Read the pacing hints that servers put in HTTP response headers.

Understands ``Retry-After`` (RFC 9110 section 10.2.3) and every rate-limit header
family seen in practice: the IETF ``RateLimit``/``RateLimit-Policy`` fields in their
current list form (read as draft-11 defines them, see :mod:`crawlpace._responses._ratelimit`)
and their draft-07 dictionary form, the older
``RateLimit-Limit``/``-Remaining``/``-Reset`` trio, and the vendor headers
``X-RateLimit-*`` and ``X-Rate-Limit-*``. The several budgets of LLM and
metered APIs (requests and tokens per minute, input and output tokens apart)
are read from ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` (resets
as durations such as ``6m0s``) and ``anthropic-ratelimit-*`` (resets as RFC 3339
times), see :func:`parse_budgets`.

The functions here are total: bad input yields ``None`` (plus a debug log line),
never an exception. No clock is read; the caller passes the wall-clock time at
which the response arrived, and a cap bounding every wait.

This module finds the headers and reads each family; how one value is read
(numbers, delays, HTTP-dates, structured-field lists) is :mod:`crawlpace._responses._header_values`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

from ..policy.tokens import BUDGET_KINDS
from ._header_values import DICT_MEMBER as _DICT_MEMBER
from ._header_values import MEMBER as _MEMBER
from ._header_values import OWS as _OWS
from ._header_values import clamp as _clamp
from ._header_values import ignored as _ignored
from ._header_values import parse_count as _count
from ._header_values import parse_delay as _delay
from ._header_values import parse_duration as _duration
from ._header_values import parse_items as _items
from ._header_values import parse_limit_and_window as _limit_and_window
from ._header_values import parse_number as _number
from ._header_values import parse_positive as _positive
from ._header_values import parse_reset, parse_retry_after
from ._header_values import parse_timestamp as _timestamp
from ._ratelimit import binding, parse_policies, parse_ratelimit

__all__ = ["BUDGET_KINDS", "Announced", "ServerHint", "header_items", "parse_budgets", "parse_hints",
           "parse_reset", "parse_retry_after"]

_log = logging.getLogger(__name__)

_WANTED = frozenset({"retry-after", "date", "ratelimit", "ratelimit-policy", "ratelimit-limit",
                     "ratelimit-remaining", "ratelimit-reset", "content-length"})
_VENDORS = (("x-ratelimit-", "x-ratelimit"), ("x-rate-limit-", "x-rate-limit"))
# Read only beside a pacing header: alone they say nothing.
_CONTEXT = frozenset({"date", "content-length"})

#: The window a budget is taken to have when its headers cannot tell (both vendors
#: document requests and tokens *per minute*).
ASSUMED_WINDOW = 60.0
# A window is inferred from a refill only past this share of the limit used: a few
# units' reset, rounded to whole seconds or milliseconds, says little.
_INFER_SHARE = 0.1
# Windows a budget's refill is snapped to: a count per second, minute, hour or day.
_WINDOWS = (1.0, 60.0, 3600.0, 86400.0)


@dataclass(frozen=True, slots=True)
class Announced:
    """One budget of a metered API as one answer announced it.

    Attributes:
        kind: what it counts, one of :data:`BUDGET_KINDS`.
        limit: units per window (positive).
        remaining: units left now (at least 0), when given.
        reset: seconds until the budget is full again (or resets), when given.
        window: the window in seconds: inferred from the refill the answer shows
            (``limit - remaining`` units come back in ``reset`` seconds), snapped
            to a second, minute, hour or day; a minute when it cannot tell.
    """

    kind: str
    limit: float
    remaining: float | None = None
    reset: float | None = None
    window: float = ASSUMED_WINDOW


@dataclass(frozen=True, slots=True)
class ServerHint:
    """What a response said about how long to wait and how much quota is left.

    Every field is optional; ``None`` means the server did not say (or said
    something unusable). All numbers are finite.

    Attributes:
        retry_after: Seconds to wait, counted from receipt of the response, in ``[0, cap]``.
        remaining: Requests (quota units) left in the current window, at least 0.
        reset: Seconds until the quota refills or the window resets, in ``[0, cap]``.
        limit: Quota per window, when announced (positive).
        window: Window length in seconds, when announced (positive, not capped).
        source: Header family the rate-limit fields came from: ``"ratelimit"``,
            ``"ratelimit-draft07"``, ``"ratelimit-trio"``, ``"x-ratelimit"``,
            ``"x-rate-limit"``, ``"ratelimit-policy"`` (a policy announced
            alone), or ``"retry-after"`` when only that header counted.
        hold: Seconds to hold every send because the binding budget is spent
            (``RateLimit`` and ``RateLimit-Policy`` only; the other families
            leave it to ``remaining`` and ``reset``).
        pace: Seconds between requests the binding budget allows, for ...
        pace_for: ... this many seconds (current ``RateLimit`` form only).
        concurrency: Requests that may be in flight at once, from a
            ``concurrent-requests`` policy.
        policy: Name of the binding ``RateLimit`` policy.
        partition: Its partition key (``pk``), when it has one.
        unit: What ``remaining`` and ``limit`` count (``RateLimit`` policies:
            ``requests``, ``content-bytes``...).
        budgets: The budgets of a metered API (requests, tokens, input and
            output tokens), when its budget headers announce them.
        reset_whole: ``reset`` came from a reset moment in whole seconds
            (``X-RateLimit-Reset: 1800000000``): the reset itself may lie up
            to a second before it (see :class:`crawlpace.policy.budget.ResetRefiner`).
    """

    retry_after: float | None = None
    remaining: float | None = None
    reset: float | None = None
    limit: float | None = None
    window: float | None = None
    source: str = ""
    hold: float | None = None
    pace: float | None = None
    pace_for: float = 0.0
    concurrency: int | None = None
    policy: str | None = None
    partition: bytes | None = None
    unit: str = "requests"
    budgets: tuple[Announced, ...] = ()
    reset_whole: bool = False

    def __repr__(self) -> str:
        # Only what the server said: most responses fill two or three of the twelve fields.
        shown = [f"{name}={getattr(self, name)!r}" for name in self.__dataclass_fields__
                 if getattr(self, name) != self.__dataclass_fields__[name].default]
        return f"ServerHint({', '.join(shown)})"


def _text(value: object) -> str | None:
    """Turn one header name or value into text, or None when it is not usable."""
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _wanted(name: str) -> bool:
    return name in _WANTED or name.startswith(("x-ratelimit-", "x-rate-limit-", "anthropic-ratelimit-"))


def header_items(headers: object) -> dict[str, str]:
    """Collect the headers that carry pacing hints from any common container.

    Accepts plain mappings (text or bytes keys and values), Scrapy's ``Headers``
    (values are lists of bytes), httpx and aiohttp header objects, or an iterable
    of ``(name, value)`` pairs. For a list value the first element counts; when a
    name repeats, its first occurrence wins. Anything else yields an empty dict.

    Args:
        headers: The response headers, in whatever shape the HTTP client uses.

    Returns:
        Lower-cased header name mapped to its value, for the relevant names only.
        If reading the container fails part way, whatever was read before.
    """
    found: dict[str, str] = {}
    if headers is None or isinstance(headers, str | bytes | bytearray):
        return found
    try:
        # httpx's items() joins repeated names with commas; multi_items() keeps them apart.
        multi, items = getattr(headers, "multi_items", None), getattr(headers, "items", None)
        pairs: Any = multi() if callable(multi) else items() if callable(items) else headers
        for name, value in pairs:
            key = name if isinstance(name, str) else _text(name)
            if key is None:
                continue
            key = key.strip(_OWS).lower()
            if key in found or not _wanted(key):  # most headers: their value is never read
                continue
            text = _text(value)
            if text is not None:
                found[key] = text.strip(_OWS)
    except Exception:
        _log.debug("stopped reading headers of type %s", type(headers).__name__, exc_info=True)
    return found


def _current_form(items: dict[str, str], cap: float) -> ServerHint | None:
    """The ``RateLimit`` list form of drafts -08 to -11, read as -11 defines it."""
    policies = parse_policies(items.get("ratelimit-policy"))
    budgets = parse_ratelimit(items.get("ratelimit"), policies)
    size = _number(items.get("content-length"))
    bound = binding(budgets, None if size is None or math.isinf(size) else size)
    if bound is None:
        return None
    budget, policy = bound.budget, bound.budget.policy
    return ServerHint(
        remaining=budget.remaining, reset=None if budget.span is None else _clamp(budget.span, cap),
        source="ratelimit", limit=None if policy is None else policy.quota,
        window=None if policy is None else policy.window,
        hold=None if bound.hold is None else _clamp(bound.hold, cap),
        pace=None if bound.pace is None else _clamp(bound.pace, cap),
        pace_for=_clamp(bound.pace_for, cap) or 0.0, concurrency=bound.concurrency, policy=budget.name,
        partition=budget.partition, unit=budget.unit)


def _policy_alone(items: dict[str, str], cap: float) -> ServerHint | None:
    """``RateLimit-Policy`` without ``RateLimit``: the strictest ``q``/``w`` is the pace."""
    policies = [p for p in parse_policies(items.get("ratelimit-policy"))
                if p.unit == "requests" and p.window is not None]
    if not policies:
        return None
    strictest = max(policies, key=lambda p: (p.window or 0.0) / p.quota)
    window = strictest.window or 0.0
    return ServerHint(limit=strictest.quota, window=window, source="ratelimit-policy",
                      pace=_clamp(window / strictest.quota, cap), pace_for=min(window, max(cap, 0.0)),
                      policy=strictest.name, partition=strictest.partition)


def _ratelimit_field(items: dict[str, str], cap: float) -> ServerHint | None:
    """The ``RateLimit`` field: current list form (draft -08 on) or draft-07 dictionary."""
    value = items.get("ratelimit")
    if value is None:
        return None
    current = _current_form(items, cap)
    if current is not None:
        return current
    if any(item.quoted or "r" in item.params for item in _items(value)):
        return None  # the list form, every member of it unusable (logged)
    fields: dict[str, str] = {}
    for member in _MEMBER.findall(value):
        if (match := _DICT_MEMBER.fullmatch(member.strip(_OWS))) is not None:
            fields.setdefault(match.group(1).lower(), match.group(2))
    remaining = _count(fields.get("remaining"), "RateLimit")
    reset = _delay(fields.get("reset"), "RateLimit", cap)
    if remaining is None and reset is None:
        _ignored("RateLimit", value)
        return None
    limit, window = _limit_and_window(items.get("ratelimit-policy"), "RateLimit-Policy")
    if "limit" in fields:
        limit = _positive(fields["limit"], "RateLimit")
    return ServerHint(remaining=remaining, reset=reset, limit=limit, window=window,
                      source="ratelimit-draft07")


def _trio(items: dict[str, str], wall_now: float, cap: float) -> ServerHint | None:
    """The ``RateLimit-Limit``/``-Remaining``/``-Reset`` headers of drafts -00 to -06."""
    remaining = _count(items.get("ratelimit-remaining"), "RateLimit-Remaining")
    raw_reset = items.get("ratelimit-reset")
    reset = None if raw_reset is None else parse_reset(raw_reset, wall_now=wall_now, cap=cap)
    if remaining is None and reset is None:
        return None
    limit, window = _limit_and_window(items.get("ratelimit-limit"), "RateLimit-Limit")
    policy_limit, policy_window = _limit_and_window(items.get("ratelimit-policy"), "RateLimit-Policy")
    return ServerHint(remaining=remaining, reset=reset, source="ratelimit-trio",
                      limit=policy_limit if limit is None else limit,
                      window=policy_window if window is None else window)


def _vendor(items: dict[str, str], wall_now: float, cap: float) -> ServerHint | None:
    """``X-RateLimit-*`` (GitHub, Reddit, Discord...) or ``X-Rate-Limit-*`` (Twitter)."""
    for prefix, source in _VENDORS:
        remaining = _count(items.get(prefix + "remaining"), prefix + "remaining")
        reset = _delay(items.get(prefix + "reset-after"), prefix + "reset-after", cap)
        raw_reset = items.get(prefix + "reset")
        if reset is None and raw_reset is not None:
            reset = parse_reset(raw_reset, wall_now=wall_now, cap=cap)
        if remaining is not None or reset is not None:
            limit, window = _limit_and_window(items.get(prefix + "limit"), prefix + "limit")
            # A whole number of seconds, or of epoch seconds (not of epoch milliseconds).
            digits = None if raw_reset is None else raw_reset.strip(_OWS)
            whole = reset is not None and digits is not None and prefix + "reset-after" not in items \
                and digits.isascii() and digits.isdigit() and len(digits) <= 12
            return ServerHint(remaining=remaining, reset=reset, limit=limit, window=window, source=source,
                              reset_whole=whole)
    return None


def _window_of(limit: float, remaining: float | None, reset: float | None) -> float:
    """The window a token-bucket budget refills over, from one answer (see :class:`Announced`)."""
    if remaining is None or reset is None or reset <= 0.0 or limit - remaining < _INFER_SHARE * limit:
        return ASSUMED_WINDOW  # too little used for its reset to say much
    refill = reset * limit / (limit - remaining)  # seconds to refill the whole limit
    return min(_WINDOWS, key=lambda window: abs(math.log(refill / window)))


def _one_budget(kind: str, limit_text: str | None, remaining_text: str | None, reset: float | None,
                name: str) -> Announced | None:
    limit = _positive(limit_text, name + " limit")
    if limit is None or math.isinf(limit):
        return None
    remaining = _count(remaining_text, name + " remaining")
    if remaining is not None and remaining > limit:
        _log.debug("%s: remaining %g above the limit %g, taken as the limit", name, remaining, limit)
        remaining = limit
    return Announced(kind, limit, remaining, reset, _window_of(limit, remaining, reset))


def parse_budgets(items: dict[str, str], *, wall_now: float, cap: float) -> tuple[Announced, ...]:
    """The budgets of a metered API from its headers (already gathered by :func:`header_items`).

    ``x-ratelimit-limit-KIND``, ``x-ratelimit-remaining-KIND`` and
    ``x-ratelimit-reset-KIND`` (a duration: ``6m0s``, ``1s``, ``20ms``) for KIND
    ``requests`` or ``tokens``; ``anthropic-ratelimit-KIND-limit``, ``-remaining``
    and ``-reset`` (an RFC 3339 time) for every kind of :data:`BUDGET_KINDS`.
    A budget needs a positive limit; bad values are dropped with a log line.

    Args:
        items: lower-cased header names and their values.
        wall_now: POSIX wall-clock time at which the response arrived.
        cap: longest reset, in seconds, that may be returned.
    """
    found: dict[str, Announced] = {}
    for kind in ("requests", "tokens"):
        limit = items.get(f"x-ratelimit-limit-{kind}")
        if limit is not None:
            name = f"x-ratelimit-*-{kind}"
            reset = _duration(items.get(f"x-ratelimit-reset-{kind}"), f"x-ratelimit-reset-{kind}", cap)
            got = _one_budget(kind, limit, items.get(f"x-ratelimit-remaining-{kind}"), reset, name)
            if got is not None:
                found[kind] = got
    for kind in BUDGET_KINDS:
        prefix = f"anthropic-ratelimit-{kind}-"
        limit = items.get(prefix + "limit")
        if limit is not None and kind not in found:
            reset = _timestamp(items.get(prefix + "reset"), prefix + "reset", wall_now=wall_now, cap=cap)
            got = _one_budget(kind, limit, items.get(prefix + "remaining"), reset, prefix + "*")
            if got is not None:
                found[kind] = got
    return tuple(found[kind] for kind in BUDGET_KINDS if kind in found)


def parse_hints(headers: object, *, wall_now: float, cap: float) -> ServerHint | None:
    """Read every pacing hint a response carries.

    Rate-limit fields come from the first header family that gives a remaining
    count or a reset time, in this order: ``RateLimit`` (current form), ``RateLimit``
    (draft-07 dictionary), the ``RateLimit-*`` trio, then ``X-RateLimit-*`` and
    ``X-Rate-Limit-*``; lacking all of them, a ``RateLimit-Policy`` of its own
    gives its quota's pace. ``Retry-After`` is read independently of them.

    Args:
        headers: The response headers in any shape :func:`header_items` accepts.
        wall_now: POSIX wall-clock time at which the response arrived.
        cap: Longest wait, in seconds, that any returned field may hold.

    Returns:
        The hints found, or None when no header yielded anything usable.
    """
    items = header_items(headers)
    if items.keys() <= _CONTEXT:  # most responses: no pacing header at all
        return None
    retry_after = None
    if "retry-after" in items:
        retry_after = parse_retry_after(items["retry-after"], date=items.get("date"),
                                        wall_now=wall_now, cap=cap)
    rate = (_ratelimit_field(items, cap) or _trio(items, wall_now, cap)
            or _vendor(items, wall_now, cap) or _policy_alone(items, cap))
    budgets = parse_budgets(items, wall_now=wall_now, cap=cap)
    if rate is not None:
        return replace(rate, retry_after=retry_after, budgets=budgets)
    if budgets:
        return ServerHint(retry_after=retry_after, source="budgets", budgets=budgets)
    return None if retry_after is None else ServerHint(retry_after=retry_after, source="retry-after")
