"""The live dashboard: a page and its JSON state, served by :class:`HttpServer`.

The page (``assets/``, shipped in the package: no CDN) polls ``api/state``
every second. The state comes from a :class:`Sampler`, over this process's
throttler (``crawlpace crawl --dashboard``) or over a store a fleet shares
(``crawlpace dashboard``), plus, for a fleet, its workers and frontier.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any

from ._metrics import metrics_text
from ._sampler import Sampler, limit_rate
from ._server import Handler, Request, Response

__all__ = ["ASSETS", "FleetInfo", "dashboard_routes", "dashboard_state"]

#: The page's files, served at ``/`` and next to it.
ASSETS = {"/": ("dashboard.html", "text/html; charset=utf-8"),
          "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
          "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8")}
#: Points of each scope's history sent to the page.
POINTS = 120

#: Returns a fleet's workers (name -> seconds since last heard) and frontier figures.
FleetInfo = Callable[[], Awaitable[tuple[Mapping[str, float], Mapping[str, Any] | None]]]


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dashboard_state(sampler: Sampler, *, mode: str = "process", source: str = "",
                    workers: Mapping[str, float] | None = None,
                    frontier: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON the page draws: one entry per sampled scope, busiest first, and totals."""
    scopes = []
    totals = {"scopes": len(sampler.latest), "sends": 0, "pushbacks": 0, "errors": 0, "rate": 0.0}
    recorder = sampler.recorder
    if recorder is not None:
        totals["scopes"] = max(totals["scopes"], len(list(recorder.tracked())) + recorder.folded_names)
    for name, snap in sorted(sampler.latest.items(), key=lambda item: (-item[1].sends, item[0])):
        points = list(sampler.history.get(name, ()))[-POINTS:]
        last = points[-1] if points else None
        counts = recorder.scope(name) if recorder is not None else None
        pushbacks = counts.pushbacks if counts is not None else None
        rate = last.rate if last is not None else 0.0
        totals["sends"] += snap.sends
        totals["errors"] += snap.errors
        totals["pushbacks"] += pushbacks or 0
        totals["rate"] += rate
        scopes.append({
            "scope": name, "sends": snap.sends, "errors": snap.errors, "pushbacks": pushbacks,
            "rate": rate, "limit": _finite(limit_rate(snap)), "delay": snap.delay,
            "delay_per_slot": snap.delay_per_slot, "concurrency": snap.concurrency,
            "inflight": snap.inflight, "queued": getattr(snap, "queued", 0), "backoff": snap.backoff,
            "breaker": snap.breaker, "quota_remaining": _finite(snap.quota_remaining),
            "rampup": snap.rampup.phase if snap.rampup is not None else None,
            "points": [[p.t, p.rate, _finite(p.limit)] for p in points],
        })
    return {"mode": mode, "source": source, "now": sampler.now(), "started": sampler.started,
            "samples": sampler.samples, "scopes": scopes, "totals": totals,
            "workers": dict(workers) if workers is not None else None,
            "frontier": dict(frontier) if frontier is not None else None}


def dashboard_routes(sampler: Sampler, *, mode: str = "process", source: str = "",
                     fleet: FleetInfo | None = None, registry: Any = None) -> dict[str, Handler]:
    """The dashboard's routes: the page, its assets, ``/api/state``, and ``/metrics`` with a registry."""
    files = resources.files(__package__).joinpath("assets")
    routes: dict[str, Handler] = {}
    for path, (name, content_type) in ASSETS.items():
        body = files.joinpath(name).read_bytes()
        routes[path] = _static(body, content_type)

    async def state(_request: Request) -> Response:
        workers, frontier = await fleet() if fleet is not None else (None, None)
        data = dashboard_state(sampler, mode=mode, source=source, workers=workers, frontier=frontier)
        return Response(json.dumps(data).encode(), "application/json")

    routes["/api/state"] = state
    if registry is not None:
        async def metrics(request: Request) -> Response:
            body, content_type = metrics_text(registry, request.headers.get("accept", ""))
            return Response(body, content_type)
        routes["/metrics"] = metrics
    return routes


def _static(body: bytes, content_type: str) -> Handler:
    async def serve(_request: Request) -> Response:
        return Response(body, content_type)
    return serve
