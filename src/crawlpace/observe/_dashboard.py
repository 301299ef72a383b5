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
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ._metrics import CrawlFigures, metrics_text
from ._recorder import ScopeCounts
from ._sampler import Sampler, limit_rule
from ._server import Handler, Request, Response

__all__ = ["ASSETS", "STALE_AFTER", "FleetInfo", "HostNote", "dashboard_routes", "dashboard_state",
           "robots_forbid", "scope_state"]

#: The page's files, served at ``/`` and next to it.
ASSETS = {"/": ("dashboard.html", "text/html; charset=utf-8"),
          "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
          "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8")}
#: Points of each scope's history sent to the page.
POINTS = 120

#: Returns a fleet's workers (name -> seconds since last heard) and frontier figures.
FleetInfo = Callable[[], Awaitable[tuple[Mapping[str, float], Mapping[str, Any] | None]]]
#: Seconds after which a worker not heard from is marked stale on the page.
STALE_AFTER = 15.0


@dataclass(frozen=True, slots=True)
class HostNote:
    """What a fleet's view knows of a host without a crawl's record: why its URLs cannot end ``ok``."""

    note: str
    outcomes: Mapping[str, int] = field(default_factory=dict)


def robots_forbid(origin: str, status: int | None, why: str) -> str | None:
    """The note for a host whose stored robots.txt answer forbids the site (``None``: it does not).

    No answer, a 429 or a 5xx forbids the whole site while it stands (RFC 9309).
    """
    if status is not None and status != 429 and status < 500:
        return None
    got = f"status {status}" if status is not None else (why or "no answer")
    return (f"robots.txt of {origin} could not be fetched ({got}); RFC 9309 forbids crawling the site "
            "until it can")


