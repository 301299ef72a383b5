"""A bound on the server's clock that a worker's estimate never falls behind (a Crawl-delay write's note).

A worker follows the server's clock from each reply's ``now``: the script ran at some moment
between the call's send and the reply's read, and the worker takes the midpoint. On a loaded
machine a reply is read tens or hundreds of milliseconds after the server ran it, and the midpoint
then puts the server's clock behind the truth by half that lag (traced in a fleet of 8: up to
69 ms behind at a write, p10 27 ms). A Crawl-delay write noted with such a time (``lua/stamp.lua``)
looks earlier than it was, and the next worker's write keeps the delay after that earlier time: the
site sees the two closer than its ``Crawl-delay``, by more than its tolerance.

What every reply does say for sure: the server ran the script no earlier than the call's send, so
its clock minus the worker's was at most ``now - sent``. The least of those over the replies is an
offset the truth never exceeds; it is as tight as the quickest round trip. Two clocks may drift
apart (NTP slews the server's wall clock by up to 500 ppm), so the bound loosens by
:data:`SLEW` per second since it was set; a reply that contradicts it (the server's ``now`` past
the bound at the read) replaces it (the server's clock was stepped).
"""

from __future__ import annotations

import math

__all__ = ["SLEW", "OffsetBound"]

#: How fast the server's clock may drift from the worker's, in seconds per second (NTP's largest slew).
SLEW = 5e-4


class OffsetBound:
    """The least offset (server clock minus this worker's) that is surely not below the truth."""

    __slots__ = ("_at", "_high")

    def __init__(self) -> None:
        self._high = math.inf  # the bound when set ...
        self._at = 0.0  # ... at this reading of the worker's clock

    def high(self, now: float) -> float:
        """The bound at ``now`` (``inf`` before any reply): loosened by the drift since it was set."""
        return self._high + SLEW * max(0.0, now - self._at)

    def heard(self, server_now: float, sent: float, read: float) -> None:
        """A reply: the script ran at ``server_now`` (server clock) between ``sent`` and ``read``."""
        candidate = server_now - sent
        bound = self.high(read)
        if candidate <= bound or server_now - read > bound:
            self._high, self._at = candidate, read
