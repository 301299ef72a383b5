"""The async facade: wait for a request's scopes, hand out permits, take feedback.

The uncontended path admits at once through a local store. Requests that
must wait go to the waiting room the throttler is built on
(:mod:`crawlpace._throttle._waiting`), where the readiness board decides whose turn it is.
What it tells others (observers, the give-up hook, settings that had no effect)
is :mod:`crawlpace._throttle._throttler_reports`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from .._clock import AsyncioClock, Clock
from .._exceptions import ConfigError, ScopeError, ThrottlerClosed
from .._redact import redact
from .._responses._blocks import BlockRules
from .._responses._feedback import FeedbackBuilder
from .._scoping._manager import (
    ThrottlingManager,
    ThrottlingManagerProtocol,
    load_manager,
    scopes_without_await,
)
from .._scoping._scopes import Demand, normalize_scopes
from .._settings._config import Settings
from .._settings._effective import effective_limits, store_label
from .._settings._ineffective import ScopeUsage, static_notes
from ..stores import open_store
from ..stores.base import Blocked, Lease, LocalStore, Store
from ._board import SHARED_POLL, Board
from ._learning import Learner
from ._observer import ThrottleObserver
from ._permit import NotReady, Permit
from ._release import Releaser
from ._stats import ScopeStats
from ._throttler_reports import GiveUpHook, ThrottlerReports
from ._waiting import WaitingRoom

__all__ = ["SHARED_POLL", "Throttler"]

logger = logging.getLogger(__name__)


def _learning(settings: Settings, learned: str | None) -> tuple[Settings, Learner | None]:
    """The settings with their warm start read from ``learned`` (or the setting), and the learner.

    Settings that already carry a warm start were prepared by their owner
    (a crawl, the Scrapy add-on), which keeps the records itself.
    """
    if learned is not None:
        if not isinstance(learned, str) or not learned.strip():
            raise ConfigError([f"learned: expected a SQLite file path or a redis:// URL, got {learned!r}; "
                               "e.g. 'learned.sqlite'"])
        settings = dataclasses.replace(settings, learned=learned, warm_start=None)
    if not settings.learned or settings.warm_start is not None:
        return settings, None
    try:
        return Learner.prepare(settings)
    except Exception as exc:  # sqlite3.Error, OSError, a Redis error: said at start-up, not at the first save
        raise ConfigError([redact(f"learned: cannot open {settings.learned!r} ({exc}); give a writable "
                                  "SQLite file path or a reachable redis:// URL")]) from exc


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
            if throttler._observers:
                throttler._note_admitted(result, 0.0)
        else:
            permit = await throttler._admit(request, demands, result)
        self._permit = permit
        return permit

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        permit = self._permit
        if permit is not None:
            await permit.__aexit__(exc_type, exc, tb)


class Throttler(ThrottlerReports, WaitingRoom):
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
        learned: where learned limits are kept for a warm start (a SQLite
            file path or a ``redis://`` URL; the ``learned`` setting,
            ``CRAWLPACE_LEARNED``, by default): new scopes start from what
            earlier runs learned of them, and what this one learns is saved
            every few seconds and when the throttler closes. See
            docs/concepts/warm-start.md.

    Raises:
        ConfigError: when the settings are invalid, or ``learned`` cannot be opened.

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
                 on_give_up: GiveUpHook | None = None, learned: str | None = None) -> None:
        if settings is None:
            settings = Settings()
        elif not isinstance(settings, Settings):
            settings = Settings.from_scrapy(settings)
        settings, self._learner = _learning(settings, learned)
        self.settings = settings
        self._blocks = BlockRules.of(settings)
        self.clock: Clock = clock if clock is not None else AsyncioClock()
        self._rng = rng if rng is not None else random.Random()
        self._store: Store = (open_store(store, settings, self.clock, self._rng)
                              if isinstance(store, str) else store)
        self._local: LocalStore | None = self._store if isinstance(self._store, LocalStore) else None
        if manager is None:
            manager = load_manager(settings.manager) if settings.manager else ThrottlingManager()
        self._manager: ThrottlingManagerProtocol = manager
        # A manager that needs no await (the default one) is answered in the fast path.
        self._scopes_now = scopes_without_await(manager)
        self._releaser = Releaser(FeedbackBuilder(settings), self._manager, self._store, self.clock,
                                  self._released)
        self._on_give_up = on_give_up
        self._cap = settings.concurrent_requests
        self._inflight = 0
        self._init_waiting()
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        self._observers: tuple[ThrottleObserver, ...] = ()
        for note in static_notes(settings):
            logger.warning("setting does not work as written: %s", note)
        logger.info("%s", effective_limits(settings, store_label(store)))
        self._usage = ScopeUsage(settings) if settings.scopes else None
        if self._usage is not None:
            self.observe(self._usage)
        self._start_learning()

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

    async def scopes(self, request: object) -> tuple[str, ...]:
        """The names of ``request``'s scopes, asking (and awaiting) the manager if it must.

        Raises:
            ScopeError: when the manager's answer is malformed.
        """
        return tuple(name for name, _ in await self._demands(request, None))

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
            if self._observers:
                self._note_admitted(result, 0.0)
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
        if self._local is not None or self._queued_ahead(demands):
            return self._try_local(request, demands)
        result = await self._store.acquire(demands)
        return self._permit(result, request) if isinstance(result, Lease) \
            else NotReady(result.ready_at, result.waiting_on, result.poll_at)

    def try_acquire_nowait(self, request: object = None, *,
                           scopes: object = None) -> Permit | NotReady | None:
        """:meth:`try_acquire` as a plain call; ``None`` when the answer needs an await (a shared
        store, a manager to await, malformed scopes): call :meth:`try_acquire` then."""
        self._check_open()
        demands = self._demands_nowait(request, scopes) if self._local is not None else None
        return None if demands is None else self._try_local(request, demands)

    def _try_local(self, request: object, demands: tuple[Demand, ...]) -> Permit | NotReady:
        if self._queued_ahead(demands):
            return NotReady(None, tuple((name, None) for name, _ in demands if name in self._queues))
        assert self._local is not None
        result = self._local.acquire_nowait(demands)
        return self._permit(result, request) if isinstance(result, Lease) \
            else NotReady(result.ready_at, result.waiting_on, result.poll_at)

    def _permit(self, lease: Lease, request: object) -> Permit:
        self._inflight += 1
        if self._observers:
            self._note_admitted(lease, 0.0)
        return Permit(self._releaser, lease, request)

    def count_work(self, work: Callable[[str], tuple[int, bool] | None] | None) -> None:
        """Tell the scopes how much work is left for them (``None``: stop telling).

        ``work`` is called with a scope's name whenever a request of it is released,
        and answers ``(left, more)``: the requests of that scope the caller still
        holds to send (those in flight not counted), and whether more may come
        later (links still to be found, URLs not loaded yet), or ``None`` when it
        does not know. It must be quick and must not await. ``crawlpace crawl``
        passes its queues' counts. With rampup, a scope weighs the risk of a
        step after a ``Retry-After`` hold against the work the step could speed
        up: a step that may cost a minute's hold is not worth taking for the last
        few pages of a site.

        Example::

            left = {"example.com": 120}
            throttler.count_work(lambda scope: (left[scope], False) if scope in left else None)
        """
        self._releaser.work = work

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
        await self._report_unused()
        if self._learner is not None:  # the last snapshot, before the store goes
            await self._learner.close(self)
        await self._store.aclose()

    async def __aenter__(self) -> Throttler:
        self._start_learning()
        return self

    @property
    def blocks(self) -> BlockRules:
        """The soft-block rules of the settings (``block_rules``, then the default rules unless
        ``block_defaults`` is false) and those always on.

        The library's clients apply them to every answer; code that feeds
        back by hand does the same with
        ``permit.feedback(response, blocked=throttler.blocks.match(status, headers, body) is not None)``.
        """
        return self._blocks

    @property
    def learner(self) -> Learner | None:
        """What keeps this throttler's learned limits (``None`` without ``learned``)."""
        return self._learner

    def _start_learning(self) -> None:
        """Snapshot the scopes every few seconds, once an event loop runs (at once, or at ``async with``)."""
        if self._learner is not None and not self._closed:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return
            self._learner.start(self)

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
            if self._scopes_now is None or request is None:
                return None
            try:
                scopes = self._scopes_now(request)
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
                return self._permit(result, request)
            answer = result
        started = self.clock.now()
        lease = await self._wait(demands, answer)
        if self._observers:
            self._note_admitted(lease, self.clock.now() - started)
        return Permit(self._releaser, lease, request)

    def _check_open(self) -> None:
        if self._closed:
            raise ThrottlerClosed("the throttler is closed; create a new one")

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
