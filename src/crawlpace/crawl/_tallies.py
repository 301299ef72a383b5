"""The crawl's per-host tallies, bounded: a broad crawl over millions of hosts keeps a fixed number of rows.

The summary counts, per host, the URLs done, the errors, the requests and the
outcomes. A crawl over a million hosts would keep a million such rows for a
table nobody reads past its first screen, so :func:`tally_of` keeps at most
``limit`` hosts, the most recently counted ones, and folds the counts of a host
it drops into one shared row (:attr:`Tallies.others`). Totals stay exact: a
host's counts move, they are never lost. A dropped host that comes back starts
a new row; what it had before stays in the shared one. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .._bounded import DEFAULT_LIMIT

__all__ = ["TALLY_LIMIT", "ScopeTally", "Tallies", "tally_of"]

#: Hosts whose tallies are kept apart at most; the others share one row.
TALLY_LIMIT = DEFAULT_LIMIT


@dataclass(slots=True)
class ScopeTally:
    """What the crawl did on one host (or, folded, on several)."""

    done: int = 0
    errors: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    #: Why the host's last URL that did not end ``ok`` ended so (robots.txt, the breaker, ...).
    note: str = ""

    def add(self, other: ScopeTally) -> None:
        """Add ``other``'s counts to this tally."""
        self.done += other.done
        self.errors += other.errors
        self.requests += other.requests
        self.outcomes.update(other.outcomes)


@dataclass(slots=True)
class Tallies:
    """The hosts whose rows were folded together.

    Attributes:
        hosts: how many rows were folded (a host dropped twice counts twice).
        others: their counts, summed.
    """

    hosts: int = 0
    others: ScopeTally = field(default_factory=ScopeTally)


def tally_of(scopes: dict[str, ScopeTally], folded: Tallies, scope: str,
             limit: int | None = None) -> ScopeTally:
    """The tally of ``scope``, made the most recent one; the least recent beyond ``limit`` is folded.

    Args:
        scopes: host -> tally, least recently counted first.
        folded: where dropped hosts' counts go.
        scope: the host counted now.
        limit: hosts kept apart at most (:data:`TALLY_LIMIT` by default).
    """
    if limit is None:
        limit = TALLY_LIMIT
    tally = scopes.pop(scope, None)
    if tally is None:
        tally = ScopeTally()
        while scopes and len(scopes) >= limit:
            oldest = next(iter(scopes))
            folded.others.add(scopes.pop(oldest))
            folded.hosts += 1
    scopes[scope] = tally
    return tally
