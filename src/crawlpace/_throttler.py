"""The async facade: wait for a request's scopes, hand out permits, take feedback.

Waiting works without one timer or task per waiter. Each scope with waiting
requests has a queue; a request with several scopes sits in each of their
queues. Which scope's queue is looked at next is the readiness board's call
(:mod:`crawlpace._board`): a scope is due when a release or its delay running
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
  it, the waiter *reserves* all its scopes: younger waiters may not take them,
  so single-scope traffic cannot keep a multi-scope request out forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from ._board import GLOBAL_CAP, SHARED_POLL, Board, request_order
from ._clock import AsyncioClock, Clock, TimerHandle
from ._config import Settings
from ._exceptions import QuotaError, ScopeError, ScopeGivenUp, ThrottlerClosed
from ._feedback import FeedbackBuilder
from ._manager import ThrottlingManager, ThrottlingManagerProtocol, load_manager
from ._permit import NotReady, Permit
from ._release import Releaser
from ._scopes import Demand, default_scopes, normalize_scopes
from ._stats import ScopeStats
from .stores import open_store
from .stores.base import NO_OUTCOME, Blocked, Lease, LocalStore, Store

__all__ = ["SHARED_POLL", "Throttler"]

logger = logging.getLogger(__name__)


#: Called with the scope and the reason when the circuit breaker gives a scope up.
GiveUpHook = Callable[[str, str], None]


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


class _Slot:
    """``async with throttler.slot(request) as permit``: acquire, then release."""

    __slots__ = ("_permit", "_request", "_scopes", "_throttler")

    def __init__(self, throttler: Throttler, request: object, scopes: object) -> None:
        self._throttler = throttler
        self._request = request
        self._scopes = scopes
        self._permit: Permit | None = None

    async def __aenter__(self) -> Permit:
        # acquire()'s steps, inlined: on the uncontended path nothing here awaits.
        throttler, request = self._throttler, self._request
        demands = throttler._demands_nowait(request, self._scopes)
        if demands is None:
            demands = await throttler._demands(request, self._scopes)
        result = throttler._admit_now(demands)
        if isinstance(result, Lease):
            permit = Permit(throttler._releaser, result, request)
        else:
            permit = await throttler._admit(request, demands, result)
        self._permit = permit
        return permit

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        permit = self._permit
        if permit is not None:
            await permit.__aexit__(exc_type, exc, tb)


class Throttler:
    """Decides when each request may be sent.

    Args:
        settings: a :class:`Settings`, a mapping of Scrapy-style names, or
            ``None`` for the defaults.
        store: a :class:`~crawlpace.stores.Store` or a store URL
            (``"memory://"``, the default).
        clock: the time source; the event loop's clock by default.
        rng: the random source for jitter; pass a seeded one for repeatable runs.
        manager: decides each request's scopes; by default the one named by
            ``THROTTLING_MANAGER``, else the request's ``meta["throttling_scopes"]``
            or its URL's host.
        on_give_up: called with ``(scope, reason)`` when the circuit breaker
            gives a scope up (a log line at ERROR level is written either way).

    Raises:
        ConfigError: when the settings are invalid.

    Example::

        async with Throttler({"DOWNLOAD_DELAY": 0.5}) as throttler:
            async with throttler.slot("https://example.com/") as permit:
                response = await client.get(permit.request)
                permit.feedback(response)
    """

    def __init__(self, settings: Settings | Mapping[str, Any] | None = None, *,
                 store: Store | str = "memory://", clock: Clock | None = None,
                 rng: random.Random | None = None,
                 manager: ThrottlingManagerProtocol | None = None,
                 on_give_up: GiveUpHook | None = None) -> None:
        if settings is None:
            settings = Settings()
        elif not isinstance(settings, Settings):
            settings = Settings.from_scrapy(settings)
        self.settings = settings
        self.clock: Clock = clock if clock is not None else AsyncioClock()
        self._rng = rng if rng is not None else random.Random()
        self._store: Store = (open_store(store, settings, self.clock, self._rng)
                              if isinstance(store, str) else store)
        self._local: LocalStore | None = self._store if isinstance(self._store, LocalStore) else None
        if manager is None:
            manager = load_manager(settings.manager) if settings.manager else ThrottlingManager()
        self._manager: ThrottlingManagerProtocol = manager
        # The default manager needs no await; its answer can be had in the fast path.
        self._sync_scopes = type(self._manager) is ThrottlingManager
        self._releaser = Releaser(FeedbackBuilder(settings), self._manager, self._store, self.clock,
                                  self._released)
        self._on_give_up = on_give_up
        self._cap = settings.concurrent_requests
        self._inflight = 0
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
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        for note in settings.inactive():
            logger.warning("setting has no effect: %s", note)

    # -- public API ----------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store holding admission state."""
        return self._store

    @property
    def inflight(self) -> int:
        """Permits of this throttler not yet released."""
        return self._inflight

    @property
    def waiting(self) -> int:
        """Requests of this process waiting for a permit."""
        return self._waiting

    def scopes_nowait(self, request: object) -> tuple[str, ...] | None:
        """The names of ``request``'s scopes, when they can be had without awaiting.

        ``None`` when the manager must be awaited or the scopes are malformed
        (:meth:`acquire` then says why). Schedulers use it to queue requests
        by the same scopes the throttler admits them under.
        """
        demands = self._demands_nowait(request, None)
        return None if demands is None else tuple(name for name, _ in demands)

    def slot(self, request: object = None, *, scopes: object = None) -> _Slot:
        """Wait for a permit for ``request`` in an ``async with`` block.

        The block's exception, if any, is fed back before the permit is
        released; cancellation is not counted as a failure.
        """
        return _Slot(self, request, scopes)

    async def acquire(self, request: object = None, *, scopes: object = None) -> Permit:
        """Wait until every scope of ``request`` admits it, then return a permit.

        Args:
            request: a URL string or an object with ``url`` (and ``meta``).
            scopes: explicit scopes, overriding the manager.

        Raises:
            ScopeError: when the request's scopes are malformed.
            ThrottlerClosed: when the throttler is or gets closed.
        """
        demands = await self._demands(request, scopes)
        result = self._admit_now(demands)
        if isinstance(result, Lease):
            return Permit(self._releaser, result, request)
        return await self._admit(request, demands, result)

    async def try_acquire(self, request: object = None, *,
                          scopes: object = None) -> Permit | NotReady:
        """Return a permit if one can be granted now, else when one could be.

        Never waits. Requests already waiting in :meth:`acquire` keep their
        turn: while any waits for one of these scopes, the answer is
        :class:`NotReady` with ``ready_at=None``.
        """
        self._check_open()
        demands = await self._demands(request, scopes)
        if self._queued_ahead(demands):
            return NotReady(None, tuple((name, None) for name, _ in demands if name in self._queues))
        local = self._local
        result = local.acquire_nowait(demands) if local is not None \
            else await self._store.acquire(demands)
        if isinstance(result, Lease):
            self._inflight += 1
            return Permit(self._releaser, result, request)
        return NotReady(result.ready_at, result.waiting_on)

    async def set_crawl_delay(self, scope: str, delay: float | None) -> None:
        """Apply the Crawl-Delay of ``scope``'s robots.txt (``None`` removes it).

        With ``THROTTLING_ROBOTSTXT_OBEY`` on (the default), the scope sends one
        request at a time, at least ``delay`` seconds apart (capped at
        ``THROTTLING_ROBOTSTXT_MAX_DELAY``), unless ``THROTTLING_SCOPES`` sets
        its rate explicitly. Parse robots.txt with :func:`crawlpace.crawl_delay`.
        """
        await self._store.set_crawl_delay(scope, delay)
        if scope in self._queues:
            self._mark(scope, self.clock.now())

    async def stats(self) -> dict[str, ScopeStats]:
        """Describe every scope the store holds state for."""
        out: dict[str, ScopeStats] = {}
        for name in await self._store.scopes():
            snap = await self.scope_stats(name)
            if snap is not None:
                out[name] = snap
        return out

    async def scope_stats(self, scope: str) -> ScopeStats | None:
        """Describe one scope, or ``None`` if nothing is known about it."""
        snap = await self._store.snapshot(scope)
        if snap is None:
            return None
        queue = self._queues.get(scope)
        return ScopeStats.from_snapshot(snap, len(queue) if queue else 0)

    async def aclose(self) -> None:
        """Stop handing out permits; waiting requests get :class:`ThrottlerClosed`."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer[1].cancel()
            self._timer = None
        for queue in self._queues.values():
            for waiter in queue:
                if not waiter.future.done():
                    waiter.future.set_exception(ThrottlerClosed("the throttler was closed"))
        self._queues.clear()
        self._board = Board()
        self._reserved.clear()
        self._cap_waiters = False
        if self._pump_task is not None:
            self._pump_task.cancel()
        for task in list(self._background):
            await task
        await self._store.aclose()

    async def __aenter__(self) -> Throttler:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"<Throttler {state} inflight={self._inflight}/{self._cap} "
                f"waiting={self._waiting} scopes_with_queues={len(self._queues)}>")

    # -- admission -------------------------------------------------------------

    async def _demands(self, request: object, scopes: object) -> tuple[Demand, ...]:
        """The request's scopes, from ``scopes`` or the manager, normalised."""
        if scopes is None:
            if request is None:
                raise TypeError("give a request (a URL or an object with .url) or scopes=...")
            scopes = await self._manager.get_scopes(request)
        return normalize_scopes(scopes)

    def _demands_nowait(self, request: object, scopes: object) -> tuple[Demand, ...] | None:
        """:meth:`_demands` when no await is needed; ``None`` leaves it (and any error) to it."""
        if scopes is None:
            if not self._sync_scopes or request is None:
                return None
            try:
                scopes = default_scopes(request)
            except ScopeError:
                return None
        try:
            return normalize_scopes(scopes)
        except ScopeError:
            return None

    def _queued_ahead(self, demands: tuple[Demand, ...]) -> bool:
        """True when earlier requests, or the global cap, come before ``demands``."""
        if self._inflight >= self._cap or self._cap_waiters:
            return True
        queues = self._queues
        if len(demands) == 1:
            return demands[0][0] in queues
        return any(name in queues for name, _ in demands)

    def _admit_now(self, demands: tuple[Demand, ...]) -> Lease | Blocked | None:
        """Ask a local store at once; ``None`` when closed, queued ahead, or not local."""
        local = self._local
        if local is None or self._closed or self._queued_ahead(demands):
            return None
        result = local.acquire_nowait(demands)
        if type(result) is Lease:
            self._inflight += 1
        return result

    async def _admit(self, request: object, demands: tuple[Demand, ...],
                     answer: Blocked | None) -> Permit:
        """Finish an admission :meth:`_admit_now` could not complete: ask, or wait."""
        self._check_open()
        if answer is None and self._local is None and not self._queued_ahead(demands):
            result = await self._store.acquire(demands)
            if isinstance(result, Lease):
                self._inflight += 1
                return Permit(self._releaser, result, request)
            answer = result
        return Permit(self._releaser, await self._wait(demands, answer), request)

    def _check_open(self) -> None:
        if self._closed:
            raise ThrottlerClosed("the throttler is closed; create a new one")

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

    def _gave_up(self, scopes: tuple[str, ...]) -> None:
        """Tell the hook that the circuit breaker gave ``scopes`` up."""
        hook = self._on_give_up
        if hook is None:
            return
        for name in scopes:
            try:
                hook(name, "the circuit breaker gave it up after repeated failures")
            except Exception:
                logger.exception("the on_give_up hook failed for scope %r", name)

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

    def _park(self, name: str, scopes: tuple[str, ...], now: float) -> None:
        """Leave ``name`` until a release of ``scopes`` (none: the global cap) wakes it."""
        poll = now + SHARED_POLL if scopes and self._store.shared else None
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
                    self._park(name, (name,), now)
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
                self._reserve(waiter)
                return
            index += 1  # held back by another scope, and still young: skip it, keep its place

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

    def _reserve(self, waiter: _Waiter) -> None:
        """Keep younger waiters off every scope of ``waiter`` until it goes."""
        waiter.reserving = True
        for name, _ in waiter.demands:
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

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _ready_by(blocked: Blocked, now: float) -> float:
    """When the scopes that said no expect to be ready (now, if a release decides)."""
    return max((when for _name, when in blocked.waiting_on if when is not None), default=now)
