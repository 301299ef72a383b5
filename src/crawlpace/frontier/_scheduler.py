"""The crawl's scheduler: per-scope queues and a heap of scopes by the time they can admit.

A crawl has many sites and few workers. A worker that waited for one site's
delay would sit idle while other sites were ready, and a slow site would end
up holding every worker (the fault seeds 002 and 003 describe). So no worker
ever waits on a site here. The scheduler keeps one FIFO queue per set of
throttling scopes (the throttler's own answer for the URL: its host, unless
``meta`` or a manager says otherwise), and the readiness board
(:mod:`crawlpace._throttle._board`) decides which queue goes next. :meth:`Scheduler.take`
takes the queue that is due, asks the throttler without waiting
(:meth:`Throttler.try_acquire`) and either returns the task with its permit
or puts the queue back on the board at the time the throttler names. A queue
whose scope has every slot in flight is parked until one of its requests
ends. Only when no queue is due does the caller wait, and then for the
earliest of them, or for news (a release, a new task).

Before a site's first page the scheduler has its robots.txt fetched, and holds
the site's pages until the rules are known (:mod:`crawlpace.frontier._robots_gate`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .._clock import Clock
from .._exceptions import ScopeError, ScopeGivenUp
from .._scoping._fetchable import fetchable_scope
from .._scoping._scopes import host_scope
from .._throttle._board import SHARED_POLL, Board
from .._throttle._permit import NotReady, Permit
from .._throttle._throttler import Throttler
from ._alarm import Alarm
from ._robots_cache import RobotsCache
from ._robots_gate import RobotsGating
from ._task import Dropped, Task, Unmeasured, origin_of

__all__ = ["LONG_WAIT", "MAX_QUIET", "Dropped", "Scheduler", "Task", "origin_of"]

_log = logging.getLogger(__name__)

# A release re-tries its scope's queue at once when that queue waits longer than this.
_RECHECK_AFTER = 0.05
#: Seconds a take() on a shared store sleeps at most before it looks at its queues again. Every way
#: a queue becomes due wakes it (a time on the board, a release, a push); this bound is only a
#: second line, for a wake-up a future change might lose (it logs a warning should it ever help).
MAX_QUIET = 1.0
#: Seconds of waiting from which ``on_wait`` hears about a queue.
LONG_WAIT = 1.0


@dataclass(slots=True)
class _Pending:
    """The head of a queue, whose admission needs an await."""

    task: Task
    request: object


class _Next:
    """:meth:`Scheduler._answer`'s word for "the task left; try the queue's next one"."""


_NEXT = _Next()


def _request_of(task: Task) -> str | Unmeasured:
    """What the throttler is given for ``task``: its URL, or an unmeasured request for robots.txt."""
    return task.target if task.kind == "page" else Unmeasured(task.target)


