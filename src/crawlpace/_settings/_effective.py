"""The limits crawlpace will enforce, written out once at start.

Scrapy's "Overridden settings" line shows what the user wrote; this block
shows what each configured scope and every other scope will actually get
(the per-slot delay and the global cap included), so a gap between the two
is visible before the first request.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ._config import ScopeConfig, Settings

__all__ = ["effective_limits", "scope_limits", "store_label"]


def store_label(store: object) -> str:
    """A store named for a log line: its URL without credentials or options, or its class."""
    if not isinstance(store, str):
        return type(store).__name__
    parts = urlsplit(store)
    where = parts.hostname or parts.path or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{where}{port}"


def scope_limits(cfg: ScopeConfig, settings: Settings) -> str:
    """One line of what ``cfg`` enforces: slots, delays, the rate they allow, rampup, quota."""
    slots = min(cfg.concurrency, settings.concurrent_requests)
    bounds = []
    if cfg.delay > 0:
        bounds.append(1.0 / cfg.delay)
    if cfg.delay_per_slot > 0:
        bounds.append(slots / cfg.delay_per_slot)
    rate = f"at most {min(bounds):.3g} requests/s" if bounds else "no rate limit"
    capped = f" (CONCURRENT_REQUESTS caps {cfg.concurrency})" if cfg.concurrency > slots else ""
    parts = [f"concurrency {slots}{capped}", f"delay {cfg.delay:g}s",
             f"per-slot delay {cfg.delay_per_slot:g}s", rate]
    if cfg.rampup:
        parts.append(f"rampup on (up to {min(cfg.rampup_max_concurrency, settings.concurrent_requests)} "
                     f"slots, {cfg.rampup_min_delay:g}s apart)")
    elif settings.autothrottle.enabled:
        parts.append(f"AutoThrottle on (target concurrency {settings.autothrottle.target_concurrency:g}, "
                     f"delay {settings.autothrottle.start_delay:g}s..{settings.autothrottle.max_delay:g}s)")
    if cfg.quota is not None:
        parts.append(f"quota {cfg.quota:g} per {cfg.window:g}s")
    if not cfg.breaker.enabled:
        parts.append("breaker off")
    return ", ".join(parts)


def effective_limits(settings: Settings, store: str = "memory://") -> str:
    """The start-up block: the store, the global cap, the defaults and each configured scope."""
    lines = [f"crawlpace limits in force (store {store}, {settings.concurrent_requests} requests in flight "
             f"at most over all scopes, robots.txt {'obeyed' if settings.robotstxt_obey else 'ignored'}):"]
    # A "*" scope entry is what every scope not named more precisely gets: the defaults never apply then,
    # so they are not shown as if some scope ran under them.
    catch_all = settings.scopes.get("*")
    other = scope_limits(catch_all if catch_all is not None else settings.scope_defaults, settings)
    label = 'every other scope ("*")' if catch_all is not None else "every other scope"
    lines.append(f"  {label}: {other}")
    for name in sorted(settings.scopes):
        if name != "*":
            lines.append(f"  {name}: {scope_limits(settings.scopes[name], settings)}")
    return "\n".join(lines)
