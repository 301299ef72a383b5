"""Profiles that fail: now and then (``flaky``) or always (``dead``).

Neither has a rate limit. They test what a crawler does with errors: whether
it retries a 500 sensibly, gives up on a request that hangs, and stops
hammering a site that is down, which a circuit breaker should notice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Unpack

from ._asgi import Receive, ResetConnection, Scope, Send
from ._params import Param
from ._site import Site, SiteOptions

__all__ = ["DeadSite", "FlakySite"]

class FlakySite(Site):
    """A site that mostly works, but answers some requests with an error and lets others hang.

    For each request (robots.txt aside) one draw decides: with probability
    ``errors`` it gets ``status`` (500) at once, whatever the load; with probability ``hangs`` it waits
    ``hang`` seconds, longer than a crawler's timeout should be, before it is
    served; otherwise it is served after ``latency`` seconds.

    Args:
        errors: the share of requests answered ``status``.
        hangs: the share of requests that hang.
        hang: how long a hanging request waits, in seconds.
        latency: how long every other request takes, in seconds.
        status: the 5xx status of an error.
        sleep: how to wait; ``asyncio.sleep`` unless a test swaps it.
        **options: see :class:`Site`.

    Raises:
        ValueError: also when ``errors + hangs`` is above 1.
    """

    profile = "flaky"
    _ERRORS = Param("errors", "number", "share of requests answered 500", 0.1, low=0.0, high=1.0)
    _HANGS = Param("hangs", "number", "share of requests that hang", 0.05, low=0.0, high=1.0)
    _HANG = Param("hang", "number", "seconds a hanging request waits", 30.0, low=0.0, high=3600.0)
    _LATENCY = Param("latency", "number", "seconds every other request takes", 0.0, low=0.0, high=60.0)
    _STATUS = Param("status", "integer", "the 5xx status of an error", 500, low=500, high=599)
    PARAMS = (_ERRORS, _HANGS, _HANG, _LATENCY, _STATUS)

    def __init__(self, *, errors: float = 0.1, hangs: float = 0.05, hang: float = 30.0, latency: float = 0.0,
                 status: int = 500, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 **options: Unpack[SiteOptions]) -> None:
        self.errors = self._ERRORS.number(errors)
        self.hangs = self._HANGS.number(hangs)
        problem = self.conflict({"errors": self.errors, "hangs": self.hangs})
        if problem:
            raise ValueError(problem)
        self.hang = self._HANG.number(hang)
        self.latency = self._LATENCY.number(latency)
        self.status = self._STATUS.integer(status)
        self.sleep = sleep
        super().__init__(**options)

    @classmethod
    def conflict(cls, params: Mapping[str, object]) -> str | None:
        """The two shares may not add up to more than 1."""
        errors, hangs = params.get("errors", 0.1), params.get("hangs", 0.05)
        if isinstance(errors, float | int) and isinstance(hangs, float | int) and errors + hangs > 1:
            return (f"errors = {errors!r} and hangs = {hangs!r} add up to more than 1; "
                    f"lower one of them")
        return None

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Fail, hang or serve, as the draw decides."""
        draw = self.rng.random()
        if draw < self.errors:
            await self.refuse(send, self.status)
            return
        await self.sleep(self.hang if draw < self.errors + self.hangs else self.latency)
        await self.content(scope, receive, send)


class DeadSite(Site):
    """A site that is down: every request, robots.txt included, fails.

    A share ``resets`` of the requests has the connection reset with no
    answer at all (only under the simulator's own server; another ASGI server
    turns that into a 500); the others get ``status``.

    Args:
        status: the status to answer with, a 5xx.
        resets: the share of requests whose connection is reset.
        **options: see :class:`Site`.
    """

    profile = "dead"
    gates_robots = True
    _STATUS = Param("status", "integer", "the 5xx status of every answer", 503, low=500, high=599)
    _RESETS = Param("resets", "number", "share of requests whose connection is reset", 0.0, low=0.0, high=1.0)
    PARAMS = (_STATUS, _RESETS)

    def __init__(self, *, status: int = 503, resets: float = 0.0, **options: Unpack[SiteOptions]) -> None:
        self.status = self._STATUS.integer(status)
        self.resets = self._RESETS.number(resets)
        super().__init__(**options)

    @property
    def capacity(self) -> float:
        """Nothing can be served."""
        return 0.0

    async def handle(self, scope: Scope, receive: Receive, send: Send, now: float) -> None:
        """Reset the connection or answer with the error status."""
        if self.resets and self.rng.random() < self.resets:
            raise ResetConnection
        await self.refuse(send, self.status)
