"""An optional robots.txt for a guarded site: it serves a ``Crawl-delay`` and sees who keeps to it.

Bingbot, among others, slows down as soon as robots.txt asks for a
``Crawl-delay``; Googlebot ignores the line. :class:`RobotsTxt` serves the
file (the guard answers ``/robots.txt`` itself, never braked) and watches the
requests of every user-agent class: how many came, how many came sooner than
the delay after the one before, and whether the class read robots.txt at all.
The guard's status report shows the result (``robots``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

__all__ = ["RobotsTxt"]

# A gap this much shorter than the delay still counts as keeping to it (timers and networks jitter).
_TOLERANCE = 0.1


class _Agent:
    __slots__ = ("last", "read", "requests", "too_soon")

    def __init__(self) -> None:
        self.requests = 0
        self.too_soon = 0
        self.last: float | None = None
        self.read = False


class RobotsTxt:
    """A robots.txt with a ``Crawl-delay``, and a watch on who keeps to it.

    Args:
        crawl_delay: seconds asked between two requests of one crawler.
        agents: the user agents the delay is asked of (``"*"``: all of them).
        text: more of the file, served before the delay's groups
            (``Disallow`` lines, a ``Sitemap``...).
        max_agents: the most user-agent classes watched (the least recently
            seen are forgotten first).

    Raises:
        ValueError: for a delay that is not a positive number.
    """

    def __init__(self, crawl_delay: float, *, agents: Iterable[str] = ("*",), text: str = "",
                 max_agents: int = 10_000) -> None:
        if isinstance(crawl_delay, bool) or not isinstance(crawl_delay, int | float) \
                or not math.isfinite(crawl_delay) or crawl_delay <= 0:
            raise ValueError(f"crawl_delay must be a positive number of seconds, got {crawl_delay!r}")
        self.crawl_delay = float(crawl_delay)
        names = [agents] if isinstance(agents, str) else list(agents)
        if not names or not all(isinstance(name, str) and name.strip() for name in names):
            raise ValueError(f"agents must name user agents (or '*'), got {agents!r}")
        delay = f"{self.crawl_delay:g}"
        groups = "".join(f"User-agent: {name.strip()}\nCrawl-delay: {delay}\n\n" for name in names)
        prefix = text if not text or text.endswith("\n\n") else text.rstrip("\n") + "\n\n"
        self.body = (prefix + groups).encode("utf-8")
        self._max = max_agents
        self._agents: OrderedDict[str, _Agent] = OrderedDict()

    def observe(self, agent: str, now: float, robots: bool) -> None:
        """Note one request of a user-agent class (``robots``: it was for robots.txt)."""
        entry = self._agents.get(agent)
        if entry is None:
            entry = self._agents[agent] = _Agent()
            while len(self._agents) > self._max:
                self._agents.popitem(last=False)
        else:
            self._agents.move_to_end(agent)
        if robots:
            entry.read = True
            return
        if entry.last is not None and now - entry.last < self.crawl_delay * (1.0 - _TOLERANCE):
            entry.too_soon += 1
        entry.requests += 1
        entry.last = now

    def report(self, top: int = 50) -> dict[str, Any]:
        """Per user-agent class (busiest first): requests, how many came too soon, and a verdict."""
        busiest = sorted(self._agents.items(), key=lambda item: -item[1].requests)[:top]
        agents = {}
        for name, entry in busiest:
            gaps = max(entry.requests - 1, 0)
            agents[name] = {"requests": entry.requests, "too_soon": entry.too_soon,
                            "read_robots_txt": entry.read,
                            "keeps_delay": None if gaps == 0 else entry.too_soon <= _TOLERANCE * gaps}
        return {"crawl_delay": self.crawl_delay, "agents": agents}
