"""Random spread applied to delays (``RANDOMIZE_DOWNLOAD_DELAY``)."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Jitter"]


@dataclass(frozen=True, slots=True)
class Jitter:
    """A delay multiplier drawn uniformly from ``[1 + low, 1 + high]``.

    ``Jitter(-0.5, 0.5)`` spreads a 1 s delay over 0.5 s to 1.5 s; ``Jitter(0, 0)``
    leaves delays untouched. Build one from the seed's setting forms with
    :func:`crawlpace._settings._config.parse_jitter`.
    """

    low: float = 0.0
    high: float = 0.0

    @property
    def enabled(self) -> bool:
        """True when the draw can differ from 1."""
        return self.low != 0.0 or self.high != 0.0

    def factor(self, rng: random.Random) -> float:
        """Draw one multiplier (never below 0)."""
        if not self.enabled:
            return 1.0
        return max(0.0, 1.0 + rng.uniform(self.low, self.high))

    def describe(self) -> str:
        """Render the spread the way users write it (``+/-50%`` or ``-10%..+30%``)."""
        if not self.enabled:
            return "off"
        if self.low == -self.high:
            return f"+/-{self.high * 100:g}%"
        return f"{self.low * 100:+g}%..{self.high * 100:+g}%"


NO_JITTER = Jitter(0.0, 0.0)
#: ``RANDOMIZE_DOWNLOAD_DELAY = True``: each delay varies by up to +/-50 %.
HALF_JITTER = Jitter(-0.5, 0.5)
