"""Reconciling a results file before a resumed crawl appends to it.

A resumed crawl reads its output back to learn which URLs are answered;
:func:`reconcile` keeps the first final line per URL, byte for byte, and drops
what a kill or a crash may have left (a partial last line, damaged lines) and
the lines that are not final answers (their URLs are crawled again). The
file is replaced atomically, and only when something must go.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ._result_line import FINAL_OUTCOMES

__all__ = ["Reconciled", "reconcile"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What :func:`reconcile` found in, and kept of, a results file.

    Attributes:
        final_urls: the URLs with a final answer in the file; mark them done
            in the journal (:meth:`Journal.replace_done`). A plain set, not a
            frozen one, to avoid copying what may be millions of URLs.
        kept: lines kept, one per URL in ``final_urls``.
        dropped_partial: a last line cut short (no newline, or not a result).
        dropped_invalid: complete lines that are not a result (damaged file).
        dropped_not_final: lines whose outcome is not final; those URLs are retried.
        dropped_duplicate: final lines for a URL that already had one.
        rewritten: whether the file was replaced by the kept lines.
    """

    final_urls: set[str] = field(default_factory=set)
    kept: int = 0
    dropped_partial: int = 0
    dropped_invalid: int = 0
    dropped_not_final: int = 0
    dropped_duplicate: int = 0
    rewritten: bool = False

    @property
    def dropped(self) -> int:
        """Lines dropped, for any reason."""
        return self.dropped_partial + self.dropped_invalid + self.dropped_not_final + self.dropped_duplicate


def _final_url(raw: bytes) -> tuple[str | None, bool]:
    """Return a line's URL (None if it is not a result line) and whether its outcome is final."""
    try:
        record = json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both derive from it
        return None, False
    if not isinstance(record, dict):
        return None, False
    url, outcome = record.get("url"), record.get("outcome")
    if not isinstance(url, str) or not isinstance(outcome, str):
        return None, False
    return url, outcome in FINAL_OUTCOMES


def reconcile(path: str | os.PathLike[str]) -> Reconciled:
    """Bring a results file into the state a resumed crawl can append to.

    The file is read line by line, never whole; only the set of final URLs is
    kept in memory. Kept are the complete lines whose outcome is final, the
    first one per URL, byte for byte. Dropped are a partial last line (what a
    write cut short leaves), lines that are not results, lines whose outcome
    is not final (their URLs are crawled again) and later final lines of a
    URL already answered.

    When something is dropped, the kept lines are written to a temporary file
    beside the original, forced to the disk, and moved over the original in
    one atomic step, so a crash during reconciliation leaves either the old
    file or the new one. When nothing is dropped nothing is written: the file
    is only forced to the disk as it is.

    A missing file is not an error: the result is empty and no file is
    created (:class:`ResultWriter` creates it).
    """
    target = Path(os.path.realpath(path))
    try:
        source = open(target, "rb")  # noqa: SIM115 - closed by the with statement below
    except FileNotFoundError:
        return Reconciled()
    final: set[str] = set()
    counts = {"kept": 0, "partial": 0, "invalid": 0, "not_final": 0, "duplicate": 0}
    rewrite = _Rewrite(target)
    try:
        with source:
            offset = 0  # bytes of the file read so far, all kept until the first drop
            for raw in source:
                complete = raw.endswith(b"\n")
                url, is_final = _final_url(raw)
                if url is None or not complete:
                    # Only the last line can lack its newline, so an unparsed
                    # line without one is the tail a cut-short write left.
                    reason = "invalid" if complete else "partial"
                elif not is_final:
                    reason = "not_final"
                elif url in final:
                    reason = "duplicate"
                else:
                    final.add(url)
                    counts["kept"] += 1
                    if rewrite.started:
                        rewrite.write(raw)
                    offset += len(raw)
                    continue
                counts[reason] += 1
                if not rewrite.started:
                    rewrite.start(offset)
            if rewrite.started:
                rewrite.finish()
            else:
                os.fsync(source.fileno())
    except BaseException:
        rewrite.abandon()
        raise
    result = Reconciled(final, kept=counts["kept"], dropped_partial=counts["partial"],
                        dropped_invalid=counts["invalid"], dropped_not_final=counts["not_final"],
                        dropped_duplicate=counts["duplicate"], rewritten=rewrite.started)
    if result.dropped_invalid:
        _log.warning("%s: dropped %d damaged lines; their URLs will be crawled again",
                     target, result.dropped_invalid)
    _log.debug("%s reconciled: kept %d, dropped %d partial, %d not final, %d duplicate",
               target, result.kept, result.dropped_partial, result.dropped_not_final,
               result.dropped_duplicate)
    return result


class _Rewrite:
    """The replacement of a results file, begun only once a line must go.

    Until then nothing is written; :meth:`start` copies the lines kept so far
    (the first ``offset`` bytes, untouched) into a temporary file beside the
    target, :meth:`write` adds later kept lines, and :meth:`finish` forces it
    to the disk and moves it over the target.
    """

    def __init__(self, target: Path) -> None:
        self._target = target
        self._temp: Path | None = None
        self._sink: BinaryIO | None = None

    @property
    def started(self) -> bool:
        return self._sink is not None

    def start(self, offset: int) -> None:
        fd, name = tempfile.mkstemp(prefix=f".{self._target.name}.", suffix=".reconcile",
                                    dir=self._target.parent)
        self._temp = Path(name)
        self._sink = os.fdopen(fd, "wb")
        os.chmod(self._temp, stat.S_IMODE(os.stat(self._target).st_mode))
        with open(self._target, "rb") as head:
            remaining = offset
            while remaining:
                chunk = head.read(min(remaining, 1 << 20))
                if not chunk:
                    raise OSError(f"{self._target} shrank while it was being reconciled")
                self._sink.write(chunk)
                remaining -= len(chunk)

    def write(self, line: bytes) -> None:
        assert self._sink is not None
        self._sink.write(line)

    def finish(self) -> None:
        assert self._sink is not None
        assert self._temp is not None
        self._sink.flush()
        os.fsync(self._sink.fileno())
        self._sink.close()
        os.replace(self._temp, self._target)
        self._temp = None
        _fsync_dir(self._target.parent)

    def abandon(self) -> None:
        if self._sink is not None:
            self._sink.close()
        if self._temp is not None:
            self._temp.unlink(missing_ok=True)
            self._temp = None


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
