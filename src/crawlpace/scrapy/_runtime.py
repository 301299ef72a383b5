"""One crawl's throttling state, shared by the add-on's components.

The scheduler grants permits, the downloader middleware sends requests under
them and feeds the outcome back, the extension reports and applies
Crawl-Delay: all through one :class:`Runtime` per Scrapy crawler, which owns
the :class:`~crawlpace.Throttler` and the tickets of the requests in flight.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from .._bounded import remember
from .._exceptions import PermitError, ScopeError
from .._manager import ThrottlingManager
from .._permit import Permit
from .._redact import redact
from .._robots import crawl_delay, robots_verdict
from .._scopes import Demand, host_scope, normalize_scopes
from .._throttler import Throttler
from ._settings import AddonConfig, RequestScopesManager
from ._tickets import APPLIED_SCOPES_KEY, TICKET_KEY, State, Ticket

__all__ = ["STALE_AFTER", "RequestView", "Runtime", "StatsLike", "runtime_of"]

logger = logging.getLogger("crawlpace.scrapy")

#: Seconds a scheduler-granted permit may wait before its request reaches the
#: network. Later than that, the spacing the throttler recorded no longer
#: matches the wire, so the request is admitted afresh.
STALE_AFTER = 0.05

ReleaseListener = Callable[[tuple[str, ...]], None]
GiveUpListener = Callable[[str], None]


class StatsLike(Protocol):
    """The part of Scrapy's stats collector the add-on uses."""

    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None: ...

    def set_value(self, key: str, value: Any) -> None: ...

    def max_value(self, key: str, value: Any) -> None: ...


class _NoStats:
    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None:
        pass

    def set_value(self, key: str, value: Any) -> None:
        pass

    def max_value(self, key: str, value: Any) -> None:
        pass


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


