"""Result lines written in batches, each URL settled only once its line is out.

Writing a line per answered URL costs a system call per page, and the job
cannot let a URL count as done (in the journal, or acknowledged to the
shared frontier) before its line has reached the operating system: the
output file is the record of what was answered. :class:`ResultBatch` keeps
both promises at a lower cost. Results wait in memory only until the event
loop ends its current turn (or ``max_lines`` of them are pending): the
answers that came in during one turn go out in one ``write``, and only after
it returns is each URL settled (the ``settled`` callback marks it done or
queues its acknowledgement). A busy crawl thus still writes many lines per
call, and an idle one a line per call.

What a crash (``kill -9``) costs: the answers of the loop turn it interrupted,
whose lines were not yet handed to the kernel; those URLs were not settled, so
a resumed crawl (or another worker) fetches them again, and each URL still has
exactly one line. Together with the fetches in flight, that is never more
than ``CONCURRENT_REQUESTS`` URLs: an answer is in its turn's batch only
because its fetch ended in that turn. (Until 0.7 lines waited up to 0.1 s or
256 lines, and a kill re-sent 11-14 pages with 8 in flight.) A clean stop
(Ctrl-C, SIGTERM, the end) calls :meth:`ResultBatch.flush` first and loses
nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from ._results import Result

__all__ = ["ResultBatch"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Lines that trigger a write at once.
MAX_LINES = 256
#: Seconds a line may wait for its batch: 0, the end of the event loop's current turn.
MAX_DELAY = 0.0


class ResultBatch(Generic[T]):
    """Results waiting to be written together, each with what settles it.

    Args:
        write: writes a list of results, all or raising ``OSError``
            (e.g. :meth:`ResultWriter.write_many`).
        settled: called with each result's ``item`` once its line is written.
        on_error: called with the ``OSError`` when a write started by the
            timer or by :meth:`add` fails (a write started by :meth:`flush`
            raises instead); the results stay pending, unsettled.
        max_lines: pending lines that trigger a write.
        max_delay: seconds the first pending line may wait; 0 (the default):
            until the event loop's current turn ends.
    """

    def __init__(self, write: Callable[[list[Result]], None], settled: Callable[[T], None], *,
                 on_error: Callable[[OSError], None], max_lines: int = MAX_LINES,
                 max_delay: float = MAX_DELAY) -> None:
        if max_lines < 1 or not max_delay >= 0:
            raise ValueError(f"max_lines must be >= 1 and max_delay >= 0, got {max_lines!r}, {max_delay!r}")
        self._write = write
        self._settled = settled
        self._on_error = on_error
        self._max_lines = max_lines
        self._max_delay = max_delay
        self._results: list[Result] = []
        self._items: list[T] = []
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None

    def __len__(self) -> int:
        return len(self._results)

    def add(self, result: Result, item: T) -> None:
        """Queue ``result``; ``item`` is handed to ``settled`` once it is written."""
        self._results.append(result)
        self._items.append(item)
        if len(self._results) >= self._max_lines:
            try:
                self.flush()
            except OSError as exc:  # the caller is settling an answer, not writing: tell on_error
                self._on_error(exc)
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = (loop.call_soon(self._on_timer) if self._max_delay == 0
                           else loop.call_later(self._max_delay, self._on_timer))

    def flush(self) -> None:
        """Write every pending result now, then settle each; nothing happens when none wait.

        Raises:
            OSError: the write failed; the results stay pending, unsettled.
        """
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._results:
            return
        results, items = self._results, self._items
        self._write(results)
        self._results, self._items = [], []
        for item in items:
            self._settled(item)

    def _on_timer(self) -> None:
        self._timer = None
        try:
            self.flush()
        except OSError as exc:
            self._on_error(exc)
