"""A crawl's own URL list as its source: the SQLite journal, loaded a batch per host.

Every input URL goes into the journal once (:class:`~crawlpace.frontier.Journal`),
with its host. The scheduler then gets them back a batch per host, a host at
a time in turn, so that at most ``max_in_memory`` URLs are held in memory
whatever the list's length. A URL is marked done once its result line is in
the output file with a final outcome; ``--resume`` rebuilds the done marks
from the output file (the record of what was answered) and carries on.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable

from ..frontier import Journal, JournalError
from ..frontier._scheduler import Task
from ._results import FINAL_OUTCOMES, ResultWriter, reconcile
from ._source import JobParts, RobotsShare, host_or_blank

__all__ = ["JournalSource"]

_log = logging.getLogger(__name__)


class JournalSource:
    """The URLs given to the crawl, through its journal (see the module docstring)."""

    on_wait: Callable[[str, float], None] | None = None
    robots_share: RobotsShare | None = None

    def __init__(self) -> None:
        self._job: JobParts | None = None
        self._journal: Journal | None = None
        self._pending_scopes: deque[str] = deque()
        self._after: dict[str, int] = {}
        self._in_memory = 0
        self._unloaded: dict[str, int] = {}  # per host: its pending URLs not yet loaded (0 once all are)

    def bind(self, job: JobParts) -> None:
        """Remember the job this source feeds."""
        self._job = job

    def _parts(self) -> JobParts:
        job = self._job
        assert job is not None, "bind() the source to its job first"
        return job

    def open(self, urls: Iterable[str] | None) -> ResultWriter:
        """Create (or, with ``resume``, reopen) the journal, add ``urls`` and queue the first batch.

        Raises:
            FileExistsError: when a journal exists and ``resume`` is off.
            FileNotFoundError: when ``resume`` is on and there is no journal.
            JournalError: when the journal belongs to another crawl, or its
                first run stopped before all its URLs were read and none are given.
        """
        job = self._parts()
        options = job.options
        state = options.state_path
        if options.resume:
            journal = Journal.open(state)
            expected = str(options.output.resolve())
            if journal.fingerprint != expected:
                journal.close()
                raise JournalError(f"{state}: this journal belongs to the crawl writing "
                                   f"{journal.fingerprint}, not {expected}; pass the matching --output "
                                   f"or --state")
        else:
            journal = Journal.create(state, fingerprint=str(options.output.resolve()))
        self._journal = journal
        was_complete = journal.input_complete if options.resume else True
        read = 0
        if urls is not None:
            def counted() -> Iterable[str]:
                nonlocal read
                for url in _clean(urls):
                    read += 1
                    yield url

            added = journal.add((url, host_or_blank(url)) for url in counted())
            _log.info("%d new URLs in the journal", added)
        if not was_complete and read == 0:
            journal.close()
            raise JournalError(f"{state}: the first run stopped before it had read all of its URLs; "
                               "give the same URLs again with --resume")
        journal.mark_input_complete()
        if options.resume:
            # The output file is the record: the done flags are made to match it exactly.
            kept = reconcile(options.output)
            journal.replace_done(kept.final_urls)
            job.summary.resumed_from = journal.done()
            _log.info("resuming: %d URLs already answered, %d lines dropped from %s", journal.done(),
                      kept.dropped, options.output)
        journal.flush()
        job.summary.urls = journal.total()
        writer = ResultWriter(options.output, append=options.resume)
        # The first batch is queued by the job's first refill(), once it holds the writer: URLs
        # that end without a fetch (an ftp:// URL, say) are written as they are queued.
        self._unloaded = {scope: count for scope, count in journal.scopes().items() if count}
        self._pending_scopes.extend(self._unloaded)
        return writer

    def start_background(self) -> None:
        """Nothing runs in the background: URLs come in as fetches end."""

    async def stop_background(self) -> None:
        """Nothing to stop."""

    def refill(self) -> None:
        """Move URLs from the journal into the scheduler, a batch per host, within the memory bound."""
        journal, job = self._journal, self._job
        assert journal is not None
        assert job is not None
        scheduler = job.scheduler
        budget = job.options.max_in_memory
        batch = max(min(budget // 10, 1000), 1)
        pending = self._pending_scopes
        if self._in_memory > budget - batch and not scheduler.idle:
            return  # refill a batch at a time, not a URL per finished fetch
        while pending and self._in_memory < budget:
            scope = pending.popleft()
            want = min(batch, budget - self._in_memory)
            entries = journal.load(scope, self._after.get(scope, 0), want)
            for entry in entries:
                scheduler.push(Task(entry.id, entry.url))
                self._after[scope] = entry.id
            self._in_memory += len(entries)
            if len(entries) == want:
                pending.append(scope)  # there may be more of this host
                self._unloaded[scope] = max(0, self._unloaded.get(scope, 0) - len(entries))
            else:  # every URL of this host is loaded: nothing to remember about it (bounded by the pending)
                self._after.pop(scope, None)
                self._unloaded[scope] = 0

    def exhausted(self) -> bool:
        """Whether every URL of the journal has been handed to the scheduler."""
        return not self._pending_scopes

    def unloaded(self, scope: str) -> int | None:
        """URLs of host ``scope`` still in the journal only (their count was read at the start);
        ``None`` for a scope that is no host of the journal while some host is still loading."""
        count = self._unloaded.get(scope)
        if count is None and not self.exhausted():
            return None
        return count or 0

    def wait_for_urls(self) -> None:
        """URLs come only as fetches end (:meth:`refill`): nothing else to wait for."""
        return None

    def answered(self, task: Task) -> None:
        """One URL fewer held in memory."""
        self._in_memory -= 1

    def settled(self, task: Task, outcome: str) -> None:
        """Record that ``task``'s line is written: a final outcome marks it done in the journal."""
        journal = self._journal
        assert journal is not None
        if outcome in FINAL_OUTCOMES:
            journal.mark_done([task.id])

    async def close(self) -> None:
        """Write the last done marks, count what is left, and close the journal."""
        journal = self._journal
        if journal is not None:
            summary = self._parts().summary
            summary.answered = journal.done()
            summary.unfinished = journal.total() - journal.done()
            journal.close()

    def __repr__(self) -> str:
        where = "not open" if self._journal is None else repr(self._journal)
        return (f"<JournalSource {where} in_memory={self._in_memory} "
                f"hosts_pending={len(self._pending_scopes)}>")


def _clean(urls: Iterable[str]) -> Iterable[str]:
    for line in urls:
        url = line.strip()
        if url and not url.startswith("#"):
            yield url