class Scheduler(RobotsGating):
    """Hand out tasks in the order the throttler can admit them, never waiting on one site.

    Args:
        throttler: decides admission; its clock is the scheduler's clock.
        robots: the robots.txt cache, or None to fetch no robots.txt at all.
        on_drop: called with ``(task, why, detail)`` for a task that leaves
            without a fetch: forbidden by robots.txt, given up by the circuit
            breaker, or unusable (no host).
        on_wait: called with ``(host, seconds)`` for each host of a queue the
            throttler holds back for at least :data:`LONG_WAIT` seconds (a
            backoff, a Retry-After, a long Crawl-Delay); the shared frontier
            passes it on.
    """

    def __init__(self, throttler: Throttler, *, robots: RobotsCache | None = None,
                 on_drop: Callable[[Task, Dropped, str], None],
                 on_wait: Callable[[str, float], None] | None = None) -> None:
        self._throttler = throttler
        self._on_wait = on_wait
        self._clock: Clock = throttler.clock
        self._robots = robots
        self._on_drop = on_drop
        self._queues: dict[str, deque[Task]] = {}
        self._board: Board[str] = Board()  # which queue goes next
        self._waiting_robots: dict[str, list[Task]] = {}  # origin -> pages held until its rules are known
        self._blocked: dict[str, str] = {}  # scope -> why its tasks are dropped as they come (see block)
        self._unresolved: deque[tuple[Task, bool]] = deque()  # (task, front): scopes not asked for yet
        self._key_scopes: dict[str, tuple[str, ...]] = {}  # queue -> the scopes its last permit held
        self._alarm = Alarm(self._clock)  # what take() sleeps on when nothing is due
        # A local store answers at once: whole takes run without a coroutine (take_nowait).
        self._shared = throttler.store.shared
        self._nowait = not self._shared
        self.queued = 0
        self._per_scope: dict[str, int] = {}  # pages queued per scope (see queued_for)
        self._per_host: dict[str, int] = {}  # pages queued per host (see queued_on_host)

    # -- adding work -----------------------------------------------------------

    def push(self, task: Task, *, front: bool = False) -> None:
        """Queue a task; ``front`` puts it ahead of its queue (retries, redirects, robots.txt).

        The throttler's scopes for the task are worked out here and kept on
        it (:attr:`Task.scopes`), so admission need not work them out again.
        A task whose scopes the throttling manager must be awaited for waits
        aside until the next :meth:`take` asks the manager, then joins the
        queue of those scopes like any other.
        """
        try:
            host = fetchable_scope(task.target)  # refuses what the crawl cannot fetch, up front
            scopes = self._throttler.scopes_nowait(_request_of(task))
        except ScopeError as exc:
            self._on_drop(task, "failed", str(exc))
            return
        task.host = host
        if not scopes:
            task.scopes = None  # a redirect's new target: its old scopes no longer hold
            self._unresolved.append((task, front))
            self.queued += 1
            self._poke()
            return
        self._file(task, scopes, host, front)

    def _file(self, task: Task, scopes: tuple[str, ...], host: str, front: bool) -> None:
        """Put ``task`` in the queue of ``scopes`` (or drop it, when that scope or its host was blocked)."""
        task.scopes = scopes
        task.key = scopes[0] if len(scopes) == 1 else "+".join(sorted(scopes))
        blocked = next((scope for scope in (task.key, host) if scope in self._blocked), None)
        if blocked is not None:
            self._on_drop(task, "gave_up", f"{blocked} was given up: {self._blocked[blocked]}")
            return
        queue = self._queues.get(task.key)
        if queue is None:
            queue = self._queues[task.key] = deque()
        if front:
            queue.appendleft(task)
        else:
            queue.append(task)
        self.queued += 1
        self._count(task, 1)
        if task.key not in self._board:
            self._schedule(task.key, self._clock.now())

    def released(self, scopes: tuple[str, ...], key: str | None = None) -> None:
        """Tell the scheduler that a request of ``scopes`` ended, freeing a slot in each.

        ``key`` names the request's queue: its answer may have loosened the
        scopes' limits (an announced budget, rampup), so a queue waiting for a
        far send time tries again now instead.
        """
        now = self._clock.now()
        when = self._board.when(key) if key is not None else None
        if key is not None and when is not None and when - now > _RECHECK_AFTER:
            self._schedule(key, now)
        # Queues parked on these scopes, or held by the global cap, are due now.
        self._board.released(scopes, now)
        self._poke()

    def give_up(self, scope: str, reason: str) -> None:
        """Drop every queue whose requests belong to ``scope`` at once, as given up.

        Called from the throttler's ``on_give_up`` hook, so that a site the
        circuit breaker abandoned does not keep its URLs until its queue
        would next have been due.
        """
        keys = [key for key in list(self._queues) if key == scope or scope in self._key_scopes.get(key, ())]
        keys += [task.key for tasks in self._waiting_robots.values() for task in tasks
                 if task.key == scope and task.key not in keys]
        for key in dict.fromkeys(keys):
            self._board.discard(key)
            self._drop_queue(key, "gave_up", f"{scope} was given up: {reason}")
        self._poke()

    def block(self, scope: str, reason: str) -> None:
        """Give ``scope`` up for the rest of the run: what is queued and every task pushed later."""
        self._blocked[scope] = reason
        self.give_up(scope, reason)

    @property
    def idle(self) -> bool:
        """Whether nothing is queued, waiting for robots.txt, or parked."""
        return self.queued == 0

    def queued_for(self, scope: str) -> int:
        """Pages queued under ``scope`` (alone or with other scopes), not yet sent.

        What the crawl tells the throttler of each scope's work left
        (:meth:`crawlpace.Throttler.count_work`): a floor, since pages waiting for
        their site's robots.txt, retries and redirects still to come are not in it.
        """
        return self._per_scope.get(scope, 0)

    def queued_on_host(self, host: str) -> int:
        """Pages of ``host`` queued, not yet sent: what a shared-frontier worker holds of the host and
        is still waiting to send (the frontier's scopes are hosts; see ``frontier/_claim_loop.py``)."""
        return self._per_host.get(host, 0)

    def _count(self, task: Task, step: int) -> None:
        """Count ``task`` in (``step`` 1) or out (-1) of :meth:`queued_for` and :meth:`queued_on_host`
        (pages only)."""
        if task.kind != "page" or not task.scopes:
            return
        for counts, keys in ((self._per_scope, task.scopes), (self._per_host, (task.host,))):
            for key in keys:
                left = counts.get(key, 0) + step
                if left > 0:
                    counts[key] = left
                else:
                    counts.pop(key, None)  # (a site done with: nothing kept for it)

    def scope_sizes(self) -> dict[str, int]:
        """Queued tasks per queue, those waiting for robots.txt included."""
        sizes = {key: len(queue) for key, queue in self._queues.items() if queue}
        for tasks in self._waiting_robots.values():
            for task in tasks:
                sizes[task.key] = sizes.get(task.key, 0) + 1
        return sizes

    def __repr__(self) -> str:
        return (f"<Scheduler queued={self.queued} queues={len(self._queues)} "
                f"waiting_robots={sum(map(len, self._waiting_robots.values()))} {self._board!r}>")

    # -- taking work -------------------------------------------------------------

    async def take(self) -> tuple[Task, Permit] | None:
        """Wait for the next task the throttler admits, with its permit.

        Returns:
            The task and its permit, or None when nothing is queued (the
            caller decides whether more may come, and calls again after news).
        """
        bounded = False  # the last sleep ended at MAX_QUIET, with nothing on the board due by then
        while True:
            got = await self._take_due()
            if got is not None:
                if bounded:
                    _log.warning("a queue of %s was due with nothing to wake the scheduler: a lost "
                                 "wake-up (a bug); found by the look every %g s", got[0].host, MAX_QUIET)
                return got
            if self.idle:
                return None
            until = self._board.next_at()
            limit = self._clock.now() + MAX_QUIET if self._shared else None
            bound = limit is not None and (until is None or until > limit)
            bounded = await self._alarm.sleep(limit if bound else until) and bound

    def poke(self) -> None:
        """Wake a waiting :meth:`take`, e.g. because work was added or a slot freed."""
        self._poke()

    def take_nowait(self) -> tuple[Task, Permit] | None:
        """The next admitted task, when it can be had without awaiting; the crawl's hot path.

        Returns:
            The task and its permit; None when no queue is due now, or when
            admission needs an await (a shared store): call :meth:`take` then.
        """
        if not self._nowait or self._unresolved:
            return None  # an await is needed: for the store, or for a manager's scopes
        board = self._board
        while (key := board.pop(self._clock.now())) is not None:
            got = self._try_nowait(key)
            if isinstance(got, _Pending):  # malformed scopes, an awaited manager: take() says
                self._schedule(key, self._clock.now())
                return None
            if got is not None:
                return got
        return None

    async def take_due(self) -> tuple[Task, Permit] | None:
        """The next admitted task if a queue is due now; None at once when none is (never sleeps).

        With a shared store, several of these may be in flight together: their
        admissions then go to the store in one round trip.
        """
        return self.take_nowait() if self._nowait else await self._take_due()

    async def _take_due(self) -> tuple[Task, Permit] | None:
        if self._unresolved:
            await self._resolve()
        board = self._board
        while (key := board.pop(self._clock.now())) is not None:
            got = await self._try(key)
            if got is not None:
                return got
        return None

    async def _resolve(self) -> None:
        """Ask an awaiting manager for the scopes of the tasks set aside, and queue them by those."""
        unresolved = self._unresolved
        while unresolved:
            task, front = unresolved.popleft()
            self.queued -= 1
            try:
                scopes = tuple(await self._throttler.scopes(_request_of(task)))
            except ScopeError as exc:
                self._on_drop(task, "failed", str(exc))
                continue
            self._file(task, scopes, task.host, front)  # push() checked the host and kept it

    async def _try(self, key: str) -> tuple[Task, Permit] | None:
        while True:
            got = self._try_nowait(key)
            if not isinstance(got, _Pending):
                return got
            task = got.task
            try:
                result: Permit | NotReady | Exception = await self._throttler.try_acquire(
                    got.request, scopes=task.scopes)
            except (ScopeError, ScopeGivenUp) as exc:
                result = exc
            except BaseException:
                self._schedule(key, self._clock.now())  # the queue stays on the board, for the next take
                raise
            queue = self._queues.get(key)
            if not queue or queue[0] is not task:  # changed during the await: look again
                if isinstance(result, Permit):
                    await result.release()
                continue
            answer = self._answer(key, queue, task, result)
            if not isinstance(answer, _Next):
                return answer

    def _try_nowait(self, key: str) -> tuple[Task, Permit] | _Pending | None:
        """Try the head of ``key``'s queue, then the next while heads leave without a fetch."""
        queue = self._queues.get(key)
        nowait = self._nowait
        while queue:
            task = queue[0]
            if task.kind == "page" and self._robots is not None and not self._robots_ready(task, queue):
                continue
            request = _request_of(task)
            if not nowait:
                return _Pending(task, request)
            try:
                result: Permit | NotReady | Exception | None = self._throttler.try_acquire_nowait(
                    request, scopes=task.scopes)
            except (ScopeError, ScopeGivenUp) as exc:
                result = exc
            if result is None:
                return _Pending(task, request)
            answer = self._answer(key, queue, task, result)
            if not isinstance(answer, _Next):
                return answer
        if queue is not None and not queue:
            del self._queues[key]
            self._key_scopes.pop(key, None)  # a host done with: nothing kept for it
        return None

    def _answer(self, key: str, queue: deque[Task], task: Task,
                result: Permit | NotReady | Exception) -> tuple[Task, Permit] | _Next | None:
        """Act on the throttler's answer for ``task``, the head of ``queue``.

        Returns:
            The task and its permit; None when the queue must wait; :data:`_NEXT`
            when the task left without a fetch and the next one may be tried.
        """
        if isinstance(result, ScopeGivenUp):
            self._drop_queue(key, "gave_up", f"{result.scope} was given up: {result.reason}")
            return None
        if isinstance(result, Exception):
            queue.popleft()
            self.queued -= 1
            self._count(task, -1)
            self._on_drop(task, "failed", str(result))
            return _NEXT
        if isinstance(result, Permit):
            self._key_scopes[key] = result.scopes
            queue.popleft()
            self.queued -= 1
            self._count(task, -1)
            if queue:
                self._schedule(key, self._clock.now())
            return task, result
        if result.ready_at is None:
            # Parked until a release of a full scope (no scope: the global
            # cap). Other processes free a shared store's slots, and no
            # release of ours would say so: look again shortly as well.
            full = [name for name, ready in result.waiting_on if ready is None]
            now = self._clock.now()
            poll = now + SHARED_POLL if self._shared else None
            if result.poll_at is not None:  # the scope's limits may change then (a hung slot freed)
                poll = result.poll_at if poll is None else min(poll, result.poll_at)
            self._board.park(key, full, (now,), poll_at=poll)
            if poll is not None:
                # A take() may sleep meanwhile, with no time at all if this queue was all it had
                # (it was off the board during the store's round trip): it must look again then.
                self._alarm.wake_by(poll)
        else:
            self._schedule(key, result.ready_at)
            wait = result.ready_at - self._clock.now()
            if self._on_wait is not None and wait >= LONG_WAIT:
                # Told per host (a queue keyed by a manager's scopes may hold several).
                for host in dict.fromkeys(host_scope(waiting.target) for waiting in queue):
                    self._on_wait(host, wait)
        return None

    def _drop_queue(self, key: str, why: Dropped, detail: str) -> None:
        queue = self._queues.pop(key, deque())
        self._key_scopes.pop(key, None)
        self._board.discard(key)
        waiting = self._take_waiting(key)
        for task in queue:
            self._count(task, -1)  # (those waiting for robots.txt were uncounted as they went aside)
        for task in [*queue, *waiting]:
            self.queued -= 1
            if task.kind == "page":
                self._on_drop(task, why, detail)
            elif self._robots is not None:
                self._robots.failed(origin_of(task.target), self._clock.now())

    # -- timing ------------------------------------------------------------------

    def _schedule(self, key: str, when: float) -> None:
        # Ranked by the time it became due: the queue that waited longest goes first.
        self._board.due(key, when, (when,))
        self._alarm.wake_by(when)  # a sleeping take() is up by then

    def _poke(self) -> None:
        self._alarm.ring()
