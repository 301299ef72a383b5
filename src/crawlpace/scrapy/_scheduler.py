"""A Scrapy scheduler that keeps throttled requests until their scopes are ready.

Scrapy's own scheduler hands the engine any request, and the downloader then
holds it in a slot queue until the slot's delay ran out; those waiting
requests count against ``CONCURRENT_REQUESTS``, so one slow site can take
the whole budget (Scrapy issues #2638 and #6982). This scheduler keeps every
request until the throttler admits it: the engine only ever receives a
request whose scopes said yes, together with its permit.

Requests are grouped in queues by their scope names (:mod:`._queues`). Which
queue is asked next is the readiness board's call (:mod:`crawlpace._throttle._board`), as for the
crawl and the throttler's own waiters: a queue is *eligible* (due now: worth
asking the throttler about), *timed* (due at a known time), *blocked*
(parked until a permit of a full scope is released) or *asking* (off the
board while a shared store answers). The engine's ``next_request()`` takes
due queues, highest head priority first and first due among equals, and
returns the first request admitted. Within a queue, requests go in the
board's request order: Scrapy priority, then the expected share of a
quota-limited scope (larger first, as seed 001 asks), then first in, first out.

With the in-memory store an admission is decided on the spot. With a shared
store (Redis) each question is a round trip: questions run as tasks, their
permits wait in a short ready list, and the engine is woken to collect them.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from .._exceptions import QuotaError, ScopeError, ScopeGivenUp, ThrottlerClosed
from .._throttle._permit import NotReady, Permit
from ._queues import ASKING, IDLE, LOCAL_POLL, Entry, Queue, ScopeQueues
from ._runtime import Runtime, runtime_of
from ._tickets import DELAY_DONE_KEY, DONT_THROTTLE_KEY, REFUSAL_KEY, RequestView, pending_delay

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

__all__ = ["ThrottlingScheduler"]

logger = logging.getLogger("crawlpace.scrapy")

T = TypeVar("T")


def _now_or_task(coro: Coroutine[Any, Any, T]) -> tuple[bool, Any]:
    """Run ``coro`` to its end if it never has to wait; else say so.

    The memory store answers without waiting, so ``try_acquire`` completes in
    its first step and the engine gets its answer in the same call.

    Returns:
        ``(True, result)``, or ``(False, None)`` after closing ``coro`` when
        it would have waited (the caller then runs it as a task).

    Raises:
        Whatever ``coro`` raised.
    """
    try:
        coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    coro.close()
    return False, None


class ThrottlingScheduler:
    """Hands the engine only requests whose throttling scopes admit them now.

    Duplicate requests are filtered with ``DUPEFILTER_CLASS`` as in Scrapy's
    scheduler. Requests are kept in memory (``JOBDIR`` resuming needs
    Scrapy's scheduler; see ``CRAWLPACE_SCHEDULER``).

    Args:
        runtime: the crawl's throttling runtime (its stats collector is used).
        dupefilter: the duplicate filter, if any.
        crawler: the crawler.
    """

    def __init__(self, runtime: Runtime, dupefilter: Any = None, *, crawler: Any = None) -> None:
        self.runtime = runtime
        self.df = dupefilter
        self.crawler = crawler
        self.spider: Spider | None = None
        self._queues = ScopeQueues(runtime)
        self._ready: deque[Request] = deque()
        self._refused: deque[Request] = deque()
        self._bypass: deque[Request] = deque()  # dont_throttle: handed out without a permit
        self._holding = 0  # requests serving their ``delay`` meta key before they join a queue
        self._resolving = 0
        self._asking = 0
        runtime.on_release(self._released)
        runtime.on_give_up(self._gave_up)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ThrottlingScheduler:
        """Build the scheduler with the crawl's runtime and ``DUPEFILTER_CLASS``."""
        from scrapy.utils.misc import build_from_crawler, load_object

        dupefilter = build_from_crawler(load_object(crawler.settings["DUPEFILTER_CLASS"]), crawler)
        return cls(runtime_of(crawler), dupefilter, crawler=crawler)

    # -- Scrapy's scheduler interface -----------------------------------------------

    def open(self, spider: Spider | None = None) -> Deferred[None] | None:
        """Start the throttler and open the duplicate filter."""
        self.spider = spider
        self.runtime.open()
        opener = getattr(self.df, "open", None)
        opened: Deferred[None] | None = opener() if callable(opener) else None
        return opened

    def close(self, reason: str) -> Deferred[None] | None:
        """Give back the permits of requests the engine never collected; close the filter."""
        self._queues.close()
        while self._ready:
            self.runtime.forget(self._ready.popleft())
        if self._queues.queued:
            logger.info("%d requests were still waiting for their throttling scopes", self._queues.queued)
        closer = getattr(self.df, "close", None)
        closed: Deferred[None] | None = closer(reason) if callable(closer) else None
        return closed

    def has_pending_requests(self) -> bool:
        """True while any request is queued, being resolved, admitted or refused."""
        return len(self) > 0

    def __len__(self) -> int:
        return (self._queues.queued + self._resolving + self._asking + len(self._ready) + len(self._refused)
                + len(self._bypass) + self._holding)

    def enqueue_request(self, request: Request) -> bool:
        """Queue ``request`` under its scopes, unless the duplicate filter drops it."""
        if self.df is not None and not request.dont_filter and self.df.request_seen(request):
            self.df.log(request, self.spider)
            return False
        self.runtime.forget(request)
        self._queue(request)
        return True

    def _queue(self, request: Request) -> None:
        """Put ``request`` in the queue of its scopes (its duplicate check is done)."""
        runtime = self.runtime
        stats = runtime.stats
        stats.inc_value("scheduler/enqueued/memory")
        stats.inc_value("scheduler/enqueued")
        if request.meta.get(DONT_THROTTLE_KEY):
            self._bypass.append(request)
            return
        hold = pending_delay(request.meta)
        if hold > 0:
            # Scrapy's draft: held this long once, then throttled like any other request.
            request.meta[DELAY_DONE_KEY] = True
            self._holding += 1
            runtime.spawn(self._hold(request, hold))
            return
        self._file(request)

    def _file(self, request: Request) -> None:
        """Put ``request`` in the queue of its scopes, now or once an awaiting manager named them."""
        runtime = self.runtime
        try:
            demands = runtime.scopes_nowait(request)
        except ScopeError as exc:
            self._refuse(request, "scopes", str(exc))
            return
        if demands is None:
            self._resolving += 1
            runtime.spawn(self._resolve(request))
        else:
            self._queues.push(request, demands)

    def next_request(self) -> Request | None:
        """Return a request whose scopes admitted it, or ``None`` when none is ready.

        ``None`` with requests pending means they wait for their scopes; the
        scheduler wakes the engine when the earliest is due. A ``dont_throttle``
        request goes at once, without a permit.
        """
        if self._refused:
            return self._dequeued(self._refused.popleft())
        if self._bypass:
            self.runtime.stats.inc_value("throttling/dont_throttle")
            return self._dequeued(self._bypass.popleft())
        if self._ready:
            return self._dequeued(self._ready.popleft())
        throttler = self.runtime.throttler
        cap = self.runtime.config.settings.concurrent_requests
        shared = throttler.store.shared
        while True:
            # Nothing can be admitted past the global cap; a release wakes the engine.
            if throttler.inflight + self._asking + len(self._ready) >= cap:
                return None
            queue = self._queues.pop_eligible()
            if queue is None:
                break
            if shared:
                self._ask_later(queue)
                continue
            request = self._ask_now(queue)
            if request is not None:
                return self._dequeued(request)
            if self._refused:
                return self._dequeued(self._refused.popleft())
        # Nothing is due now: have the timer wake the engine when the next queue is.
        self._queues.arm_for_next()
        return None

    # -- queues ------------------------------------------------------------------------

    def _dequeued(self, request: Request) -> Request:
        stats = self.runtime.stats
        stats.inc_value("scheduler/dequeued/memory")
        stats.inc_value("scheduler/dequeued")
        return request

    async def _hold(self, request: Request, seconds: float) -> None:
        """Queue ``request`` after its ``delay``."""
        try:
            await self.runtime.config.clock.sleep(seconds)
        finally:
            self._holding -= 1
        self._file(request)
        self.runtime.wake()

    async def _resolve(self, request: Any) -> None:
        """Ask an awaiting manager for the scopes, then queue the request."""
        try:
            demands = await self.runtime.scopes(request)
        except ScopeError as exc:
            self._resolving -= 1
            self._refuse(request, "scopes", str(exc))
        except Exception as exc:
            self._resolving -= 1
            logger.exception("the throttling manager failed on %s", request)
            self._refuse(request, "scopes", f"the throttling manager failed: {exc!r}")
        else:
            self._resolving -= 1
            self._queues.push(request, demands)
        self.runtime.wake()

    # -- admission ----------------------------------------------------------------------

    def _ask_now(self, queue: Queue) -> Any | None:
        """Ask the (local) store about the queue's head; return the request if admitted."""
        entry = queue.head()
        throttler = self.runtime.throttler
        try:
            done, result = _now_or_task(throttler.try_acquire(RequestView(entry.request),
                                                              scopes=dict(entry.demands)))
        except (ScopeGivenUp, QuotaError, ThrottlerClosed) as exc:
            self._failed(queue, exc)
            return None
        if not done:  # a store that awaits after all: ask in a task
            self._ask_later(queue)
            return None
        return self._answer(queue, entry, result)

    def _ask_later(self, queue: Queue) -> None:
        self._queues.set_asking(queue)
        self._asking += 1
        self.runtime.spawn(self._ask(queue, queue.head()))

    async def _ask(self, queue: Queue, entry: Entry) -> None:
        throttler = self.runtime.throttler
        try:
            result = await throttler.try_acquire(RequestView(entry.request), scopes=dict(entry.demands))
        except (ScopeGivenUp, QuotaError, ThrottlerClosed) as exc:
            self._asking -= 1
            self._failed(queue, exc, entry)
            self.runtime.wake()
            return
        except Exception:
            # A store that fails (Redis unreachable) must not lose the request: ask again later.
            self._asking -= 1
            logger.exception("asking the throttling store about %s failed", entry.request)
            self._queues.set_timed(queue, self.runtime.clock_now + LOCAL_POLL)
            return
        self._asking -= 1
        request = self._answer(queue, entry, result)
        if request is not None:
            self._ready.append(request)
        self.runtime.wake()

    def _answer(self, queue: Queue, entry: Entry, result: Permit | NotReady) -> Any | None:
        runtime = self.runtime
        if isinstance(result, Permit):
            self._queues.remove(queue, entry)
            runtime.issue(entry.request, result, "scheduler")
            self._queues.after_admission(queue)
            return entry.request
        if not entry.waited:
            entry.waited = True
            runtime.stats.inc_value("throttling/waits")
            runtime.stats.inc_value("throttling/waits/scheduler")
        if result.ready_at is not None:
            self._queues.set_timed(queue, result.ready_at)
        else:
            self._queues.set_blocked(queue, tuple(item for item in result.waiting_on if item[1] is None))
        return None

    def _failed(self, queue: Queue, exc: BaseException, entry: Entry | None = None) -> None:
        """The head of ``queue`` can never be admitted (or the crawl is closing)."""
        if isinstance(exc, ThrottlerClosed):
            queue.state = IDLE
            return
        if isinstance(exc, ScopeGivenUp):
            self._refuse_queue(queue, "given_up", str(exc))
            return
        entry = queue.head() if entry is None else entry
        self._queues.remove(queue, entry)
        self._refuse(entry.request, "quota", str(exc))
        self._queues.after_admission(queue)

    def _refuse(self, request: Any, reason: str, message: str) -> None:
        request.meta[REFUSAL_KEY] = message
        self.runtime.note_refused(reason)
        self._refused.append(request)

    def _refuse_queue(self, queue: Queue, reason: str, message: str) -> None:
        while queue.heap:
            self._refuse(self._queues.pop_entry(queue).request, reason, message)
        self._queues.drop(queue)

    # -- events from the runtime ------------------------------------------------------

    def _released(self, scopes: tuple[str, ...]) -> None:
        """A permit of ``scopes`` went back: their waiting queues may go now."""
        if self._queues.released(scopes):
            self.runtime.wake()

    def _gave_up(self, scope: str) -> None:
        message = f"scope {scope!r} was given up by its circuit breaker"
        for queue in self._queues.of_scope(scope):
            if queue.state != ASKING:
                self._refuse_queue(queue, "given_up", message)
        if self._refused:
            self.runtime.wake()

    def __repr__(self) -> str:
        return (f"<ThrottlingScheduler queued={self._queues.queued} queues={len(self._queues)} "
                f"ready={len(self._ready)} refused={len(self._refused)}>")
