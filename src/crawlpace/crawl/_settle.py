"""What an answer means for its URL, and the URL's line: retry, follow, or final.

Part of :class:`~crawlpace.crawl._job.CrawlJob` (the job sets the attributes
declared here): a backoff answer or a transient failure is queued again within
the retries, a redirect is followed under its own host, anything else is the
URL's answer, written as its result line and counted in the crawl's figures.
The rules are listed in the job's module docstring.

``retries`` is a bound, not a wish: a URL is sent at most ``retries + 1``
times, whatever its answers (backoff, soft block, transient failure, an
unexpected error), and a robots.txt file at most ``min(robots_retries,
retries) + 1`` times. Every resend goes back through the scheduler and the
throttler's admission, so it waits out the scope's pace, its backoff and any
hold the server announced; nothing here sends on its own.
"""

from __future__ import annotations

import logging
import time

from .._throttle._permit import Permit
from .._throttle._throttler import Throttler
from ..frontier._scheduler import Dropped, Scheduler, Task
from ._answer import Answer, redirect_target, transient
from ._hedge import HedgeBook
from ._options import CrawlOptions
from ._output import ResultBatch
from ._refusals import RefusalTracker
from ._results import Result
from ._robots_answers import RobotsAnswers
from ._source import UrlSource, host_or_blank
from ._summary import CrawlSummary
from ._tallies import ScopeTally, tally_of

__all__ = ["JobOutcomes"]

_log = logging.getLogger(__name__)


class JobOutcomes:
    """The settling part of a crawl job."""

    options: CrawlOptions
    throttler: Throttler
    scheduler: Scheduler
    summary: CrawlSummary
    source: UrlSource
    _results: ResultBatch[tuple[Task, str]]
    _refusals: RefusalTracker
    _robots_answers: RobotsAnswers | None
    hedges: HedgeBook

    def _settle(self, task: Task, permit: Permit, answer: Answer) -> None:
        refused = self._refusals.note(task.host, answer.error)
        if refused is not None:  # nothing listens there: give the host up now, not after minutes of backoff
            _log.warning("%s given up: %s", task.host, refused)
            self.scheduler.block(task.host, refused)
            self._finish(task, "gave_up", error=f"{task.host} was given up: {refused}")
            return
        outcome = permit.outcome
        backoff = outcome is not None and any(item.backoff for item in outcome.feedback)
        if task.kind == "robots":
            assert self._robots_answers is not None
            self._robots_answers.settle(task, answer, permit.scopes)
            return
        if self._follow_redirect(task, answer):
            return
        transient_failure = not backoff and transient(answer)
        if (backoff or transient_failure) and task.retries < self.options.retries:
            task.retries += 1
            _log.debug("%s: %s %s, attempt %d; queued again", task.target,
                       "backoff answer" if backoff else "transient failure",
                       answer.status if answer.error is None else type(answer.error).__name__, task.attempts)
            if answer.block_rule is not None:
                _log.info("%s: soft block (%s), attempt %d; backing off and queued again", task.target,
                          answer.block_rule, task.attempts)
            # Behind its host's other pages, a failure as a refusal: a refusal is about the site's
            # pace, not the page, and the lock-out's probes then try other pages, so one page does
            # not spend all its retries on them (a counter that counts refusals, HAProxy's, refused
            # one page's four sends in a row and left it "exhausted").
            self.scheduler.push(task)
            return
        if backoff:
            kind = "exhausted"
        elif answer.error is not None:
            kind = "failed"
        else:
            kind = "ok"
        error = None if answer.error is None else f"{type(answer.error).__name__}: {answer.error}"
        if kind == "exhausted" and error is None:
            blocked = "" if answer.block_rule is None else f" (blocked: {answer.block_rule})"
            error = f"still {answer.status}{blocked} after {task.attempts} attempts"
        self._finish(task, kind, status=answer.status, error=error, size=len(answer.body),
                     latency=answer.latency, block_rule=answer.block_rule)

    @staticmethod
    def _final(task: Task, permit: Permit, answer: Answer) -> bool:
        """Whether ``answer`` is one :meth:`_settle` would not send again, retries left or not: not a
        backoff answer, not a transient failure (a page's hedge race: the first such answer wins)."""
        outcome = permit.outcome
        backoff = outcome is not None and any(item.backoff for item in outcome.feedback)
        return task.kind == "page" and not backoff and not transient(answer)

    def _follow_redirect(self, task: Task, answer: Answer, max_hops: int | None = None) -> bool:
        """Queue the next hop of a redirect, under its own host; False when there is none to follow."""
        target = redirect_target(task, answer, self.options.max_redirects if max_hops is None else max_hops)
        if target is None:
            return False
        task.target, task.hops = target, task.hops + 1
        self.scheduler.push(task, front=True)
        return True

    def _dropped(self, task: Task, why: Dropped, detail: str) -> None:
        if self.hedges.dropped(task):
            return  # a hedge: the page's first send is still out and writes its line
        if task.kind == "robots" and self._robots_answers is not None:
            self._robots_answers.dropped(task, detail)
            return
        self._finish(task, why, error=detail)

    def _retry_or_fail(self, task: Task) -> None:
        """Queue ``task`` again after an unexpected error, within its retries; then give it up as failed."""
        if task.retries < self.options.retries:
            task.retries += 1
            self.scheduler.push(task)
        elif task.kind == "robots":
            self._dropped(task, "failed", "an unexpected error, see the log")
        else:
            self._finish(task, "failed", error="an unexpected error, see the log")

    def _finish(self, task: Task, outcome: str, *, status: int | None = None, error: str | None = None,
                size: int = 0, latency: float | None = None, block_rule: str | None = None) -> None:
        if task.kind == "robots":
            return
        scope = task.host or host_or_blank(task.target)
        final_url = task.target if status is not None else None
        self._results.add(Result(url=task.url, status=status, final_url=final_url, bytes=size,
                                 latency=None if latency is None else round(latency, 6),
                                 attempts=task.attempts, error=error, scope=scope, time=round(time.time(), 3),
                                 outcome=outcome, blocked=block_rule is not None, block_rule=block_rule),
                          (task, outcome))
        summary = self.summary
        summary.outcomes[outcome] += 1
        summary.bytes += size
        if status is not None:
            summary.statuses[status] += 1
        tally = self._tally(scope)
        tally.outcomes[outcome] += 1
        tally.done += 1
        if outcome != "ok" or (status is not None and status >= 400):
            tally.errors += 1
            if error:
                tally.note = error
        self.source.answered(task)

    def _tally(self, scope: str) -> ScopeTally:
        # Bounded: past TALLY_LIMIT hosts, the least recently counted are folded into one row.
        summary = self.summary
        return tally_of(summary.scopes, summary.folded, scope)
