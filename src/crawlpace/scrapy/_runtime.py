"""One crawl's throttling state, shared by the add-on's components.

The scheduler grants permits, the downloader middleware sends requests under
them and feeds the outcome back, the extension reports and applies
Crawl-Delay: all through one :class:`Runtime` per Scrapy crawler, which owns
the :class:`~crawlpace.Throttler` and the tickets of the requests in flight.

The runtime also takes the crawl's last look (:mod:`crawlpace._clients._last_look`,
the rule ``crawlpace crawl`` and the library clients use): every released
permit's hold (``Retry-After``, a spent RateLimit budget) is noted, and a
scheduler's admission that reaches the network after a hold heard since it was
granted is not used: the request is admitted again, and waits for the hold.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any

from .._clients._last_look import LastLook, NotSent
from .._exceptions import PermitError
from .._redact import redact
from .._scoping._manager import scopes_without_await
from .._scoping._scopes import Demand, normalize_scopes
from .._throttle._permit import Permit
from .._throttle._throttler import Throttler
from ._crawl_delays import CrawlDelays
from ._reporting import NoStats, ScopeReport, StatsLike
from ._settings import AddonConfig
from ._tickets import APPLIED_SCOPES_KEY, TICKET_KEY, RequestView, State, Ticket

__all__ = ["STALE_AFTER", "Runtime", "runtime_of"]

logger = logging.getLogger("crawlpace.scrapy")

#: Seconds a scheduler-granted permit may wait before its request reaches the
#: network. Later than that, the spacing the throttler recorded no longer
#: matches the wire, so the request is admitted afresh.
STALE_AFTER = 0.05

ReleaseListener = Callable[[tuple[str, ...]], None]
GiveUpListener = Callable[[str], None]

_RUNTIMES: weakref.WeakKeyDictionary[Any, Runtime] = weakref.WeakKeyDictionary()


def runtime_of(crawler: Any) -> Runtime:
    """The runtime the add-on created for ``crawler``.

    Raises:
        RuntimeError: when the add-on is not enabled for this crawler.
    """
    runtime = _RUNTIMES.get(crawler)
    if runtime is None:
        raise RuntimeError("crawlpace.scrapy components need the add-on: add "
                           "'crawlpace.scrapy.Addon' to the ADDONS setting")
    return runtime


class Runtime:
    """The throttler of one crawl and the tickets of its requests.

    Args:
        config: the checked settings.
        crawler: the Scrapy crawler (for its stats and its engine), if any.
        stats: the stats collector to use instead of the crawler's.
        wake: called to make the engine ask the scheduler again; by default
            the crawler's engine is poked.
    """

    def __init__(self, config: AddonConfig, *, crawler: Any = None, stats: StatsLike | None = None,
                 wake: Callable[[], object] | None = None) -> None:
        self.config = config
        self.crawler = crawler
        self._stats = stats
        self._wake = wake
        self.manager = config.manager
        self._throttler: Throttler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._live: dict[Ticket, None] = {}
        self._parked: dict[Ticket, None] = {}
        self._release_listeners: list[ReleaseListener] = []
        self._give_up_listeners: list[GiveUpListener] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False
        # The throttler's own rule for which managers answer without an await.
        self._nowait = scopes_without_await(self.manager)
        self.report = ScopeReport(config.settings, lambda: self.stats, stats_scopes=config.stats_scopes)
        self.crawl_delays = CrawlDelays(config, lambda: self.throttler, lambda: self.stats, self._parked)
        #: The holds this crawl's answers announced, for the last look of the requests admitted before.
        self.look = LastLook()

    @classmethod
    def register(cls, crawler: Any, config: AddonConfig) -> Runtime:
        """Create the runtime of ``crawler``."""
        runtime = cls(config, crawler=crawler)
        _RUNTIMES[crawler] = runtime
        return runtime

    # -- plumbing ---------------------------------------------------------------

    @property
    def stats(self) -> StatsLike:
        """The crawl's stats collector (a no-op one before the crawler has it)."""
        if self._stats is not None:
            return self._stats
        stats = getattr(self.crawler, "stats", None)
        return stats if stats is not None else NoStats()

    @property
    def throttler(self) -> Throttler:
        """The crawl's throttler, created on first use."""
        throttler = self._throttler
        if throttler is None:
            throttler = self.open()
        return throttler

    @property
    def clock_now(self) -> float:
        """The throttler clock's reading."""
        return self.config.clock.now()

    def open(self) -> Throttler:
        """Create the throttler (done when the spider opens; later calls return it)."""
        if self._throttler is None:
            config = self.config
            self._throttler = Throttler(config.settings, store=config.store, clock=config.clock,
                                        manager=config.manager, on_give_up=self._gave_up)
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._loop = None
            logger.info("crawlpace throttling on; store %s, %s", redact(config.store_url),
                        "crawlpace scheduler" if config.use_scheduler else "Scrapy's scheduler")
        return self._throttler

    def wake(self) -> None:
        """Make the engine ask the scheduler for requests again soon."""
        if self._wake is not None:
            self._wake()
            return
        from ._compat import wake_engine

        wake_engine(self.crawler)

    def on_release(self, listener: ReleaseListener) -> None:
        """Call ``listener(scopes)`` whenever a permit of those scopes is released."""
        self._release_listeners.append(listener)

    def on_give_up(self, listener: GiveUpListener) -> None:
        """Call ``listener(scope)`` when the circuit breaker gives a scope up."""
        self._give_up_listeners.append(listener)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run ``coro`` in the background, keeping a reference until it ends."""
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    @property
    def closed(self) -> bool:
        """True once the spider closed."""
        return self._closed

    async def aclose(self) -> None:
        """Release what is still held, publish the final stats and close the throttler."""
        if self._closed:
            return
        self._closed = True
        for ticket in list(self._live):
            await self._give_back(ticket)
        throttler = self._throttler
        if throttler is None:
            return
        try:
            await self.publish_scope_stats()
        except Exception as exc:  # the stats must not keep the throttler open
            logger.warning("could not publish the per-scope throttling stats: %s", redact(exc),
                           exc_info=logger.isEnabledFor(logging.DEBUG))
        for task in list(self._background):
            task.cancel()
        await throttler.aclose()

    # -- scopes -----------------------------------------------------------------

    def scopes_nowait(self, request: Any) -> tuple[Demand, ...] | None:
        """The request's scopes when the manager can give them without awaiting, else ``None``.

        Raises:
            ScopeError: when the scopes are malformed.
        """
        if self._nowait is None:
            return None
        return normalize_scopes(self._nowait(request))

    async def scopes(self, request: Any) -> tuple[Demand, ...]:
        """Ask the manager for the request's scopes.

        Raises:
            ScopeError: when the scopes are malformed.
        """
        demands = self.scopes_nowait(request)
        if demands is not None:
            return demands
        return normalize_scopes(await self.manager.get_scopes(request))

    # -- tickets ------------------------------------------------------------------

    def issue(self, request: Any, permit: Permit, source: str) -> Ticket:
        """Attach ``permit`` to ``request`` in a new ticket.

        Args:
            request: the Scrapy request.
            permit: the permit granted to it.
            source: ``"scheduler"`` (the ticket starts parked), ``"direct"`` or
                ``"lent"`` (the ticket starts sent).
        """
        state = State.PARKED if source == "scheduler" else State.SENT
        ticket = Ticket(permit, source, state)
        try:
            ticket.finalizer = weakref.finalize(request, self._abandon, ticket)
        except TypeError:  # not weakly referenceable: the spider_closed sweep still frees it
            ticket.finalizer = None
        request.meta[TICKET_KEY] = ticket
        self._live[ticket] = None
        if state is State.PARKED:
            self._parked[ticket] = None
        else:
            request.meta[APPLIED_SCOPES_KEY] = permit.scopes
        stats = self.stats
        stats.inc_value("throttling/permits")
        stats.inc_value(f"throttling/permits/{source}")
        return ticket

    async def claim(self, request: Any) -> Ticket | None:
        """At the network: the ticket the request may be sent under, or ``None``.

        A parked ticket becomes sent. A ticket that was lent away, or that
        waited too long to still match the spacing the throttler recorded,
        does not count: the request must be admitted again.
        """
        ticket = request.meta.get(TICKET_KEY)
        if not isinstance(ticket, Ticket):
            return None
        if ticket.state is State.SENT:
            return ticket
        if ticket.state is State.PARKED:
            self._parked.pop(ticket, None)
            now = self.clock_now
            lag = now - ticket.permit.granted_at
            self.stats.max_value("throttling/send_lag_ms/max", int(lag * 1000))
            if lag <= STALE_AFTER and not ticket.outdated:
                if not self.held_since_granted(ticket, now):
                    ticket.state = State.SENT
                    request.meta[APPLIED_SCOPES_KEY] = ticket.scopes
                    return ticket
                self.stats.inc_value("throttling/readmitted/held")
            self.stats.inc_value("throttling/readmitted")
            await self._give_back(ticket)
        del request.meta[TICKET_KEY]
        return None

    async def admit(self, request: Any) -> Ticket:
        """Admit a request that reached the network without a usable ticket.

        It goes at once if its scopes allow; otherwise it takes over the
        permit of a request parked in the middlewares that holds all of its
        scopes (that request is usually waiting for this one: robots.txt);
        otherwise it waits in memory for its turn.

        Raises:
            ScopeError: when the request's scopes are malformed.
            QuotaError: when it expects more quota than a scope holds.
            ScopeGivenUp: when a scope was given up.
            ThrottlerClosed: when the crawl is closing.
        """
        demands = await self.scopes(request)
        throttler = self.throttler
        spec = dict(demands)
        view = RequestView(request)
        first = await throttler.try_acquire(view, scopes=spec)
        if isinstance(first, Permit):
            return self.issue(request, first, "direct")
        names = tuple(name for name, _ in demands)
        now = self.clock_now
        for parked in self._parked:
            if parked.covers(names) and not parked.outdated and not self.held_since_granted(parked, now):
                del self._parked[parked]
                parked.state = State.LENT
                self._live.pop(parked, None)
                if parked.finalizer is not None:
                    parked.finalizer.detach()
                logger.debug("%s goes first under the permit of a parked request (%s)", request,
                             "+".join(parked.scopes))
                return self.issue(request, parked.permit, "lent")
        stats = self.stats
        stats.inc_value("throttling/waits")
        stats.inc_value("throttling/waits/direct")
        started = self.clock_now
        waiting = throttler.waiting + 1
        stats.max_value("throttling/delayed_requests/max", waiting)
        permit = await throttler.acquire(view, scopes=spec)
        stats.inc_value("throttling/wait_time_ms/direct", int((self.clock_now - started) * 1000))
        return self.issue(request, permit, "direct")

    def held_since_granted(self, ticket: Ticket, now: float) -> bool:
        """The last look: whether a hold this crawl heard after the ticket's permit was granted still
        runs on one of its scopes (its request must not reach the network under that permit)."""
        try:
            self.look.check(ticket.permit, now)
        except NotSent as exc:
            logger.debug("an admission of %s is not used: %s", "+".join(ticket.scopes), exc)
            return True
        return False

    async def settle(self, request: Any, *, response: Any = None, exception: BaseException | None = None,
                     latency: float | None = None, blocked: bool = False) -> None:
        """Release the request's permit with what happened to it.

        A request that never reached the network (a cached response, a
        request refused by robots.txt or offsite rules on its way) frees its
        slots without teaching the scopes anything. ``blocked`` marks a soft
        block, which backs the scopes off like a 429.
        """
        ticket = request.meta.pop(TICKET_KEY, None)
        if not isinstance(ticket, Ticket):
            return
        if ticket.state is State.SENT:
            if response is not None or exception is not None:
                ticket.permit.feedback(response, exception=exception, latency=latency, blocked=blocked)
        elif ticket.state is State.PARKED:
            self.stats.inc_value("throttling/released_unsent")
        await self._give_back(ticket, soft_block=blocked)

    def forget(self, request: Any) -> None:
        """Drop a ticket a request still carries as it re-enters the scheduler.

        Retries and redirects copy ``meta``; a copy made before the original's
        permit was settled (by a middleware that returned a new request from
        ``process_request``) would otherwise keep that permit forever.
        """
        ticket = request.meta.pop(TICKET_KEY, None)
        if isinstance(ticket, Ticket) and ticket.state in (State.PARKED, State.SENT):
            self._schedule_give_back(ticket)

    async def _give_back(self, ticket: Ticket, *, soft_block: bool = False) -> None:
        if ticket.state in (State.DONE, State.LENT):
            return
        ticket.state = State.DONE
        self._live.pop(ticket, None)
        self._parked.pop(ticket, None)
        if ticket.finalizer is not None:
            ticket.finalizer.detach()
        permit = ticket.permit
        try:
            # Its hold noted as soon as the outcome is known: a shared store's release is a round
            # trip or more, and this crawl's other requests of the scope may be written meanwhile.
            await permit.release(heard=self.look.hearing(self.config.clock.now))
        except PermitError:  # pragma: no cover - released through another path already
            return
        await self._released(permit, soft_block=soft_block)

    def _schedule_give_back(self, ticket: Ticket) -> None:
        try:
            self.spawn(self._give_back(ticket))
        except RuntimeError:  # no running loop: nothing can be waiting on it either
            ticket.state = State.DONE
            self._live.pop(ticket, None)
            self._parked.pop(ticket, None)

    def _abandon(self, ticket: Ticket) -> None:
        """The finalizer of a request that was dropped with its permit still held."""
        if ticket.state in (State.DONE, State.LENT):
            return
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        logger.debug("a request was dropped while holding a permit of %s; releasing it",
                     "+".join(ticket.scopes))
        self.stats.inc_value("throttling/released_abandoned")
        loop.call_soon_threadsafe(self._schedule_give_back, ticket)

    async def _released(self, permit: Permit, *, soft_block: bool = False) -> None:
        outcome = permit.outcome
        # Its hold (Retry-After), for the last look of the requests admitted before it came.
        self.look.note(permit, self.clock_now)
        self.report.count_release(outcome, soft_block=soft_block)
        scopes = permit.scopes
        for listener in self._release_listeners:
            listener(scopes)
        if self.config.debug and self._throttler is not None:
            await self.report.log_adjustments(self._throttler, scopes, outcome)

    async def publish_scope_stats(self) -> None:
        """Write each busy scope's limits into the stats (``throttling/scope/<name>/...``)."""
        if self._throttler is not None:
            await self.report.publish(self._throttler)

    def note_refused(self, reason: str) -> None:
        """Count a request that was refused for good."""
        self.report.note_refused(reason)

    def _gave_up(self, scope: str, reason: str) -> None:
        self.stats.inc_value("throttling/given_up/scopes")
        for listener in self._give_up_listeners:
            listener(scope)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._throttler is not None else "not started"
        return (f"<Runtime store={redact(self.config.store_url)} {state} live={len(self._live)} "
                f"parked={len(self._parked)}>")
