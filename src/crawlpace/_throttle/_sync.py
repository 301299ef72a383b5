"""A blocking facade over :class:`~crawlpace.Throttler`, for threads and plain scripts.

The throttler is asyncio code. :class:`SyncThrottler` gives it an event loop
of its own, running in one daemon thread, and every blocking call hands a
coroutine to that loop and waits on a :class:`concurrent.futures.Future`. A
caller therefore sleeps on a lock until its permit is granted: nothing polls,
and one loop thread serves any number of calling threads. Since all throttler
state is touched only from the loop thread, the facade is thread-safe without
locks of its own.

With the memory store the budget is shared by the threads of one process;
with a Redis store (``store="redis://..."``) by every process and machine
that uses the same server, since admission happens in Redis.

A :class:`SyncThrottler` belongs to the process that created it: its loop
thread does not survive ``fork``. Create one in each process (after forking,
in a ``multiprocessing`` worker's initializer for instance).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import random
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

from .._exceptions import ThrottlerClosed
from .._scoping._manager import ThrottlingManagerProtocol
from .._settings._config import Settings
from ..stores.base import Outcome
from ._permit import NotReady, Permit
from ._stats import ScopeStats
from ._throttler import Throttler
from ._throttler_reports import GiveUpHook

__all__ = ["SyncPermit", "SyncThrottler"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SyncPermit:
    """The blocking twin of :class:`~crawlpace.Permit`.

    Send the request, report with :meth:`feedback`, then :meth:`release` (or
    leave the ``with`` block of :meth:`SyncThrottler.slot`).
    """

    __slots__ = ("_owner", "_permit")

    def __init__(self, owner: SyncThrottler, permit: Permit) -> None:
        self._owner = owner
        self._permit = permit

    @property
    def scopes(self) -> tuple[str, ...]:
        """The scopes this permit holds a slot in."""
        return self._permit.scopes

    @property
    def granted_at(self) -> float:
        """The throttler clock's reading at admission."""
        return self._permit.granted_at

    @property
    def released(self) -> bool:
        """True once the slots went back to the throttler."""
        return self._permit.released

    @property
    def outcome(self) -> Outcome | None:
        """The outcome applied at release, once released with feedback."""
        return self._permit.outcome

    @property
    def request(self) -> object:
        """The request the permit was granted for."""
        return self._permit.request

    def feedback(self, response: object = None, *, status: int | None = None,
                 exception: BaseException | None = None, latency: float | None = None,
                 consumed_quota: Mapping[str, float] | None = None) -> None:
        """Record what happened to the request; see :meth:`crawlpace.Permit.feedback`.

        Raises:
            PermitError: if the permit was already released.
        """
        permit = self._permit

        async def record() -> None:
            permit.feedback(response, status=status, exception=exception, latency=latency,
                            consumed_quota=consumed_quota)

        self._owner._call(record())

    def _report(self, response: object = None, *, exception: BaseException | None = None,
                latency: float | None = None, blocked: bool = False,
                heard: Callable[[Permit], None] | None = None) -> None:
        """Feed back and release in one trip to the loop (the adapters' hot path); ``heard`` as in
        :meth:`Permit.release <crawlpace.Permit.release>` (called on the loop's thread)."""
        permit = self._permit

        async def report() -> None:
            permit.feedback(response, exception=exception, latency=latency, blocked=blocked)
            await permit.release(heard=heard)

        self._owner._call(report())

    def release(self) -> None:
        """Give the slots back and apply the feedback; later calls do nothing."""
        if self._permit.released:
            return
        self._owner._call(self._permit.release())

    def __enter__(self) -> SyncPermit:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if isinstance(exc, Exception):
                self._feedback_unless_given(exc)
        finally:
            self.release()

    def _feedback_unless_given(self, exc: Exception) -> None:
        permit = self._permit

        async def record() -> None:
            if not permit.released and permit._raw is None:
                permit.feedback(exception=exc)

        self._owner._call(record())

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<SyncPermit {'+'.join(self.scopes)} {state}>"


