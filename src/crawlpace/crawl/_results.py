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
"""

from __future__ import annotations

import builtins
import json
import logging
import math
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

__all__ = ["FINAL_OUTCOMES", "OUTCOMES", "Reconciled", "Result", "ResultWriter", "reconcile"]

_log = logging.getLogger(__name__)

#: Every outcome a result can have.
OUTCOMES = frozenset({"ok", "disallowed", "failed", "gave_up", "exhausted"})
#: Outcomes that settle a URL for good; the others are retried on resume.
FINAL_OUTCOMES = frozenset({"ok", "disallowed", "failed"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """What became of one URL: one line of the results file.

    Attributes:
        url: the URL as it was read from the input.
        status: the HTTP status of the last response, None without one.
        final_url: the URL that answered after redirects, None without a response.
        bytes: bytes of body received.
        latency: seconds from sending the last request to its response, None
            without a response.
        attempts: requests sent for this URL, retries included.
        error: what went wrong, in words, None when nothing did.
        scope: the throttling scope the URL was crawled under.
        time: when the URL was settled, in Unix time.
        outcome: one of

            - ``"ok"``: the site gave a final HTTP answer: a 2xx, or a 4xx or
              5xx that is not retried and so stands as the site's answer;
            - ``"disallowed"``: robots.txt forbids fetching it;
            - ``"failed"``: a permanent error, such as an invalid URL;
            - ``"gave_up"``: the circuit breaker gave the site up;
            - ``"exhausted"``: every retry was used without a final answer.

            The first three are final (:attr:`final`); the other two are
            tried again when the crawl is resumed.
        blocked: the last response was a soft block (a challenge page, a
            ``cf-mitigated`` header, a quota problem); written only when true.
        block_rule: the rule that matched, when ``blocked``.
    """

    url: str
    status: int | None
    final_url: str | None
    bytes: int
    latency: float | None
    attempts: int
    error: str | None
    scope: str
    time: float
    outcome: str
    blocked: bool = False
    block_rule: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {sorted(OUTCOMES)}, got {self.outcome!r}")
        if self.bytes < 0:
            raise ValueError(f"bytes must be >= 0, got {self.bytes!r}")
        if self.attempts < 0:
            raise ValueError(f"attempts must be >= 0, got {self.attempts!r}")
        if self.latency is not None and not (math.isfinite(self.latency) and self.latency >= 0):
            raise ValueError(f"latency must be a finite number >= 0 or None, got {self.latency!r}")
        if not math.isfinite(self.time):
            raise ValueError(f"time must be a finite number, got {self.time!r}")

    @property
    def final(self) -> bool:
        """Whether the outcome settles the URL for good (``ok``, ``disallowed``, ``failed``)."""
        return self.outcome in FINAL_OUTCOMES

    def to_json(self) -> str:
        """Return the result as one line of JSON, keys sorted, without a newline."""
        # The keys in sorted order, written out: a line per page, so no sort and no loop.
        if self.blocked:
            record = {"attempts": self.attempts, "block_rule": self.block_rule, "blocked": True,
                      "bytes": self.bytes, "error": self.error, "final_url": self.final_url,
                      "latency": self.latency, "outcome": self.outcome, "scope": self.scope,
                      "status": self.status, "time": self.time, "url": self.url}
        else:  # most lines: as short as before soft blocks existed
            record = {"attempts": self.attempts, "bytes": self.bytes, "error": self.error,
                      "final_url": self.final_url, "latency": self.latency, "outcome": self.outcome,
                      "scope": self.scope, "status": self.status, "time": self.time, "url": self.url}
        return _encode(record)

    # builtins.bytes: inside this class, plain ``bytes`` names the field above.
    @classmethod
    def from_json(cls, line: str | builtins.bytes) -> Result:
        """Parse a line written by :meth:`to_json`; unknown keys are ignored.

        Raises:
            ValueError: the line is not JSON, or a field is missing or has the
                wrong type or value.
        """
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a JSON line: {exc}") from exc
        if not isinstance(record, dict):
            raise ValueError(f"a result line holds a JSON object, not {type(record).__name__}")
        return cls(
            url=_field(record, "url", str),
            status=_field(record, "status", int, optional=True),
            final_url=_field(record, "final_url", str, optional=True),
            bytes=_field(record, "bytes", int),
            latency=_number(record, "latency", optional=True),
            attempts=_field(record, "attempts", int),
            error=_field(record, "error", str, optional=True),
            scope=_field(record, "scope", str),
            time=_number(record, "time"),
            outcome=_field(record, "outcome", str),
            blocked=record.get("blocked") is True,
            block_rule=record["block_rule"] if isinstance(record.get("block_rule"), str) else None,
        )


# One encoder for every line (json.dumps with options builds a new one per call).
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _field(record: dict[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    if name not in record:
        raise ValueError(f"result line lacks {name!r}")
    value = record[name]
    if value is None and optional:
        return None
    # bool is an int to Python but not a status or a count to anyone.
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"result field {name!r} must be {kind.__name__}"
                         f"{' or null' if optional else ''}, got {value!r}")
    return value


def _number(record: dict[str, Any], name: str, *, optional: bool = False) -> Any:
    if name not in record:
        raise ValueError(f"result line lacks {name!r}")
    value = record[name]
    if value is None and optional:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"result field {name!r} must be a number{' or null' if optional else ''}, "
                         f"got {value!r}")
    return float(value)


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
