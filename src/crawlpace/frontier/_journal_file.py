"""The journal's SQLite file: its layout, opening it, and holding it exclusively.

A crawl journal is an SQLite file in WAL mode with ``synchronous=NORMAL``,
held with an exclusive lock while open; this module makes and checks such
files (:func:`created_file`, :func:`opened_file`) and names what can go wrong
with one (:class:`JournalError`). What the
journal keeps in it, and how, is :mod:`crawlpace.frontier._journal`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .._exceptions import CrawlpaceError

__all__ = ["FORMAT_VERSION", "KIND", "SCHEMA", "SIDE_FILES", "JournalError", "acquire", "check_kind",
           "connect", "created_file", "opened_file", "txn"]

_log = logging.getLogger(__name__)

#: The layout version written into new journals; other versions are refused.
FORMAT_VERSION = 1

#: What the ``kind`` row of the meta table says in every crawlpace journal.
KIND = "crawlpace-journal"

#: Seconds to wait for a lock held by someone else before giving up. The
#: journal holds its file exclusively, so waiting longer would not help.
_BUSY_TIMEOUT = 0.1

SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE urls (id INTEGER PRIMARY KEY, url TEXT NOT NULL UNIQUE,"
    " scope TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0)",
    # Only pending URLs are indexed: the index shrinks as the crawl advances,
    # and both paging through a scope and counting what is left read it alone.
    "CREATE INDEX urls_pending ON urls (scope, id) WHERE done = 0",
)

SIDE_FILES = ("-wal", "-shm", "-journal")


class JournalError(CrawlpaceError):
    """A file cannot be used as a crawl journal.

    Raised when the file is not a crawlpace journal at all, when it was
    written in a format version this crawlpace does not read, or when
    another process has it open.
    """


@contextmanager
def txn(conn: sqlite3.Connection) -> Iterator[None]:
    """Run the block as one write transaction, rolled back if it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def connect(path: Path, *, must_exist: bool = False) -> sqlite3.Connection:
    """Open a connection in autocommit mode; transactions are begun explicitly."""
    if must_exist:
        # mode=rw never creates the file, unlike a plain connect.
        target, uri = f"{path.resolve().as_uri()}?mode=rw", True
    else:
        target, uri = str(path), False
    conn = sqlite3.connect(target, uri=uri, timeout=_BUSY_TIMEOUT, isolation_level=None,
                           check_same_thread=False)
    # With an exclusive lock, WAL keeps its index in process memory (no -shm
    # file), and no other connection can read or write while the journal is open.
    conn.execute("PRAGMA locking_mode = EXCLUSIVE")
    return conn


def check_kind(conn: sqlite3.Connection, path: Path) -> None:
    """Raise :class:`JournalError` unless ``conn`` is a journal of this format."""
    try:
        rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('kind', 'format')").fetchall())
    except sqlite3.DatabaseError as exc:
        if _is_busy(exc):
            raise JournalError(f"{path}: the journal is in use by another crawl") from exc
        raise JournalError(f"{path}: not a crawlpace journal ({exc})") from exc
    if rows.get("kind") != KIND:
        raise JournalError(f"{path}: not a crawlpace journal (an SQLite file of some other kind)")
    if rows.get("format") != str(FORMAT_VERSION):
        raise JournalError(f"{path}: journal format version {rows.get('format')}, but this crawlpace "
                           f"reads version {FORMAT_VERSION}; finish that crawl with the crawlpace that "
                           "started it, or delete the journal to start over")


def acquire(conn: sqlite3.Connection, path: Path) -> None:
    """Switch to WAL, set durability, and take the exclusive lock now rather than lazily."""
    try:
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        if _is_busy(exc):
            raise JournalError(f"{path}: the journal is in use by another crawl") from exc
        raise JournalError(f"{path}: cannot use the journal ({exc})") from exc
    if str(mode).lower() != "wal":
        _log.warning("%s: SQLite refused WAL mode (journal_mode is %s); the journal will be slower",
                     path, mode)


def _is_busy(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorname", "") in {"SQLITE_BUSY", "SQLITE_LOCKED"}


@contextmanager
def created_file(where: Path, *, fingerprint: str) -> Iterator[sqlite3.Connection]:
    """A new journal file at ``where``, laid out and held; removed again if the block fails.

    Raises:
        FileExistsError: a file is already at ``where``.
    """
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
            yield conn
        except BaseException:
            conn.close()
            raise
    except BaseException:
        for suffix in ("", *SIDE_FILES):
            Path(f"{where}{suffix}").unlink(missing_ok=True)
        raise


@contextmanager
def opened_file(where: Path) -> Iterator[sqlite3.Connection]:
    """The existing journal file at ``where``, checked and held; closed again if the block fails.

    Raises:
        FileNotFoundError: nothing is at ``where``.
        JournalError: the file is not a crawlpace journal, has another
            format version, or is open in another process.
    """
    if not where.exists():
        raise FileNotFoundError(
            f"{where}: no crawl journal to resume; run without --resume to start a new crawl")
    conn = connect(where, must_exist=True)
    try:
        check_kind(conn, where)
        acquire(conn, where)
        yield conn
    except BaseException:
        conn.close()
        raise
