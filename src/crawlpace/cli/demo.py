"""``crawlpace demo``: a scripted crawl of a few scopes on the fake clock.

Until the site simulator lands, the demo runs entirely in-process: simulated
requests with seeded random latencies go through a real :class:`Throttler`
driven by :class:`~crawlpace.testing.MockClock`, and the demo prints when each
scope's requests were sent and what spacing and concurrency resulted. It
shows the seed's timeline, scopes with several slots, and nested scopes where
a parent domain caps its subdomains together.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from .._config import Settings
from .._scopes import ScopesSpec, host_scope
from .._throttler import Throttler
from ..testing import MockClock

__all__ = ["DemoResult", "run_demo"]

DEMO_SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 32,
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "THROTTLING_SCOPES": {
        # Seed 001's worked example: two slots, 0.3 s apart, 1 s per slot.
        "toscrape.com": {"concurrency": 2, "delay": 0.3, "delay_per_slot": 1.0},
        # Two subdomains with 3 slots each and no scope delay...
        "books.shop.example": {"concurrency": 3, "delay": 0.0, "delay_per_slot": 1.0},
        "quotes.shop.example": {"concurrency": 3, "delay": 0.0, "delay_per_slot": 1.0},
        # ...under a parent scope that caps them together (see ParentDomainManager).
        "shop.example": {"concurrency": 4, "delay": 0.0, "delay_per_slot": 0.0},
        # example.org keeps the defaults of seed 001: one slot, 1 s apart.
    },
}


class ParentDomainManager:
    """Give every request its host's scope and its parent domain's scope."""

    async def get_scopes(self, request: Any) -> ScopesSpec:
        host = host_scope(str(request))
        labels = host.split(".")
        if len(labels) > 2:
            return {host, ".".join(labels[-2:])}
        return host


@dataclass
class ScopeReport:
    """What the demo observed for one scope."""

    scope: str
    sends: list[float] = field(default_factory=list)
    peak_inflight: int = 0

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.sends, self.sends[1:], strict=False)]

    def as_dict(self) -> dict[str, Any]:
        gaps = self.gaps()
        return {
            "scope": self.scope,
            "sends": len(self.sends),
            "first": round(self.sends[0], 3) if self.sends else None,
            "last": round(self.sends[-1], 3) if self.sends else None,
            "min_gap": round(min(gaps), 3) if gaps else None,
            "peak_inflight": self.peak_inflight,
            "send_times": [round(t, 3) for t in self.sends],
        }


@dataclass
class DemoResult:
    """Everything the demo measured, per scope, in virtual seconds."""

    scopes: dict[str, ScopeReport]
    duration: float
    requests: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "virtual_seconds": round(self.duration, 3),
            "scopes": {name: rep.as_dict() for name, rep in sorted(self.scopes.items())},
        }


async def _crawl(urls: list[str], seed: int) -> DemoResult:
    clock = MockClock(autojump=True)
    rng = random.Random(seed)
    settings = Settings.from_scrapy(DEMO_SETTINGS)
    reports: dict[str, ScopeReport] = {}
    inflight: dict[str, int] = {}
    latencies = {url: rng.uniform(0.1, 0.8) for url in urls}

    async with Throttler(settings, clock=clock, rng=rng, manager=ParentDomainManager()) as throttler:

        async def fetch(url: str) -> None:
            async with throttler.slot(url) as permit:
                now = clock.now()
                for scope in permit.scopes:
                    report = reports.setdefault(scope, ScopeReport(scope))
                    report.sends.append(now)
                    inflight[scope] = inflight.get(scope, 0) + 1
                    report.peak_inflight = max(report.peak_inflight, inflight[scope])
                await clock.sleep(latencies[url])  # the simulated response time
                permit.feedback(status=200)
                for scope in permit.scopes:
                    inflight[scope] -= 1

        await asyncio.gather(*(fetch(url) for url in urls))
    return DemoResult(reports, clock.now(), len(urls))


def demo_urls(per_site: int) -> list[str]:
    """The demo's request list: ``per_site`` pages on each of four hosts."""
    sites = ["toscrape.com", "books.shop.example", "quotes.shop.example", "example.org"]
    return [f"https://{site}/page/{i}" for i in range(per_site) for site in sites]


def run_demo(*, quick: bool = False, seed: int = 7) -> DemoResult:
    """Run the scripted crawl and return what it measured."""
    return asyncio.run(_crawl(demo_urls(4 if quick else 8), seed))


def render(result: DemoResult) -> str:
    """Format the demo's report for a terminal."""
    lines = [
        f"crawlpace demo: {result.requests} requests, {result.duration:.2f} virtual seconds "
        "(fake clock, no network)",
        "",
        f"{'scope':<22}{'sends':>6}{'min gap':>9}{'peak':>6}  send times (s)",
    ]
    for name, rep in sorted(result.scopes.items()):
        gaps = rep.gaps()
        min_gap = f"{min(gaps):.2f}s" if gaps else "-"
        times = " ".join(f"{t:.2f}" for t in rep.sends)
        lines.append(f"{name:<22}{len(rep.sends):>6}{min_gap:>9}{rep.peak_inflight:>6}  {times}")
    lines += [
        "",
        "toscrape.com follows seed 001's timeline: 2 slots, 0.3 s apart, 1 s per slot",
        "  (sends at 0.0, 0.3, 1.0, 1.3, ...).",
        "books. and quotes.shop.example may use 3 slots each, but their parent scope",
        "  shop.example caps the two together at 4 in flight.",
        "example.org has the defaults: 1 slot, 1 s between sends.",
    ]
    return "\n".join(lines)
