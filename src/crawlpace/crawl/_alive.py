"""Hosts that are alive: a URL of a site that keeps answering is not given up after a few bad draws.

A flaky site answers most requests well but some with a 500 or not at all,
whatever the pace. With ``retries`` resends, a page whose every attempt draws
such a failure is lost although the site is up: at a 30 % failure share and 3
resends, about one page in 120. The rule: once a URL has used its retries, a
further transient failure or backoff answer is sent again as long as its host
gave a good answer (one that is neither a backoff answer nor a transient
failure) within the last :data:`ALIVE_SECONDS`, up to :data:`ALIVE_FACTOR`
times the attempts the retries allow. A page that fails while the rest of its
site answers is then lost only after a long run of failures (0.3 to the power
16 at the defaults), and a host that stopped answering well is given up after
its ordinary retries, as before. Pure: every time is passed in.
"""

from __future__ import annotations

from .._bounded import remember

__all__ = ["ALIVE_FACTOR", "ALIVE_SECONDS", "LiveHosts"]

#: A host that answered well this many seconds ago or less counts as alive.
ALIVE_SECONDS = 30.0
#: A URL of a live host may take this many times the attempts its retries allow.
ALIVE_FACTOR = 4


class LiveHosts:
    """When each host last answered well (the most recent hosts, bounded)."""

    __slots__ = ("_good",)

    def __init__(self) -> None:
        self._good: dict[str, float] = {}

    def note(self, host: str, now: float) -> None:
        """Record a good answer from ``host`` at ``now``."""
        remember(self._good, host, now)

    def alive(self, host: str, now: float) -> bool:
        """Whether ``host`` answered well within the last :data:`ALIVE_SECONDS`."""
        last = self._good.get(host)
        return last is not None and now - last <= ALIVE_SECONDS

    def may_retry(self, host: str, now: float, *, retries: int, used: int) -> bool:
        """Whether a URL of ``host`` that used ``used`` resends may be sent once more.

        Args:
            host: the URL's host.
            now: the time of its latest failure.
            retries: the resends every URL may take (0 disables resends, this rule too).
            used: the resends it has taken.
        """
        if used < retries:
            return True
        return retries > 0 and used + 1 < ALIVE_FACTOR * (retries + 1) and self.alive(host, now)
