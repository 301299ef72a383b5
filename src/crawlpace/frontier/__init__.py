"""The crawl's frontier: what is left to fetch, and the record of what was answered.

``crawlpace crawl`` reads its URLs into a :class:`Journal`, an SQLite file that
holds every input URL with its scope and a done flag, so that memory stays
bounded however long the input is and an interrupted crawl can resume. Each
settled URL becomes one line of the results file, written by
:class:`ResultWriter`; that file, not the journal, is the record of what was
answered, and :func:`reconcile` reads it back on ``--resume`` to tell the
journal which URLs are done.

The :class:`Scheduler` hands the URLs out: one queue per host and a heap of
hosts by the time the throttler can next admit them, so no worker ever waits
on one site; :class:`RobotsCache` keeps each origin's robots.txt rules for it.
"""

from __future__ import annotations

from ._journal import Entry, Journal, JournalError
from ._results import FINAL_OUTCOMES, OUTCOMES, Reconciled, Result, ResultWriter, reconcile
from ._robots_cache import RobotsCache
from ._scheduler import Scheduler, Task, origin_of

__all__ = [
    "FINAL_OUTCOMES",
    "OUTCOMES",
    "Entry",
    "Journal",
    "JournalError",
    "Reconciled",
    "Result",
    "ResultWriter",
    "RobotsCache",
    "Scheduler",
    "Task",
    "origin_of",
    "reconcile",
]
