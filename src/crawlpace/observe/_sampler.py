"""Samples scope state at intervals and keeps a short history of each busy scope.

The dashboard, the run report and the Prometheus collector read from one
:class:`Sampler`. A sample asks a *reader* (the throttler of this process, or a
store shared by a fleet) for the snapshots of the busiest scopes and appends
one :class:`Point` per scope. The history is bounded twice: at most
``max_scopes`` scopes, at most ``history`` points each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..stores.base import ScopeSnapshot, Store
from ._recorder import Recorder

__all__ = ["Point", "Reader", "Sampler", "limit_rate", "limit_rule", "store_reader", "throttler_reader"]

logger = logging.getLogger(__name__)

#: Returns the snapshots of the scopes worth showing, at most ``limit`` of them.
Reader = Callable[[int], Awaitable[Mapping[str, ScopeSnapshot]]]
#: Called with ``(scope, reason)`` when a scope's breaker is seen to open.
BreakerListener = Callable[[str, str], None]
# Snapshots read at most per sample when a store must be listed to rank its scopes.
LIST_CAP = 2000
#: Seconds between two rankings of a shared store's scopes by sends.
RERANK = 30.0
#: Seconds over which a point's send rate is measured.
RATE_WINDOW = 5.0
# Breaker states remembered at most (forgetting only risks one repeated alert).
BREAKER_MEMO = 10_000
#: Reads one scope's snapshot (``None``: no state).
ScopeReader = Callable[[str], Awaitable[ScopeSnapshot | None]]


def limit_rule(snap: ScopeSnapshot) -> tuple[float | None, str]:
    """The sends per second the scope may make, the lowest of every rule that binds, and which rule.

    The rules: a budget the server announced (``RateLimit`` or
    ``X-RateLimit-*`` headers: its pace, while in force); for a rampup scope,
    the rate rampup has learned the site takes; otherwise one send per
    ``delay`` and ``concurrency`` sends per per-slot delay, as admission
    applies them; and a robots.txt Crawl-delay. Rampup's delay in force also
    follows what the scope has been sending lately (an idle scope starts
    again gently), so on its own it would show a site that went quiet, or
    sends in bursts, as slow: the learned rate stands for it. While a server's
    pace is in force rampup does not search (the pace is the rate, even above
    what it learned), so the pace is the limit. A ``Retry-After`` hold is not
    a rate: it is shown apart (``hold_in``).

    Returns:
        ``(rate, rule)``: ``rule`` is ``"server's pace"``, ``"rampup"``,
        ``"delay"``, ``"slots"`` or ``"Crawl-delay"``; ``(None, "")`` when no
        rule limits the scope. On a tie the server's pace is named: a fixed
        delay shorter than the pace is raised to it.
    """
    bounds: list[tuple[float, str]] = []
    pace = snap.pace if snap.pace is not None and snap.pace > 0 else None
    if pace is not None:
        bounds.append((1.0 / pace, "server's pace"))
    rampup = snap.rampup
    if rampup is not None:
        learned = getattr(rampup, "learned_rate", rampup.rate)
        if pace is None:  # with a pace, rampup's rate is raised to it
            bounds.append((learned, "rampup"))
    else:
        if snap.delay > 0:
            bounds.append((1.0 / snap.delay, "delay"))
        if snap.delay_per_slot > 0:
            bounds.append((snap.concurrency / snap.delay_per_slot, "slots"))
    if snap.crawl_delay:
        bounds.append((1.0 / snap.crawl_delay, "Crawl-delay"))
    if not bounds:
        return None, ""
    return min(bounds, key=lambda bound: bound[0])


def limit_rate(snap: ScopeSnapshot) -> float | None:
    """The sends per second the scope may make: :func:`limit_rule`'s rate (``None``: no rule binds)."""
    return limit_rule(snap)[0]


