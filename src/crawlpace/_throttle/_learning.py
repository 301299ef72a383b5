"""Keeping what a crawl learns of each scope, as it goes and at its end (see
:mod:`crawlpace._throttle._learned`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Protocol

from .._settings._config import Settings
from ._learned import LearnedScope, LearnedSink, open_learned, snapshot, warm_start
from ._stats import ScopeStats

__all__ = ["LEARN_EVERY", "Learner"]

_log = logging.getLogger(__name__)

#: Seconds between two snapshots written during a crawl.
LEARN_EVERY = 5.0


class Throttler(Protocol):
    """What a learner reads of a throttler (which keeps a learner of its own: ``Throttler(learned=...)``)."""

    async def stats(self) -> dict[str, ScopeStats]: ...


class Learner:
    """Reads the learned records before a crawl and writes new ones while it runs.

    Args:
        sink: where the records live.
        every: seconds between snapshots.
    """

    def __init__(self, sink: LearnedSink, *, every: float = LEARN_EVERY) -> None:
        self.sink = sink
        self.every = every
        self.saved = 0
        self._sends: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def prepare(cls, settings: Settings) -> tuple[Settings, Learner | None]:
        """The settings with the records of ``settings.learned`` as their warm start, and the learner."""
        if not settings.learned:
            return settings, None
        sink = open_learned(settings.learned)
        warm = warm_start(sink)
        _log.info("warm start: %d scopes known from %s", len(warm.records), settings.learned)
        return dataclasses.replace(settings, warm_start=warm), cls(sink)

    def start(self, throttler: Throttler) -> None:
        """Snapshot the throttler's scopes every :attr:`every` seconds until :meth:`close`."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop(throttler))

    async def _loop(self, throttler: Throttler) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await self.flush(throttler)
            except Exception:  # a full disk or a lost Redis must not end the crawl
                _log.warning("could not save learned limits", exc_info=True)

    async def flush(self, throttler: Throttler) -> None:
        """Write a record for every scope that sent something since the last flush.

        A scope idle since then is left as it was: its rampup rate is capped
        by what it sends, which says nothing of what its server allows.
        """
        stats = await throttler.stats()
        active = [stat for stat in stats.values() if stat.sends != self._sends.get(stat.scope, 0)]
        for stat in active:
            self._sends[stat.scope] = stat.sends
        records: dict[str, LearnedScope] = snapshot(active, time.time())
        if records:
            await asyncio.to_thread(self.sink.save, records)
            self.saved += len(records)

    async def close(self, throttler: Throttler) -> None:
        """Stop the snapshots, write a last one, and close the sink."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.flush(throttler)
        except Exception:
            _log.warning("could not save learned limits", exc_info=True)
        finally:
            self.sink.close()
