"""Reading what a site's robots.txt asks of a crawler: which URLs, and how often.

The throttling core takes the parsed Crawl-Delay (:meth:`Throttler.set_crawl_delay`);
this module turns robots.txt text into that value, and into the allow/deny
rules the crawl command applies, with protego, the parser Scrapy uses.
Fetching and caching robots.txt belong to the crawl command.

Broken input is never fatal. Following what the large crawlers do, a file
that cannot be parsed, or one larger than :data:`MAX_ROBOTS_BYTES`, is taken
as allowing everything, with a warning.
"""

from __future__ import annotations

import logging
import math

from protego import Protego

__all__ = ["MAX_ROBOTS_BYTES", "RobotsRules", "crawl_delay"]

logger = logging.getLogger(__name__)

#: Bytes of robots.txt that are read; Google reads 500 KiB and ignores the rest.
MAX_ROBOTS_BYTES = 500 * 1024


def crawl_delay(robots_txt: str | bytes, user_agent: str) -> float | None:
    """Return the Crawl-Delay that ``robots_txt`` sets for ``user_agent``, if any.

    Broken input never raises: undecodable bytes are replaced, text past
    :data:`MAX_ROBOTS_BYTES` is dropped, and a file the parser rejects, or a
    negative or non-finite delay, counts as no Crawl-Delay (with a warning).
    """
    if isinstance(robots_txt, bytes):
        robots_txt = robots_txt[:MAX_ROBOTS_BYTES].decode("utf-8", errors="replace")
    elif len(robots_txt) > MAX_ROBOTS_BYTES:
        robots_txt = robots_txt[:MAX_ROBOTS_BYTES]
    try:
        delay = Protego.parse(robots_txt).crawl_delay(user_agent)
    except Exception as exc:  # a parser bug must not stop a crawl: treat as "no rules"
        logger.warning("robots.txt could not be parsed (%s); ignoring its Crawl-Delay", exc)
        return None
    if delay is None:
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

    Build it with :meth:`parse` from a fetched file, or :meth:`allow_all`
    when there is no usable file (a 4xx answer, or a file that is broken).

    Attributes:
        crawl_delay: the Crawl-Delay for the user agent, None when absent.
        note: why the rules allow everything, when they do by default
            (``"missing"``, ``"too large"``, ``"unparsable"``); empty otherwise.
    """

    __slots__ = ("_parser", "_user_agent", "crawl_delay", "note")

    def __init__(self, parser: Protego | None, user_agent: str, crawl_delay: float | None = None,
                 note: str = "") -> None:
        self._parser = parser
        self._user_agent = user_agent
        self.crawl_delay = crawl_delay
        self.note = note

    @classmethod
    def allow_all(cls, user_agent: str, note: str = "missing") -> RobotsRules:
        """Rules that allow every URL and ask for no delay."""
        return cls(None, user_agent, None, note)

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
            The rules; allow-all with a warning when the file is too large or
            cannot be parsed.
        """
        if len(body) > MAX_ROBOTS_BYTES:
            logger.warning("%s is larger than %d bytes: treating it as allowing everything",
                           origin, MAX_ROBOTS_BYTES)
            return cls.allow_all(user_agent, "too large")
        text = body.decode("utf-8", errors="replace")
        try:
            parser = Protego.parse(text)
        except Exception as exc:  # a parser bug must not stop a crawl: treat as "no rules"
            logger.warning("%s could not be parsed (%s): treating it as allowing everything", origin, exc)
            return cls.allow_all(user_agent, "unparsable")
        return cls(parser, user_agent, crawl_delay(text, user_agent))

    def allowed(self, url: str) -> bool:
        """Whether the rules let the user agent fetch ``url``."""
        if self._parser is None:
            return True
        try:
            return bool(self._parser.can_fetch(url, self._user_agent))
        except Exception as exc:  # the parser must not stop a crawl either
            logger.warning("robots.txt rules failed on %r (%s): allowing it", url, exc)
            return True

    def __repr__(self) -> str:
        kind = f"allow-all ({self.note})" if self._parser is None else "parsed"
        return f"<RobotsRules {kind} crawl_delay={self.crawl_delay!r}>"
