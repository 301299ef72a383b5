"""How many URLs a worker of the shared frontier claims, and how fast a host gives them out.

Both follow from the throttling settings every worker of a fleet shares:
the spacing keeps one worker from taking a site's URLs faster than its
limits let them be sent, the per-host cap keeps a worker's room from filling
with the URLs of slow sites (see :mod:`crawlpace.frontier._claim_loop`).
"""

from __future__ import annotations

from .._settings._config import ScopeConfig, Settings

__all__ = ["claim_per_scope", "claim_spacing"]


def _configs(settings: Settings) -> list[ScopeConfig]:
    """Every scope configuration a host may get: the defaults and each named scope's."""
    return [settings.scope_defaults, *settings.scopes.values()]


def claim_spacing(settings: Settings) -> float:
    """Seconds a host waits in the frontier after giving a URL: the fastest pace of any scope, at most 1 s.

    Claims then hand a site's URLs out about as fast as its limits let them
    be sent, so no worker piles up URLs of one site while the others idle.
    The frontier has one spacing for every host, so it is the shortest of
    the defaults' and each configured scope's: a host given 4 slots and no
    delay of its own, under defaults of 1 slot and 1 s, was once handed out a
    URL a second by the frontier whatever its own limits allowed (and kept at
    2 in flight with 2 s answers).
    """
    gaps = []
    for cfg in _configs(settings):
        if cfg.rampup:
            gaps.append(cfg.rampup_min_delay / max(cfg.rampup_max_concurrency, 1))
        else:
            gaps.append(cfg.delay / max(cfg.concurrency, 1))
    return min(max(min(gaps), 0.0), 1.0)


def claim_per_scope(settings: Settings) -> int:
    """URLs of one host a worker holds at most: the most slots any host may get, plus two.

    Enough to fill every slot the host's limits allow, with one more waiting
    for each of the next sends; more would only keep them from other workers.
    """
    slots = max(cfg.rampup_max_concurrency if cfg.rampup else cfg.concurrency for cfg in _configs(settings))
    return max(min(slots, settings.concurrent_requests), 1) + 2
