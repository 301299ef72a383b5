"""Server side: a staged brake that rations a costly daily quota among clients.

Wrap an ASGI application in :class:`Guard` (a WSGI one in :class:`GuardWSGI`); past set shares of the quota it
answers a growing fraction of costly requests with 429 and ``Retry-After``.
:class:`StagedBrake` is the clock-free core, usable from any framework;
:class:`SharedBrake` keeps its counts in Redis for many server processes.
Allow-listed crawlers are confirmed by :class:`BotVerifier`, and client
addresses read through trusted proxies by :class:`ClientAddress`.
"""

from __future__ import annotations

from ._address import ClientAddress
from ._brake import DEFAULT_STAGES, Decision, Stage, StagedBrake, check_stages
from ._metrics import GuardMetrics
from ._middleware import DEFAULT_ALLOW, Guard
from ._robots_txt import RobotsTxt
from ._shared import SharedBrake
from ._verify import BOT_DOMAINS, BotVerifier, Resolver, SystemResolver, load_ranges
from ._wsgi import GuardWSGI

__all__ = [
    "BOT_DOMAINS",
    "DEFAULT_ALLOW",
    "DEFAULT_STAGES",
    "BotVerifier",
    "ClientAddress",
    "Decision",
    "Guard",
    "GuardMetrics",
    "GuardWSGI",
    "Resolver",
    "RobotsTxt",
    "SharedBrake",
    "Stage",
    "StagedBrake",
    "SystemResolver",
    "check_stages",
    "load_ranges",
]
