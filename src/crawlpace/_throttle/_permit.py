"""Permits: the right to send one request, and the channel for its feedback."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

from .._exceptions import PermitError
from .._responses._feedback import status_of
from ..stores.base import NO_OUTCOME, Lease, Outcome
from ._release import RawFeedback, Releaser

__all__ = ["NotReady", "Permit", "RawFeedback"]


@dataclass(frozen=True, slots=True)
class NotReady:
    """What :meth:`Throttler.try_acquire` returns when it cannot admit now.

    Attributes:
        ready_at: the throttler clock's reading at which every scope could
            admit the request, or ``None`` when that depends on a release
            (slots full, the global cap reached, or earlier waiters queued).
        waiting_on: the scopes that said no, each with its own ready time.
        poll_at: when a full scope's limits may change with no release (``Blocked.poll_at``).
    """

    ready_at: float | None
    waiting_on: tuple[tuple[str, float | None], ...]
    poll_at: float | None = None

    def __bool__(self) -> bool:
        return False


class Permit:
    """Admission of one request to all of its scopes.

    Send the request, report what happened with :meth:`feedback`, then
    :meth:`release` (or leave an ``async with`` block, which releases). A
    permit that is never given feedback is released with no outcome: it frees
    its slots and teaches the scopes nothing.
    """

    __slots__ = ("_lease", "_outcome", "_raw", "_released", "_releaser", "request")

    def __init__(self, releaser: Releaser, lease: Lease, request: object) -> None:
        self._releaser = releaser
        self._lease = lease
        self._raw: RawFeedback | None = None
        self._outcome: Outcome | None = None
        self._released = False
        self.request = request

    @property
    def scopes(self) -> tuple[str, ...]:
        """The scopes this permit holds a slot in."""
        return tuple(name for name, _ in self._lease.demands)

    @property
    def granted_at(self) -> float:
        """The clock reading at admission (the send time)."""
        return self._lease.granted_at

    @property
    def lease_id(self) -> str:
        """The shared store's name for this admission ("" for a store that keeps none): a fleet's
        last look notes the request's write under it (``RedisStore.held_for``)."""
        return str(getattr(self._lease, "lease_id", ""))

    @property
    def released(self) -> bool:
        """True once the slots went back to the throttler."""
        return self._released

    @property
    def outcome(self) -> Outcome | None:
        """The outcome applied at release, once released with feedback."""
        return self._outcome

    def feedback(self, response: object = None, *, status: int | None = None,
                 exception: BaseException | None = None, latency: float | None = None,
                 consumed_quota: Mapping[str, float] | None = None, blocked: bool = False,
                 stalled: bool = False, lag: float = 0.0) -> None:
        """Record what happened to the request; it is applied at release.

        Args:
            response: a response object with ``status_code`` or ``status``,
                and ``headers`` (read for ``Retry-After`` and rate-limit fields).
            status: the HTTP status, when no response object is at hand.
            exception: the exception the request failed with.
            latency: seconds from connection to response headers; by default
                the time since admission.
            consumed_quota: the quota the request actually used, per scope;
                the difference from its expected use is charged or refunded.
            blocked: the response is a soft block (see :class:`~crawlpace.BlockRules`):
                every scope backs off as for a 429, whatever the status, and
                its latency does not steer AutoThrottle.
            stalled: the latency is mostly this process's own lateness (its event
                loop ran late while the answer waited): it is kept in the outcome
                but steers no scope (rampup, AutoThrottle, the mean latency).
            lag: seconds from the admission to the moment the request began to
                go out, when ``latency`` was measured from then (a fleet
                worker's wait for the shared store's reply, a busy event loop):
                the request reached the server that much later than the send
                time its scopes recorded. Rampup reads the arrivals' spread
                from it; negative or not finite: 0.

        Raises:
            PermitError: if the permit was already released.
        """
        if self._released:
            raise PermitError("feedback given after the permit was released; call feedback() "
                              "before release() or before leaving the 'async with' block")
        if status is None and response is not None:
            status = status_of(response)
        if latency is None:
            latency = self._releaser.clock.now() - self._lease.granted_at
        lag = lag if math.isfinite(lag) and lag > 0.0 else 0.0
        self._raw = RawFeedback(response, status, exception, latency, consumed_quota, blocked, stalled, lag)

    async def release(self, *, heard: Callable[[Permit], None] | None = None) -> None:
        """Give the slots back and apply the feedback; later calls do nothing.

        Args:
            heard: called with this permit as soon as its :attr:`outcome` is known, before the
                store is told. A shared store's release takes a round trip or more (a loaded
                fleet's: tens to hundreds of milliseconds), and a hold the answer announced
                (``Retry-After``) runs from the answer: the caller's other requests of the
                scope that are about to be written can hear of it from here (the crawl's last look).
        """
        if self._released:
            return
        self._released = True
        known = None if heard is None else self._hearing(heard)
        outcome = await self._releaser.release(self._lease, self.request, self._raw, known)
        self._outcome = None if outcome is NO_OUTCOME else outcome

    def _hearing(self, heard: Callable[[Permit], None]) -> Callable[[Outcome], None]:
        """What the releaser calls with the outcome before the store's release: keep it, tell ``heard``."""
        def known(outcome: Outcome) -> None:
            self._outcome = None if outcome is NO_OUTCOME else outcome
            heard(self)
        return known

    def release_nowait(self) -> bool:
        """:meth:`release` as a plain call, when it needs no await (a local store, no
        manager hooks to await); False when it does: call :meth:`release` then."""
        if self._released:
            return True
        self._released = True
        outcome = self._releaser.release_nowait(self._lease, self.request, self._raw)
        if outcome is None:
            self._released = False
            return False
        self._outcome = None if outcome is NO_OUTCOME else outcome
        return True

    async def __aenter__(self) -> Permit:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if exc is not None and self._raw is None and not isinstance(exc, asyncio.CancelledError):
            self.feedback(exception=exc)
        if self._released:
            return
        self._released = True
        releaser = self._releaser
        outcome = releaser.release_nowait(self._lease, self.request, self._raw)
        if outcome is None:  # the manager's hooks must be awaited
            outcome = await releaser.release(self._lease, self.request, self._raw)
        self._outcome = None if outcome is NO_OUTCOME else outcome

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Permit {'+'.join(self.scopes)} {state}>"
