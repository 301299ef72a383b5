"""Watching a throttler: Prometheus metrics, the live dashboard, run reports, alerts.

The throttler tells a :class:`Recorder` of every admission and release
(:meth:`crawlpace.Throttler.observe`); a :class:`Sampler` reads the scopes'
state at intervals. :class:`ThrottlerCollector` exposes both to
``prometheus-client``; the dashboard and the run report draw them.
"""

from ._alerts import CommandAlert
from ._metrics import METRICS, CrawlFigures, ThrottlerCollector
from ._monitor import Monitor, MonitorOptions
from ._recorder import OTHER, Recorder, ScopeCounts
from ._sampler import Point, Sampler, limit_rate, limit_rule, store_reader, throttler_reader
from ._server import ServeError

__all__ = [
    "METRICS",
    "OTHER",
    "CommandAlert",
    "CrawlFigures",
    "Monitor",
    "MonitorOptions",
    "Point",
    "Recorder",
    "Sampler",
    "ScopeCounts",
    "ServeError",
    "ThrottlerCollector",
    "limit_rate",
    "limit_rule",
    "store_reader",
    "throttler_reader",
]
