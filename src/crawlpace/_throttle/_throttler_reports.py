"""What the throttler tells others: its observers, the give-up hook, and the settings that had no effect.

Part of :class:`~crawlpace.Throttler` (the throttler sets the attributes
declared here), as the waiting room (:mod:`crawlpace._throttle._waiting`) is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .._settings._config import Settings
from .._settings._ineffective import ScopeUsage, crawl_delay_notes
from ..stores.base import Lease, LocalStore, Outcome, Store
from ._observer import ThrottleObserver
from ._release import Releaser

__all__ = ["GiveUpHook", "ThrottlerReports"]

# Log as the throttler: users filter on that name, and this is part of it.
# the throttler's notes at close (test_ineffective)
logger = logging.getLogger("crawlpace._throttle._throttler")

#: Called with the scope and the reason when the circuit breaker gives a scope up.
GiveUpHook = Callable[[str, str], None]


class ThrottlerReports:
    """The reporting part of :class:`~crawlpace.Throttler`."""

    settings: Settings
    _store: Store
    _local: LocalStore | None
    _releaser: Releaser
    _observers: tuple[ThrottleObserver, ...]
    _on_give_up: GiveUpHook | None
    _usage: ScopeUsage | None

    def observe(self, observer: ThrottleObserver) -> None:
        """Tell ``observer`` of every admission, release and give-up from now on.

        Used by :mod:`crawlpace.observe` (metrics, dashboard, run report).
        """
        self._observers = (*self._observers, observer)
        self._releaser.observe = self._note_released

    async def _report_unused(self) -> None:
        """Log the settings the crawl showed to have had no effect (see
        :mod:`crawlpace._settings._ineffective`)."""
        notes = self._usage.notes() if self._usage is not None else []
        if self._local is not None and self.settings.robotstxt_obey:
            delays = {}
            for name in await self._store.scopes():
                snap = await self._store.snapshot(name)
                if snap is not None and snap.crawl_delay:
                    delays[name] = snap.crawl_delay
            notes += crawl_delay_notes(self.settings, delays)
        for note in notes:
            logger.warning("setting had no effect: %s", note)

    @staticmethod
    def _scope_names(lease: Lease) -> tuple[str, ...]:
        demands = lease.demands
        return (demands[0][0],) if len(demands) == 1 else tuple(name for name, _ in demands)

    def _note_admitted(self, lease: Lease, waited: float) -> None:
        scopes = self._scope_names(lease)
        for observer in self._observers:
            observer.admitted(scopes, waited)

    def _note_released(self, lease: Lease, outcome: Outcome) -> None:
        scopes = self._scope_names(lease)
        for observer in self._observers:
            observer.released(scopes, outcome)

    def _gave_up(self, scopes: tuple[str, ...]) -> None:
        """Tell the observers and the hook that the circuit breaker gave ``scopes`` up."""
        for observer in self._observers:
            for name in scopes:
                observer.gave_up(name, "the circuit breaker gave it up after repeated failures")
        hook = self._on_give_up
        if hook is None:
            return
        for name in scopes:
            try:
                hook(name, "the circuit breaker gave it up after repeated failures")
            except Exception:
                logger.exception("the on_give_up hook failed for scope %r", name)