def _limits_of(snapshot: Any) -> tuple[object, ...]:
    return (snapshot.concurrency, round(snapshot.delay, 3), snapshot.backoff, snapshot.crawl_delay,
            snapshot.breaker)


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
        self._last_limits: dict[str, tuple[object, ...]] = {}
        self._robots_scopes: dict[str, tuple[str, ...]] = {}
        self._crawl_delayed: set[str] = set()  # scopes under a Crawl-Delay, to clear when it goes
        self._background: set[asyncio.Task[Any]] = set()
        self._closed = False
        manager = self.manager
        # Scopes that can be had without awaiting: the default manager, or a
        # manager with a plain get_request_scopes.
        self._nowait: Callable[[Any], Any] | None = None
        if type(manager) is ThrottlingManager:
            self._nowait = _default_spec
        elif isinstance(manager, RequestScopesManager):
            self._nowait = manager.scopes_nowait

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
        return stats if stats is not None else _NoStats()

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
            lag = self.clock_now - ticket.permit.granted_at
            self.stats.max_value("throttling/send_lag_ms/max", int(lag * 1000))
            if lag <= STALE_AFTER and not ticket.outdated:
                ticket.state = State.SENT
                request.meta[APPLIED_SCOPES_KEY] = ticket.scopes
                return ticket
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
        for parked in self._parked:
            if parked.covers(names) and not parked.outdated:
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
        await self._give_back(ticket)

    def forget(self, request: Any) -> None:
        """Drop a ticket a request still carries as it re-enters the scheduler.

        Retries and redirects copy ``meta``; a copy made before the original's
        permit was settled (by a middleware that returned a new request from
        ``process_request``) would otherwise keep that permit forever.
        """
        ticket = request.meta.pop(TICKET_KEY, None)
        if isinstance(ticket, Ticket) and ticket.state in (State.PARKED, State.SENT):
            self._schedule_give_back(ticket)

    async def _give_back(self, ticket: Ticket) -> None:
        if ticket.state in (State.DONE, State.LENT):
            return
        ticket.state = State.DONE
        self._live.pop(ticket, None)
        self._parked.pop(ticket, None)
        if ticket.finalizer is not None:
            ticket.finalizer.detach()
        permit = ticket.permit
        try:
            await permit.release()
        except PermitError:  # pragma: no cover - released through another path already
            return
        await self._released(permit)

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

    async def _released(self, permit: Permit) -> None:
        outcome = permit.outcome
        stats = self.stats
        if outcome is not None:
            if any(signal.backoff for signal in outcome.feedback):
                stats.inc_value("throttling/backoffs")
                cause = f"status/{outcome.status}" if outcome.error is None else f"exception/{outcome.error}"
                stats.inc_value(f"throttling/backoffs/{cause}")
            if any(signal.hold for signal in outcome.feedback):
                stats.inc_value("throttling/holds")
        scopes = permit.scopes
        for listener in self._release_listeners:
            listener(scopes)
        if self.config.debug and self._throttler is not None:
            await self._log_adjustments(scopes, outcome)

    # -- feedback into the scopes --------------------------------------------------

    async def _log_adjustments(self, scopes: tuple[str, ...], outcome: Any) -> None:
        """One log line for each scope whose limits changed (``THROTTLING_DEBUG``)."""
        throttler = self._throttler
        assert throttler is not None
        for scope in scopes:
            snapshot = await throttler.scope_stats(scope)
            if snapshot is None:
                continue
            now = _limits_of(snapshot)
            before = self._last_limits.get(scope)
            if before is None:
                before = self._configured_limits(scope)
            remember(self._last_limits, scope, now)  # bounded: a broad crawl meets millions of scopes
            if before == now:
                continue
            if outcome is None:
                cause = "a request released unsent"
            elif outcome.error is not None:
                cause = f"exception {outcome.error}"
            else:
                latency = "" if outcome.latency is None else f", latency {outcome.latency:.3f}s"
                cause = f"status {outcome.status}{latency}"
            logger.info("scope %s: delay %.3fs -> %.3fs, concurrency %s -> %s, backoff level %s -> %s, "
                        "crawl-delay %s -> %s, breaker %s -> %s (after %s)", scope, before[1], now[1],
                        before[0], now[0], before[2], now[2], before[3], now[3], before[4], now[4], cause)

    def _configured_limits(self, scope: str) -> tuple[object, ...]:
        settings = self.config.settings
        cfg = settings.scope_config(scope)
        delay = cfg.delay
        if settings.autothrottle.enabled and not cfg.rampup:
            delay = max(delay, min(settings.autothrottle.start_delay,
                                   max(settings.autothrottle.max_delay, cfg.delay)))
        concurrency = min(cfg.concurrency, settings.concurrent_requests)
        return (concurrency, round(delay, 3), 0, None, "closed")

    def _gave_up(self, scope: str, reason: str) -> None:
        stats = self.stats
        stats.inc_value("throttling/given_up/scopes")
        for listener in self._give_up_listeners:
            listener(scope)

    def note_refused(self, reason: str) -> None:
        """Count a request that was refused for good."""
        self.stats.inc_value("throttling/refused")
        self.stats.inc_value(f"throttling/refused/{reason}")

    # -- robots.txt ----------------------------------------------------------------------

    def remember_robots_scopes(self, url: str, scopes: tuple[str, ...]) -> None:
        """Note which scopes a robots.txt fetch ran under, for its Crawl-Delay."""
        netloc = urlsplit(url).netloc
        remember(self._robots_scopes, netloc, scopes)  # bounded, like every per-host memo

    def crawl_delay_targets(self, url: str, scopes: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """The scopes a robots.txt of ``url``'s host applies its Crawl-Delay to.

        The host's own scope when the robots.txt request had it (the usual
        case); otherwise every scope the robots.txt request was throttled
        under (a manager that groups hosts, say by registrable domain).
        """
        if scopes is None:
            scopes = self._robots_scopes.get(urlsplit(url).netloc)
        try:
            host = host_scope(url)
        except ScopeError:
            return scopes or ()
        if not scopes or host in scopes:
            return (host,)
        return scopes

    async def apply_crawl_delay(self, scopes: tuple[str, ...], delay: float | None) -> None:
        """Give ``scopes`` the Crawl-Delay of their robots.txt (``None``: it has none, clear any)."""
        if not self.config.robots:
            return
        if delay is None:
            scopes = tuple(scope for scope in scopes if scope in self._crawl_delayed)
            if not scopes:
                return
        throttler = self.throttler
        for scope in scopes:
            await throttler.set_crawl_delay(scope, delay)
            key = f"throttling/crawl_delay/{scope}"
            if delay is None:
                self._crawl_delayed.discard(scope)
                everything = getattr(self.stats, "get_stats", None)
                if callable(everything):
                    everything().pop(key, None)
            else:
                self._crawl_delayed.add(scope)
                self.stats.set_value(key, delay)
        # Requests admitted before the Crawl-Delay was known (most are waiting
        # for this very robots.txt) must be admitted again under it.
        for ticket in self._parked:
            if any(scope in scopes for scope in ticket.scopes):
                ticket.outdated = True
        logger.debug("Crawl-Delay %s applied to %s", "cleared" if delay is None else f"{delay:g}s",
                     ", ".join(scopes))

    async def robots_response(self, request: Any, response: Any, scopes: tuple[str, ...]) -> None:
        """Read the Crawl-Delay of a robots.txt response as it passes (any Scrapy version).

        Per RFC 9309: a 2xx body sets the Crawl-Delay (or clears one it no
        longer has), a 4xx means no file (any Crawl-Delay is cleared), and a
        5xx, a 429 or a 1xx leaves the one in force as it is. Which URLs are
        allowed stays the business of Scrapy's robots.txt middleware.
        """
        self.remember_robots_scopes(request.url, scopes)
        status = getattr(response, "status", None)
        verdict = robots_verdict(status if isinstance(status, int) else None)
        if verdict == "unreachable":
            logger.warning("robots.txt of %s answered %s: the Crawl-Delay in force (if any) is kept",
                           request.url, status)
            return
        delay = None
        if verdict == "rules":
            body = getattr(response, "body", b"")
            delay = crawl_delay(body if isinstance(body, bytes) else b"", self.config.robots_user_agent)
        await self.apply_crawl_delay(self.crawl_delay_targets(request.url, scopes), delay)

    # -- stats ------------------------------------------------------------------------------

    async def publish_scope_stats(self) -> None:
        """Write each busy scope's limits into the stats (``throttling/scope/<name>/...``)."""
        throttler = self._throttler
        limit = self.config.stats_scopes
        if throttler is None or limit == 0:
            return
        scopes = await throttler.stats()
        busiest = sorted(scopes.values(), key=lambda snap: snap.sends, reverse=True)[:limit]
        stats = self.stats
        for snap in busiest:
            base = f"throttling/scope/{snap.scope}"
            stats.set_value(f"{base}/delay", round(snap.delay, 3))
            stats.set_value(f"{base}/delay_per_slot", round(snap.delay_per_slot, 3))
            stats.set_value(f"{base}/concurrency", snap.concurrency)
            stats.set_value(f"{base}/backoff", snap.backoff)
            stats.set_value(f"{base}/sends", snap.sends)
            if snap.breaker != "closed":
                stats.set_value(f"{base}/breaker", snap.breaker)


class RequestView:
    """What the throttler keeps of a Scrapy request inside its permit.

    The permit only needs the URL and ``meta`` (for
    ``autothrottle_dont_adjust_delay``); holding the request itself would
    keep it alive, and with it the finalizer that frees a lost permit would
    never run.
    """

    __slots__ = ("_ref", "url")

    def __init__(self, request: Any) -> None:
        self.url: str = request.url
        self._ref = weakref.ref(request)

    @property
    def meta(self) -> dict[str, Any]:
        request = self._ref()
        return request.meta if request is not None else {}

    def __repr__(self) -> str:
        return f"<RequestView {self.url}>"


def _default_spec(request: Any) -> Any:
    """The default manager's scopes: ``meta["throttling_scopes"]`` or the host."""
    meta = getattr(request, "meta", None)
    if meta:
        spec = meta.get("throttling_scopes")
        if spec is not None:
            return spec
    return host_scope(request.url)
