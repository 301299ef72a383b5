"""One crawl: URLs in, one JSON line per URL out, every request through the throttler.

The job ties the parts together. Its URL source (``crawl/_source.py``: the
journal of a URL list, or the shared frontier) feeds the scheduler, which
holds the URLs being worked on per queue of scopes and hands them out in the
order the throttler can admit them; up to ``CONCURRENT_REQUESTS`` fetches run
at once; each answer is fed back to the throttler and written to the output
file before the source records the URL as answered.

What happens to each URL:

- a 3xx with a ``Location`` is followed (up to ``max_redirects``), the next
  hop queued under its own host so its throttling applies;
- a backoff answer (by the scope's ``BACKOFF_HTTP_CODES`` and
  ``BACKOFF_EXCEPTIONS``) is queued again, behind its host's queue, up to
  ``retries`` times; the throttler makes the host wait out the backoff delay
  or the server's Retry-After, and the host's next send tries another page
  (a lock-out's refusals then spend one retry each of several pages);
- a transient failure that is not a backoff answer (another 5xx, or an
  exception the scope does not back off on) is queued again too, behind its
  host's queue, within the same ``retries`` (as Scrapy's RetryMiddleware
  does): the host's pace spaces the resends, and the rest of its URLs go
  first;
- ``retries`` bounds every kind of resend: a URL goes out at most
  ``retries + 1`` times (redirect hops aside), soft blocks and unexpected
  errors included, and each resend waits for the throttler's admission;
- a soft block (a challenge page matching a block rule, ``cf-mitigated:
  challenge``, a quota problem+json) counts as a backoff answer, whatever its
  status, and its line says ``"blocked": true`` with the rule;
- anything else is the URL's answer (``outcome = "ok"``, whatever the status),
  as is a robots.txt refusal (``"disallowed"``) or an unusable URL (``"failed"``);
- a URL whose retries ran out (``"exhausted"``) or whose site the circuit
  breaker gave up (``"gave_up"``) is written too, but not marked done: a
  resumed crawl tries it again.

The output file is the record of what was answered (see the sources for
what a resume or another worker does with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Iterable
from typing import Any

from .._clients._last_look import WRITING, LastLook, NotSent, Writing
from .._responses._blocks import BlockRules
from .._robotstxt._robots import MAX_ROBOTS_BYTES
from .._settings._config import Settings
from .._throttle._learning import Learner
from .._throttle._permit import Permit
from .._throttle._throttler import Throttler
from ..frontier._robots_cache import RobotsCache
from ..frontier._scheduler import Scheduler, Task
from ..stores.base import HeldStore
from ._answer import Answer
from ._fetch import AiohttpFetcher, Fetcher
from ._hedge import HedgeBook
from ._journal_source import JournalSource
from ._options import CrawlOptions
from ._output import ResultBatch
from ._refusals import RefusalTracker
from ._results import Result, ResultWriter
from ._robots_answers import RobotsAnswers
from ._settle import JobOutcomes
from ._source import UrlSource
from ._stalls import local_share_dominates
from ._summary import CrawlSummary
from ._tallies import ScopeTally

__all__ = ["CrawlJob", "CrawlSummary", "ScopeTally"]

_log = logging.getLogger(__name__)

class CrawlJob(JobOutcomes):
    """Run one crawl to its end, or until :meth:`stop`.

    Args:
        settings: the throttling settings.
        options: the crawl's own options.
        throttler: a throttler to use instead of one built from ``settings``
            (the job does not close it).
        fetcher: the HTTP layer to send with (by default an aiohttp one built
            from ``options``, closed at the end); the job does not close one
            given here.
        source: where URLs come from and where their answers are recorded
            (by default the URLs given to :meth:`run`, through the journal).
    """

    def __init__(self, settings: Settings, options: CrawlOptions, *, throttler: Throttler | None = None,
                 fetcher: Fetcher | None = None, source: UrlSource | None = None) -> None:
        # Warm start: the scopes' policies begin from what earlier crawls learned
        # (crawlpace._throttle._learned).
        settings, self.learner = Learner.prepare(settings) if throttler is None else (settings, None)
        self.settings = settings
        self.options = options
        self._own_throttler = throttler is None
        self.throttler = throttler if throttler is not None else Throttler(
            settings, store=options.store, on_give_up=self._gave_up)
        self._given_fetcher = fetcher
        self.blocks = BlockRules.of(settings)
        self.robots = RobotsCache(options.user_agent) if options.robots else None
        #: Each Crawl-delay scope's last write (told by RobotsAnswers) and each hold this crawl's answers
        #: announced, for the fetcher's last look before each write.
        self.look = LastLook()
        self.source: UrlSource = source if source is not None else JournalSource()
        self._robots_answers = None if self.robots is None else RobotsAnswers(
            self, self.robots, self._follow_redirect, shared=self.source.robots_share, look=self.look)
        self.scheduler = Scheduler(self.throttler, robots=self.robots, on_drop=self._dropped,
                                   on_wait=self.source.on_wait)
        if self._robots_answers is not None and self.source.robots_share is not None:
            self.scheduler.share_robots(self._robots_answers.wanted)
        self.summary = CrawlSummary()
        self.inflight = 0
        self._stop = asyncio.Event()
        self._writer: ResultWriter | None = None
        # Lines go out in batches; a URL is settled (done, acknowledged) once its line is written.
        self._results: ResultBatch[tuple[Task, str]] = ResultBatch(
            self._write_results, lambda item: self.source.settled(*item), on_error=self._write_failed)
        self._fetcher: Fetcher | None = None
        self._fetches: set[asyncio.Task[None]] = set()
        #: The error that stopped the crawl's writes (a full disk), None while the output file takes them.
        self.write_error: OSError | None = None
        self._refusals = RefusalTracker()
        #: Pages out far longer than their site's answers take are sent once more (crawl/_hedge.py).
        self.hedges = HedgeBook(now=self.throttler.clock.now, sleep=self.throttler.clock.sleep,
                                retries=options.retries, idle=self._host_idle, hedge=self._hedge)
        self._hedge_news: asyncio.Future[None] | None = None
        self.source.bind(self)
        # Each scope hears the work the crawl still holds for it (rampup weighs a step after a hold by it).
        self.throttler.count_work(self._work_left)

    # -- public ------------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking URLs; fetches in flight are abandoned and left for a resume."""
        self._stop.set()
        self.scheduler.poke()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop.is_set()

    async def run(self, urls: Iterable[str] | None) -> CrawlSummary:
        """Crawl ``urls`` (read again and merged on resume; None: only what the journal holds).

        Returns:
            The summary; :attr:`CrawlSummary.complete` tells whether every
            URL was answered.

        Raises:
            FileExistsError: when a journal exists and ``resume`` is off.
            FileNotFoundError: when ``resume`` is on and there is no journal.
        """
        started = time.monotonic()
        self._writer = self.source.open(urls)
        try:
            self.source.refill()  # the first URLs, now that their lines have somewhere to go
            self._fetcher = self._given_fetcher or self._make_fetcher()
            if self.learner is not None:
                self.learner.start(self.throttler)
            await self._dispatch()
        finally:
            await self._shutdown()
            self.summary.seconds = time.monotonic() - started
            self.summary.hedges = self.hedges.hedges
            self.summary.interrupted = self.stopping
        return self.summary

    # -- set-up and tear-down ------------------------------------------------------

    def _work_left(self, scope: str) -> tuple[int, bool]:
        """``scope``'s pages still to send: those queued and those the source holds back, and whether
        more may come than these (then they are a floor)."""
        held = self.source.unloaded(scope)
        return self.scheduler.queued_for(scope) + (held or 0), held is None

    def _host_idle(self, host: str) -> bool:
        """Whether ``host`` has nothing else to send: nothing queued, nothing the source holds back."""
        return self.scheduler.queued_for(host) == 0 and not self.source.unloaded(host)

    def _hedge(self, task: Task) -> None:
        """Queue ``task``'s second send (its first is still out), at the head of its host's queue."""
        self.scheduler.push(task, front=True)
        news = self._hedge_news
        if news is not None and not news.done():
            news.set_result(None)  # the dispatcher may be waiting for a fetch to end: wake it

    def _make_fetcher(self) -> Fetcher:
        options = self.options
        return AiohttpFetcher(user_agent=options.user_agent, timeout=options.timeout,
                              max_connections=max(self.settings.concurrent_requests * 2, 10),
                              trust_env=options.trust_env, clock=self.throttler.clock.now,
                              deadline=options.deadline, sleep=self.throttler.clock.sleep)

    async def _shutdown(self) -> None:
        try:
            await self._close_parts()
        finally:
            # Last, whatever happened: every line that could be written is out, so the source
            # records (journal marks, acknowledgements) exactly what was answered.
            await self.source.close()

    async def _close_parts(self) -> None:
        for task in list(self._fetches):
            task.cancel()
        await asyncio.gather(*self._fetches, return_exceptions=True)
        # Only now, with no fetch left to see its connections drop and report a failure.
        if self._fetcher is not None and self._given_fetcher is None:
            await self._fetcher.aclose()
        writer = self._writer
        if writer is not None:
            try:
                self._flush()
            finally:
                try:
                    writer.close()
                except OSError as exc:  # its last fsync: the lines were written, the disk refused
                    self._write_failed(exc)
        if self.learner is not None:
            await self.learner.close(self.throttler)
        if self._own_throttler:
            await self.throttler.aclose()
        else:
            self.throttler.count_work(None)  # (a throttler lent to the job outlives its queues)

    # -- the dispatch loop --------------------------------------------------------------

    async def _dispatch(self) -> None:
        self.source.start_background()
        slots = asyncio.Semaphore(self.settings.concurrent_requests)
        stop_wait = asyncio.ensure_future(self._stop.wait())
        hedger = asyncio.ensure_future(self.hedges.run())
        try:
            while not self.stopping:
                await slots.acquire()
                # The hot path: a local store admits without a coroutine or a future.
                got = self.scheduler.take_nowait() or await self._next()
                if got is None:
                    slots.release()
                    self._flush()  # nothing to send now: write (and settle) what waits
                    if self.stopping or self._finished():
                        break
                    if self._refilled():
                        continue
                    await self._await_news(stop_wait)
                    continue
                task, permit = got
                self.inflight += 1
                fetch = asyncio.ensure_future(self._fetch(task, permit, slots))
                self._fetches.add(fetch)
                fetch.add_done_callback(self._fetches.discard)
        finally:
            stop_wait.cancel()
            hedger.cancel()
            await asyncio.gather(hedger, return_exceptions=True)
            await self.source.stop_background()

    def _finished(self) -> bool:
        return self.inflight == 0 and self.scheduler.idle and self.source.exhausted()

    def _refilled(self) -> bool:
        """Nothing queued and nothing in flight: whether the source had more to queue (it was asked).

        URLs can leave the scheduler without a fetch (their site's robots.txt
        failed, the breaker gave the site up, the URL is unusable), and only a
        finished fetch asks the source for more. Without this, a crawl whose
        whole memory bound was dropped so would find nothing queued, nothing in
        flight and nothing to wait for, and go round this loop for ever.
        """
        if self.inflight or not self.scheduler.idle:
            return False
        before = self.summary.outcomes.total(), self.source.exhausted()
        self.source.refill()
        # Progress is anything queued, any URL ended, or the source found it has no more (its last
        # look at a host whose previous batch was exactly full finds nothing): the loop looks again.
        return not self.scheduler.idle or (self.summary.outcomes.total(), self.source.exhausted()) != before

    async def _next(self) -> tuple[Task, Permit] | None:
        """The next admitted task; None when nothing is queued now."""
        take = asyncio.ensure_future(self.scheduler.take())
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({take, stop}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # The crawl itself was cancelled (a caller's timeout): the take must not outlive it, or
            # it ends later on the closed throttler with an error nobody retrieves.
            take.cancel()
            raise
        finally:
            stop.cancel()
        if take.done():
            return take.result()
        take.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            got = await take
            if got is not None:  # admitted at the last moment: hand the slot back unused
                await got[1].release()
        return None

    async def _await_news(self, stop_wait: asyncio.Future[Any]) -> None:
        """Nothing is queued: wait until a fetch ends or the source brings new URLs."""
        news = self.source.wait_for_urls()
        hedged = self._hedge_news = asyncio.get_running_loop().create_future()
        if news is None:
            if not self._fetches:
                # Nothing can bring work any more, yet the source is not exhausted: a bug, but
                # going round the loop would spin at full CPU for ever. End, leaving the rest.
                _log.error("the crawl has nothing queued, nothing in flight and nothing to wait for, "
                           "yet its source is not exhausted (%r); stopping, the rest is left for --resume",
                           self.source)
                self.stop()
                return
            try:
                await asyncio.wait({*self._fetches, stop_wait, hedged}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                hedged.cancel()
                self._hedge_news = None
            return
        try:
            await asyncio.wait({*self._fetches, stop_wait, news, hedged}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            news.cancel()
            hedged.cancel()
            self._hedge_news = None

    # -- one fetch ------------------------------------------------------------------------

    async def _fetch(self, task: Task, permit: Permit, slots: asyncio.Semaphore) -> None:
        """Fetch ``task``, then, in the same slot, whatever the scheduler admits at once.

        Going on to the next admitted task here, instead of handing the slot
        back to :meth:`_dispatch`, spares a task and a wake-up per page.
        """
        try:
            while True:
                await self._fetch_one(task, permit)
                # One turn of the loop first: answers that arrived with this one (a sibling's 429
                # and its Retry-After, say) are read and applied before the next send.
                await asyncio.sleep(0)
                try:
                    got = None if self.stopping else await self.scheduler.take_due()
                except Exception:  # left to the dispatcher, whose own take() meets it and raises
                    break
                if got is None:
                    break
                task, permit = got
                if self.stopping:  # admitted as the crawl stopped: the slot goes back unused
                    await permit.release()
                    break
        finally:
            self.inflight -= 1
            slots.release()

    async def _fetch_one(self, task: Task, permit: Permit) -> None:
        released = False
        try:
            if self.hedges.stale(task):
                return  # a hedge whose page its first send answered meanwhile: the permit goes back unused
            task.attempts += 1
            tally = self._tally(task.host)
            tally.requests += 1
            self.summary.requests += 1
            if task.attempts > 1:
                self.summary.retries += 1
            outcome = await self._send(task, permit)
            if not permit.release_nowait():
                # A shared store's release is a round trip or more (the hold's, the counts'); the
                # hold is heard before it, for this worker's own writes of the scope meanwhile.
                await permit.release(heard=self.look.hearing(self.throttler.clock.now))
            released = True
            # Its hold (Retry-After), for the last look of the requests admitted before it came.
            self.look.note(permit, self.throttler.clock.now())
            if self.hedges.racing(task) and not self._final(task, permit, outcome):
                # Its other send (a hedge, or the hung first one) is still out and decides: this
                # answer would be sent again, and that send is already on its way.
                _log.debug("%s: %s while its other send is out; that one decides", task.target,
                           outcome.status if outcome.error is None else type(outcome.error).__name__)
                self.hedges.lost(task)
                return
            self.hedges.settled(task)
            self._settle(task, permit, outcome)
        except NotSent as exc:
            # Not written (the fetcher's last look): a hold this crawl heard after the permit was
            # granted still runs. The slot goes back untaught (below), the send is not counted, and
            # the task waits at the head of its queue for the throttler, which keeps the hold.
            _log.debug("%s: %s; queued again", task.target, exc)
            if task.attempts > 1:
                self.summary.retries -= 1
            task.attempts -= 1
            self._tally(task.host).requests -= 1
            self.summary.requests -= 1
            self.hedges.requeued(task)
            self.scheduler.push(task, front=True)
        except Exception:  # a bug, or an error no layer below turned into an answer
            # The task must not vanish: a shared worker would hold its claim forever and never end.
            _log.exception("%s: unexpected error while fetching it", task.target)
            if not self.hedges.racing(task):
                self.hedges.settled(task)
                self._retry_or_fail(task)
        finally:
            if not released:
                await permit.release()
            self.scheduler.released(permit.scopes, task.key)
            self.source.refill()

    async def _send(self, task: Task, permit: Permit) -> Answer:
        fetcher = self._fetcher
        assert fetcher is not None
        limit = MAX_ROBOTS_BYTES + 1 if task.kind == "robots" else self.options.max_bytes
        # The fetcher's last look spaces a Crawl-delay scope's writes (crawl/_fetch.py).
        store = self.throttler.store
        shared = store if isinstance(store, HeldStore) else None
        token = WRITING.set(Writing(permit, self.look, self.throttler.clock.now,
                                    None if shared is None else shared.held_for,
                                    None if shared is None else shared.write_after,
                                    None if shared is None else shared.wrote,
                                    None if shared is None else shared.holding, permit.lease_id))
        # From the admission to the fetch: a fleet worker's wait for the store's reply and its own
        # loop's turn. The fetch's latency starts after it; the scopes learn it apart (Permit.feedback).
        lag = self.throttler.clock.now() - permit.granted_at
        send = self.hedges.going(task)
        page = None
        try:
            page = await fetcher.get(task.target, limit)
        finally:
            WRITING.reset(token)
            # (Cancelled: the page's other send settled it; no feedback, the permit goes back untaught.)
            self.hedges.back(task, send, None if page is None else page.latency)
        # A latency mostly spent waiting for this process's own event loop (a worker starved
        # of CPU) says nothing of the server: the throttler does not learn from it.
        stalled = local_share_dominates(page.latency, page.stalled)
        if page.error is not None:
            permit.feedback(exception=page.error, latency=page.latency)
            return Answer(None, None, b"", page.latency, page.error)
        rule = None
        if task.kind == "page" and page.status is not None:
            rule = self.blocks.match(page.status, page.headers or {}, page.body)
        # The last look's round trip to a fleet's store came after the lag above and before the write.
        lag += page.asked
        permit.feedback(page, latency=page.latency, blocked=rule is not None, stalled=stalled, lag=lag)
        return Answer(page.status, page.location, page.body, page.latency, None, rule)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` alongside the fetches (cancelled with them at the end)."""
        job = asyncio.ensure_future(coro)
        self._fetches.add(job)
        job.add_done_callback(self._fetches.discard)

    # -- results ------------------------------------------------------------------------

    def _gave_up(self, scope: str, reason: str) -> None:
        self.scheduler.give_up(scope, reason)

    def _write_results(self, results: list[Result]) -> None:
        writer = self._writer
        assert writer is not None
        writer.write_many(results)

    def _flush(self) -> None:
        """Write (and settle) the pending lines; a failed write stops the crawl with a message."""
        try:
            self._results.flush()
        except OSError as exc:
            self._write_failed(exc)

    def _write_failed(self, exc: OSError) -> None:
        """The output file refused a write (a full disk, say): say so once and stop; a resume carries on."""
        if self.write_error is None:
            self.write_error = exc
            _log.error("cannot write to %s (%s); stopping the crawl: its unwritten URLs are not marked done, "
                       "so --resume fetches them once there is room", self.options.output,
                       exc.strerror or exc)
        self.stop()
