"""Hosts that refuse connections: given up after a few refusals in a row, not after minutes of backoff.

A refused connection says that nothing listens on that host and port. The
scope's backoff would space further tries 2, 4, 8, 16, 32 s apart until the
circuit breaker gives up, a minute and a half later; the crawl instead gives
the host up after :data:`REFUSALS_TO_GIVE_UP` refusals in a row (any answer
from the host starts the count again). Its URLs end as ``gave_up``, which is
not final: ``--resume`` tries them again.
"""

from __future__ import annotations

import errno

__all__ = ["REFUSALS_TO_GIVE_UP", "RefusalTracker", "is_refused"]

#: Refused connections in a row after which a host is given up.
REFUSALS_TO_GIVE_UP = 3


def is_refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it wraps) is a refused TCP connection."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
            return True
        wrapped = getattr(exc, "os_error", None)  # aiohttp's connector errors keep it here
        if isinstance(wrapped, BaseException) and wrapped is not exc:
            exc = wrapped
        else:
            exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class RefusalTracker:
    """Counts refused connections per scope, in a row.

    Args:
        limit: refusals in a row that give a scope up.
    """

    def __init__(self, limit: int = REFUSALS_TO_GIVE_UP) -> None:
        self.limit = limit
        self._counts: dict[str, int] = {}

    def note(self, scope: str, error: BaseException | None) -> str | None:
        """Record one outcome of ``scope``; returns why to give it up, when it is time to."""
        if not is_refused(error):
            self._counts.pop(scope, None)
            return None
        count = self._counts.get(scope, 0) + 1
        self._counts[scope] = count
        if count < self.limit:
            return None
        return f"connection refused {count} times in a row (nothing listens there)"
