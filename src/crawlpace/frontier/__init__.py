"""The crawl's frontier: what is left to fetch, and in which order.

``crawlpace crawl`` reads its URLs into a :class:`Journal`, an SQLite file that
holds every input URL with its scope and a done flag, so that memory stays
bounded however long the input is and an interrupted crawl can resume. The
record of what was answered (the results file) is the crawl's output and
lives in :mod:`crawlpace.crawl`.

The :class:`Scheduler` hands the URLs out: one queue per set of throttling
scopes, and the readiness board decides which goes next, so no worker ever
waits on one site; :class:`RobotsCache` keeps each origin's robots.txt rules
for it.
"""

from __future__ import annotations

from ._journal import Entry, Journal, JournalError
from ._robots_cache import RobotsCache
from ._scheduler import Scheduler, Task, origin_of

__all__ = [
    "Entry",
    "Journal",
    "JournalError",
    "RobotsCache",
    "Scheduler",
    "Task",
    "origin_of",
]
