"""The figures of a crawl: per host, and in all.

Kept by :class:`~crawlpace.crawl.CrawlJob` as it goes, shown by the live
view and the closing table (``crawl/_display.py``) and written by ``--json``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ._result_line import FINAL_OUTCOMES
from ._tallies import ScopeTally, Tallies

__all__ = ["CrawlSummary", "ScopeTally"]


@dataclass(slots=True)
class CrawlSummary:
    """The figures of a finished (or stopped) crawl."""

    urls: int = 0
    answered: int = 0
    unfinished: int = 0
    requests: int = 0
    #: Requests sent again for a URL already tried (its second send and later).
    retries: int = 0
    #: Second sends of hung pages (see ``crawl/_hedge.py``), each also one of ``retries``.
    hedges: int = 0
    #: Bytes of the bodies of the answers written (after decompression).
    bytes: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    outcomes: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    scopes: dict[str, ScopeTally] = field(default_factory=dict)
    resumed_from: int = 0
    #: URLs the shared frontier lost (its Redis came back empty): queued or claimed elsewhere, gone.
    lost: int = 0
    #: The hosts whose rows were folded into one, beyond ``TALLY_LIMIT`` (``crawl/_tallies.py``).
    folded: Tallies = field(default_factory=Tallies)

    @property
    def settled_not_final(self) -> int:
        """URLs written with an outcome that is not final (``exhausted``, ``gave_up``): no answer."""
        return sum(count for outcome, count in self.outcomes.items() if outcome not in FINAL_OUTCOMES)

    @property
    def complete(self) -> bool:
        """Whether every URL reached a final outcome (``ok``, ``disallowed``, ``failed``).

        Not so when the crawl was interrupted, when a URL is left queued or in
        flight, when one ended ``exhausted`` or ``gave_up`` (in a single process
        a ``--resume`` asks again; on a shared frontier the URL is settled and
        only enqueueing it again retries it), or when the shared frontier lost
        URLs. A worker of a fleet and a single process mean the same by it.
        """
        return (not self.interrupted and self.unfinished == 0 and self.lost == 0
                and self.settled_not_final == 0)

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict."""
        return {
            "urls": self.urls, "answered": self.answered, "unfinished": self.unfinished,
            "requests": self.requests, "retries": self.retries, "hedges": self.hedges,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3), "interrupted": self.interrupted,
            "complete": self.complete, "resumed_from": self.resumed_from, "lost": self.lost,
            "outcomes": dict(sorted(self.outcomes.items())),
            "statuses": {str(code): count for code, count in sorted(self.statuses.items())},
            "scopes": {name: {"done": tally.done, "errors": tally.errors, "requests": tally.requests,
                              "outcomes": dict(sorted(tally.outcomes.items()))}
                       for name, tally in sorted(self.scopes.items())},
            **({"other_hosts": {"hosts": self.folded.hosts, "done": self.folded.others.done,
                                "errors": self.folded.others.errors, "requests": self.folded.others.requests,
                                "outcomes": dict(sorted(self.folded.others.outcomes.items()))}}
               if self.folded.hosts else {}),
        }
