"""Settings that were written but had no effect, named so the user can fix them.

Two kinds of checks. Before the first request (:func:`static_notes`): a
per-scope concurrency above ``CONCURRENT_REQUESTS``, which caps it; a delay
shorter than the per-slot delay allows, which then governs instead; and the
combinations :meth:`Settings.inactive` knows. After the crawl
(:class:`ScopeUsage`): a ``THROTTLING_SCOPES`` key that matched no request,
with a did-you-mean to the hosts seen; a delay that a robots.txt Crawl-Delay
replaced; a scope manager that never ran because its key matched nothing.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Iterable, Mapping

from .._scoping._patterns import is_pattern, resolve_scope
from ..policy._gradual_slots import applies as gradual_applies
from ._config import ScopeConfig, Settings

__all__ = ["ScopeUsage", "crawl_delay_notes", "static_notes"]

# Scope names remembered for did-you-mean suggestions, at most.
SEEN_CAP = 10_000


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def _where(name: str | None) -> str:
    return "the scope defaults" if name is None else f'THROTTLING_SCOPES["{name}"]'


def _inert_delay(name: str | None, cfg: ScopeConfig) -> str | None:
    """A note when the per-slot delay, not the delay, sets the scope's pace."""
    if cfg.rampup or cfg.delay <= 0 or cfg.delay_per_slot <= 0:
        return None
    by_delay = 1.0 / cfg.delay
    by_slots = cfg.concurrency / cfg.delay_per_slot
    if by_slots >= by_delay * 0.999:
        return None
    fix = cfg.concurrency * cfg.delay
    # With one slot the per-slot delay always waits longer: the delay does nothing. With
    # more, the delay still spaces the first sends apart, but no longer sets the pace.
    effect = "has no effect" if cfg.concurrency == 1 else "does not set the pace"
    if name is None:
        return (f"DOWNLOAD_DELAY = {cfg.delay:g} {effect}: {cfg.concurrency} slot(s) per scope "
                f"(CONCURRENT_REQUESTS_PER_DOMAIN) that each wait DOWNLOAD_DELAY_PER_SLOT = "
                f"{cfg.delay_per_slot:g}s between sends allow at most {by_slots:.3g} requests/s, not the "
                f"{by_delay:.3g}/s the delay allows; set DOWNLOAD_DELAY_PER_SLOT = {fix:g} or lower")
    return (f'{_where(name)}: "delay": {cfg.delay:g} {effect}: {cfg.concurrency} slot(s) that each '
            f"wait delay_per_slot {cfg.delay_per_slot:g}s between sends allow at most {by_slots:.3g} "
            f'requests/s, not {by_delay:.3g}/s; add "delay_per_slot": {fix:g} (or lower) to it')


def _inert_gradual(name: str | None, cfg: ScopeConfig, autothrottle: bool) -> str | None:
    """A note when gradual slots are on where they cannot apply (a delay, one slot, rampup, AutoThrottle)."""
    if not cfg.gradual_slots or gradual_applies(True, cfg.concurrency, cfg.delay, rampup=cfg.rampup,
                                                autothrottle=autothrottle):
        return None
    why = ("rampup sets the pace" if cfg.rampup else "AutoThrottle sets the pace" if autothrottle
           else f"one slot ({cfg.concurrency})" if cfg.concurrency <= 1 else f"a delay ({cfg.delay:g}s)")
    what = "THROTTLING_GRADUAL_SLOTS" if name is None else f'{_where(name)}["gradual_slots"]'
    return (f"{what} has no effect: gradual slots apply to a scope with several slots and no delay, "
            f"without rampup or AutoThrottle, and this one has {why}")


