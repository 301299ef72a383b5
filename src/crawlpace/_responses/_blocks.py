"""Soft blocks: responses that refuse the crawler without saying 429.

Some sites answer an overloaded or suspicious client with a 200 or 403
"challenge" page, a header such as ``cf-mitigated: challenge``, or an RFC 9457
``application/problem+json`` body naming a quota or capacity problem. Counted
as successes, such answers would let rampup climb into a wall. A
:class:`BlockRules` matcher recognises them so that the caller can treat them
as pushback: back the scope off as for a 429, resend within its retries, and
say in its record which rule matched.

Rules come in three kinds:

- body rules, written ``REGEX[:STATUS[,STATUS...]]`` (``captcha:200``,
  ``Access denied:403,503``, or ``verify you are human`` for any status); the
  pattern is searched in the first :data:`SCAN_BYTES` bytes of the body;
- the header rule ``cf-mitigated: challenge`` (always on);
- the problem-type rule: a ``problem+json`` body whose ``type`` is one of
  the RateLimit draft's ``quota-exceeded``, ``temporary-reduced-capacity``
  or ``abnormal-usage-detected`` (always on).

Matching is pure: no I/O, no clock; bad input never raises.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .._exceptions import ConfigError

__all__ = ["PROBLEM_TYPES", "SCAN_BYTES", "BlockRule", "BlockRules", "parse_block_rules"]

_log = logging.getLogger(__name__)

#: Bytes at the start of a body that body rules search.
SCAN_BYTES = 64 * 1024
#: Problem types (the last part of the ``type`` URI) that mean "you are being limited".
PROBLEM_TYPES = frozenset({"quota-exceeded", "temporary-reduced-capacity", "abnormal-usage-detected"})

_STATUSES = re.compile(r"[1-5][0-9][0-9](?:,[1-5][0-9][0-9])*", re.ASCII)


@dataclass(frozen=True, slots=True)
class BlockRule:
    """One body rule: a pattern searched in the body, for some statuses or all.

    Attributes:
        spec: the rule as written, which is also how a match is reported.
        pattern: the compiled pattern, searched in the body's bytes.
        statuses: the statuses it applies to; empty for every status.
    """

    spec: str
    pattern: re.Pattern[bytes]
    statuses: frozenset[int] = frozenset()

    @classmethod
    def parse(cls, spec: str, label: str = "block_rules") -> BlockRule:
        """Read ``REGEX[:STATUS[,STATUS...]]``.

        A trailing ``:`` followed by three-digit statuses names the statuses;
        any other colon belongs to the pattern.

        Raises:
            ConfigError: naming ``label`` when the rule is empty or its
                pattern does not compile.
        """
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError([f"{label}: {spec!r} is not a rule; write REGEX or REGEX:STATUS, "
                               "e.g. 'captcha:200'"])
        text, statuses = spec, frozenset[int]()
        head, sep, tail = spec.rpartition(":")
        if sep and head and _STATUSES.fullmatch(tail):
            text, statuses = head, frozenset(int(code) for code in tail.split(","))
        try:
            pattern = re.compile(text.encode("utf-8"), re.IGNORECASE)
        except re.error as exc:
            raise ConfigError([f"{label}: {spec!r} is not a valid regular expression ({exc}); escape "
                               "special characters, e.g. 'Access denied \\(bot\\):403'"]) from exc
        return cls(spec, pattern, statuses)

    def matches(self, status: int | None, body: bytes) -> bool:
        """Whether a response with ``status`` and ``body`` is a block by this rule."""
        if self.statuses and status not in self.statuses:
            return False
        return self.pattern.search(body, 0, SCAN_BYTES) is not None


def parse_block_rules(label: str, value: object) -> tuple[str, ...]:
    """Check a ``block_rules`` setting and return it as a tuple of rule strings.

    Raises:
        ConfigError: naming ``label``, the bad value and the fix.
    """
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise ConfigError([f"{label}: expected a list of 'REGEX[:STATUS]' strings, got "
                           f"{type(value).__name__} {value!r}"])
    problems: list[str] = []
    for item in value:
        try:
            BlockRule.parse(item, label)
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return tuple(value)


class BlockRules:
    """Decide whether a response is a soft block, and by which rule.

    Args:
        rules: body rules as ``REGEX[:STATUS]`` strings.

    Raises:
        ConfigError: when a rule does not parse.
    """

    __slots__ = ("rules",)

    def __init__(self, rules: Iterable[str] = ()) -> None:
        self.rules = tuple(BlockRule.parse(rule) for rule in rules)

    def match(self, status: int | None, headers: Mapping[str, str], body: bytes) -> str | None:
        """Return the rule a response matches, or None when it is no block.

        Args:
            status: the response's status.
            headers: its headers, names lower-cased (other names are not found).
            body: its body, or the part of it that was read.

        Returns:
            ``"header cf-mitigated: challenge"``, ``"problem <type>"``, or the
            spec of the first body rule that matched.
        """
        mitigated = headers.get("cf-mitigated")
        if mitigated is not None and mitigated.strip().lower() == "challenge":
            return "header cf-mitigated: challenge"
        content_type = headers.get("content-type", "")
        if content_type.split(";", 1)[0].strip().lower() == "application/problem+json":
            problem = _problem_type(body)
            if problem is not None:
                return f"problem {problem}"
        for rule in self.rules:
            if rule.matches(status, body):
                return rule.spec
        return None

    def __repr__(self) -> str:
        return f"<BlockRules {[rule.spec for rule in self.rules]!r}>"


def _problem_type(body: bytes) -> str | None:
    """The limiting problem type a problem+json body names, if any."""
    try:
        data = json.loads(body[:SCAN_BYTES])
    except (ValueError, UnicodeDecodeError):
        _log.debug("ignoring a problem+json body that is not JSON")
        return None
    kind = data.get("type") if isinstance(data, dict) else None
    if not isinstance(kind, str):
        return None
    name = re.split(r"[#/]", kind.rstrip("/"))[-1]
    return name if name in PROBLEM_TYPES else None
