"""Read the pacing hints that servers put in HTTP response headers.

Understands ``Retry-After`` (RFC 9110 section 10.2.3) and every rate-limit header
family seen in practice: the IETF ``RateLimit``/``RateLimit-Policy`` fields in their
current list form (read as draft-11 defines them, see :mod:`crawlpace._ratelimit`)
and their draft-07 dictionary form, the older
``RateLimit-Limit``/``-Remaining``/``-Reset`` trio, and the vendor headers
``X-RateLimit-*`` and ``X-Rate-Limit-*``.

The functions here are total: bad input yields ``None`` (plus a debug log line),
never an exception. No clock is read; the caller passes the wall-clock time at
which the response arrived, and a cap bounding every wait.
"""

from __future__ import annotations

import logging
import math
import re
import sys
from dataclasses import dataclass, replace
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, NamedTuple

from ._ratelimit import binding, parse_policies, parse_ratelimit

__all__ = ["ServerHint", "header_items", "parse_hints", "parse_reset", "parse_retry_after"]

_log = logging.getLogger(__name__)

_WANTED = frozenset({"retry-after", "date", "ratelimit", "ratelimit-policy", "ratelimit-limit",
                     "ratelimit-remaining", "ratelimit-reset", "content-length"})
_VENDORS = (("x-ratelimit-", "x-ratelimit"), ("x-rate-limit-", "x-rate-limit"))
_OWS = " \t\r\n"
# Read only beside a pacing header: alone they say nothing.
_CONTEXT = frozenset({"date", "content-length"})

# Plain decimal numbers only: no sign, no "inf"/"nan", ASCII digits only.
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", re.ASCII)
_QUOTED = r'"(?:[^"\\]|\\.)*"'
# Members of a comma-separated list; commas inside quoted strings do not split.
_MEMBER = re.compile(r'(?:"(?:[^"\\]|\\.)*"?|[^,"])+', re.DOTALL)
# The bare item that names a structured-field list member: string, token or number.
_ITEM_NAME = re.compile(rf"{_QUOTED}|[A-Za-z*][A-Za-z0-9:/!#$%&'*+.^_`|~-]*|[0-9]+(?:\.[0-9]+)?", re.ASCII)
_PARAM = re.compile(rf'[ \t]*;[ \t]*([a-z*][a-z0-9_.*-]*)(?:=({_QUOTED}|[^;"\s]*))?', re.ASCII)
_DICT_MEMBER = re.compile(r"([A-Za-z*][A-Za-z0-9_.*-]*)[ \t]*=[ \t]*([^;]*)(?:;.*)?", re.ASCII | re.DOTALL)


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

    def __repr__(self) -> str:
        # Only what the server said: most responses fill two or three of the twelve fields.
        shown = [f"{name}={getattr(self, name)!r}" for name in self.__dataclass_fields__
                 if getattr(self, name) != self.__dataclass_fields__[name].default]
        return f"ServerHint({', '.join(shown)})"


class _Item(NamedTuple):
    """One member of a structured-field list: its name and its parameters."""

    name: str
    quoted: bool
    params: dict[str, str]


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
    return name in _WANTED or name.startswith(("x-ratelimit-", "x-rate-limit-"))


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


def _ignored(name: str, value: str) -> None:
    _log.debug("ignoring malformed %s header value %r", name, value[:80])


def _number(text: str | None) -> float | None:
    """Parse a plain non-negative decimal; absurdly long digit strings give inf."""
    if text is None:
        return None
    text = text.strip(_OWS)
    return float(text) if _NUMBER.fullmatch(text) else None


def _clamp(seconds: float, cap: float) -> float | None:
    """Bound a number of seconds to ``[0, cap]`` (and to a finite value)."""
    if math.isnan(seconds) or math.isnan(cap):
        return None
    return min(max(seconds, 0.0), max(cap, 0.0), sys.float_info.max)


def _http_date(text: str) -> float | None:
    """POSIX time of an HTTP-date (any of the three RFC 9110 formats), or None."""
    text = text.strip(_OWS)
    if not text:
        return None
    try:
        moment = parsedate_to_datetime(text)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        stamp = moment.timestamp()
    except Exception:
        return None
    return stamp if math.isfinite(stamp) else None


