"""The waiting room: requests that a throttler cannot admit at once wait here.

Waiting works without one timer or task per waiter. Each scope with waiting
requests has a queue; a request with several scopes sits in each of their
queues. Which scope's queue is looked at next is the readiness board's call
(:mod:`crawlpace._throttle._board`): a scope is due when a release or its delay running
out may have freed it, or parked until a slot frees, and one pump task takes
due scopes off the board (the one whose first waiter came earliest first) and
walks each queue in order, admitting every waiter that all of its scopes
now accept. The walk stops at the first waiter this scope itself refuses,
since nobody behind it could pass either.

Two rules keep every waiter's wait bounded (nobody waits longer than its
own scopes' pace implies):

* When ``CONCURRENT_REQUESTS`` is reached, a release wakes the scope whose
  first waiter has waited longest, not the releasing request's own scope.
* A waiter held back by one of its scopes may be overtaken on its other
  scopes only until the time its scopes first said they would be ready. Past
  it, the waiter *reserves* each of its scopes that still refuses it: younger
  waiters may not take them, so single-scope traffic cannot keep a multi-scope
  request out forever, while its scopes that would take it stay open to others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any

from .._clock import Clock, TimerHandle
from .._exceptions import QuotaError, ScopeGivenUp
from .._scoping._scopes import Demand
from .._settings._config import Settings
from ..stores.base import NO_OUTCOME, Blocked, Lease, LocalStore, Store
from ._board import GLOBAL_CAP, SHARED_POLL, Board, request_order
from ._release import Releaser

__all__ = ["WaitingRoom"]

# Log as the throttler: users filter on that name, and the room is part of it.
logger = logging.getLogger(__name__)


class _Waiter:
    __slots__ = ("deadline", "demands", "future", "queued", "reserving", "seq")

    def __init__(self, demands: tuple[Demand, ...], future: asyncio.Future[Lease], seq: int) -> None:
        self.demands = demands
        self.future = future
        self.queued = True
        self.seq = seq  # arrival order: smaller waited longer
        # When its scopes first said they would all be ready; past it, it reserves them.
        self.deadline: float | None = None
        self.reserving = False


class WaitingRoom:
    """The waiting half of :class:`~crawlpace.Throttler`: queues, the board, the pump.

    The throttler sets the attributes declared here; :meth:`_init_waiting`
    sets the room's own.
    """

    settings: Settings
    clock: Clock
    _store: Store
    _local: LocalStore | None
    _releaser: Releaser
    _cap: int
    _inflight: int
    _closed: bool

    def _init_waiting(self) -> None:
        self._queues: dict[str, deque[_Waiter]] = {}
        self._waiting = 0
        self._warned_waiting = False
        # Which scope's queue to walk next: due at a time, or parked until a release.
        self._board: Board[str] = Board()
        self._timer: tuple[float, TimerHandle] | None = None
        self._arrivals = 0
        # True from when a waiter is held by the global cap until the pump has
        # served the queues a release woke: newcomers queue behind them.
        self._cap_waiters = False
        # scope -> the oldest waiter reserving it (see the module docstring).
        self._reserved: dict[str, _Waiter] = {}
        self._pump_task: asyncio.Task[None] | None = None

    def _gave_up(self, scopes: tuple[str, ...]) -> None:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        raise NotImplementedError

    async def _wait(self, demands: tuple[Demand, ...], blocked: Blocked | None) -> Lease:
        self._arrivals += 1
        waiter = _Waiter(demands, asyncio.get_running_loop().create_future(), self._arrivals)
        for name, use in demands:
            queue = self._queues.get(name)
            if queue is None:
                self._queues[name] = deque((waiter,))
            else:
                self._enqueue(queue, waiter, name, use)
        self._waiting += 1
        if self._waiting >= self.settings.delayed_requests_warn_threshold \
                and not self._warned_waiting:
            self._warned_waiting = True
            logger.warning("%d requests are waiting in memory for a permit "
                           "(DELAYED_REQUESTS_WARN_THRESHOLD); consider queueing fewer at once",
                           self._waiting)
        now = self.clock.now()
        if blocked is not None:
            waiter.deadline = _ready_by(blocked, now)
            self._arm(blocked, now)
        elif self._inflight >= self._cap:
            self._park(demands[0][0], (), now)
        else:
            for name, _ in demands:
                self._mark(name, now)
        try:
            return await waiter.future
        except BaseException:
            self._forget(waiter)
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                # Granted in the same breath as the cancellation: give it back.
                if self._local is not None:
                    self._releaser.give_back_nowait(future.result(), NO_OUTCOME)
                else:
                    self._spawn(self._releaser.give_back(future.result(), NO_OUTCOME))
            raise

    def _enqueue(self, queue: deque[_Waiter], waiter: _Waiter, name: str, use: float) -> None:
        """Queue ``waiter`` in the board's request order (quota share, then arrival).

        Seed 001: among waiting requests, those that need a larger share of
        the scope's quota go first, so that they are not starved by a stream
        of small ones; equal shares keep their arrival order.
        """
        quota = self.settings.scope_config(name).quota
        if quota is None:
            queue.append(waiter)
            return
        mine = request_order(0, (use / quota,), waiter.seq)
        index = len(queue)
        while index > 0 and request_order(
                0, (dict(queue[index - 1].demands).get(name, 0.0) / quota,), queue[index - 1].seq) > mine:
            index -= 1
        queue.insert(index, waiter)

    def _forget(self, waiter: _Waiter) -> None:
        if not waiter.queued:
            return
        waiter.queued = False
        self._waiting -= 1
        if waiter.reserving:
            self._unreserve(waiter)
        for name, _ in waiter.demands:
            queue = self._queues.get(name)
            if queue is None:
                continue
            with contextlib.suppress(ValueError):
                queue.remove(waiter)
            if not queue:
                self._drop_queue(name)

    def _drop_queue(self, name: str) -> None:
        del self._queues[name]
        self._board.discard(name)

    def _released(self, lease: Lease, given_up: tuple[str, ...] = ()) -> None:
        if given_up:
            self._gave_up(given_up)
        self._inflight -= 1
        if not self._queues:
            return
        now = self.clock.now()
        # Queues parked on these scopes or on the global cap become due, the
        # one whose first waiter came earliest first.
        self._board.released([name for name, _ in lease.demands], now)
        for name, _ in lease.demands:
            if name in self._queues:
                self._mark(name, now)
        self._start_pump()

    # -- waking ----------------------------------------------------------------

    def _rank(self, name: str) -> tuple[float, ...]:
        queue = self._queues.get(name)
        return (queue[0].seq,) if queue else ()

    def _mark(self, name: str, now: float) -> None:
        """Note that ``name`` may admit a waiter now, and make sure the pump runs."""
        if self._closed:
            return
        self._board.due(name, now, self._rank(name), keep_earlier=True)
        self._start_pump()

    def _park(self, name: str, scopes: tuple[str, ...], now: float, poll_at: float | None = None) -> None:
        """Leave ``name`` until a release of ``scopes`` (none: the global cap) wakes it, or ``poll_at``
        (a full scope's limits may change then: ``Blocked.poll_at``)."""
        poll = now + SHARED_POLL if scopes and self._store.shared else None
        if poll_at is not None:
            poll = poll_at if poll is None else min(poll, poll_at)
        if not scopes:
            self._cap_waiters = True
        self._board.park(name, scopes, self._rank(name), poll_at=poll)
        if poll is not None:
            self._wake_at(poll)

    def _start_pump(self) -> None:
        task = self._pump_task
        if task is None or task.done():
            self._pump_task = asyncio.get_running_loop().create_task(self._pump())

    def _arm(self, blocked: Blocked, now: float) -> None:
        """Put each scope that said no on the board: due when it said, or parked on its slots."""
        board = self._board
        for name, when in blocked.waiting_on:
            if name not in self._queues:
                continue
            if when is None:
                if board.state(name) == "off":
                    self._park(name, (name,), now, blocked.poll_at)
                continue
            if board.state(name) != "due" or (board.when(name) or 0.0) > when:
                board.due(name, when, self._rank(name))
                self._wake_at(when)

    def _wake_at(self, when: float) -> None:
        """Have the one timer fire no later than ``when``."""
        if self._closed:
            return
        timer = self._timer
        if timer is not None:
            if timer[0] <= when:
                return
            timer[1].cancel()
        self._timer = (when, self.clock.call_at(when, self._on_timer))

    def _on_timer(self) -> None:
        self._timer = None
        self._start_pump()

    async def _pump(self) -> None:
        board = self._board
        served: set[str] = set()
        while (name := board.pop(self.clock.now())) is not None:
            queue = self._queues.get(name)
            if not queue:
                continue
            if name in served:
                # Due again in the same pass (its store said "now" yet refused):
                # leave it to the timer, so one pass never spins on one scope.
                board.due(name, self.clock.now(), self._rank(name))
                break
            served.add(name)
            try:
                await self._serve(name, queue)
            except Exception as exc:
                # A failing store must not leave waiters hanging on a dead pump:
                # they get the error, and the pump goes on with other scopes.
                logger.exception("admitting waiters of scope %r failed", name)
                for waiter in list(queue):
                    if not waiter.future.done():
                        waiter.future.set_exception(exc)
                        self._forget(waiter)
            board = self._board
        self._cap_waiters = board.holds(GLOBAL_CAP)
        when = board.next_at()
        if when is not None:
            self._wake_at(when)

    async def _serve(self, name: str, queue: deque[_Waiter]) -> None:
        """Admit, in order, every waiter of ``name`` that can go now."""
        index = 0
        while index < len(queue):
            waiter = queue[index]
            if waiter.future.done():
                index += 1
                continue
            now = self.clock.now()
            if self._inflight >= self._cap:
                self._park(name, (), now)
                return
            reserved = self._reserved_against(waiter)
            if reserved:
                if name in reserved:
                    return  # an older waiter holds this scope: a release of it wakes us
                index += 1
                continue
            local = self._local
            try:
                result = local.acquire_nowait(waiter.demands) if local is not None \
                    else await self._store.acquire(waiter.demands)
            except (ScopeGivenUp, QuotaError) as exc:
                # This waiter can never be admitted; the ones behind it may be.
                waiter.future.set_exception(exc)
                self._forget(waiter)
                continue
            if isinstance(result, Lease):
                self._inflight += 1
                if waiter.future.done():  # cancelled while a shared store answered
                    await self._releaser.give_back(result, NO_OUTCOME)
                    continue
                waiter.future.set_result(result)
                self._forget(waiter)  # leaves the queue: the next one moves up to ``index``
                continue
            if waiter.deadline is None:
                waiter.deadline = _ready_by(result, now)
            self._arm(result, now)
            if any(scope == name for scope, _ in result.waiting_on):
                return
            if now >= waiter.deadline:
                # Past its promise: the scopes that still refuse it are kept for it, so
                # younger traffic cannot take their next free slot. Its other scopes stay
                # open to the waiters behind it (no idle room while it waits elsewhere).
                self._reserve(waiter, [scope for scope, _ in result.waiting_on])
            index += 1  # held back by another scope: skip it, keep its place

    # -- reservations ------------------------------------------------------------

    def _reserved_against(self, waiter: _Waiter) -> list[str]:
        """The scopes of ``waiter`` that an older waiter reserves."""
        reserved = self._reserved
        if not reserved:
            return []
        out = []
        for name, _ in waiter.demands:
            holder = reserved.get(name)
            if holder is not None and holder.seq < waiter.seq:
                out.append(name)
        return out

    def _reserve(self, waiter: _Waiter, names: list[str]) -> None:
        """Keep younger waiters off ``names`` (scopes of ``waiter``) until it goes."""
        waiter.reserving = True
        for name in names:
            holder = self._reserved.get(name)
            if holder is None or waiter.seq < holder.seq:
                self._reserved[name] = waiter

    def _unreserve(self, waiter: _Waiter) -> None:
        waiter.reserving = False
        now = self.clock.now()
        for name, _ in waiter.demands:
            if self._reserved.get(name) is waiter:
                del self._reserved[name]
                if name in self._queues:
                    self._mark(name, now)


def _ready_by(blocked: Blocked, now: float) -> float:
    """When the scopes that said no expect to be ready (now, if a release decides)."""
    return max((when for _name, when in blocked.waiting_on if when is not None), default=now)
