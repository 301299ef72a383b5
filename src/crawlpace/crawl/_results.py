"""The results file: one JSON line per URL, and the record of what was answered.

A crawl promises that every input URL is answered exactly once in its output,
even across a ``kill -9`` and ``--resume``. The output file itself is what
keeps that promise, not the journal: a line is written with a single
``write`` system call as soon as a URL is settled, so once the call returns
the line survives the process dying (the kernel holds it), and a resumed
crawl reads the file back to learn which URLs are answered (:func:`reconcile`).

Not every line is a final answer. A URL whose site was given up by the
circuit breaker, or whose retries ran out, is written so the output shows
what happened, but a resumed crawl tries it again; :func:`reconcile` drops
such lines first so the retried URL still appears only once.

This module is the writer; the line itself is ``_result_line.py`` and the
reading back ``_reconcile.py`` (their names are importable from here).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from ._reconcile import Reconciled, reconcile
from ._result_line import FINAL_OUTCOMES, OUTCOMES, Result

__all__ = ["FINAL_OUTCOMES", "OUTCOMES", "Reconciled", "Result", "ResultWriter", "reconcile"]


class ResultWriter:
    """Appends results to the output file, one line per :meth:`write`.

    Each line goes to the operating system in one ``write`` call before
    :meth:`write` returns, so a process killed right after keeps it. Lines are
    not forced to the disk one by one (that would cost a disk flush per URL);
    :meth:`sync` and :meth:`close` do that.

    Args:
        path: the output file.
        append: keep the file's lines and add after them (resuming; run
            :func:`reconcile` on the file first), or else start the file
            afresh, emptying it if it exists. Either way it is created if
            missing.

    Raises:
        ValueError: ``append`` is true and the file ends in a partial line,
            which means :func:`reconcile` was not run on it.

    Attributes:
        written: lines written by this writer.
    """

    def __init__(self, path: str | os.PathLike[str], *, append: bool) -> None:
        self._path = Path(path)
        # Append mode also reads, to check the last byte. O_APPEND puts every
        # write at the end whatever else touches the file.
        flags = os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        flags |= os.O_RDWR if append else os.O_WRONLY | os.O_TRUNC
        self._fd: int | None = os.open(self._path, flags, 0o666)
        self.written = 0
        try:
            if append:
                self._check_ends_cleanly()
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> Path:
        """The output file."""
        return self._path

    def write(self, result: Result) -> None:
        """Write one result as a line.

        Raises:
            ValueError: the writer is closed.
            OSError: the write failed (disk full, for instance); part of the
                line may have reached the file, which :func:`reconcile` drops.
        """
        if self._fd is None:
            raise ValueError(f"{self._path}: the result writer is closed")
        data = memoryview((result.to_json() + "\n").encode("utf-8"))
        # A regular file takes the whole line in one call; the loop only
        # matters for the rare short write, e.g. after a signal.
        while data:
            sent = os.write(self._fd, data)
            data = data[sent:]
        self.written += 1

    def write_many(self, results: list[Result]) -> None:
        """Write several results as lines, in one ``write`` call for the lot.

        A batch costs one system call instead of one per line. A process
        killed during the call may leave a prefix of the batch, the last line
        possibly cut short; :func:`reconcile` drops the partial line.

        Raises:
            ValueError: the writer is closed.
            OSError: the write failed; a prefix of the lines may have reached
                the file.
        """
        if self._fd is None:
            raise ValueError(f"{self._path}: the result writer is closed")
        if not results:
            return
        data = memoryview("".join([result.to_json() + "\n" for result in results]).encode("utf-8"))
        while data:
            sent = os.write(self._fd, data)
            data = data[sent:]
        self.written += len(results)

    def sync(self) -> None:
        """Force the lines written so far to the disk (``fsync``)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """Force the lines to the disk and close the file; later calls do nothing."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _check_ends_cleanly(self) -> None:
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if not size:
            return
        # Reading moves the file offset, which O_APPEND writes ignore anyway.
        os.lseek(self._fd, size - 1, os.SEEK_SET)
        if os.read(self._fd, 1) != b"\n":
            raise ValueError(f"{self._path} ends in a partial line; run reconcile() on it before "
                             "appending")
