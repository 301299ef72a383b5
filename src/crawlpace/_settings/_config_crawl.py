"""The crawl's own options a settings file may hold (its ``[crawl]`` table), and their checks.

The checks are written once, here, for both ways in: ``CrawlOptions`` (the
crawl's options in Python) checks its fields with :func:`crawl_problems`, and
the settings file's ``[crawl]`` table is read with the same function, each
problem then naming the key by its path in the file (``crawl.deadline``).
``crawlpace crawl`` takes the table's values where no command-line flag gives
one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .._exceptions import ConfigError
from ._config_checks import kind_of

__all__ = ["CRAWL_KEYS", "CrawlConfig", "crawl_problems"]

#: Whole-number options and their least value.
_COUNTS = {"retries": 0, "max_redirects": 0, "max_bytes": 0, "robots_retries": 0, "max_in_memory": 1}
#: Options in positive seconds, with an example value for the fix.
_SECONDS = {"timeout": 10, "deadline": 300, "visibility": 30}


@dataclass(frozen=True, slots=True)
class CrawlConfig:
    """The ``[crawl]`` table: options of ``crawlpace crawl`` kept in the settings file.

    Every key is optional (``None``: not in the file); a command-line flag
    wins over the file, and the file over the crawl's default. The meanings
    are those of :class:`crawlpace.crawl.CrawlOptions`. Only ``crawlpace
    crawl`` reads this table; a ``Throttler`` or the Scrapy add-on ignores it.

    Attributes:
        deadline: seconds one whole request may take, headers and body (``--deadline``).
        timeout: seconds to connect, and then for each read (``--timeout``).
        retries: resends of a URL after a backoff answer or a transient failure (``--retries``).
        user_agent: the User-Agent sent and matched against robots.txt (``--user-agent``).
        robots: fetch and obey robots.txt (``--robots`` / ``--no-robots``).
        visibility: with the shared frontier, seconds a claimed URL stays hidden (``--visibility``).
        wait_for_urls: with the shared frontier, seconds to wait for URLs to be enqueued
            (``--wait-for-urls``).
        max_redirects: redirects followed per URL.
        max_bytes: bytes of a body read at most.
        max_in_memory: URLs held in memory at once; the rest wait in the journal.
    """

    deadline: float | None = None
    timeout: float | None = None
    retries: int | None = None
    user_agent: str | None = None
    robots: bool | None = None
    visibility: float | None = None
    wait_for_urls: float | None = None
    max_redirects: int | None = None
    max_bytes: int | None = None
    max_in_memory: int | None = None

    def __post_init__(self) -> None:
        problems = crawl_problems(self.given(), "CrawlConfig.")
        if problems:
            raise ConfigError(problems)

    def given(self) -> dict[str, Any]:
        """The options the table sets, by name (for ``CrawlOptions(**...)``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


#: The keys of the ``[crawl]`` table.
CRAWL_KEYS = frozenset(f.name for f in fields(CrawlConfig))


def crawl_problems(values: Mapping[str, object], prefix: str = "") -> list[str]:
    """What is wrong with the crawl options in ``values`` (only the names present are checked).

    Each problem names the option as ``prefix`` + its name, the value and the
    fix, e.g. ``crawl.deadline: 0 is not a positive number of seconds; use e.g. 300``.
    """
    problems = []
    for name, low in _COUNTS.items():
        if name in values:
            value = values[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                problems.append(f"{prefix}{name}: {value!r} is not an integer >= {low}; "
                                f"use a whole number >= {low}")
    for name, example in _SECONDS.items():
        if name in values:
            value = values[name]
            if isinstance(value, bool) or not (isinstance(value, int | float) and math.isfinite(value)
                                               and value > 0):
                problems.append(f"{prefix}{name}: {value!r} is not a positive number of seconds; "
                                f"use e.g. {example}")
    if "wait_for_urls" in values:
        wait = values["wait_for_urls"]
        number = isinstance(wait, int | float) and not isinstance(wait, bool)
        if not (number and math.isfinite(wait) and wait >= 0):  # type: ignore[arg-type,operator]
            problems.append(f"{prefix}wait_for_urls: {wait!r} is not a number of seconds >= 0; use e.g. 60, "
                            "or 0 to end at once on an empty frontier")
    if "user_agent" in values:
        agent = values["user_agent"]
        if not isinstance(agent, str):
            problems.append(f"{prefix}user_agent: expected text, got {kind_of(agent)}; use one line of text")
        elif not agent or any(ch in agent for ch in "\r\n"):
            problems.append(f"{prefix}user_agent: {agent!r} is empty or spans lines; use one line of text")
    if "robots" in values and not isinstance(values["robots"], bool):
        problems.append(f"{prefix}robots: expected true or false, got {kind_of(values['robots'])}")
    return problems
