"""Reading one pacing header's value: numbers, delays, HTTP-dates, structured-field lists.

The lenient parsers :mod:`crawlpace._responses._headers` builds its header families from,
and the two public ones, :func:`parse_retry_after` and :func:`parse_reset`. Like
the rest, they are total: bad input yields ``None`` (plus a debug log line,
under ``crawlpace._responses._headers``), never an exception, and no clock is read.
"""

from __future__ import annotations

import logging
import math
import re
import sys
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import NamedTuple

__all__ = ["DICT_MEMBER", "MEMBER", "NUMBER", "OWS", "Item", "clamp", "http_date", "ignored", "parse_count",
           "parse_delay", "parse_duration", "parse_items", "parse_limit_and_window", "parse_number",
           "parse_positive", "parse_reset", "parse_retry_after", "parse_timestamp"]

_log = logging.getLogger("crawlpace._responses._headers")  # named in docs/concepts/server-hints.md

OWS = " \t\r\n"

# Plain decimal numbers only: no sign, no "inf"/"nan", ASCII digits only.
NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", re.ASCII)
_QUOTED = r'"(?:[^"\\]|\\.)*"'
# Members of a comma-separated list; commas inside quoted strings do not split.
MEMBER = re.compile(r'(?:"(?:[^"\\]|\\.)*"?|[^,"])+', re.DOTALL)
# The bare item that names a structured-field list member: string, token or number.
_ITEM_NAME = re.compile(rf"{_QUOTED}|[A-Za-z*][A-Za-z0-9:/!#$%&'*+.^_`|~-]*|[0-9]+(?:\.[0-9]+)?", re.ASCII)
_PARAM = re.compile(rf'[ \t]*;[ \t]*([a-z*][a-z0-9_.*-]*)(?:=({_QUOTED}|[^;"\s]*))?', re.ASCII)
DICT_MEMBER = re.compile(r"([A-Za-z*][A-Za-z0-9_.*-]*)[ \t]*=[ \t]*([^;]*)(?:;.*)?", re.ASCII | re.DOTALL)


class Item(NamedTuple):
    """One member of a structured-field list: its name and its parameters."""

    name: str
    quoted: bool
    params: dict[str, str]


def ignored(name: str, value: str) -> None:
    _log.debug("ignoring malformed %s header value %r", name, value[:80])


def parse_number(text: str | None) -> float | None:
    """Parse a plain non-negative decimal; absurdly long digit strings give inf."""
    if text is None:
        return None
    text = text.strip(OWS)
    return float(text) if NUMBER.fullmatch(text) else None


def clamp(seconds: float, cap: float) -> float | None:
    """Bound a number of seconds to ``[0, cap]`` (and to a finite value)."""
    if math.isnan(seconds) or math.isnan(cap):
        return None
    return min(max(seconds, 0.0), max(cap, 0.0), sys.float_info.max)


def http_date(text: str) -> float | None:
    """POSIX time of an HTTP-date (any of the three RFC 9110 formats), or None."""
    text = text.strip(OWS)
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
    delay = parse_number(value)
    if delay is None:
        target = http_date(value)
        if target is not None:
            base = None if date is None else http_date(date)
            delay = target - (wall_now if base is None else base)
    seconds = None if delay is None else clamp(delay, cap)
    if seconds is None:
        ignored("Retry-After", value)
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
    number = parse_number(value)
    if number is None:
        stamp = http_date(value)
        delta = None if stamp is None else stamp - wall_now
    elif number > 1e12:
        delta = number / 1000.0 - wall_now
    elif number > 1e9:
        delta = number - wall_now
    else:
        delta = number
    seconds = None if delta is None else clamp(delta, cap)
    if seconds is None:
        ignored("reset", value)
    return seconds


def parse_count(value: str | None, name: str) -> float | None:
    """A finite non-negative number from a present header or parameter, else None."""
    number = parse_number(value)
    if value is not None and (number is None or math.isinf(number)):
        ignored(name, value)
        return None
    return number


def parse_positive(value: str | None, name: str) -> float | None:
    number = parse_count(value, name)
    if number == 0.0 and value is not None:
        ignored(name, value)
    return number if number else None


def parse_delay(value: str | None, name: str, cap: float) -> float | None:
    """Delay seconds from a present header or parameter, clamped to the cap."""
    number = parse_number(value)
    if value is not None and number is None:
        ignored(name, value)
    return None if number is None else clamp(number, cap)


def parse_items(value: str | None) -> list[Item]:
    """Parse a structured-field list leniently, dropping members that do not parse."""
    parsed: list[Item] = []
    for member in MEMBER.findall(value or ""):
        member = member.strip(OWS)
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
            parsed.append(Item(name, quoted, params))
    return parsed


def parse_limit_and_window(value: str | None, name: str) -> tuple[float | None, float | None]:
    """Quota and window from ``100`` / ``100, 100;w=60`` style values (first number wins)."""
    numbered = [item for item in parse_items(value) if not item.quoted and NUMBER.fullmatch(item.name)]
    limit = parse_positive(numbered[0].name, name) if numbered else None
    windows = [item.params["w"] for item in numbered if "w" in item.params]
    return limit, parse_positive(windows[0], name) if windows else None




# Go's time.Duration text, as OpenAI sends it: "6m0s", "1s", "20ms", "1h2m3.5s", "850us".
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|ms|us|µs|ns|m|s)", re.ASCII)
_DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:h|ms|us|µs|ns|m|s))+")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(value: str | None, name: str, cap: float) -> float | None:
    """Seconds from a duration such as ``6m0s``, ``1s``, ``20ms`` (or plain seconds), clamped to the cap.

    Returns:
        Seconds in ``[0, cap]``; None (with a log line) when the value is unusable.
    """
    if value is None:
        return None
    text = value.strip(OWS)
    seconds: float | None = None
    if _DURATION.fullmatch(text):
        seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _DURATION_PART.findall(text))
    else:
        seconds = parse_number(text)
    result = None if seconds is None else clamp(seconds, cap)
    if result is None:
        ignored(name, value)
    return result


def parse_timestamp(value: str | None, name: str, *, wall_now: float, cap: float) -> float | None:
    """Seconds until an RFC 3339 time (``2026-11-28T17:20:00Z``), clamped to ``[0, cap]``.

    Returns:
        None (with a log line) when the value is unusable; 0.0 for a time in the past.
    """
    if value is None:
        return None
    text = value.strip(OWS)
    stamp: float | None = None
    if 0 < len(text) <= 40 and text[:4].isdigit():
        try:
            moment = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "zZ" else text)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            stamp = moment.timestamp()
        except (ValueError, OverflowError):
            stamp = None
    result = None if stamp is None or not math.isfinite(stamp) else clamp(stamp - wall_now, cap)
    if result is None:
        ignored(name, value)
    return result
