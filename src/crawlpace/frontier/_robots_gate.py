"""robots.txt before a site's pages: the crawl scheduler's pages wait until their site's rules are known.

Before a site's first page the scheduler has its robots.txt fetched, as a task
of its own that goes through the throttler like any other; pages of that site
wait beside the queue until the rules are known, and then those the rules
forbid are set aside as disallowed instead of being fetched. The rules
themselves are kept by :mod:`crawlpace.frontier._robots_cache`; this module is
the holding of pages, a part of :class:`~crawlpace.frontier._scheduler.Scheduler`.

A crawl may hand the fetch to someone else (:meth:`RobotsGating.share_robots`):
a worker of a fleet first looks for the copy another worker already fetched,
so that a site sees one robots.txt request per fleet rather than per worker.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from .._clock import Clock
from ._robots_cache import RobotsCache
from ._task import Dropped, Task, origin_of

__all__ = ["RobotsGating"]


class _SchedulerState(Protocol):
    """What the methods of :class:`RobotsGating` use of the scheduler."""

    _robots: RobotsCache | None
    _waiting_robots: dict[str, list[Task]]
    _clock: Clock
    _on_drop: Callable[[Task, Dropped, str], None]
    _robots_hook: Callable[[Task], bool] | None
    queued: int

    def push(self, task: Task, *, front: bool = False) -> None: ...
    def _poke(self) -> None: ...
    def _count(self, task: Task, step: int) -> None: ...


class RobotsGating:
    """The robots.txt part of the crawl scheduler: pages held per origin until its rules are known."""

    #: Given each robots.txt fetch before it is queued; True when it took the fetch over (and
    #: will queue it with :meth:`push` or settle the rules itself). None: always queue it.
    _robots_hook: Callable[[Task], bool] | None = None

    def share_robots(self, hook: Callable[[Task], bool] | None) -> None:
        """Offer every robots.txt fetch to ``hook`` first (see :attr:`_robots_hook`)."""
        self._robots_hook = hook

    def robots_known(self: _SchedulerState, origin: str) -> None:
        """Put back the pages that waited for ``origin``'s robots.txt, ahead of their queues."""
        for task in reversed(self._waiting_robots.pop(origin, [])):
            self.queued -= 1
            self.push(task, front=True)
        self._poke()

    def _robots_ready(self: _SchedulerState, task: Task, queue: deque[Task]) -> bool:
        """Whether ``task`` may be tried now; otherwise it has been moved aside and False returned."""
        robots = self._robots
        assert robots is not None
        origin = origin_of(task.target)
        state = robots.state(origin, self._clock.now())
        if state == "known":
            if robots.allowed(origin, task.target):
                return True
            queue.popleft()
            self.queued -= 1
            self._count(task, -1)
            final, detail = robots.refusal(origin)
            self._on_drop(task, "disallowed" if final else "exhausted", detail)
            return False
        queue.popleft()
        self._count(task, -1)  # (counted again when robots_known() pushes it back)
        self._waiting_robots.setdefault(origin, []).append(task)
        if state == "unknown":
            robots.start(origin, self._clock.now())
            fetch = Task(0, f"{origin}/robots.txt", kind="robots", key=task.key, host=task.host)
            hook = self._robots_hook
            if hook is None or not hook(fetch):
                queue.appendleft(fetch)
                self.queued += 1
        return False

    def _take_waiting(self: _SchedulerState, key: str) -> list[Task]:
        """Take the pages of queue ``key`` out of those waiting for a robots.txt."""
        waiting = [task for tasks in self._waiting_robots.values() for task in tasks if task.key == key]
        for origin, tasks in list(self._waiting_robots.items()):
            kept = [task for task in tasks if task.key != key]
            if kept:
                self._waiting_robots[origin] = kept
            else:
                del self._waiting_robots[origin]
        return waiting
