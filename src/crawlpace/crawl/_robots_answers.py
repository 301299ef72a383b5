"""What the crawl does with the answer to a robots.txt fetch.

The scheduler fetches a site's robots.txt before its first page and holds
the pages until the rules are known (``frontier/_scheduler.py``). The answer
comes back here: redirects are followed (up to five hops), an unreachable
file is fetched again within ``robots_retries`` (and never more often than
the crawl's ``retries`` allow any URL), and then the rules are
settled in the cache, a changed Crawl-delay goes to the scopes the fetch ran
under (stored again and again while a shared store is away), and the pages
that waited are let go.

A worker of a fleet (a crawl whose source shares robots.txt answers) first
looks for the copy another worker stored: one worker fetches each site's
robots.txt and stores its final answer, the others wait for that copy and
settle it as if they had fetched it themselves. So a site sees one robots.txt
request per fleet, not one per worker, each taking a slot of the site's
start-up pace before any page goes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from .._clients._last_look import LastLook
from .._robotstxt._robots import MAX_ROBOTS_BYTES, ROBOTS_MAX_REDIRECTS, crawl_delay_scopes, robots_verdict
from ..frontier._robots_cache import RobotsCache
from ..frontier._scheduler import Task, origin_of
from ..frontier._shared import RobotsCopy
from ..frontier._task import Unmeasured
from ..stores.redis.connection import Retry, unreachable
from ._answer import Answer
from ._source import JobParts, RobotsShare

__all__ = ["RobotsAnswers"]

_log = logging.getLogger(__name__)

#: Seconds one worker holds the right to fetch a site's robots.txt for the fleet; should it store
#: no answer by then (it died, or its fetch was dropped), the next worker to ask fetches it.
SHARED_HOLD = 30.0
#: Seconds between two looks for the robots.txt copy another worker is fetching. Not the board's
#: ``SHARED_POLL`` (0.05 s, a look at a full scope's queue): a copy takes a whole fetch to appear.
COPY_POLL = 0.2
#: Seconds a fleet adds to a robots.txt Crawl-delay. The shared store spaces the admissions,
#: but each worker sends a moment after its own, by a lag (the reply's way back, its event
#: loop) that differs from worker to worker: two sends of different workers then arrive
#: closer than the delay. Measured: 8 workers on a loaded 2-core machine sent 1.29 s apart
#: under a Crawl-delay of 1.33 s; one process, whose sends all lag alike, never did.
FLEET_DELAY_SPREAD = 0.05


def fleet_crawl_delay(delay: float | None, max_delay: float) -> float | None:
    """The Crawl-delay a fleet's store keeps for ``delay``: with room for its workers' lags.

    Never past ``max_delay`` (``THROTTLING_ROBOTSTXT_MAX_DELAY``) on account of the room: a
    delay already past it is left for the store to clamp, with its warning.
    """
    if delay is None or delay >= max_delay:
        return delay
    return min(delay + FLEET_DELAY_SPREAD, max_delay)


class RobotsAnswers:
    """Settles robots.txt fetches for one crawl.

    Args:
        job: the crawl job.
        cache: the crawl's robots.txt cache.
        follow: queues the next hop of a redirect, ``follow(task, answer, max_hops)``;
            False when there is none to follow.
        shared: where the workers of a fleet share robots.txt answers; None
            for a crawl on its own (every file is fetched here).
        look: the fetcher's last look, told each scope's Crawl-delay in force so
            that it spaces the writes as well as the admissions; None for none.
    """

    def __init__(self, job: JobParts, cache: RobotsCache,
                 follow: Callable[[Task, Answer, int], bool], *, shared: RobotsShare | None = None,
                 look: LastLook | None = None) -> None:
        self._job = job
        self._look = look
        self._cache = cache
        self._follow = follow
        self._shared = shared
        self._fetching: set[str] = set()  # origins this worker fetches for the fleet

    def wanted(self, fetch: Task) -> bool:
        """A robots.txt fetch is due: with a fleet, look for its copy first; True when taken over."""
        if self._shared is None:
            return False
        self._job.spawn(self._look_up(fetch))
        return True

    async def _look_up(self, fetch: Task) -> None:
        """Settle the fleet's copy of ``fetch``'s file, or queue the fetch once it is this worker's turn."""
        job, shared = self._job, self._shared
        assert shared is not None
        origin = origin_of(fetch.url)
        while not job.stopping:
            try:
                found = await shared.robots(origin, hold=SHARED_HOLD)
            except Exception as exc:  # unreachable or not: fetch it here rather than hold the site
                _log.debug("could not look up the fleet's robots.txt of %s (%s); fetching it", origin, exc)
                found = True
            if isinstance(found, RobotsCopy):
                _log.debug("robots.txt of %s: the copy another worker fetched", origin)
                fetch.retries = job.options.robots_retries  # its retries were spent where it was fetched
                scopes = job.throttler.scopes_nowait(Unmeasured(fetch.url)) or ()
                self._apply(fetch, origin, found.status, found.body, found.why, scopes)
                return
            if found:
                self._fetching.add(origin)
                job.scheduler.push(fetch, front=True)
                return
            await job.throttler.clock.sleep(COPY_POLL)

    def settle(self, task: Task, answer: Answer, scopes: tuple[str, ...]) -> None:
        """The answer to robots.txt ``task``, fetched under ``scopes``."""
        job = self._job
        if self._follow(task, answer, ROBOTS_MAX_REDIRECTS):
            return
        # --retries bounds every URL's sends, robots.txt's too: --retries 0 means one try here as well.
        retries = min(job.options.robots_retries, job.options.retries)
        if robots_verdict(answer.status) == "unreachable" and task.retries < retries:
            task.retries += 1  # the throttler spaces the retry by the scope's backoff
            job.scheduler.push(task, front=True)
            return
        origin = origin_of(task.url)  # the rules are the first origin's, wherever they were found
        why = "" if answer.error is None else f"{type(answer.error).__name__}: {answer.error}"
        if origin in self._fetching:
            self._fetching.discard(origin)
            self._store(origin, RobotsCopy(answer.status, answer.body[:MAX_ROBOTS_BYTES], why))
        self._apply(task, origin, answer.status, answer.body, why, scopes)

    def _apply(self, task: Task, origin: str, status: int | None, body: bytes, why: str,
               scopes: tuple[str, ...]) -> None:
        """Settle ``origin``'s rules, pass a changed Crawl-delay on, and let the waiting pages go."""
        job = self._job
        settled = self._cache.settle(origin, status, body, job.throttler.clock.now(), why=why)
        if settled.crawl_delay_changed:  # a Crawl-delay removed from the file is cleared too
            paced = crawl_delay_scopes(task.host, scopes)
            job.spawn(self._crawl_delay_first(paced, settled.rules.crawl_delay, origin))
            return
        job.scheduler.robots_known(origin)

    async def _crawl_delay_first(self, scopes: Iterable[str], delay: float | None, origin: str) -> None:
        """Apply a changed Crawl-delay to ``scopes``, then let ``origin``'s waiting pages go.

        The pages went at once, and the delay was applied meanwhile: a fleet's workers admitted the
        first pages after robots.txt before the delay reached the shared store (a round trip or
        two on a loaded machine), at the start's pace, and the site saw its second request
        closer than the delay. A store that cannot be reached holds the pages back no longer than
        one try; the delay is then stored in the background, as before.
        """
        job = self._job
        try:
            for scope in scopes:
                if not await self._try_crawl_delay(scope, delay, origin):
                    job.spawn(self._apply_crawl_delay(scope, delay, origin))
        finally:
            job.scheduler.robots_known(origin)

    def _store(self, origin: str, copy: RobotsCopy) -> None:
        """Store this worker's answer for the fleet, as long as the rules it gives are trusted."""
        shared = self._shared
        assert shared is not None
        cache = self._cache
        keep = cache.retry_ttl if robots_verdict(copy.status) == "unreachable" else cache.ttl

        async def store() -> None:
            try:
                await shared.store_robots(origin, copy, keep=keep)
            except Exception as exc:  # the others then fetch it themselves once the hold ends
                _log.debug("could not store the robots.txt of %s for the fleet: %s", origin, exc)

        self._job.spawn(store())

    def dropped(self, task: Task, detail: str) -> None:
        """A robots.txt fetch left without an answer (``detail`` says why)."""
        # Pages wait for this file: it counts as unreachable (RFC 9309), and they are looked at again.
        origin = origin_of(task.url)
        self._fetching.discard(origin)  # nothing to store: the next worker to ask fetches it
        self._cache.failed(origin, self._job.throttler.clock.now(), detail)
        self._job.scheduler.robots_known(origin)

    async def _apply_crawl_delay(self, scope: str, delay: float | None, origin: str) -> None:
        """Store a changed Crawl-delay, again and again while a shared store cannot be reached.

        This worker's copy of the scope's policy takes the delay at once (the
        pages that follow are paced by it); the store must have it too, or a
        newer copy read from it later would not. A failure used to end the
        task with an exception nobody retrieved.
        """
        job = self._job
        retry = Retry()
        while not job.stopping:
            await job.throttler.clock.sleep(retry.next())
            if await self._try_crawl_delay(scope, delay, origin):
                return

    async def _try_crawl_delay(self, scope: str, delay: float | None, origin: str) -> bool:
        """Store a changed Crawl-delay once; False when a shared store could not be reached."""
        job = self._job
        if self._shared is not None:
            delay = fleet_crawl_delay(delay, job.throttler.settings.robotstxt_max_delay)
        try:
            await job.throttler.set_crawl_delay(scope, delay)
            # The delay in force (clamped, or None where settings win) spaces the writes too.
            if self._look is not None:
                stats = await job.throttler.scope_stats(scope)
                self._look.pace(scope, None if stats is None else stats.crawl_delay)
        except Exception as exc:
            if not unreachable(exc):
                _log.exception("could not apply the Crawl-delay of %s to %s", origin, scope)
                return True
            _log.debug("could not store the Crawl-delay of %s yet: %s", origin, exc)
            return False
        return True
