"""How many URLs a worker of the shared frontier claims, and how fast a host gives them out.

Both follow from the throttling settings every worker of a fleet shares:
the spacing keeps one worker from taking a site's URLs faster than its
limits let them be sent, the per-host cap keeps a worker's room from filling
with the URLs of slow sites (see :mod:`crawlpace.crawl._shared_job`).
"""

from __future__ import annotations

from .._config import Settings

__all__ = ["claim_per_scope", "claim_spacing"]


def claim_spacing(settings: Settings) -> float:
    """Seconds a host waits in the frontier after giving a URL: its fastest pace, at most 1 s.

    Claims then hand a site's URLs out about as fast as its limits let them
    be sent, so no worker piles up URLs of one site while the others idle.
    """
    cfg = settings.scope_defaults
    if cfg.rampup:
        gap = cfg.rampup_min_delay / max(cfg.rampup_max_concurrency, 1)
    else:
        gap = cfg.delay / max(cfg.concurrency, 1)
    return min(max(gap, 0.0), 1.0)


def claim_per_scope(settings: Settings) -> int:
    """URLs of one host a worker holds at most: the most slots a host may get, plus two.

    Enough to fill every slot the host's limits allow, with one more waiting
    for each of the next sends; more would only keep them from other workers.
    """
    cfg = settings.scope_defaults
    slots = cfg.rampup_max_concurrency if cfg.rampup else cfg.concurrency
    return max(slots, 1) + 2
