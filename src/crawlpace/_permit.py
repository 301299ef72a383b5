"""Permits: the right to send one request, and the channel for its feedback."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._exceptions import PermitError
from .stores.base import NO_OUTCOME, Lease, Outcome

if TYPE_CHECKING:
    from ._throttler import Throttler

__all__ = ["NotReady", "Permit"]


@dataclass(frozen=True, slots=True)
class NotReady:
    """What :meth:`Throttler.try_acquire` returns when it cannot admit now.

    Attributes:
        ready_at: the throttler clock's reading at which every scope could
            admit the request, or ``None`` when that depends on a release
            (slots full, the global cap reached, or earlier waiters queued).
        waiting_on: the scopes that said no, each with its own ready time.
    """

    ready_at: float | None
    waiting_on: tuple[tuple[str, float | None], ...]

    def __bool__(self) -> bool:
        return False


def _status_of(response: Any) -> int | None:
    for attr in ("status_code", "status"):
        value = getattr(response, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


class Permit:
    """Admission of one request to all of its scopes.

    Send the request, report what happened with :meth:`feedback`, then
    :meth:`release` (or leave an ``async with`` block, which releases). A
    permit that is never given feedback is released with no outcome.
    """

    __slots__ = ("_lease", "_outcome", "_released", "_throttler", "request")

    def __init__(self, throttler: Throttler, lease: Lease, request: object) -> None:
        self._throttler = throttler
        self._lease = lease
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
    def released(self) -> bool:
        """True once the slots went back to the throttler."""
        return self._released

    @property
    def outcome(self) -> Outcome | None:
        """The feedback recorded so far, if any."""
        return self._outcome

    def feedback(self, response: object = None, *, status: int | None = None,
                 exception: BaseException | None = None, latency: float | None = None) -> None:
        """Record what happened to the request.

        Args:
            response: a response object with ``status_code`` or ``status``.
            status: the HTTP status, when no response object is at hand.
            exception: the exception the request failed with.
            latency: seconds from connection to response headers; by default
                the time since admission.

        Raises:
            PermitError: if the permit was already released.
        """
        if self._released:
            raise PermitError("feedback given after the permit was released; call feedback() "
                              "before release() or before leaving the 'async with' block")
        if status is None and response is not None:
            status = _status_of(response)
        if latency is None:
            latency = self._throttler.clock.now() - self._lease.granted_at
        self._outcome = Outcome(
            status=status,
            error=None if exception is None else type(exception).__name__,
            latency=latency,
        )

    async def release(self) -> None:
        """Give the slots back; later calls do nothing."""
        if self._released:
            return
        self._released = True
        # Without feedback there is no response to learn from: nothing but the slot returns.
        outcome = self._outcome or NO_OUTCOME
        throttler = self._throttler
        if throttler._local is not None:
            throttler._release_nowait(self._lease, outcome)
        else:
            await throttler._release(self._lease, outcome)

    async def __aenter__(self) -> Permit:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if exc is not None and self._outcome is None and not isinstance(exc, asyncio.CancelledError):
            self.feedback(exception=exc)
        if self._released:
            return
        throttler = self._throttler
        if throttler._local is not None:
            self._released = True
            throttler._release_nowait(self._lease, self._outcome or NO_OUTCOME)
        else:
            await self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Permit {'+'.join(self.scopes)} {state}>"
