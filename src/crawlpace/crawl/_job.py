"""One crawl: URLs in, one JSON line per URL out, every request through the throttler.

The job ties the parts together. The journal (SQLite) holds every input URL
and which are done; the scheduler holds the URLs being worked on, per host,
and hands them out in the order the throttler can admit them; up to
``CONCURRENT_REQUESTS`` fetches run at once; each answer is fed back to the
throttler and written to the output file before the URL is marked done.

What happens to each URL:

- a 3xx with a ``Location`` is followed (up to ``max_redirects``), the next
  hop queued under its own host so its throttling applies;
- a backoff answer (by the scope's ``BACKOFF_HTTP_CODES`` and
  ``BACKOFF_EXCEPTIONS``) is queued again, ahead of its host's queue, up to
  ``retries`` times; the throttler makes it wait out the backoff delay or the
  server's Retry-After before it goes;
- a transient failure that is not a backoff answer (another 5xx, or an
  exception the scope does not back off on) is queued again too, behind its
  host's queue, within the same ``retries`` (as Scrapy's RetryMiddleware
  does): the host's pace spaces the resends, and the rest of its URLs go
  first;
- a soft block (a challenge page matching a block rule, ``cf-mitigated:
  challenge``, a quota problem+json) counts as a backoff answer, whatever its
  status, and its line says ``"blocked": true`` with the rule;
- anything else is the URL's answer (``outcome = "ok"``, whatever the status),
  as is a robots.txt refusal (``"disallowed"``) or an unusable URL (``"failed"``);
- a URL whose retries ran out (``"exhausted"``) or whose site the circuit
  breaker gave up (``"gave_up"``) is written too, but not marked done: a
  resumed crawl tries it again.

The output file is the record of what was answered. After a crash,
``resume`` keeps its complete lines, drops the rest, and fetches again only
what has no final line: at most the requests that were in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

from .._blocks import BlockRules
from .._config import Settings
from .._exceptions import ScopeError
from .._fetchable import fetchable_scope
from .._learning import Learner
from .._permit import Permit
from .._robots import MAX_ROBOTS_BYTES, ROBOTS_MAX_REDIRECTS, robots_verdict
from .._throttler import Throttler
from ..frontier import Journal, JournalError
from ..frontier._robots_cache import RobotsCache
from ..frontier._scheduler import Dropped, Scheduler, Task, origin_of
from ..stores.connection import Retry, unreachable
from ._fetch import AiohttpFetcher, Fetcher
from ._options import CrawlOptions
from ._output import ResultBatch
from ._refusals import RefusalTracker
from ._results import FINAL_OUTCOMES, Result, ResultWriter, reconcile

__all__ = ["CrawlJob", "CrawlSummary", "ScopeTally"]

_log = logging.getLogger(__name__)

_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(slots=True)
class ScopeTally:
    """What the crawl did on one host."""

    done: int = 0
    errors: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    requests: int = 0


@dataclass(slots=True)
class CrawlSummary:
    """The figures of a finished (or stopped) crawl."""

    urls: int = 0
    answered: int = 0
    unfinished: int = 0
    requests: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    outcomes: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    scopes: dict[str, ScopeTally] = field(default_factory=dict)
    resumed_from: int = 0

    @property
    def complete(self) -> bool:
        """Whether every URL got a final answer."""
        return not self.interrupted and self.unfinished == 0

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict."""
        return {
            "urls": self.urls, "answered": self.answered, "unfinished": self.unfinished,
            "requests": self.requests, "seconds": round(self.seconds, 3), "interrupted": self.interrupted,
            "complete": self.complete, "resumed_from": self.resumed_from,
            "outcomes": dict(sorted(self.outcomes.items())),
            "statuses": {str(code): count for code, count in sorted(self.statuses.items())},
            "scopes": {name: {"done": tally.done, "errors": tally.errors, "requests": tally.requests,
                              "outcomes": dict(sorted(tally.outcomes.items()))}
                       for name, tally in sorted(self.scopes.items())},
        }


