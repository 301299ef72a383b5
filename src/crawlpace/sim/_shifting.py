"""The ``shifting`` profile: another profile whose capacity changes during the run.

A shifting site wraps a site of a *base* profile and follows a schedule of
``[seconds, factor]`` steps counted from the site's first request: from each
step on, the base's main limit is its configured value times the factor. Rate
limits change their rate (``ratelimit``, ``retryafter``), windows and counters
their limit (``headers``, ``window``, ``reqrate``, rounded) and loaded sites how
many requests they hold (``overload``, ``slow``, ``conncap``, rounded, at least 1). The capacity follows the
factor exactly for rate limits, up to rounding for ``headers`` and ``slow``;
for ``overload`` it moves less, since fewer requests in flight are each
served faster. A crawler that adapts should follow each change down and back up.

The change takes effect on the first request at or after the step's time;
the statistics record the capacity from then on, and report the average
over the active period.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from ._asgi import Receive, Scope, Send
from ._load import OverloadSite, SlowSite
from ._params import Param, Schedule
from ._rates import HeadersSite, RateLimitSite, RetryAfterSite
from ._site import Site
from ._windows import RequestRateSite, SlotCapSite, WindowSite

__all__ = ["SHIFTABLE", "ShiftingSite"]

_log = logging.getLogger(__name__)


class _Scalable(Protocol):
    def rescale(self, factor: float, now: float) -> None: ...


#: The profiles a shifting site can be based on.
SHIFTABLE: Mapping[str, type[Site]] = {
    cls.profile: cls for cls in (RateLimitSite, RetryAfterSite, HeadersSite, OverloadSite, SlowSite,
                                 WindowSite, RequestRateSite, SlotCapSite)
}

_OPTIONS = ("pages", "links", "tolerance", "private", "clock", "rng")
_BASE = Param("base", "choice", "the profile whose capacity shifts", choices=tuple(SHIFTABLE))
_CHANGES = Param("changes", "schedule", "[seconds after the first request, capacity factor] steps")


class ShiftingSite(Site):
    """A site of another profile whose capacity follows a schedule.

    Args:
        base: the profile name, one of :data:`SHIFTABLE`.
        changes: ``(seconds, factor)`` steps, seconds counted from the first
            request and strictly increasing, factors applied to the base
            profile's configured capacity.
        **params: the base profile's parameters and the common ones.

    Attributes:
        inner: the base site, which answers every request.
    """

    profile = "shifting"
    PARAMS = (_BASE, _CHANGES)

    def __init__(self, *, base: str, changes: Schedule | list[list[float]], **params: Any) -> None:
        self.base = _BASE.word(base)
        self.changes = _CHANGES.schedule(changes)
        self.inner = SHIFTABLE[self.base](**params)
        self._next = 0
        self.factor = 1.0
        options = {key: params[key] for key in _OPTIONS if key in params}
        super().__init__(**options)
        # One set of books: the base site's statistics, embargo and content are the site's own.
        self.stats = self.inner.stats
        self.embargo = self.inner.embargo
        self.content = self.inner.content

    @classmethod
    def extra_params(cls, entry: Mapping[str, object]) -> tuple[Param, ...]:
        """The base profile's parameters, once ``base`` names a shiftable profile."""
        base = entry.get("base")
        return SHIFTABLE[base].PARAMS if isinstance(base, str) and base in SHIFTABLE else ()

    @classmethod
    def conflict(cls, params: Mapping[str, object]) -> str | None:
        """Check the base profile's own combination rules."""
        base = params.get("base")
        return SHIFTABLE[base].conflict(params) if isinstance(base, str) and base in SHIFTABLE else None

    @property
    def capacity(self) -> float | None:
        """The base site's current capacity."""
        return self.inner.capacity

    @property
    def crawl_delay(self) -> float | None:
        """The base site's crawl delay."""
        return self.inner.crawl_delay

    def _shift(self, now: float) -> None:
        first = self.stats.first
        if first is None:
            return
        inner: _Scalable = self.inner  # type: ignore[assignment]  # every SHIFTABLE class has rescale
        while self._next < len(self.changes) and now - first >= self.changes[self._next][0]:
            seconds, self.factor = self.changes[self._next]
            self._next += 1
            inner.rescale(self.factor, now)
            self.stats.set_capacity(now, self.capacity)
            _log.info("%s site: capacity x%g from %gs on, now %s", self.base, self.factor, seconds,
                      self.capacity)

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Apply the steps that are due, then let the base site answer."""
        self._shift(now)
        await self.inner.handle(scope, receive, send, now)