@dataclass(frozen=True, slots=True)
class Point:
    """One scope at one sample.

    Attributes:
        t: wall-clock time of the sample (seconds since the epoch).
        rate: sends per second over the last :data:`RATE_WINDOW` seconds
            (since the first sample, early on).
        limit: :func:`limit_rate` at the sample.
        sends: sends counted by the store so far.
        errors: releases with an exception so far.
        pushbacks: 429 and 503 answers so far (this process's count; ``None``
            when read from a shared store).
        delay: the delay in force.
        concurrency: the slots in force.
        inflight: requests in flight.
        queued: requests of this process waiting.
        backoff: the backoff level.
        breaker: the breaker state.
        quota_remaining: quota units left, if the scope has a quota.
        latency: the mean latency, if known.
    """

    t: float
    rate: float
    limit: float | None
    sends: int
    errors: int
    pushbacks: int | None
    delay: float
    concurrency: int
    inflight: int
    queued: int
    backoff: int
    breaker: str
    quota_remaining: float | None
    latency: float | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready values (a number that is not finite becomes ``None``)."""
        return {key: (None if isinstance(value, float) and not math.isfinite(value) else value)
                for key, value in asdict(self).items()}


def throttler_reader(throttler: Any, recorder: Recorder | None) -> Reader:
    """Read the busiest scopes of one :class:`~crawlpace.Throttler`.

    With a recorder, the scopes it saw most admissions for; otherwise the
    store's scopes ranked by sends.
    """
    async def read(limit: int) -> Mapping[str, ScopeSnapshot]:
        names = recorder.names()[:limit] if recorder is not None else []
        if not names:
            return _rank(await throttler.stats(), limit)
        out: dict[str, ScopeSnapshot] = {}
        for name in names:
            snap = await throttler.scope_stats(name)
            if snap is not None:
                out[name] = snap
        return out
    return read


def store_reader(store: Store, *, rerank: float = RERANK,
                 clock: Callable[[], float] = time.monotonic) -> Reader:
    """Read the busiest scopes of a store (the fleet's view, for ``crawlpace dashboard``).

    Ranking needs every scope's snapshot (at most :data:`LIST_CAP`), so it is
    done every ``rerank`` seconds; in between only the ranked scopes are read.
    """
    ranked: list[str] = []
    last = [-math.inf]

    async def read(limit: int) -> Mapping[str, ScopeSnapshot]:
        now = clock()
        full = not ranked or now - last[0] >= rerank
        names = (await store.scopes())[:LIST_CAP] if full else ranked[:limit]
        snaps: dict[str, ScopeSnapshot] = {}
        for name in names:
            snap = await store.snapshot(name)
            if snap is not None:
                snaps[name] = snap
        top = _rank(snaps, limit)
        if full:
            ranked[:] = list(top)
            last[0] = now
        return top
    return read


def _rank(snaps: Mapping[str, ScopeSnapshot], limit: int) -> dict[str, ScopeSnapshot]:
    names = sorted(snaps, key=lambda name: (-snaps[name].sends, name))[:limit]
    return {name: snaps[name] for name in names}


class Sampler:
    """Keeps the latest snapshots and a bounded history per scope.

    Args:
        reader: where snapshots come from (:func:`throttler_reader`,
            :func:`store_reader`).
        recorder: this process's counters, for pushbacks (optional).
        max_scopes: scopes sampled and kept at most.
        history: points kept per scope.
        wall: the wall clock (injectable for tests).
        scope_reader: reads one scope, for :meth:`check`.
    """

    def __init__(self, reader: Reader, *, recorder: Recorder | None = None, max_scopes: int = 50,
                 history: int = 600, wall: Callable[[], float] = time.time,
                 scope_reader: ScopeReader | None = None) -> None:
        if max_scopes < 1:
            raise ValueError(f"max_scopes: {max_scopes!r} is below 1; use e.g. 50")
        self._reader = reader
        self.recorder = recorder
        self.max_scopes = max_scopes
        self._history_len = history
        self._wall = wall
        self.latest: dict[str, ScopeSnapshot] = {}
        self.history: dict[str, deque[Point]] = {}
        self.started = wall()
        self.samples = 0
        self._breaker_listeners: list[BreakerListener] = []
        self._breakers: dict[str, str] = {}
        self._scope_reader = scope_reader
        self._task: asyncio.Task[None] | None = None

    def now(self) -> float:
        """The wall clock's reading."""
        return self._wall()

    @property
    def has_breaker_listeners(self) -> bool:
        """True when someone wants to hear of breakers opening."""
        return bool(self._breaker_listeners)

    def on_breaker_open(self, listener: BreakerListener) -> None:
        """Call ``listener(scope, reason)`` when a sample sees a scope's breaker newly open."""
        self._breaker_listeners.append(listener)

    async def sample(self) -> None:
        """Take one sample now."""
        snaps = await self._reader(self.max_scopes)
        now = self._wall()
        for name, snap in snaps.items():
            self._add(name, snap, now)
        self.latest = dict(snaps)
        if len(self.history) > self.max_scopes:
            for name in [name for name in self.history if name not in snaps][:len(self.history)
                                                                              - self.max_scopes]:
                del self.history[name]
        self.samples += 1

    def _add(self, name: str, snap: ScopeSnapshot, now: float) -> None:
        points = self.history.get(name)
        if points is None:
            points = self.history[name] = deque(maxlen=self._history_len)
        previous = points[-1] if points else None
        # The rate over the last RATE_WINDOW seconds: per sample, it would flicker between 0 and bursts.
        base = previous
        for point in reversed(points):
            if now - point.t > RATE_WINDOW:
                break
            base = point
        rate = 0.0
        if base is not None and now > base.t:
            rate = max(0.0, (snap.sends - base.sends) / (now - base.t))
        counts = self.recorder.scope(name) if self.recorder is not None else None
        points.append(Point(
            t=now, rate=rate, limit=limit_rate(snap), sends=snap.sends, errors=snap.errors,
            pushbacks=counts.pushbacks if counts is not None else None, delay=snap.delay,
            concurrency=snap.concurrency, inflight=snap.inflight, queued=getattr(snap, "queued", 0),
            backoff=snap.backoff, breaker=snap.breaker, quota_remaining=snap.quota_remaining,
            latency=snap.mean_latency))
        self._note_breaker(name, snap.breaker)

    def _note_breaker(self, name: str, state: str) -> None:
        """Tell the listeners when ``name``'s breaker is newly seen open."""
        was = self._breakers.get(name, "closed")
        if state == was:
            return
        if len(self._breakers) >= BREAKER_MEMO:
            self._breakers.clear()
        self._breakers[name] = state
        if state in ("open", "given_up") and was in ("closed", "half_open", "off"):
            for listener in self._breaker_listeners:
                try:
                    listener(name, f"the circuit breaker is {state.replace('_', ' ')}")
                except Exception:
                    logger.exception("a breaker listener failed for scope %r", name)

    async def check(self, name: str) -> None:
        """Read one scope now (after a failure, say) and note a breaker that opened."""
        if self._scope_reader is None:
            return
        snap = await self._scope_reader(name)
        if snap is not None:
            self._note_breaker(name, snap.breaker)

    async def run(self, interval: float = 1.0) -> None:
        """Sample every ``interval`` seconds until cancelled; a failed read is logged and retried."""
        while True:
            try:
                await self.sample()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("sampling the scopes failed (%s); trying again in %gs", exc, interval)
            await asyncio.sleep(interval)

    def start(self, interval: float = 1.0) -> None:
        """Run :meth:`run` as a task of the running loop."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(interval))

    async def stop(self, *, final: bool = True) -> None:
        """Stop the task started by :meth:`start`, then take a last sample when ``final``."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if not final:
            return
        try:
            await self.sample()
        except Exception as exc:
            logger.warning("the last sample of the scopes failed (%s)", exc)