class SyncThrottler:
    """Decides when each request may be sent, for code that does not use asyncio.

    Args:
        settings: a :class:`~crawlpace.Settings`, a mapping of Scrapy-style
            names, or ``None`` for the defaults.
        store: a store URL (``"memory://"``, the default, or
            ``"redis://host:port/db"`` to share limits between processes and
            machines). A :class:`~crawlpace.stores.Store` object is not taken:
            it would be bound to another event loop.
        rng: the random source for jitter.
        manager: decides each request's scopes; see :class:`~crawlpace.Throttler`.
        on_give_up: called (in the throttler's own thread) with ``(scope,
            reason)`` when the circuit breaker gives a scope up.
        learned: where learned limits are kept for a warm start; see
            :class:`~crawlpace.Throttler`.

    Raises:
        ConfigError: when the settings are invalid.
        TypeError: when ``store`` is not a URL.

    Example::

        with SyncThrottler({"DOWNLOAD_DELAY": 0.5}) as throttler:
            with throttler.slot("https://example.com/") as permit:
                response = requests.get(permit.request)
                permit.feedback(response)
    """

    def __init__(self, settings: Settings | Mapping[str, Any] | None = None, *,
                 store: str = "memory://", rng: random.Random | None = None,
                 manager: ThrottlingManagerProtocol | None = None,
                 on_give_up: GiveUpHook | None = None, learned: str | None = None) -> None:
        if not isinstance(store, str):
            raise TypeError(f"SyncThrottler takes a store URL such as 'memory://' or "
                            f"'redis://localhost:6379/0', got {type(store).__name__}: a store object "
                            f"belongs to the event loop that made it")
        self._pid = os.getpid()
        self._closed = False
        self._stopped = False
        self._close_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="crawlpace-throttler", daemon=True)
        self._thread.start()

        async def build() -> Throttler:
            return Throttler(settings, store=store, rng=rng, manager=manager, on_give_up=on_give_up,
                             learned=learned)

        try:
            self._throttler = self._call(build())
        except BaseException:
            self._stop_loop()
            raise

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        loop = self._loop
        try:
            loop.run_forever()
            # Whatever was handed over while the loop stopped is cancelled, so no caller
            # waits on a future that would never be done.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            loop.close()

    # -- running coroutines on the loop thread ---------------------------------

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Hand ``coro`` to the loop thread; refuse where waiting for it could never end."""
        if os.getpid() != self._pid:
            coro.close()
            raise RuntimeError("this SyncThrottler was created in another process and its thread "
                               "did not survive fork; create a SyncThrottler in each process")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("SyncThrottler methods block; from the throttler's own thread "
                               "(an on_give_up hook) use .throttler and await instead")
        if self._stopped:
            coro.close()
            raise ThrottlerClosed("the throttler is closed; create a new one")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop thread and block until it is done."""
        return self._submit(coro).result(timeout)

    # -- public API ------------------------------------------------------------

    @property
    def throttler(self) -> Throttler:
        """The asyncio throttler underneath; use it only from its own loop (see :meth:`call`)."""
        return self._throttler

    @property
    def settings(self) -> Settings:
        """The settings in force."""
        return self._throttler.settings

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def now(self) -> float:
        """The throttler clock's reading (the clock permits are timed on)."""
        return self._throttler.clock.now()

    def call(self, func: Callable[[Throttler], Awaitable[T]], timeout: float | None = None) -> T:
        """Run ``func(throttler)`` on the throttler's loop and return its result.

        For the rare async method the facade does not wrap. Blocks the caller.
        """

        async def run() -> T:
            return await func(self._throttler)

        return self._call(run(), timeout)

    def acquire(self, request: object = None, *, scopes: object = None,
                timeout: float | None = None) -> SyncPermit:
        """Block until every scope of ``request`` admits it, then return a permit.

        Args:
            request: a URL string or an object with ``url`` (and ``meta``).
            scopes: explicit scopes, overriding the manager.
            timeout: the most seconds to wait; ``None`` waits as long as it takes.

        Raises:
            TimeoutError: when ``timeout`` ran out (the request gave up its turn).
            ScopeError: when the request's scopes are malformed.
            ScopeGivenUp: when the circuit breaker gave a scope up.
            ThrottlerClosed: when the throttler is or gets closed.
        """
        self._check_open()
        throttler = self._throttler

        async def wait() -> Permit:
            # The time limit runs in the loop, so a request that times out has left its
            # queues by the time the caller hears of it.
            async with asyncio.timeout(timeout):
                return await throttler.acquire(request, scopes=scopes)

        future = self._submit(wait())
        try:
            permit = future.result()
        except TimeoutError:
            raise TimeoutError(f"no permit for {request!r} within {timeout} s") from None
        except BaseException:
            # An interrupt (Ctrl-C) of the waiting thread: withdraw the request. A permit
            # granted in the same breath is given back.
            if not future.cancel() and future.done() and not future.cancelled() \
                    and future.exception() is None:
                self._call(future.result().release())
            raise
        return SyncPermit(self, permit)

    def try_acquire(self, request: object = None, *, scopes: object = None) -> SyncPermit | NotReady:
        """Return a permit if one can be granted now, else when one could be (never waits)."""
        self._check_open()
        result = self._call(self._throttler.try_acquire(request, scopes=scopes))
        return SyncPermit(self, result) if isinstance(result, Permit) else result

    @contextmanager
    def slot(self, request: object = None, *, scopes: object = None,
             timeout: float | None = None) -> Iterator[SyncPermit]:
        """Hold a permit for a ``with`` block; its exception, if any, is fed back."""
        permit = self.acquire(request, scopes=scopes, timeout=timeout)
        with permit:
            yield permit

    def set_crawl_delay(self, scope: str, delay: float | None) -> None:
        """Apply a robots.txt Crawl-Delay to ``scope``; see :meth:`crawlpace.Throttler.set_crawl_delay`."""
        self._call(self._throttler.set_crawl_delay(scope, delay))

    def stats(self) -> dict[str, ScopeStats]:
        """Describe every scope the store holds state for."""
        return self._call(self._throttler.stats())

    def scope_stats(self, scope: str) -> ScopeStats | None:
        """Describe one scope, or ``None`` if nothing is known about it."""
        return self._call(self._throttler.scope_stats(scope))

    def close(self) -> None:
        """Close the throttler (waiting requests get ``ThrottlerClosed``) and stop its thread."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if os.getpid() != self._pid or not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._throttler.aclose(), self._loop).result()
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._stopped = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _check_open(self) -> None:
        if self._closed:
            raise ThrottlerClosed("the throttler is closed; create a new one")

    def __enter__(self) -> SyncThrottler:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<SyncThrottler {'closed' if self._closed else 'open'} {self._throttler!r}>"
