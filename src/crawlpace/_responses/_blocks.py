"""Soft blocks: responses that refuse the crawler without saying 429.

Some sites answer an overloaded or suspicious client with a 200 or 403
"challenge" page, a header such as ``cf-mitigated: challenge``, or an RFC 9457
``application/problem+json`` body naming a quota or capacity problem. Counted
as successes, such answers would let rampup climb into a wall. A
:class:`BlockRules` matcher recognises them so that the caller can treat them
as pushback: back the scope off as for a 429, resend within its retries, and
say in its record which rule matched.

Rules come in four kinds:

- body rules, written ``REGEX[:STATUS[,STATUS...]]`` (``captcha:200``,
  ``Access denied:403,503``, or ``verify you are human`` for any status); the
  pattern is searched in the first :data:`SCAN_BYTES` bytes of the body;
- the default body rules (:data:`DEFAULT_RULES`, on unless the setting
  ``block_defaults`` is false): the markers of well-known bot-shield
  interstitials (Cloudflare's "Just a moment...", Imperva, DataDome, HUMAN,
  Sucuri), each for a few statuses and for a small HTML body only
  (:data:`DEFAULT_MAX_BYTES`), so that a page of content that merely embeds a
  captcha widget, or quotes a marker, is no block;
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
from typing import Protocol

from .._exceptions import ConfigError

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_RULES", "PROBLEM_TYPES", "SCAN_BYTES", "BlockRule", "BlockRules",
           "BlockSettings", "parse_block_rules"]

_log = logging.getLogger(__name__)

#: Bytes at the start of a body that body rules search.
SCAN_BYTES = 64 * 1024
#: Problem types (the last part of the ``type`` URI) that mean "you are being limited".
PROBLEM_TYPES = frozenset({"quota-exceeded", "temporary-reduced-capacity", "abnormal-usage-detected"})

#: The largest body a default rule judges. A shield's interstitial is a few KiB of HTML (Cloudflare's
#: "Just a moment..." about 5-30 KiB with its inline style and script); a page of content is usually
#: larger, and one that quotes a marker (a help page about bot shields, say) should stay content.
DEFAULT_MAX_BYTES = 48 * 1024
#: The statuses the interstitials come with: 403 (Cloudflare's managed challenge, DataDome, HUMAN,
#: Imperva, Sucuri), 503 (Cloudflare's older "I'm under attack" page), and 200 for shields that serve
#: the page in place of the content. Not 429: that is pushback already, and its hold (Retry-After)
#: must reach the throttler at once, not after the body was read.
_INTERSTITIAL = (200, 403, 503)

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
    #: A default rule's name (``"default cloudflare challenge"``), reported instead of its pattern.
    name: str = ""
    #: The largest body the rule judges (None: any), and only a body not announced as another type
    #: than HTML: the limits of the default rules.
    max_bytes: int | None = None

    @property
    def label(self) -> str:
        """How a match is reported: the name of a default rule, else the rule as written."""
        return self.name or self.spec

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

    def matches(self, status: int | None, body: bytes, content_type: str = "") -> bool:
        """Whether a response with ``status``, ``body`` and ``content_type`` is a block by this rule."""
        if self.statuses and status not in self.statuses:
            return False
        if self.max_bytes is not None and (len(body) > self.max_bytes or not _html_or_unsaid(content_type)):
            return False
        return self.pattern.search(body, 0, SCAN_BYTES) is not None


def _default(name: str, pattern: str, statuses: Iterable[int]) -> BlockRule:
    codes = frozenset(statuses)
    spec = f"{pattern}:{','.join(str(code) for code in sorted(codes))}"
    return BlockRule(spec, re.compile(pattern.encode("ascii"), re.IGNORECASE), codes,
                     name=f"default {name}", max_bytes=DEFAULT_MAX_BYTES)


#: The default body rules: markers that only a shield's interstitial carries (a widget embedded in a
#: form, such as Turnstile, reCAPTCHA or hCaptcha, or the detection script Cloudflare adds to every
#: page, carries none of them). Each applies to a few statuses and to a small HTML body only.
DEFAULT_RULES: tuple[BlockRule, ...] = (
    # Cloudflare's managed and JavaScript challenges ("Just a moment..."; the challenge options object
    # only a challenge page defines) and its block page ("Attention Required! | Cloudflare").
    _default("cloudflare challenge",
             r"<title>\s*Just a moment\.\.\.\s*</title>|window\._cf_chl_opt\b"
             r"|<title>\s*Attention Required! \| Cloudflare\s*</title>", _INTERSTITIAL),
    # Imperva (Incapsula): the incident page and its resource frame.
    _default("imperva", r"Incapsula incident ID|/_Incapsula_Resource\?", _INTERSTITIAL),
    # DataDome: the captcha page loads from captcha-delivery.com (normal pages load js.datadome.co).
    _default("datadome", r"\b(?:geo|ct)\.captcha-delivery\.com\b", (403,)),
    # HUMAN (PerimeterX): the block page's captcha element (normal pages carry only the sensor).
    _default("human", r"""id=["']px-captcha["']""", (403,)),
    # Sucuri's firewall page.
    _default("sucuri", r"Sucuri WebSite Firewall - (?:CloudProxy - )?Access Denied", (403, 503)),
)


