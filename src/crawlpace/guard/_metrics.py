"""The guard's Prometheus metrics (the ``metrics`` extra: prometheus-client).

Labels are kept few and bounded: the costly group, the stage, the outcome and
a coarse client class (:func:`client_class`), never the client's own key, so
a bot inventing user agents cannot blow up the series. Per-key counts are in
the JSON status instead (:meth:`crawlpace.guard.Guard.status`).

Serve them as usual, e.g. ``prometheus_client.make_asgi_app()`` mounted at
``/metrics``, or ``prometheus_client.make_wsgi_app()``.
"""

from __future__ import annotations

import re
import weakref
from typing import Any, ClassVar

from ._brake import Decision

__all__ = ["GuardMetrics", "client_class"]

_BOT = re.compile(r"bot|crawl|spider|slurp|fetch|scrap|python|curl|wget|go-http|java|httpx|aiohttp|okhttp|"
                  r"libwww|headless", re.IGNORECASE)
_NAMED = ("googlebot", "bingbot", "applebot", "yandexbot", "baiduspider", "duckduckbot", "gptbot",
          "claudebot", "ccbot", "ahrefsbot", "semrushbot", "petalbot", "bytespider", "mj12bot")


def client_class(user_agent: str) -> str:
    """A coarse, bounded class of a user agent for metric labels.

    A well-known crawler's name (``googlebot``, ``bingbot``, ...), ``bot``
    for any other automated client, ``browser`` for a ``Mozilla/`` agent,
    ``none`` without one and ``other`` for the rest.
    """
    agent = user_agent.lower()
    if not agent:
        return "none"
    for name in _NAMED:
        if name in agent:
            return name
    if _BOT.search(agent):
        return "bot"
    return "browser" if agent.startswith("mozilla/") else "other"


class GuardMetrics:
    """The guard's counters and gauges on one registry (made once per registry).

    Metrics:
        ``crawlpace_guard_requests_total{group,stage,outcome,client}``: costly
            requests put to the brake, ``outcome`` ``allowed`` or ``braked``.
        ``crawlpace_guard_crawler_requests_total{group,crawler}``: requests of
            confirmed allow-listed crawlers (on top of the quota).
        ``crawlpace_guard_used{group}``, ``crawlpace_guard_quota{group}``,
            ``crawlpace_guard_stage{group}``: the window's count, the quota and the stage.
        ``crawlpace_guard_store_down``: 1 while the shared store cannot be reached.
    """

    _made: ClassVar[weakref.WeakKeyDictionary[Any, GuardMetrics]] = weakref.WeakKeyDictionary()

    def __init__(self, registry: Any) -> None:
        try:
            from prometheus_client import Counter, Gauge
        except ImportError as exc:
            raise ImportError("metrics=True needs prometheus-client: "
                              "pip install 'crawlpace[metrics]'") from exc
        self.requests = Counter("crawlpace_guard_requests", "Costly requests put to the guard's brake",
                                ["group", "stage", "outcome", "client"], registry=registry)
        self.crawlers = Counter("crawlpace_guard_crawler_requests",
                                "Requests of confirmed allow-listed crawlers (not counted against the quota)",
                                ["group", "crawler"], registry=registry)
        self.used = Gauge("crawlpace_guard_used", "Quota used in the current window", ["group"],
                          registry=registry)
        self.quota = Gauge("crawlpace_guard_quota", "The quota per window", ["group"], registry=registry)
        self.stage = Gauge("crawlpace_guard_stage", "The brake's stage in the current window", ["group"],
                           registry=registry)
        self.down = Gauge("crawlpace_guard_store_down", "1 while the shared store cannot be reached",
                          registry=registry)

    @classmethod
    def for_registry(cls, registry: Any) -> GuardMetrics:
        """The metrics on ``registry`` (``True``: prometheus-client's default one), made on first use."""
        if registry is True:
            from prometheus_client import REGISTRY

            registry = REGISTRY
        made = cls._made.get(registry)
        if made is None:
            made = cls._made[registry] = cls(registry)
        return made

    def decision(self, group: str, decision: Decision, client: str, quota: float) -> None:
        """Count one decision of the brake."""
        outcome = "allowed" if decision.allowed else "braked"
        self.requests.labels(group, str(decision.stage), outcome, client).inc()
        self.used.labels(group).set(decision.used)
        self.quota.labels(group).set(quota)
        self.stage.labels(group).set(decision.stage)

    def crawler(self, group: str, name: str) -> None:
        """Count one request of a confirmed crawler."""
        self.crawlers.labels(group, name).inc()

    def store_down(self, down: bool) -> None:
        """Whether the shared store is away."""
        self.down.set(1.0 if down else 0.0)
