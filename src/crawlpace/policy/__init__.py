"""The pure throttling policy: state machines driven by ``now``, with no I/O."""

from .admission import Limits, ScopeState

__all__ = ["Limits", "ScopeState"]
