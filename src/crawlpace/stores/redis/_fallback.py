"""The shared store's optional fallback: a local memory store for while Redis is unreachable.

With ``fallback=memory`` in the store URL, a worker that cannot reach Redis
keeps crawling instead of failing closed, on limits it can keep without
knowing what the other workers do: every scope gets one slot, and its delays
(between sends, and per slot) multiplied by ``fallback_workers`` (default 4),
the number of workers assumed to share the site; a quota is divided by it
too, and rampup is off (the slowed configured delay is the pace). So N
workers that all lose Redis together send no faster than the configured rate.

Leases granted by the fallback are released to it. When Redis answers again
the worker goes back to it, and to the state Redis kept: what the fallback
learned (a backoff, say) stays local and is forgotten.
"""

from __future__ import annotations

import dataclasses
import random

from ..._clock import Clock
from ..._settings._config import ScopeConfig, Settings
from ..memory import MemoryStore

__all__ = ["DEFAULT_WORKERS", "fallback_settings", "open_fallback", "parse_options"]

#: Workers assumed to share a site while each throttles on its own.
DEFAULT_WORKERS = 4


def fallback_settings(settings: Settings, workers: int) -> Settings:
    """``settings`` made safe for one of ``workers`` workers throttling on its own."""

    def slow(cfg: ScopeConfig) -> ScopeConfig:
        return dataclasses.replace(cfg, concurrency=1, delay=cfg.delay * workers,
                                   delay_per_slot=cfg.delay_per_slot * workers, rampup=False,
                                   quota=None if cfg.quota is None else cfg.quota / workers)

    return dataclasses.replace(settings, scope_defaults=slow(settings.scope_defaults),
                               scopes={name: slow(cfg) for name, cfg in settings.scopes.items()})


def parse_options(url: str, fallback: str | None, workers: str | None) -> tuple[bool, int, list[str]]:
    """The ``fallback`` and ``fallback_workers`` options: on or off, the workers, and what is wrong."""
    problems = []
    value = (fallback or "").strip().lower()
    if value not in ("", "off", "none", "memory"):
        problems.append(f"store {url!r}: fallback={fallback!r} is not known; give fallback=memory "
                        "(or leave it out to hold every request while Redis is unreachable)")
    count = DEFAULT_WORKERS
    if workers is not None:
        try:
            count = int(workers)
        except ValueError:
            count = 0
        if count < 1:
            problems.append(f"store {url!r}: fallback_workers={workers!r} is not a whole number >= 1; "
                            "give e.g. fallback_workers=4")
            count = DEFAULT_WORKERS
    return value == "memory", count, problems


def open_fallback(settings: Settings, workers: int, clock: Clock, rng: random.Random) -> MemoryStore:
    """The memory store a worker admits by while Redis is unreachable."""
    return MemoryStore(fallback_settings(settings, workers), clock, rng)
