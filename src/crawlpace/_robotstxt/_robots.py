"""Reading what a site's robots.txt asks of a crawler: which URLs, and how often.

The throttling core takes the parsed Crawl-Delay (:meth:`Throttler.set_crawl_delay`);
this module turns robots.txt text into that value, and into the allow/deny
rules the crawl command applies, with protego, the parser Scrapy uses.
Fetching and caching robots.txt belong to the crawl command.

What an answer to a robots.txt fetch means follows RFC 9309 (section 2.3.1):

- 2xx: the body holds the rules; only its first :data:`MAX_ROBOTS_BYTES` are
  read (cut back to the last whole line), the rest is ignored with a warning;
- 3xx: the crawl follows up to :data:`ROBOTS_MAX_REDIRECTS` hops; one more,
  or a redirect that leads nowhere usable, counts as "unavailable";
- 4xx ("unavailable"): there are no rules, everything is allowed;
- 5xx, 429 and network errors ("unreachable"): everything is disallowed
  until a later fetch succeeds. 429 is a 4xx, but it says "too fast", not
  "there is no file", so it is treated like a server error, as Google does.

:func:`robots_verdict` is that table; the crawl command and
:class:`~crawlpace.frontier.RobotsCache` act on it. Broken input is never
fatal: a file the parser rejects is taken as allowing everything, with a
warning.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Literal

from protego import Protego

__all__ = ["MAX_ROBOTS_BYTES", "ROBOTS_MAX_REDIRECTS", "RobotsRules", "Verdict", "crawl_delay",
           "crawl_delay_scopes", "robots_verdict"]

logger = logging.getLogger(__name__)

#: Bytes of robots.txt that are read; Google reads 500 KiB and ignores the rest.
MAX_ROBOTS_BYTES = 500 * 1024
#: Redirect hops followed to reach robots.txt; RFC 9309 asks for at least five.
ROBOTS_MAX_REDIRECTS = 5
#: Resends of a robots.txt fetch that drew a backoff answer (429, 503...) before the origin
#: counts as unreachable: one lets a passing fault by, and a site that is down costs two
#: requests, not four. The crawl's default and the library clients' rule.
ROBOTS_RETRIES = 1

#: What a robots.txt answer means: ``"rules"`` (parse the body), ``"allow_all"``
#: (no usable file) or ``"unreachable"`` (disallow everything for now).
Verdict = Literal["rules", "allow_all", "unreachable"]


def robots_verdict(status: int | None) -> Verdict:
    """Classify the final answer to a robots.txt fetch (``None``: no answer at all).

    A 3xx reaching this function is one the crawl did not follow (too many
    hops, or a ``Location`` that is not http(s)): RFC 9309 lets a crawler
    treat that as unavailable, hence allow-all.
    """
    if status is None or status == 429 or status >= 500 or status < 200:
        return "unreachable"
    if status < 300:
        return "rules"
    return "allow_all"


def crawl_delay_scopes(host: str | None, scopes: tuple[str, ...]) -> tuple[str, ...]:
    """The scopes a host's robots.txt Crawl-delay applies to, given those its fetch ran under.

    The host's own scope when the robots.txt request held it (the usual
    case, and the answer when nothing is known of the request); otherwise
    every scope it was throttled under (a manager that groups hosts by
    server or registrable domain). The crawl and the Scrapy add-on both ask
    here.
    """
    if host is None:
        return scopes
    if not scopes or host in scopes:
        return (host,)
    return scopes


def _head(robots_txt: bytes) -> bytes:
    """The first :data:`MAX_ROBOTS_BYTES` of a file, cut back to a whole line."""
    if len(robots_txt) <= MAX_ROBOTS_BYTES:
        return robots_txt
    head = robots_txt[:MAX_ROBOTS_BYTES]
    end = head.rfind(b"\n")
    return head[:end + 1] if end >= 0 else head


_DELAY_LINE = re.compile(r"^[ \t]*crawl[-_ ]?delay[ \t]*:[ \t]*([^#\r\n]*?)[ \t]*(?:#.*)?$",
                         re.IGNORECASE | re.MULTILINE)


def _usable(text: str) -> bool:
    """Whether a Crawl-Delay value reads as a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and value >= 0.0


