"""The crawl journal: every input URL, its scope, and whether it is done, in SQLite.

A crawl over millions of URLs cannot keep them all in memory, and a crawl that
is stopped (Ctrl-C, a crash, ``kill -9``) must be able to carry on where it
left off. The journal serves both needs with one SQLite file: the input is
imported into it once, the scheduler reads pending URLs back per scope in
small pages, and finished URLs are flagged as done.

The journal is not the record of what was answered; the results file is (see
:mod:`crawlpace.crawl._results`). Done flags are therefore written lazily,
in batches, and may lag behind the results file after a crash; on
``--resume`` the caller rebuilds them from the results file with
:meth:`Journal.replace_done`. That is why losing a few unflushed marks is
harmless, and why each mark need not cost a transaction of its own.

SQLite runs in WAL mode with ``synchronous=NORMAL``: a committed transaction
survives the process being killed, and only a power loss or an operating
system crash can take back the latest ones, which the reconciliation above
repairs too. The file is held with an exclusive lock while open, so a second
crawl cannot use the same journal at the same time.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from ._journal_file import (
    FORMAT_VERSION,
    KIND,
    SCHEMA,
    SIDE_FILES,
    JournalError,
    acquire,
    check_kind,
    connect,
    txn,
)

__all__ = ["FORMAT_VERSION", "Entry", "Journal", "JournalError"]

_log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Rows written per transaction by bulk operations. Large enough that commits
#: are a small part of the cost, small enough to keep memory and lock hold
#: times short.
_BATCH = 5000


@dataclass(frozen=True, slots=True)
class Entry:
    """One URL waiting to be crawled.

    Attributes:
        id: the URL's row id; ids grow in the order URLs were added, and
            :meth:`Journal.load` pages by them.
        url: the URL as it was added.
        scope: the scope the caller gave it when adding it.
    """

    id: int
    url: str
    scope: str


def _chunks(items: Iterable[_T], size: int) -> Iterator[list[_T]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


class Journal:
    """The SQLite store of a crawl's input and progress.

    Build one with :meth:`create` for a new crawl or :meth:`open` to resume
    one; do not call the constructor directly. Every method is a short
    synchronous call meant to be made from the event loop. The bulk methods
    :meth:`add` and :meth:`mark_done_urls` commit every few thousand rows and
    release an internal lock between batches, so they can also run in a
    worker thread (``asyncio.to_thread``) while the loop keeps using the
    journal; :meth:`replace_done` is one transaction and holds the lock
    throughout.

    Reads see every mark made so far: :meth:`load`, :meth:`scopes` and the
    counts write out buffered marks first.

    Args:
        path: the journal file.
        connection: an open connection to it, already checked and set up.
        flush_every: buffered done marks that trigger a write.
    """

    def __init__(self, path: Path, connection: sqlite3.Connection, *, flush_every: int = 500) -> None:
        if flush_every < 1:
            raise ValueError(f"flush_every must be at least 1, got {flush_every!r}")
        self._path = path
        self._conn = connection
        self._flush_every = flush_every
        self._lock = threading.Lock()
        self._buffer: list[int] = []
        self._closed = False
        self._fingerprint = self._meta("fingerprint") or ""
        self._created = float(self._meta("created") or 0.0)

    # -- opening -----------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str], *, fingerprint: str, flush_every: int = 500) -> Journal:
        """Create a new, empty journal at ``path``.

        Args:
            path: where the journal goes; the file must not exist.
            fingerprint: an opaque string the caller uses to recognise its own
                journal on resume (for example a hash of the output path and
                the settings); stored as given.
            flush_every: buffered done marks that trigger a write.

        Raises:
            FileExistsError: a file is already at ``path``.
        """
        where = Path(path)
        try:
            # O_EXCL makes "does it exist" and "create it" one step, so two
            # crawls started at once cannot both believe they made the file.
            fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            raise FileExistsError(
                f"{where}: a crawl journal already exists; pass --resume to continue that crawl, "
                "or delete the file to start over") from None
        os.close(fd)
        # Leftover WAL files of an earlier journal that was deleted on its own
        # would be replayed into the new one; they belong to no live file now.
        for suffix in SIDE_FILES:
            side = Path(f"{where}{suffix}")
            if side.exists():
                _log.warning("removing %s, left over from a deleted journal", side)
                side.unlink()
        try:
            conn = connect(where)
            try:
                acquire(conn, where)
                with txn(conn):
                    for statement in SCHEMA:
                        conn.execute(statement)
                    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                        ("kind", KIND),
                        ("format", str(FORMAT_VERSION)),
                        ("created", repr(time.time())),
                        ("fingerprint", fingerprint),
                        ("input_complete", "0"),
                    ])
                journal = cls(where, conn, flush_every=flush_every)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            for suffix in ("", *SIDE_FILES):
                Path(f"{where}{suffix}").unlink(missing_ok=True)
            raise
        _log.debug("created journal %s", where)
        return journal

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, flush_every: int = 500) -> Journal:
        """Open an existing journal to resume its crawl.

        Compare :attr:`fingerprint` with the caller's own before trusting it.

        Args:
            path: the journal file.
            flush_every: buffered done marks that trigger a write.

        Raises:
            FileNotFoundError: nothing is at ``path``.
            JournalError: the file is not a crawlpace journal, has another
                format version, or is open in another process.
        """
        where = Path(path)
        if not where.exists():
            raise FileNotFoundError(
                f"{where}: no crawl journal to resume; run without --resume to start a new crawl")
        conn = connect(where, must_exist=True)
        try:
            check_kind(conn, where)
            acquire(conn, where)
            journal = cls(where, conn, flush_every=flush_every)
        except BaseException:
            conn.close()
            raise
        if _log.isEnabledFor(logging.DEBUG):  # counting rows is not free on a big journal
            _log.debug("opened journal %s: %d URLs, %d pending", where, journal.total(), journal.pending())
        return journal

    # -- properties --------------------------------------------------------

    @property
    def path(self) -> Path:
        """The journal file."""
        return self._path

    @property
    def fingerprint(self) -> str:
        """The string given to :meth:`create`."""
        return self._fingerprint

    @property
    def created(self) -> float:
        """When the journal was created, in Unix time."""
        return self._created

    def __repr__(self) -> str:
        # No query here: a repr must be cheap and must work on a closed journal.
        state = "closed" if self._closed else "open"
        return f"<Journal {self._path} {state} buffered_marks={len(self._buffer)}>"

    @property
    def input_complete(self) -> bool:
        """Whether :meth:`mark_input_complete` was called: every input URL is in."""
        with self._lock:
            return self._meta("input_complete") == "1"

    # -- input -------------------------------------------------------------

    def add(self, items: Iterable[tuple[str, str]]) -> int:
        """Add ``(url, scope)`` pairs; return how many URLs were new.

        The iterable is consumed in batches, one transaction each, so it can
        stream millions of pairs in bounded memory. A URL already in the
        journal is skipped, and keeps its first scope and its done flag;
        adding the whole input again on resume is therefore safe.
        """
        added = 0
        for chunk in _chunks(items, _BATCH):
            with self._transaction():
                before = self._conn.total_changes
                self._conn.executemany("INSERT OR IGNORE INTO urls (url, scope) VALUES (?, ?)", chunk)
                added += self._conn.total_changes - before
        return added

    def mark_input_complete(self) -> None:
        """Record that every input URL has been added.

        A resumed crawl whose journal lacks this mark must read its input
        again and :meth:`add` it all (already known URLs are skipped).
        """
        with self._transaction():
            self._conn.execute("UPDATE meta SET value = '1' WHERE key = 'input_complete'")

    # -- reading -----------------------------------------------------------

    def scopes(self) -> dict[str, int]:
        """Return each scope that has pending URLs, with how many.

        This reads every pending row, so it suits start-up and occasional
        checks rather than a per-request loop.
        """
        with self._lock:
            self._flush_locked()
            rows = self._conn.execute(
                "SELECT scope, COUNT(*) FROM urls WHERE done = 0 GROUP BY scope").fetchall()
        return {scope: count for scope, count in rows}

    def load(self, scope: str, after_id: int = 0, limit: int = 100) -> list[Entry]:
        """Return up to ``limit`` pending URLs of ``scope`` whose id is above ``after_id``.

        Entries come in id order, which is the order they were added. Page
        through a scope by passing the last id returned as the next
        ``after_id``: URLs handed out but not yet marked done are still
        pending, so starting again from 0 would return them a second time.

        Raises:
            ValueError: ``limit`` is below 1.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit!r}")
        with self._lock:
            self._flush_locked()
            rows = self._conn.execute(
                "SELECT id, url, scope FROM urls WHERE scope = ? AND done = 0 AND id > ?"
                " ORDER BY id LIMIT ?", (scope, after_id, limit)).fetchall()
        return [Entry(id_, url, scope_) for id_, url, scope_ in rows]

    def pending(self) -> int:
        """Return how many URLs are not done (counts every pending row)."""
        with self._lock:
            self._flush_locked()
            return int(self._conn.execute("SELECT COUNT(*) FROM urls WHERE done = 0").fetchone()[0])

    def done(self) -> int:
        """Return how many URLs are done (counts rows)."""
        with self._lock:
            self._flush_locked()
            return int(self._conn.execute("SELECT COUNT(*) FROM urls WHERE done = 1").fetchone()[0])

    def total(self) -> int:
        """Return how many URLs the journal holds (counts rows)."""
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM urls").fetchone()[0])

    # -- progress ----------------------------------------------------------

    def mark_done(self, ids: Iterable[int]) -> None:
        """Flag URLs, by :attr:`Entry.id`, as done; buffered.

        The marks are kept in memory and written in one transaction by
        :meth:`flush`, which runs on its own once ``flush_every`` marks are
        waiting, before every read, and on :meth:`close`. A crash loses the
        marks not yet written. That is fine: the results file, not the
        journal, says what was answered, and resuming rebuilds the done
        flags from it (:meth:`replace_done`).
        """
        with self._lock:
            self._buffer.extend(ids)
            if len(self._buffer) >= self._flush_every:
                self._flush_locked()

    def flush(self) -> int:
        """Write the buffered done marks; return how many URLs they turned done."""
        with self._lock:
            return self._flush_locked()

    def mark_done_urls(self, urls: Iterable[str]) -> int:
        """Flag URLs, by URL, as done at once; return how many were pending.

        URLs the journal does not hold are ignored. The iterable is consumed
        in batches, one transaction each.
        """
        marked = 0
        for chunk in _chunks(urls, _BATCH):
            with self._transaction():
                before = self._conn.total_changes
                self._conn.executemany("UPDATE urls SET done = 1 WHERE url = ? AND done = 0",
                                       [(url,) for url in chunk])
                marked += self._conn.total_changes - before
        return marked

    def replace_done(self, urls: Iterable[str]) -> int:
        """Make the done flags say exactly: these URLs are done, no others are.

        This is the resume step. The results file is the truth, and the
        flags may disagree with it both ways after a crash: marks lost before
        a flush (the URL is answered but looks pending), and, after a power
        loss, marks kept for lines that never reached the disk, or for lines
        the reconciliation dropped so they are retried (the URL looks done but
        has no final answer). Clearing every flag and setting those of the
        final URLs fixes both. It runs as one transaction, so a crash midway
        leaves the flags as they were. Buffered marks are discarded.

        URLs the journal does not hold are ignored; URLs added afterwards
        start pending, so call this once the input is fully imported.

        Returns:
            How many of the journal's URLs are now done.
        """
        with self._lock:
            self._buffer.clear()
            with txn(self._conn):
                self._conn.execute("UPDATE urls SET done = 0 WHERE done = 1")
                before = self._conn.total_changes
                for chunk in _chunks(urls, _BATCH):
                    self._conn.executemany("UPDATE urls SET done = 1 WHERE url = ? AND done = 0",
                                           [(url,) for url in chunk])
                marked = self._conn.total_changes - before
        _log.debug("journal %s: done flags rebuilt, %d URLs done", self._path, marked)
        return marked

    # -- closing -----------------------------------------------------------

    def close(self) -> None:
        """Write buffered marks and close the file; later calls do nothing."""
        with self._lock:
            if self._closed:
                return
            try:
                self._flush_locked()
            finally:
                self._closed = True
                self._conn.close()
        _log.debug("closed journal %s", self._path)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- internals ---------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock, txn(self._conn):
            yield

    def _flush_locked(self) -> int:
        if not self._buffer or self._closed:
            return 0
        with txn(self._conn):
            before = self._conn.total_changes
            self._conn.executemany("UPDATE urls SET done = 1 WHERE id = ? AND done = 0",
                                   [(id_,) for id_ in self._buffer])
            marked = self._conn.total_changes - before
        self._buffer.clear()
        return marked

    def _meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])