def parse_retry_after(value: str, *, date: str | None, wall_now: float, cap: float) -> float | None:
    """Turn a ``Retry-After`` value into seconds to wait.

    Args:
        value: The header value: delay-seconds (a decimal fraction is tolerated)
            or an HTTP-date.
        date: The response's ``Date`` header, if any. A date value is measured
            against it when it parses, which keeps client clock skew out.
        wall_now: POSIX wall-clock time at which the response arrived; the
            reference for a date value when ``date`` is missing or unusable.
        cap: Longest wait, in seconds, that may be returned.

    Returns:
        Seconds in ``[0, cap]`` (a date in the past gives 0.0), or None when the
        value is unusable (empty, negative, not a number or date).
    """
    delay = _number(value)
    if delay is None:
        target = _http_date(value)
        if target is not None:
            base = None if date is None else _http_date(date)
            delay = target - (wall_now if base is None else base)
    seconds = None if delay is None else _clamp(delay, cap)
    if seconds is None:
        _ignored("Retry-After", value)
    return seconds


def parse_reset(value: str, *, wall_now: float, cap: float) -> float | None:
    """Turn a reset value of unknown style into seconds until the reset.

    Numbers above 1e12 are read as epoch milliseconds, numbers above 1e9 as epoch
    seconds, smaller ones as a delay in seconds. An HTTP-date is accepted too.

    Args:
        value: The header value.
        wall_now: POSIX wall-clock time at which the response arrived.
        cap: Longest wait, in seconds, that may be returned.

    Returns:
        Seconds in ``[0, cap]`` (a moment in the past gives 0.0), or None when
        the value is unusable.
    """
    number = _number(value)
    if number is None:
        stamp = _http_date(value)
        delta = None if stamp is None else stamp - wall_now
    elif number > 1e12:
        delta = number / 1000.0 - wall_now
    elif number > 1e9:
        delta = number - wall_now
    else:
        delta = number
    seconds = None if delta is None else _clamp(delta, cap)
    if seconds is None:
        _ignored("reset", value)
    return seconds


def _count(value: str | None, name: str) -> float | None:
    """A finite non-negative number from a present header or parameter, else None."""
    number = _number(value)
    if value is not None and (number is None or math.isinf(number)):
        _ignored(name, value)
        return None
    return number


def _positive(value: str | None, name: str) -> float | None:
    number = _count(value, name)
    if number == 0.0 and value is not None:
        _ignored(name, value)
    return number if number else None


def _delay(value: str | None, name: str, cap: float) -> float | None:
    """Delay seconds from a present header or parameter, clamped to the cap."""
    number = _number(value)
    if value is not None and number is None:
        _ignored(name, value)
    return None if number is None else _clamp(number, cap)


def _items(value: str | None) -> list[_Item]:
    """Parse a structured-field list leniently, dropping members that do not parse."""
    parsed: list[_Item] = []
    for member in _MEMBER.findall(value or ""):
        member = member.strip(_OWS)
        head = _ITEM_NAME.match(member)
        if head is None:
            continue
        params: dict[str, str] = {}
        pos = head.end()
        while pos < len(member) and (param := _PARAM.match(member, pos)) is not None:
            params[param.group(1)] = "?1" if param.group(2) is None else param.group(2)
            pos = param.end()
        if pos == len(member):
            name, quoted = head.group(), head.group().startswith('"')
            name = re.sub(r"\\(.)", r"\1", name[1:-1]) if quoted else name
            parsed.append(_Item(name, quoted, params))
    return parsed


def _limit_and_window(value: str | None, name: str) -> tuple[float | None, float | None]:
    """Quota and window from ``100`` / ``100, 100;w=60`` style values (first number wins)."""
    numbered = [item for item in _items(value) if not item.quoted and _NUMBER.fullmatch(item.name)]
    limit = _positive(numbered[0].name, name) if numbered else None
    windows = [item.params["w"] for item in numbered if "w" in item.params]
    return limit, _positive(windows[0], name) if windows else None


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
            return ServerHint(remaining=remaining, reset=reset, limit=limit, window=window, source=source)
    return None


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
    if rate is not None:
        return replace(rate, retry_after=retry_after)
    return None if retry_after is None else ServerHint(retry_after=retry_after, source="retry-after")