class CrawlJob:
    """Run one crawl to its end, or until :meth:`stop`.

    Args:
        settings: the throttling settings.
        options: the crawl's own options.
        throttler: a throttler to use instead of one built from ``settings``
            (the job does not close it).
        fetcher: the HTTP layer to send with (by default an aiohttp one built
            from ``options``, closed at the end); the job does not close one
            given here.
    """

    def __init__(self, settings: Settings, options: CrawlOptions, *, throttler: Throttler | None = None,
                 fetcher: Fetcher | None = None) -> None:
        # Warm start: the scopes' policies begin from what earlier crawls learned (crawlpace._learned).
        settings, self.learner = Learner.prepare(settings) if throttler is None else (settings, None)
        self.settings = settings
        self.options = options
        self._own_throttler = throttler is None
        self.throttler = throttler if throttler is not None else Throttler(
            settings, store=options.store, on_give_up=self._gave_up)
        self._given_fetcher = fetcher
        self.blocks = BlockRules(settings.block_rules)
        self.robots = RobotsCache(options.user_agent) if options.robots else None
        self.scheduler = Scheduler(self.throttler, robots=self.robots, on_drop=self._dropped,
                                   on_wait=self._wait_hook())
        self.summary = CrawlSummary()
        self.inflight = 0
        self._stop = asyncio.Event()
        self._journal: Journal | None = None
        self._writer: ResultWriter | None = None
        # Lines go out in batches; a URL is settled (done, acknowledged) once its line is written.
        self._results: ResultBatch[tuple[Task, str]] = ResultBatch(
            self._write_results, lambda item: self._settled(*item), on_error=self._write_failed)
        self._fetcher: Fetcher | None = None
        self._pending_scopes: deque[str] = deque()
        self._after: dict[str, int] = {}
        self._in_memory = 0
        self._fetches: set[asyncio.Task[None]] = set()
        self._refusals = RefusalTracker()

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
        self._open(urls)
        try:
            self._fetcher = self._given_fetcher or self._make_fetcher()
            if self.learner is not None:
                self.learner.start(self.throttler)
            await self._dispatch()
        finally:
            await self._shutdown()
            self.summary.seconds = time.monotonic() - started
            self.summary.interrupted = self.stopping
        return self.summary

    # -- set-up and tear-down ------------------------------------------------------

    def _open(self, urls: Iterable[str] | None) -> None:
        options = self.options
        state = options.state_path
        if options.resume:
            journal = Journal.open(state)
            expected = str(options.output.resolve())
            if journal.fingerprint != expected:
                journal.close()
                raise JournalError(f"{state}: this journal belongs to the crawl writing "
                                   f"{journal.fingerprint}, not {expected}; pass the matching --output "
                                   f"or --state")
        else:
            journal = Journal.create(state, fingerprint=str(options.output.resolve()))
        self._journal = journal
        was_complete = journal.input_complete if options.resume else True
        read = 0
        if urls is not None:
            def counted() -> Iterable[str]:
                nonlocal read
                for url in _clean(urls):
                    read += 1
                    yield url

            added = journal.add((url, _scope_or_blank(url)) for url in counted())
            _log.info("%d new URLs in the journal", added)
        if not was_complete and read == 0:
            journal.close()
            raise JournalError(f"{state}: the first run stopped before it had read all of its URLs; "
                               "give the same URLs again with --resume")
        journal.mark_input_complete()
        if options.resume:
            # The output file is the record: the done flags are made to match it exactly.
            kept = reconcile(options.output)
            journal.replace_done(kept.final_urls)
            self.summary.resumed_from = journal.done()
            _log.info("resuming: %d URLs already answered, %d lines dropped from %s", journal.done(),
                      kept.dropped, options.output)
        journal.flush()
        self.summary.urls = journal.total()
        self._writer = ResultWriter(options.output, append=options.resume)
        self._pending_scopes.extend(scope for scope, count in journal.scopes().items() if count)
        self._refill()

    def _make_fetcher(self) -> Fetcher:
        options = self.options
        return AiohttpFetcher(user_agent=options.user_agent, timeout=options.timeout,
                              max_connections=max(self.settings.concurrent_requests * 2, 10),
                              trust_env=options.trust_env, clock=self.throttler.clock.now)

    async def _shutdown(self) -> None:
        for task in list(self._fetches):
            task.cancel()
        await asyncio.gather(*self._fetches, return_exceptions=True)
        # Only now, with no fetch left to see its connections drop and report a failure.
        if self._fetcher is not None and self._given_fetcher is None:
            await self._fetcher.aclose()
        journal, writer = self._journal, self._writer
        if writer is not None:
            try:
                self._results.flush()
            finally:
                writer.close()
        if journal is not None:
            self.summary.answered = journal.done()
            self.summary.unfinished = journal.total() - journal.done()
            journal.close()
        if self.learner is not None:
            await self.learner.close(self.throttler)
        if self._own_throttler:
            await self.throttler.aclose()

    # -- feeding the scheduler -------------------------------------------------------

    def _refill(self) -> None:
        """Move URLs from the journal into the scheduler, a batch per host, within the memory bound."""
        journal = self._journal
        assert journal is not None
        budget = self.options.max_in_memory
        batch = max(min(budget // 10, 1000), 1)
        pending = self._pending_scopes
        if self._in_memory > budget - batch and not self.scheduler.idle:
            return  # refill a batch at a time, not a URL per finished fetch
        while pending and self._in_memory < budget:
            scope = pending.popleft()
            want = min(batch, budget - self._in_memory)
            entries = journal.load(scope, self._after.get(scope, 0), want)
            for entry in entries:
                self.scheduler.push(Task(entry.id, entry.url))
                self._after[scope] = entry.id
            self._in_memory += len(entries)
            if len(entries) == want:
                pending.append(scope)  # there may be more of this host

    # -- the dispatch loop --------------------------------------------------------------

    async def _dispatch(self) -> None:
        slots = asyncio.Semaphore(self.settings.concurrent_requests)
        stop_wait = asyncio.ensure_future(self._stop.wait())
        try:
            while not self.stopping:
                await slots.acquire()
                got = await self._next()
                if got is None:
                    slots.release()
                    self._results.flush()  # nothing to send now: write (and settle) what waits
                    if self.stopping or self._finished():
                        break
                    await self._await_news(stop_wait)
                    continue
                task, permit = got
                self.inflight += 1
                fetch = asyncio.ensure_future(self._fetch(task, permit, slots))
                self._fetches.add(fetch)
                fetch.add_done_callback(self._fetches.discard)
        finally:
            stop_wait.cancel()

    def _finished(self) -> bool:
        return self.inflight == 0 and self.scheduler.idle and not self._pending_scopes

    async def _next(self) -> tuple[Task, Permit] | None:
        """The next admitted task; None when nothing is queued now."""
        take = asyncio.ensure_future(self.scheduler.take())
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({take, stop}, return_when=asyncio.FIRST_COMPLETED)
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
        """Nothing is queued but fetches are running: wait until one of them ends."""
        if not self._fetches:
            return
        await asyncio.wait({*self._fetches, stop_wait}, return_when=asyncio.FIRST_COMPLETED)

    # -- one fetch ------------------------------------------------------------------------

    async def _fetch(self, task: Task, permit: Permit, slots: asyncio.Semaphore) -> None:
        released = False
        try:
            task.attempts += 1
            tally = self._tally(task.key)
            tally.requests += 1
            self.summary.requests += 1
            outcome = await self._send(task, permit)
            await permit.release()
            released = True
            self._settle(task, permit, outcome)
        except Exception:  # a bug, or an error no layer below turned into an answer
            # The task must not vanish: a shared worker would hold its claim forever and never end.
            _log.exception("%s: unexpected error while fetching it", task.target)
            self._retry_or_fail(task)
        finally:
            if not released:
                await permit.release()
            self.inflight -= 1
            slots.release()
            self.scheduler.released(permit.scopes, task.key)
            self._refill()

    async def _send(self, task: Task, permit: Permit) -> _Answer:
        fetcher = self._fetcher
        assert fetcher is not None
        limit = MAX_ROBOTS_BYTES + 1 if task.kind == "robots" else self.options.max_bytes
        page = await fetcher.get(task.target, limit)
        if page.error is not None:
            permit.feedback(exception=page.error, latency=page.latency)
            return _Answer(None, None, b"", page.latency, page.error)
        rule = None
        if task.kind == "page" and page.status is not None:
            rule = self.blocks.match(page.status, page.headers or {}, page.body)
        permit.feedback(page, latency=page.latency, blocked=rule is not None)
        return _Answer(page.status, page.location, page.body, page.latency, None, rule)

    def _settle(self, task: Task, permit: Permit, answer: _Answer) -> None:
        refused = self._refusals.note(task.key, answer.error)
        if refused is not None:  # nothing listens there: give the host up now, not after minutes of backoff
            _log.warning("%s given up: %s", task.key, refused)
            self.scheduler.block(task.key, refused)
            self._finish(task, "gave_up", error=f"{task.key} was given up: {refused}")
            return
        outcome = permit.outcome
        backoff = outcome is not None and any(item.backoff for item in outcome.feedback)
        if task.kind == "robots":
            self._settle_robots(task, answer, backoff)
            return
        if self._follow_redirect(task, answer):
            return
        transient = not backoff and _transient(answer)
        if (backoff or transient) and task.retries < self.options.retries:
            task.retries += 1
            _log.debug("%s: %s %s, attempt %d; queued again", task.target,
                       "backoff answer" if backoff else "transient failure",
                       answer.status if answer.error is None else type(answer.error).__name__, task.attempts)
            if answer.block_rule is not None:
                _log.info("%s: soft block (%s), attempt %d; backing off and queued again", task.target,
                          answer.block_rule, task.attempts)
            self.scheduler.push(task, front=backoff)
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

    def _follow_redirect(self, task: Task, answer: _Answer, max_hops: int | None = None) -> bool:
        """Queue the next hop of a redirect, under its own host; False when there is none to follow."""
        limit = self.options.max_redirects if max_hops is None else max_hops
        if answer.status not in _REDIRECTS or not answer.location or task.hops >= limit:
            return False
        try:
            target = urljoin(task.target, answer.location)
        except ValueError:  # hostile or broken input, e.g. an unclosed IPv6 bracket: not followed
            _log.info("%s: the Location %r cannot be followed", task.target, answer.location[:200])
            return False
        if not target.startswith(("http://", "https://")):
            return False
        task.target, task.hops = target, task.hops + 1
        self.scheduler.push(task, front=True)
        return True

    def _settle_robots(self, task: Task, answer: _Answer, backoff: bool) -> None:
        robots = self.robots
        assert robots is not None
        if self._follow_redirect(task, answer, ROBOTS_MAX_REDIRECTS):
            return
        if robots_verdict(answer.status) == "unreachable" and task.retries < self.options.robots_retries:
            task.retries += 1  # the throttler spaces the retry by the scope's backoff
            self.scheduler.push(task, front=True)
            return
        origin = origin_of(task.url)  # the rules are the first origin's, wherever they were found
        why = "" if answer.error is None else f"{type(answer.error).__name__}: {answer.error}"
        settled = robots.settle(origin, answer.status, answer.body, self.throttler.clock.now(), why=why)
        if settled.crawl_delay_changed:  # a Crawl-delay removed from the file is cleared too
            self._spawn(self._apply_crawl_delay(task.key, settled.rules.crawl_delay, origin))
        self.scheduler.robots_known(origin)

    async def _apply_crawl_delay(self, scope: str, delay: float | None, origin: str) -> None:
        """Store a changed Crawl-delay, again and again while a shared store cannot be reached.

        This worker's copy of the scope's policy takes the delay at once (the
        pages that follow are paced by it); the store must have it too, or a
        newer copy read from it later would not. A failure used to end the
        task with an exception nobody retrieved.
        """
        retry = Retry()
        while not self.stopping:
            try:
                await self.throttler.set_crawl_delay(scope, delay)
                return
            except Exception as exc:
                if not unreachable(exc):
                    _log.exception("could not apply the Crawl-delay of %s to %s", origin, scope)
                    return
                _log.debug("could not store the Crawl-delay of %s yet: %s", origin, exc)
            await self.throttler.clock.sleep(retry.next())

    def _spawn(self, coro: Any) -> None:
        job = asyncio.ensure_future(coro)
        self._fetches.add(job)
        job.add_done_callback(self._fetches.discard)

    # -- results ------------------------------------------------------------------------

    def _wait_hook(self) -> Callable[[str, float], None] | None:
        """What the scheduler calls when a host is held back for long (nothing, for a crawl of its own)."""
        return None

    def _gave_up(self, scope: str, reason: str) -> None:
        self.scheduler.give_up(scope, reason)

    def _dropped(self, task: Task, why: Dropped, detail: str) -> None:
        if task.kind == "robots" and self.robots is not None:
            # Pages wait for this file: it counts as unreachable (RFC 9309), and they are looked at again.
            origin = origin_of(task.url)
            self.robots.failed(origin, self.throttler.clock.now(), detail)
            self.scheduler.robots_known(origin)
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
        scope = task.key or _scope_or_blank(task.target)
        final_url = task.target if status is not None else None
        self._results.add(Result(url=task.url, status=status, final_url=final_url, bytes=size,
                                 latency=None if latency is None else round(latency, 6),
                                 attempts=task.attempts, error=error, scope=scope, time=round(time.time(), 3),
                                 outcome=outcome, blocked=block_rule is not None, block_rule=block_rule),
                          (task, outcome))
        summary = self.summary
        summary.outcomes[outcome] += 1
        if status is not None:
            summary.statuses[status] += 1
        tally = self._tally(scope)
        tally.outcomes[outcome] += 1
        tally.done += 1
        if outcome != "ok" or (status is not None and status >= 400):
            tally.errors += 1
        self._in_memory -= 1

    def _write_results(self, results: list[Result]) -> None:
        writer = self._writer
        assert writer is not None
        writer.write_many(results)

    def _write_failed(self, exc: OSError) -> None:
        _log.error("cannot write to %s (%s); stopping the crawl, its unwritten URLs are left for a resume",
                   self.options.output, exc)
        self.stop()

    def _settled(self, task: Task, outcome: str) -> None:
        """Record that ``task``'s line is written: a final outcome marks it done in the journal."""
        journal = self._journal
        assert journal is not None
        if outcome in FINAL_OUTCOMES:
            journal.mark_done([task.id])

    def _tally(self, scope: str) -> ScopeTally:
        tally = self.summary.scopes.get(scope)
        if tally is None:
            tally = self.summary.scopes[scope] = ScopeTally()
        return tally


@dataclass(slots=True)
class _Answer:
    status: int | None
    location: str | None
    body: bytes
    latency: float | None
    error: BaseException | None
    block_rule: str | None = None


def _transient(answer: _Answer) -> bool:
    """Whether an answer may well succeed if sent again: a 5xx, or no answer at all."""
    return answer.error is not None or (answer.status is not None and answer.status >= 500)


def _clean(urls: Iterable[str]) -> Iterable[str]:
    for line in urls:
        url = line.strip()
        if url and not url.startswith("#"):
            yield url


def _scope_or_blank(url: str) -> str:
    try:
        return fetchable_scope(url)
    except ScopeError:
        return ""


