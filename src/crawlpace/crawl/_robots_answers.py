"""What the crawl does with the answer to a robots.txt fetch.

The scheduler fetches a site's robots.txt before its first page and holds
the pages until the rules are known (``frontier/_scheduler.py``). The answer
comes back here: redirects are followed (up to five hops), an unreachable
file is fetched again within ``robots_retries``, and then the rules are
settled in the cache, a changed Crawl-delay goes to the scopes the fetch ran
under (stored again and again while a shared store is away), and the pages
that waited are let go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .._robots import ROBOTS_MAX_REDIRECTS, crawl_delay_scopes, robots_verdict
from ..frontier._robots_cache import RobotsCache
from ..frontier._scheduler import Task, origin_of
from ..stores.connection import Retry, unreachable
from ._answer import Answer
from ._source import JobParts

__all__ = ["RobotsAnswers"]

_log = logging.getLogger("crawlpace.crawl._job")  # its lines keep the job's logger


class RobotsAnswers:
    """Settles robots.txt fetches for one crawl.

    Args:
        job: the crawl job.
        cache: the crawl's robots.txt cache.
        follow: queues the next hop of a redirect, ``follow(task, answer, max_hops)``;
            False when there is none to follow.
    """

    def __init__(self, job: JobParts, cache: RobotsCache,
                 follow: Callable[[Task, Answer, int], bool]) -> None:
        self._job = job
        self._cache = cache
        self._follow = follow

    def settle(self, task: Task, answer: Answer, scopes: tuple[str, ...]) -> None:
        """The answer to robots.txt ``task``, fetched under ``scopes``."""
        job, robots = self._job, self._cache
        if self._follow(task, answer, ROBOTS_MAX_REDIRECTS):
            return
        if robots_verdict(answer.status) == "unreachable" and task.retries < job.options.robots_retries:
            task.retries += 1  # the throttler spaces the retry by the scope's backoff
            job.scheduler.push(task, front=True)
            return
        origin = origin_of(task.url)  # the rules are the first origin's, wherever they were found
        why = "" if answer.error is None else f"{type(answer.error).__name__}: {answer.error}"
        settled = robots.settle(origin, answer.status, answer.body, job.throttler.clock.now(), why=why)
        if settled.crawl_delay_changed:  # a Crawl-delay removed from the file is cleared too
            for scope in crawl_delay_scopes(task.host, scopes):
                job.spawn(self._apply_crawl_delay(scope, settled.rules.crawl_delay, origin))
        job.scheduler.robots_known(origin)

    def dropped(self, task: Task, detail: str) -> None:
        """A robots.txt fetch left without an answer (``detail`` says why)."""
        # Pages wait for this file: it counts as unreachable (RFC 9309), and they are looked at again.
        origin = origin_of(task.url)
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
            try:
                await job.throttler.set_crawl_delay(scope, delay)
                return
            except Exception as exc:
                if not unreachable(exc):
                    _log.exception("could not apply the Crawl-delay of %s to %s", origin, scope)
                    return
                _log.debug("could not store the Crawl-delay of %s yet: %s", origin, exc)
            await job.throttler.clock.sleep(retry.next())