def crawl_delay(robots_txt: str | bytes, user_agent: str) -> float | None:
    """Return the Crawl-Delay that ``robots_txt`` sets for ``user_agent``, if any.

    Broken input never raises: undecodable bytes are replaced, bytes past
    :data:`MAX_ROBOTS_BYTES` are dropped (back to the last whole line), and a
    file the parser rejects, or a negative or non-finite delay, counts as no
    Crawl-Delay (with a warning).
    """
    if isinstance(robots_txt, str):
        robots_txt = robots_txt.encode("utf-8", errors="replace")
    robots_txt = _head(robots_txt).decode("utf-8", errors="replace")
    try:
        delay = Protego.parse(robots_txt).crawl_delay(user_agent)
    except Exception as exc:  # a parser bug must not stop a crawl: treat as "no rules"
        logger.warning("robots.txt could not be parsed (%s); ignoring its Crawl-Delay", exc)
        return None
    if delay is None:
        # The parser drops a delay it cannot use (inf, 1e309, nan, negative, words) without a word:
        # say so, as for any hostile input, naming the first such value.
        unusable = next((value for value in _DELAY_LINE.findall(robots_txt) if not _usable(value)), None)
        if unusable is not None:
            logger.warning("robots.txt Crawl-Delay %r is not a usable number of seconds; ignoring it",
                           unusable[:40])
        return None
    try:
        value = float(delay)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value) or value < 0.0:
        logger.warning("robots.txt Crawl-Delay %r is not a usable number of seconds; ignoring it", delay)
        return None
    return value


class RobotsRules:
    """The rules of one robots.txt for one user agent.

    Build it with :meth:`parse` from a fetched file, :meth:`allow_all` when
    there is no usable file (a 4xx answer, or a file that is broken), or
    :meth:`disallow_all` while the file cannot be reached.

    Attributes:
        crawl_delay: the Crawl-Delay for the user agent, None when absent.
        note: why the rules allow or forbid everything, when they do by
            default (``"missing"``, ``"unparsable"``, ``"status 503"``, ...);
            for parsed rules, ``"truncated"`` or empty.
        unreachable: whether these rules stand in for a file that could not
            be fetched (everything is forbidden, but only for now).
    """

    __slots__ = ("_parser", "_user_agent", "crawl_delay", "note", "unreachable")

    def __init__(self, parser: Protego | None, user_agent: str, crawl_delay: float | None = None,
                 note: str = "", *, unreachable: bool = False) -> None:
        self._parser = parser
        self._user_agent = user_agent
        self.crawl_delay = crawl_delay
        self.note = note
        self.unreachable = unreachable

    @classmethod
    def allow_all(cls, user_agent: str, note: str = "missing") -> RobotsRules:
        """Rules that allow every URL and ask for no delay."""
        return cls(None, user_agent, None, note)

    @classmethod
    def disallow_all(cls, user_agent: str, note: str = "unreachable") -> RobotsRules:
        """Rules that forbid every URL, standing in for a file that could not be fetched."""
        return cls(None, user_agent, None, note, unreachable=True)

    @classmethod
    def parse(cls, body: bytes, user_agent: str, *, origin: str = "robots.txt") -> RobotsRules:
        """Read a robots.txt body.

        Args:
            body: the file as fetched; only the first :data:`MAX_ROBOTS_BYTES`
                plus one are needed to tell that it is too large.
            user_agent: the crawler's user agent; its product token selects
                the group of rules.
            origin: where the file came from, for log lines.

        Returns:
            The rules; those of the first :data:`MAX_ROBOTS_BYTES` (with a
            warning) when the file is larger; allow-all with a warning when
            it cannot be parsed.
        """
        note = ""
        if len(body) > MAX_ROBOTS_BYTES:
            logger.warning("%s is larger than %d bytes: only its first %d bytes are read",
                           origin, MAX_ROBOTS_BYTES, MAX_ROBOTS_BYTES)
            body, note = _head(body), "truncated"
        text = body.decode("utf-8", errors="replace")
        try:
            parser = Protego.parse(text)
        except Exception as exc:  # a parser bug must not stop a crawl: treat as "no rules"
            logger.warning("%s could not be parsed (%s): treating it as allowing everything", origin, exc)
            return cls.allow_all(user_agent, "unparsable")
        return cls(parser, user_agent, crawl_delay(body, user_agent), note)

    def allowed(self, url: str) -> bool:
        """Whether the rules let the user agent fetch ``url``."""
        if self._parser is None:
            return not self.unreachable
        try:
            return bool(self._parser.can_fetch(url, self._user_agent))
        except Exception as exc:  # the parser must not stop a crawl either
            logger.warning("robots.txt rules failed on %r (%s): allowing it", url, exc)
            return True

    def __repr__(self) -> str:
        if self._parser is not None:
            kind = "parsed"
        else:
            kind = f"{'disallow' if self.unreachable else 'allow'}-all ({self.note})"
        return f"<RobotsRules {kind} crawl_delay={self.crawl_delay!r}>"