class BlockSettings(Protocol):
    """What :meth:`BlockRules.of` reads from a settings object: the user's rules, and the defaults' switch."""

    @property
    def block_rules(self) -> tuple[str, ...]:
        ...

    @property
    def block_defaults(self) -> bool:
        ...


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
        rules: body rules as ``REGEX[:STATUS]`` strings, tried first.
        defaults: add :data:`DEFAULT_RULES` after them.

    Raises:
        ConfigError: when a rule does not parse.
    """

    __slots__ = ("rules",)

    def __init__(self, rules: Iterable[str] = (), *, defaults: bool = True) -> None:
        own = tuple(BlockRule.parse(rule) for rule in rules)
        self.rules = (*own, *DEFAULT_RULES) if defaults else own

    @classmethod
    def of(cls, settings: BlockSettings) -> BlockRules:
        """The rules a settings object asks for (its ``block_rules``, and the defaults unless
        ``block_defaults`` is false): the one place the crawl, the clients, the throttler and the
        Scrapy add-on build theirs."""
        return cls(settings.block_rules, defaults=settings.block_defaults)

    def needs_body(self, status: int, headers: Mapping[str, str]) -> bool:
        """Whether telling a soft block from ``status`` and ``headers`` needs the body.

        True for a problem+json answer, for a user rule that covers ``status``, and for a default
        rule that covers it when the answer is HTML (or unlabelled), carries no ``Retry-After``
        (a hold must reach the throttler at once, and such an answer is pushback already) and
        its ``Content-Length`` is within what the rule judges; a 200 must announce its length (a
        page of content streamed without one may be large), a refusal's status need not. A
        client that reads bodies only when this says so leaves every other answer (a large
        download, a 200 of JSON) to stream.
        """
        kind = headers.get("content-type", "")
        if "problem+json" in kind.lower():
            return True
        length = _length(headers.get("content-length"))
        held = headers.get("retry-after") is not None
        for rule in self.rules:
            if rule.statuses and status not in rule.statuses:
                continue
            if rule.max_bytes is None:
                return True
            if held or not _html_or_unsaid(kind):
                continue
            if (length is None and status != 200) or (length is not None and length <= rule.max_bytes):
                return True
        return False

    def match(self, status: int | None, headers: Mapping[str, str], body: bytes) -> str | None:
        """Return the rule a response matches, or None when it is no block.

        Args:
            status: the response's status.
            headers: its headers, names lower-cased (other names are not found).
            body: its body, or the part of it that was read.

        Returns:
            ``"header cf-mitigated: challenge"``, ``"problem <type>"``, the
            spec of the first of the user's body rules that matched, or the
            name of a default rule (``"default cloudflare challenge"``).
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
            if rule.matches(status, body, content_type):
                return rule.label
        return None

    def __repr__(self) -> str:
        return f"<BlockRules {[rule.label for rule in self.rules]!r}>"


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


def _html_or_unsaid(content_type: str) -> bool:
    """Whether a ``Content-Type`` is HTML (or XHTML), or not given: what an interstitial is served as."""
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind in ("", "text/html", "application/xhtml+xml")


def _length(value: str | None) -> int | None:
    """A ``Content-Length`` as a number, None when absent or not a number (hostile input is ignored)."""
    if value is None:
        return None
    text = value.strip()
    return int(text) if text.isascii() and text.isdigit() else None
