"""What the throttler tells an observer (metrics, the dashboard, run reports).

The throttler calls these hooks synchronously, on the event loop, right where
the event happens; an observer must do no I/O and return quickly. Nothing is
called when no observer is attached, so the hot path pays one check.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..stores.base import Outcome

__all__ = ["ThrottleObserver"]


@runtime_checkable
class ThrottleObserver(Protocol):
    """Receives the throttler's events; attach one with :meth:`Throttler.observe`."""

    def admitted(self, scopes: tuple[str, ...], waited: float) -> None:
        """A request got a permit for ``scopes`` after ``waited`` seconds in the queue."""

    def released(self, scopes: tuple[str, ...], outcome: Outcome) -> None:
        """A permit came back with ``outcome`` (no status and no error: no feedback)."""

    def gave_up(self, scope: str, reason: str) -> None:
        """The circuit breaker gave ``scope`` up."""
