"""Server side: a staged brake that rations a costly daily quota among clients.

Wrap an ASGI application in :class:`Guard`; past set shares of the quota it
answers a growing fraction of costly requests with 429 and ``Retry-After``.
:class:`StagedBrake` is the clock-free core, usable from any framework.
"""

from __future__ import annotations

from ._brake import DEFAULT_STAGES, Decision, Stage, StagedBrake
from ._middleware import Guard

__all__ = ["DEFAULT_STAGES", "Decision", "Guard", "Stage", "StagedBrake"]