def scope_state(snap: Any, counts: ScopeCounts | None, host: Any = None, queued: int = 0) -> str:
    """One word or two for what is happening to a scope, worst first, as the page shows it.

    ``given up`` and ``forbidden by robots.txt`` come from the crawl's own
    record of the host's URLs; the rest from the scope's snapshot: a server's
    hold, a backoff, a cut by rampup, a breaker that is open. A site is
    forbidden by its robots.txt when the file could not be fetched (RFC 9309
    then forbids the whole site), or when it disallowed every URL of the site
    the crawl asked for (none ended ``ok``, none is left); a few disallowed
    paths beside pages fetched are the site's rules obeyed, not a state.
    """
    note = str(getattr(host, "note", "") or "")
    outcomes = getattr(host, "outcomes", None) or {}
    if snap.breaker == "given_up":
        return "given up"
    unreachable = "robots.txt" in note and "could not be fetched" in note
    everything_disallowed = (outcomes.get("disallowed", 0) > 0 and outcomes.get("ok", 0) == 0
                             and queued == 0 and snap.inflight == 0)
    if unreachable or everything_disallowed:
        return "forbidden by robots.txt"
    if snap.breaker in ("open", "half_open"):
        return "paused by the breaker"
    if snap.hold_in:
        return "held (Retry-After)"
    if snap.backoff > 0:
        return "backing off"
    rampup = snap.rampup
    if (rampup is not None and str(getattr(rampup, "decision", "")).startswith("cut")
            and getattr(rampup, "pushbacks", 0) > 0):
        return "cut by rampup"  # a pushback in the last window brought the rate down
    return "ok"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dashboard_state(sampler: Sampler, *, mode: str = "process", source: str = "",
                    workers: Mapping[str, float] | None = None,
                    frontier: Mapping[str, Any] | None = None,
                    crawl: CrawlFigures | None = None,
                    names: Mapping[str, str] | None = None,
                    hosts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON the page draws: one entry per sampled scope, busiest first, and totals.

    ``hosts`` stands in for a crawl's record of its hosts where there is no
    crawl (a fleet's view: a robots.txt the fleet could not fetch).

    Each scope is shown by its key (``scope``) and, where ``names`` knows it
    (``--sites``), by its site's name (``site``). ``limit`` is the lowest rule
    that binds and ``limit_by`` names it (``server's pace``, ``rampup``,
    ``delay``, ``slots``, ``Crawl-delay``).

    ``errors`` counts failed answers (5xx but 503, 4xx but 429, exceptions)
    where this process's counts are known, and exceptions alone in a fleet
    view, whose store keeps no status counts; ``pushbacks`` is then ``None``:
    each worker's metrics have them.
    """
    scopes = []
    totals: dict[str, Any] = {"scopes": len(sampler.latest), "sends": 0, "pushbacks": 0, "errors": 0,
                              "rate": 0.0}
    recorder = sampler.recorder
    if recorder is not None:
        totals["scopes"] = max(totals["scopes"], len(list(recorder.tracked())) + recorder.folded_names)
    hosts = dict(crawl.hosts()) if crawl is not None else dict(hosts or {})
    waiting = dict(crawl.queued_by_scope()) if crawl is not None else {}
    for name, snap in sorted(sampler.latest.items(), key=lambda item: (-item[1].sends, item[0])):
        points = list(sampler.history.get(name, ()))[-POINTS:]
        last = points[-1] if points else None
        counts = recorder.scope(name) if recorder is not None else None
        pushbacks = counts.pushbacks if counts is not None else None
        if counts is not None:
            o = counts.outcomes
            errors = o["http_4xx"] + o["http_5xx"] + o["exception"]
        else:
            errors = snap.errors
        rate = last.rate if last is not None else 0.0
        host = hosts.get(name)
        totals["sends"] += snap.sends
        totals["errors"] += errors
        if pushbacks is None:
            totals["pushbacks"] = None
        elif totals["pushbacks"] is not None:
            totals["pushbacks"] += pushbacks
        totals["rate"] += rate
        urls = None
        limit, limit_by = limit_rule(snap)
        queued = waiting.get(name, getattr(snap, "queued", 0))
        if host is not None and not isinstance(host, HostNote):  # a fleet's view counts no URLs per host
            urls = {"done": host.done, "outcomes": dict(host.outcomes), "note": host.note}
        scopes.append({
            "scope": name, "site": (names or {}).get(name), "sends": snap.sends, "errors": errors,
            "pushbacks": pushbacks, "rate": rate, "limit": _finite(limit), "limit_by": limit_by,
            "pace": snap.pace, "delay": snap.delay,
            "delay_per_slot": snap.delay_per_slot, "concurrency": snap.concurrency,
            "inflight": snap.inflight, "queued": queued,
            "backoff": snap.backoff, "hold_in": _finite(snap.hold_in), "crawl_delay": snap.crawl_delay,
            "breaker": snap.breaker, "quota_remaining": _finite(snap.quota_remaining),
            "rampup": snap.rampup.phase if snap.rampup is not None else None,
            "state": scope_state(snap, counts, host, queued), "urls": urls,
            "points": [[p.t, p.rate, _finite(p.limit)] for p in points],
        })
    if mode == "fleet":
        totals["pushbacks"] = None
    return {"mode": mode, "source": source, "now": sampler.now(), "started": sampler.started,
            "samples": sampler.samples, "scopes": scopes, "totals": totals,
            "workers": dict(workers) if workers is not None else None, "stale_after": STALE_AFTER,
            "frontier": dict(frontier) if frontier is not None else None}


def dashboard_routes(sampler: Sampler, *, mode: str = "process", source: str = "",
                     fleet: FleetInfo | None = None, registry: Any = None,
                     crawl: CrawlFigures | None = None,
                     names: Mapping[str, str] | None = None,
                     hosts: Callable[[], Mapping[str, Any]] | None = None) -> dict[str, Handler]:
    """The dashboard's routes: the page, its assets, ``/api/state``, and ``/metrics`` with a registry."""
    files = resources.files(__package__).joinpath("assets")
    routes: dict[str, Handler] = {}
    for path, (name, content_type) in ASSETS.items():
        body = files.joinpath(name).read_bytes()
        routes[path] = _static(body, content_type)

    async def state(_request: Request) -> Response:
        workers, frontier = await fleet() if fleet is not None else (None, None)
        data = dashboard_state(sampler, mode=mode, source=source, workers=workers, frontier=frontier,
                               crawl=crawl, names=names, hosts=hosts() if hosts is not None else None)
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
