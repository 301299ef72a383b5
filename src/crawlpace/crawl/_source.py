"""Where a crawl's URLs come from and where their answers are recorded: the part that differs.

:class:`~crawlpace.crawl.CrawlJob` fetches, throttles, follows redirects,
retries and writes one result line per URL the same way whatever feeds it.
What differs between a crawl of a URL list and a worker of a shared fleet is
its *URL source*, an object the job takes:

* :class:`~crawlpace.crawl._journal_source.JournalSource` (the default): the
  URLs given, imported into the SQLite journal, loaded into the scheduler a
  batch per host within the memory bound, and marked done once their lines
  are written; ``--resume`` carries on from the journal;
* :class:`~crawlpace.crawl._shared_job.SharedSource`: the shared frontier in
  Redis, whose URLs are claimed, kept claimed, acknowledged once answered,
  and handed back on a stop.

A source sees the job only through :class:`JobParts`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

from .._exceptions import ScopeError
from .._scoping._fetchable import fetchable_scope
from .._throttle._throttler import Throttler
from ..frontier._scheduler import Scheduler, Task
from ..frontier._shared import RobotsCopy
from ._options import CrawlOptions
from ._results import ResultWriter
from ._summary import CrawlSummary

__all__ = ["JobParts", "RobotsShare", "UrlSource", "host_or_blank"]


class JobParts(Protocol):
    """What a URL source (or another helper of the job, e.g. its robots.txt handling) may use of it."""

    scheduler: Scheduler
    throttler: Throttler
    summary: CrawlSummary
    options: CrawlOptions
    inflight: int

    @property
    def stopping(self) -> bool:
        """Whether the job was told to stop."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` alongside the fetches (cancelled with them at the end)."""

    def stop(self) -> None:
        """Stop taking URLs (what is unanswered is left to the source's :meth:`UrlSource.close`)."""


class RobotsShare(Protocol):
    """Where the workers of a fleet keep each site's robots.txt, so that one of them fetches it.

    :class:`~crawlpace.frontier._shared.SharedFrontier` is one.
    """

    async def robots(self, origin: str, *, hold: float) -> RobotsCopy | bool:
        """The stored copy; else True when this worker should fetch it, False while another does."""

    async def store_robots(self, origin: str, copy: RobotsCopy, *, keep: float) -> None:
        """Store this worker's answer for the others, for ``keep`` seconds."""


class UrlSource(Protocol):
    """Feeds a crawl job with URLs and records what became of them.

    The job calls, in order: :meth:`bind` (when built), :meth:`open` (the
    run starts), :meth:`start_background` and :meth:`stop_background`
    (around the dispatch loop), and :meth:`close` (last, whatever happened).
    In between, :meth:`refill` after every fetch, :meth:`answered` when a URL
    has its result, :meth:`settled` once that result's line is written.
    """

    #: Called with ``(host, seconds)`` when the throttler holds a host back
    #: for a second or more; ``None`` when the source has no use for it.
    on_wait: Callable[[str, float], None] | None
    #: Where robots.txt answers are shared with other workers; ``None`` for a crawl on its own.
    robots_share: RobotsShare | None

    def bind(self, job: JobParts) -> None:
        """Remember the job this source feeds."""

    def open(self, urls: Iterable[str] | None) -> ResultWriter:
        """Take ``urls`` (``None``: none given) and open the output file.

        Nothing may be queued yet: a task can end without a fetch as it is
        queued (a URL the crawl cannot fetch), and its line needs the writer
        this returns. The job calls :meth:`refill` next.
        """

    def start_background(self) -> None:
        """Begin any background work the source does while the crawl runs."""

    async def stop_background(self) -> None:
        """End that background work (the dispatch loop has ended)."""

    def refill(self) -> None:
        """Queue more URLs if the source holds back some.

        Called once the output file is open, after every fetch, and whenever
        the job finds nothing queued: URLs that leave without a fetch (a
        site whose robots.txt failed, an unusable URL) free room too.
        """

    def exhausted(self) -> bool:
        """Whether no more URLs will come (the job ends once nothing is queued or in flight)."""

    def unloaded(self, scope: str) -> int | None:
        """URLs of ``scope`` this source still holds back from the scheduler; ``None`` when more of
        them may come that it cannot count (a scope that is not a host; on a shared frontier, a host
        none of whose URLs this worker has claimed yet)."""

    def wait_for_urls(self) -> asyncio.Future[None] | None:
        """A future done when new URLs arrive, or ``None`` when only finished fetches bring any."""

    def answered(self, task: Task) -> None:
        """``task`` has its result (its line is still to be written)."""

    def settled(self, task: Task, outcome: str) -> None:
        """``task``'s line is written: record it as done (a final ``outcome``) or acknowledge it."""

    async def close(self) -> None:
        """Record the end: what is left, and the summary's answered and unfinished counts."""


def host_or_blank(url: str) -> str:
    """The host scope of ``url``, or ``""`` when the crawl cannot fetch it."""
    try:
        return fetchable_scope(url)
    except ScopeError:
        return ""
