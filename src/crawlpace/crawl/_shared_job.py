"""A crawl worker fed by the shared frontier in Redis instead of its own URL list.

Everything about fetching is :class:`CrawlJob`'s: the scheduler, the
throttler (on the shared store), redirects, retries, robots.txt, the output
file. What differs is where URLs come from and what "done" means:

* a feeder task claims URLs from the frontier while this worker holds fewer
  than it can use (twice ``CONCURRENT_REQUESTS``), extends the visibility of
  those it holds every third of the visibility time, and acknowledges each
  URL after its line is in the output file;
* it holds at most a few more URLs of one host than the host has slots
  (:func:`claim_per_scope`): claims skip the hosts it holds enough of, so its
  room does not fill with the URLs of slow sites while the URLs of fast ones
  wait in the frontier (claims go round the ready hosts, and a slow host's
  URLs leave a worker slowly);
* a host the throttler holds back for a second or more is deferred in the
  frontier, so other workers do not claim its URLs meanwhile;
* the worker ends when the frontier is drained: nothing queued, nothing
  claimed by anyone (a dead worker's claims first expire and are redone);
  with ``wait_for_urls``, a worker that has not yet seen any work waits that
  long for ``crawlpace enqueue`` first (a fleet started ahead of its URLs);
* on Ctrl-C or SIGTERM it hands the URLs it has not answered back at once;
* while Redis is away it keeps retrying (with backoff and one log line each
  way), and loses nothing: unacknowledged answers are acknowledged later, and
  a claim that expired meanwhile is at worst fetched twice.

There is no journal: the frontier is the record of what is left, and the
output file (appended to, never emptied) the record of what this worker
answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from .._settings._config import Settings
from .._throttle._throttler import Throttler
from ..frontier._claim_loop import ClaimLoop, Wording
from ..frontier._claims import claim_per_scope, claim_spacing
from ..frontier._scheduler import Scheduler, Task
from ..frontier._shared import Claim, SharedFrontier, ack_counts, frontier_unreachable
from ._fetch import Fetcher
from ._job import CrawlJob
from ._options import CrawlOptions
from ._results import ResultWriter, reconcile
from ._source import JobParts, RobotsShare
from ._summary import CrawlSummary

__all__ = ["SharedCrawlJob", "SharedSource", "claim_per_scope", "claim_spacing"]

_log = logging.getLogger(__name__)

# Seconds between two claims while the frontier has nothing ready for us.
_POLL = 0.5
# Seconds allowed, when stopping, to hand URLs back and send the last acknowledgements.
_GOODBYE = 5.0
_WORDING = Wording(items="URLs", holder="worker", visibility="the visibility",
                   down=". Nothing is lost if it comes back with its data; should it come back empty, this "
                        "worker says how many URLs went")


class SharedCrawlJob(CrawlJob):
    """Crawl the URLs of a shared frontier, alongside any number of other workers.

    A :class:`CrawlJob` whose URL source is a :class:`SharedSource`.

    Args:
        settings: the throttling settings (every worker should use the same).
        options: the crawl's options; ``options.store`` must be the Redis
            URL (with its namespace), shared by the frontier and the limits.
        frontier: the frontier client to use instead of one built from
            ``options.store`` (the job closes it either way).
        throttler: a throttler to use instead of one built from ``settings``.
        fetcher: the HTTP layer to send with (see :class:`CrawlJob`).
    """

    def __init__(self, settings: Settings, options: CrawlOptions, *, frontier: SharedFrontier | None = None,
                 throttler: Throttler | None = None,
                 fetcher: Fetcher | None = None) -> None:
        source = SharedSource(settings, options, frontier)
        super().__init__(settings, options, throttler=throttler, fetcher=fetcher, source=source)
        self.frontier = source.frontier


class SharedSource:
    """The shared frontier as a crawl's URL source (see the module docstring).

    Args:
        settings: the throttling settings (for the claim target and spacing).
        options: the crawl's options (the store URL, the visibility, the output).
        frontier: the frontier client to use instead of one built from
            ``options.store``; closed at the end either way.
    """

    def __init__(self, settings: Settings, options: CrawlOptions,
                 frontier: SharedFrontier | None = None) -> None:
        self.options = options
        self.frontier = frontier if frontier is not None else SharedFrontier(
            options.store, visibility=options.visibility)
        self._job: JobParts | None = None
        # The URLs claimed and not yet answered, and the loop that claims more.
        self._claims = ClaimLoop(self.frontier, settings, now=lambda: self.throttler.clock.now(), poll=_POLL,
                                 wording=_WORDING, logger=_log,
                                 waiting=lambda scope: self.scheduler.queued_on_host(scope))
        self._held = self._claims.held
        self._acks: dict[str, list[int]] = defaultdict(list)  # outcome -> ids, waiting to be sent
        self._acking: set[asyncio.Future[Any]] = set()  # acknowledgements queued, their replies to come
        self._ack_error: Exception | None = None  # a queued one's failure other than an unreachable server
        self._claimed = asyncio.Event()  # the feeder handed over URLs, or found the frontier drained
        self._drained = False
        self._feeder: asyncio.Task[None] | None = None
        self._deferred: dict[str, float] = {}  # host -> when (our clock) we last said it waits until
        self._wait_until: float | None = None  # until when an empty frontier is waited on (start_background)
        self._last_id = 0  # the highest URL id the frontier reported: lower later means it lost its data
        self._outstanding = 0  # URLs queued or claimed elsewhere at the last claim (what a loss costs)
        self._unclaimed: dict[str, int] = {}  # host -> its URLs the frontier still queued at our last claim
        self.on_wait: Callable[[str, float], None] | None = self._held_back
        # One worker fetches each site's robots.txt; the others read its answer from the frontier.
        self.robots_share: RobotsShare | None = self.frontier

    # -- the parts of the job the feeder uses ------------------------------------------

    def bind(self, job: JobParts) -> None:
        """Remember the job this source feeds."""
        self._job = job

    @property
    def _parts(self) -> JobParts:
        job = self._job
        assert job is not None, "bind() the source to its job first"
        return job

    @property
    def scheduler(self) -> Scheduler:
        """The job's scheduler."""
        return self._parts.scheduler

    @property
    def throttler(self) -> Throttler:
        """The job's throttler."""
        return self._parts.throttler

    @property
    def summary(self) -> CrawlSummary:
        """The job's summary."""
        return self._parts.summary

    @property
    def stopping(self) -> bool:
        """Whether the job was told to stop."""
        return self._parts.stopping

    @property
    def inflight(self) -> int:
        """The job's fetches in flight."""
        return self._parts.inflight

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._parts.spawn(coro)

    def stop(self) -> None:
        """Stop the job (the feeder failed, say)."""
        self._parts.stop()

    # -- the source's side of the job ----------------------------------------------------

    def open(self, urls: Iterable[str] | None) -> ResultWriter:
        """Open the output file to append to (a killed worker's partial last line is dropped).

        Raises:
            ValueError: when URLs are given: they go into the frontier with
                ``crawlpace enqueue``.
        """
        if urls is not None:
            raise ValueError("a shared-frontier worker takes its URLs from the frontier; "
                             "add them with crawlpace enqueue")
        output = self.options.output
        if output.exists():
            kept = reconcile(output)  # a killed worker's last line may be partial
            self.summary.resumed_from = len(kept.final_urls)
        return ResultWriter(output, append=True)

    def start_background(self) -> None:
        """Start the feeder."""
        self._wait_until = self.throttler.clock.now() + self.options.wait_for_urls
        self._feeder = asyncio.ensure_future(self._feed())
        self._feeder.add_done_callback(self._feeder_ended)

    async def stop_background(self) -> None:
        """Stop the feeder."""
        feeder = self._feeder
        if feeder is not None:
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder

    def refill(self) -> None:
        """A fetch ended: the feeder may claim more."""
        self._claims.news.set()

    def exhausted(self) -> bool:
        """Whether the frontier is drained and every URL claimed here was answered."""
        return self._drained and not self._held

    def unloaded(self, scope: str) -> int | None:
        """URLs of host ``scope`` the shared frontier still queued when this worker last claimed one of
        its URLs (``claim.lua`` counts them in the same step); ``None`` before any such claim.

        What one process's source tells of its own hosts (a floor here: the URLs other workers claimed
        and have not sent are not in it), so that a fleet's worker weighs a bucket's step for the work
        the fleet has left, as one process does, not a guess from the pace kept so far: the guess bet
        steps a short Retry-After site's pages could not pay back, and every lost bet cost a hold
        (fleets of 4 and 8 took 108-116 s over one process's 69 on a 2.24/s bucket of 2 with 18 s holds;
        bench/results/herd2.md).
        """
        return self._unclaimed.get(scope)

    def _finished(self) -> bool:
        return self._drained and self.inflight == 0 and self.scheduler.idle and not self._held

    def wait_for_urls(self) -> asyncio.Future[None]:
        """Done when the feeder hands over new URLs or finds the frontier drained."""
        return asyncio.ensure_future(self._wait_for_claims())

    def answered(self, task: Task) -> None:
        """Nothing to count: the claims bound what is held."""

    def settled(self, task: Task, outcome: str) -> None:
        """``task``'s line is written: its acknowledgement goes with the feeder's next round."""
        if self._claims.release(task.id):
            self._acks[outcome].append(task.id)
        self._claims.news.set()

    async def close(self) -> None:
        """Send the last acknowledgements, hand back what was not answered, close the frontier."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._goodbye(), _GOODBYE)
        await self.frontier.aclose()
        # As a single process counts them: a URL that ended exhausted or gave_up has no answer. The
        # frontier settled it (no worker claims it again), but it is not done, and the run not complete.
        summary = self.summary
        summary.unfinished = len(self._held) + summary.settled_not_final
        summary.answered = max(summary.urls - summary.unfinished, 0)

    def __repr__(self) -> str:
        return (f"<SharedSource {self.frontier!r} held={len(self._held)} "
                f"acks={sum(map(len, self._acks.values()))} drained={self._drained}>")

    # -- the feeder ----------------------------------------------------------------------

    def _feeder_ended(self, feeder: asyncio.Task[None]) -> None:
        """A feeder that failed stops the worker: without it nothing is claimed or acknowledged, and
        the worker would wait forever. Its URLs go back to the frontier as it stops, and
        :meth:`run` raises the feeder's error."""
        error = None if feeder.cancelled() else feeder.exception()
        if error is None:
            return
        _log.error("the shared frontier's feeder failed (%s: %s); stopping this worker",
                   type(error).__name__, error)
        self.stop()

    async def _wait_for_claims(self) -> None:
        """Return when the feeder hands over new URLs or finds the frontier drained."""
        while not (self.scheduler.queued or self._drained):
            self._claimed.clear()
            await self._claimed.wait()

    async def _feed(self) -> None:
        """Claim, touch and acknowledge until the frontier is drained or the job stops."""
        await self._claims.run(before=self._queue_acks, take=self._take, stopping=lambda: self.stopping)

    def full_scopes(self) -> list[str]:
        """The scopes this worker holds enough URLs of (:func:`claim_per_scope`): claims skip them."""
        return self._claims.full_scopes()

    def _take(self, claim: Claim) -> bool:
        """Hand the claimed URLs to the scheduler; True when the frontier is drained and all is answered."""
        self._check_loss(claim)
        if claim.requeued:
            _log.info("%d claims had expired and went back to the queue", claim.requeued)
        for item in claim.urls:
            self._claims.hold(item.id, item.scope)
            self.scheduler.push(Task(item.id, item.url))
            self._unclaimed[item.scope] = item.left
        self.summary.urls += len(claim.urls)
        if claim.urls or not claim.drained:
            self._wait_until = None  # work was seen: a drained frontier now means the end
        drained = claim.drained and not self._held and not self._acks
        waiting = self._wait_until is not None and self.throttler.clock.now() < self._wait_until
        self._drained = drained and not waiting
        if claim.urls or self._drained:
            self._claimed.set()
        if self._finished():
            self.scheduler.poke()
            return True
        return False

    def _check_loss(self, claim: Claim) -> None:
        """Say so, loudly, when the frontier's data vanished since the last claim.

        Ids only grow, so a last id below the one seen before means the keys
        went: the server restarted without persistence (or from an older
        snapshot), or someone purged the namespace. What was queued or claimed
        by other workers at the last claim is gone; this worker still answers
        the URLs it holds. The count goes to the summary, which makes the run
        incomplete (a non-zero exit).
        """
        if claim.last_id < self._last_id:
            lost = max(self._outstanding, 0)
            self.summary.lost += lost
            _log.error("the shared frontier lost its data (the last URL id went from %d to %d: its Redis "
                       "restarted without persistence, or from an older snapshot, or the namespace was "
                       "purged): about %d URLs queued or claimed by other workers are gone and will not be "
                       "crawled; enqueue them again. docs/frontier.md says how to make a frontier durable",
                       self._last_id, claim.last_id, lost)
        self._last_id = claim.last_id
        self._outstanding = claim.queued + claim.claimed - len(self._held) - len(claim.urls)

    async def _queue_acks(self) -> None:
        """The claim loop's step before each claim: queue the acknowledgements waiting to go out with it.

        They leave in the claim's batch (:meth:`SharedFrontier.ack_later`), and the server runs them
        first: one script call and one round trip for both where awaiting them first took two (a
        fleet worker claims after most answers: 0.8 acknowledgements a request on a fleet of 4).
        Their replies are read as they come (:meth:`_acked`). On a cluster, whose calls go one by
        one, they are sent and awaited first, as before (:meth:`_send_acks`).
        """
        error, self._ack_error = self._ack_error, None
        if error is not None:  # a queued acknowledgement failed, and not for an unreachable server
            raise error
        for outcome in list(self._acks):
            ids = self._acks[outcome]
            sent = self.frontier.ack_later(ids, outcome)
            if sent is None:
                await self._send_acks()
                return
            del self._acks[outcome]  # answers that come in meanwhile start a new list
            self._acking.add(sent)
            sent.add_done_callback(functools.partial(self._acked, ids, outcome))

    def _acked(self, ids: list[int], outcome: str, sent: asyncio.Future[Any]) -> None:
        """The reply to a queued acknowledgement; one that failed waits to be sent again."""
        self._acking.discard(sent)
        error: BaseException | None = asyncio.CancelledError() if sent.cancelled() else sent.exception()
        if error is not None:
            self._acks[outcome] = ids + self._acks.get(outcome, [])
            if isinstance(error, Exception) and not frontier_unreachable(error):
                self._ack_error = error
            return
        done, dups = ack_counts(sent.result())
        self._said_acked(ids, done, dups)

    async def _send_acks(self) -> None:
        for outcome in list(self._acks):
            # Taken out before the await: answers that come in meanwhile start a new list.
            ids = self._acks.pop(outcome)
            try:
                done, dups = await self.frontier.ack(ids, outcome)
            except BaseException:
                self._acks[outcome] = ids + self._acks.get(outcome, [])
                raise
            self._said_acked(ids, done, dups)

    @staticmethod
    def _said_acked(ids: list[int], done: int, dups: int) -> None:
        """Log what an acknowledgement's reply says beyond "finished"."""
        if dups:
            _log.info("%d URLs had been answered by another worker too (their claims had expired)", dups)
        if len(ids) - done - dups:
            _log.info("%d URLs were answered after another worker had claimed them (this worker was out "
                      "of touch past the visibility); that worker finishes them", len(ids) - done - dups)

    def _held_back(self, host: str, seconds: float) -> None:
        """The throttler holds ``host`` back: tell the frontier, at most once per wait."""
        now = self.throttler.clock.now()
        until = self._deferred.get(host)
        if until is not None and until >= now + seconds - 0.5:
            return
        self._deferred[host] = now + seconds
        self._spawn(self._defer(host, seconds))

    async def _defer(self, host: str, seconds: float) -> None:
        try:
            await self.frontier.defer(host, seconds)
        except Exception as exc:
            if not frontier_unreachable(exc):
                raise
            _log.debug("could not defer %s in the frontier: %s", host, exc)

    async def _goodbye(self) -> None:
        """Send the last acknowledgements and hand back what was not answered."""
        try:
            if self._acking:  # queued ones still on their way: those that fail are sent again below
                await asyncio.wait(set(self._acking))
            await self._send_acks()
            if self._held:
                back = await self.frontier.give_back(list(self._held))
                _log.info("handed %d unanswered URLs back to the frontier", back)
        except Exception as exc:
            if not frontier_unreachable(exc):
                raise
            _log.warning("could not reach the frontier to hand back %d URLs and acknowledge %d answers; "
                         "they come back to other workers after the visibility (%gs)", len(self._held),
                         sum(len(ids) for ids in self._acks.values()), self.frontier.visibility)