def static_notes(settings: Settings) -> list[str]:
    """Everything that can be seen to have no effect before a request is sent."""
    notes = list(settings.inactive())
    cap = settings.concurrent_requests
    configs: list[tuple[str | None, ScopeConfig]] = [(None, settings.scope_defaults)]
    configs += sorted(settings.scopes.items())
    for name, cfg in configs:
        if cfg.concurrency > cap and (name is None or cfg.concurrency != settings.scope_defaults.concurrency):
            what = "CONCURRENT_REQUESTS_PER_DOMAIN" if name is None else f'{_where(name)}["concurrency"]'
            notes.append(f"{what} = {cfg.concurrency} is above CONCURRENT_REQUESTS = {cap}, which caps "
                         f"every scope at {cap}; raise CONCURRENT_REQUESTS to {cfg.concurrency} or more")
        inert = _inert_delay(name, cfg)
        if inert is not None and (name is None or (cfg.delay, cfg.delay_per_slot, cfg.concurrency) != (
                settings.scope_defaults.delay, settings.scope_defaults.delay_per_slot,
                settings.scope_defaults.concurrency)):
            notes.append(inert)
        gradual = _inert_gradual(name, cfg, settings.autothrottle.enabled)
        if gradual is not None and (name is None or gradual != _inert_gradual(
                None, settings.scope_defaults, settings.autothrottle.enabled)):
            notes.append(gradual)
    for name in settings.scopes:
        if not is_pattern(name) and not _is_ip(name) and (":" in name or "/" in name):
            host = name.split("://")[-1].split("/")[0].rsplit(":", 1)[0]
            notes.append(f'THROTTLING_SCOPES["{name}"]: scopes are host names, without scheme, port or '
                         f'path, so this key matches no request; write "{host}"')
    return notes


def crawl_delay_notes(settings: Settings, crawl_delays: Mapping[str, float | None]) -> list[str]:
    """Scopes whose robots.txt Crawl-Delay replaced the configured delay (given scope -> Crawl-Delay)."""
    replaced = sorted(name for name, delay in crawl_delays.items() if delay and not settings.is_explicit(name)
                      and delay > settings.scope_config(name).delay)
    if not replaced:
        return []
    shown = ", ".join(replaced[:5]) + (f" and {len(replaced) - 5} more" if len(replaced) > 5 else "")
    return [f"DOWNLOAD_DELAY = {settings.scope_defaults.delay:g} had no effect on {len(replaced)} scope(s) "
            f"({shown}): their robots.txt Crawl-Delay set a longer pace; list a scope in THROTTLING_SCOPES "
            "with its own delay to override it, or set THROTTLING_ROBOTSTXT_OBEY = False"]


class ScopeUsage:
    """Which ``THROTTLING_SCOPES`` keys matched a request: a throttler observer.

    Args:
        settings: the settings whose keys are checked.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.matched: set[str] = set()
        self.seen: dict[str, None] = {}
        self.requests = 0

    def admitted(self, scopes: tuple[str, ...], waited: float) -> None:
        """Note the scopes of one admitted request."""
        self.requests += 1
        seen = self.seen
        for name in scopes:
            if name in seen:
                continue
            if len(seen) < SEEN_CAP:
                seen[name] = None
            key = resolve_scope(self.settings.scopes, name)
            if key is not None:
                self.matched.add(key)

    def released(self, scopes: tuple[str, ...], outcome: object) -> None:
        """Nothing to note."""

    def gave_up(self, scope: str, reason: str) -> None:
        """Nothing to note."""

    def notes(self) -> list[str]:
        """A note per key that matched no request (only once a request was admitted)."""
        if not self.requests:
            return []
        out = []
        hosts = list(self.seen)
        for key in sorted(set(self.settings.scopes) - self.matched):
            out.append(_unmatched(key, hosts, self.settings.scopes[key]))
        return out


def _unmatched(key: str, hosts: Iterable[str], cfg: ScopeConfig) -> str:
    hosts = list(hosts)
    candidate = key if _is_ip(key) or not (":" in key or "/" in key) else \
        key.split("://")[-1].split("/")[0].rsplit(":", 1)[0]
    close = difflib.get_close_matches(candidate, hosts, n=3, cutoff=0.8)
    hint = f"; did you mean {' or '.join(repr(host) for host in close)}?" if close else ""
    if not close and hosts:
        hint = f"; scopes seen: {', '.join(repr(host) for host in hosts[:5])}" + \
            (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")
    manager = f" (its manager {cfg.manager} never ran)" if cfg.manager else ""
    return f'THROTTLING_SCOPES["{key}"] matched no request{manager}{hint}'
