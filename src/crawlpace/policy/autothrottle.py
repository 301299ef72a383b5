"""Latency-driven delay of one scope: the AutoThrottle rules of seed 000.

1. A scope starts at ``start_delay`` (never below the scope's own delay).
2. Each response proposes a target delay of ``latency / target_concurrency``:
   if the server needs ``latency`` seconds per answer, one send every
   ``latency / N`` seconds keeps about ``N`` requests in its hands.
3. The next delay is the mean of the previous delay and the target.
4. A response whose status is not 200 may raise the delay but never lower it
   (error pages often come back fast, and must not speed the crawl up).
5. The delay stays within ``[min_delay, max_delay]``.

Seed 000 states the rules; Scrapy's own code additionally never lets the new
delay fall below the target. We follow the seed's five rules as written.
"""

from __future__ import annotations

__all__ = ["AutoThrottle"]


class AutoThrottle:
    """The AutoThrottle delay of one scope.

    Args:
        start_delay: ``AUTOTHROTTLE_START_DELAY``.
        min_delay: the scope's configured delay (``DOWNLOAD_DELAY``).
        max_delay: ``AUTOTHROTTLE_MAX_DELAY``.
        target_concurrency: ``AUTOTHROTTLE_TARGET_CONCURRENCY``.
    """

    __slots__ = ("delay", "max_delay", "min_delay", "target_concurrency")

    def __init__(self, *, start_delay: float, min_delay: float, max_delay: float,
                 target_concurrency: float) -> None:
        self.min_delay = min_delay
        self.max_delay = max(max_delay, min_delay)
        self.target_concurrency = target_concurrency
        self.delay = min(self.max_delay, max(start_delay, min_delay))

    def observe(self, latency: float, status: int | None) -> float | None:
        """Adjust the delay for one response.

        Args:
            latency: seconds from connection to response headers.
            status: the response's HTTP status.

        Returns:
            The new delay when it changed, else ``None``.
        """
        if not latency >= 0.0:  # NaN or negative: nothing to learn from
            return None
        target = latency / self.target_concurrency
        proposed = (self.delay + target) / 2.0
        proposed = min(self.max_delay, max(self.min_delay, proposed))
        if status != 200 and proposed < self.delay:
            return None
        if proposed == self.delay:
            return None
        self.delay = proposed
        return proposed

    def __repr__(self) -> str:
        return f"<AutoThrottle delay={self.delay:g}s>"
