"""A site simulator: many small websites with hidden limits, on loopback only.

One asyncio process serves a *farm* of simulated sites, each on its own
address (127.0.0.2, 127.0.0.3, ...) and each following a *profile*: a rate
limit, a budget announced in RateLimit headers, a robots.txt crawl delay, an
embargo after ``Retry-After``, overload, slowness, a rationed quota, errors
and hangs, plain downtime, or a capacity that shifts during the run. The sites measure their visitors from
the server side (requests, goodput against capacity, peaks, refusals and
broken rules), so a crawler's politeness and efficiency can be judged without
trusting the crawler's own account::

    async with Farm.builtin("mixed", control=True) as farm:
        ...  # crawl the URLs in farm.sites
        print(farm.stats())

Nothing here ever listens outside 127.0.0.0/8.
"""

from __future__ import annotations

from ._challenge import CHALLENGE_PAGE, ChallengeSite
from ._farm import Farm, SiteInfo, builtin_farms
from ._faults import DeadSite, FlakySite
from ._load import OverloadSite, SlowSite
from ._pages import PRIVATE_PREFIX, PageApp
from ._plot import PlotUnavailable, write_plot
from ._profiles import PROFILES
from ._random import RANDOM_KINDS, draw_farm, farm_toml
from ._rates import HEADER_STYLES, CrawlDelaySite, HeadersSite, QuotaSite, RateLimitSite, RetryAfterSite
from ._server import SimServer, serve
from ._shifting import SHIFTABLE, ShiftingSite
from ._site import Site
from ._spec import FarmSpec, SiteSpec, parse_farm
from ._stats import SiteStats
from ._windows import QueueSite, RequestRateSite, SlotCapSite, WindowSite

__all__ = [
    "CHALLENGE_PAGE",
    "HEADER_STYLES",
    "PRIVATE_PREFIX",
    "PROFILES",
    "RANDOM_KINDS",
    "SHIFTABLE",
    "ChallengeSite",
    "CrawlDelaySite",
    "DeadSite",
    "Farm",
    "FarmSpec",
    "FlakySite",
    "HeadersSite",
    "OverloadSite",
    "PageApp",
    "PlotUnavailable",
    "QueueSite",
    "QuotaSite",
    "RateLimitSite",
    "RequestRateSite",
    "RetryAfterSite",
    "ShiftingSite",
    "SimServer",
    "Site",
    "SiteInfo",
    "SiteSpec",
    "SiteStats",
    "SlotCapSite",
    "SlowSite",
    "WindowSite",
    "builtin_farms",
    "draw_farm",
    "farm_toml",
    "parse_farm",
    "serve",
    "write_plot",
]
