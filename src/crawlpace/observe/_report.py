"""The run report: one self-contained HTML page about a finished crawl.

One row per site: what the crawler saw (sends, answers by kind, latency, the
limits it ended with) and, when the sites' own figures are known (the demo,
a crawl of the simulator), what the site saw, joined on the host. Below the
table, one plot per site of its send rate against the limit it learned or
was told, drawn as inline SVG (no script, no external file), then the
settings in force.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .._settings._config import Settings
from .._settings._effective import effective_limits
from ._dashboard import scope_state
from ._recorder import ScopeCounts
from ._sampler import Point, Sampler, limit_rate

__all__ = ["join_sites", "render_report", "write_report"]

# What a cell shows when the figure is unknown.
NONE = "-"

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:80em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{padding:.2em .45em;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
th{background:#f3f3f3}.site{display:inline-block;margin:0 1.5em 1.5em 0;vertical-align:top}
.site h3{font-size:1em;margin:.2em 0}pre{background:#f6f6f6;padding:1em;overflow-x:auto}
.rate{fill:none;stroke:#1f77b4;stroke-width:1.5}.limit{fill:none;stroke:#d62728;stroke-dasharray:4 2}
.axis{stroke:#999}.bad{color:#c0392b;font-weight:bold}
td .key{display:block;color:#777;font-size:.85em}
th{white-space:normal;vertical-align:bottom}td:nth-child(2){white-space:normal;max-width:8em}
tr.attention td:nth-child(2){color:#fff;background:#c0392b;font-weight:600}
"""


def join_sites(sites: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Key the simulator's per-site figures by host, the crawler's scope name.

    Args:
        sites: site name -> figures with a ``url`` (:meth:`crawlpace.sim.Farm.stats`).
    """
    out = {}
    for name, figures in sites.items():
        host = urlsplit(str(figures.get("url", ""))).hostname
        if host:
            out[host] = {"site": name, **figures}
    return out


def _num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NONE
    return f"{value:.{digits}f}"


def _plot(points: Sequence[Point], width: int = 360, height: int = 120) -> str:
    """Send rate (blue) against the limit (red, dashed) over the crawl, as an SVG element."""
    if len(points) < 2:
        return "<p>too short to plot</p>"
    t0, t1 = points[0].t, points[-1].t
    span = (t1 - t0) or 1.0
    top = max([p.rate for p in points] + [p.limit for p in points if p.limit is not None
                                          and math.isfinite(p.limit)] + [1e-9]) * 1.1

    def line(values: list[tuple[float, float | None]], cls: str) -> str:
        coords = [f"{(t - t0) / span * (width - 40) + 35:.1f},{height - 15 - (v / top) * (height - 25):.1f}"
                  for t, v in values if v is not None and math.isfinite(v)]
        return f'<polyline class="{cls}" points="{" ".join(coords)}"/>' if len(coords) > 1 else ""

    axes = (f'<line class="axis" x1="35" y1="{height - 15}" x2="{width - 5}" y2="{height - 15}"/>'
            f'<line class="axis" x1="35" y1="5" x2="35" y2="{height - 15}"/>'
            f'<text x="0" y="14" font-size="10">{top:.3g}/s</text>'
            f'<text x="{width - 40}" y="{height - 2}" font-size="10">{span:.0f}s</text>')
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="send rate against the limit">'
            f'{axes}{line([(p.t, p.limit) for p in points], "limit")}'
            f'{line([(p.t, p.rate) for p in points], "rate")}</svg>')


def busy_rate(points: Sequence[Point]) -> float | None:
    """Sends per second while the scope was sending: from its first send seen to its last.

    Sends already made at the first sample count, over the sampling interval
    before it; the time after the last send does not: a site crawled in the
    first ten seconds of a ten-minute run is not shown as slow.
    """
    moving = [index for index, point in enumerate(points)
              if point.sends > (points[index - 1].sends if index else 0)]
    if not moving:
        return None
    first, last = moving[0], moving[-1]
    if first:
        start, base = points[first - 1].t, points[first - 1].sends
    else:
        step = points[1].t - points[0].t if len(points) > 1 else 1.0
        start, base = points[0].t - step, 0
    seconds = points[last].t - start
    return (points[last].sends - base) / seconds if seconds > 0 else None


def render_report(sampler: Sampler, settings: Settings, *, title: str = "crawlpace run",
                  summary: Mapping[str, Any] | None = None,
                  sites: Mapping[str, Mapping[str, Any]] | None = None, store: str = "memory://",
                  site_names: Mapping[str, str] | None = None,
                  hosts: Mapping[str, Any] | None = None) -> str:
    """The report's HTML.

    Args:
        sampler: the run's samples (and, through it, its recorder).
        settings: the settings in force.
        title: the page's title.
        summary: the crawl's figures (``CrawlSummary.as_dict()``), shown as a list.
        sites: the sites' own figures keyed by host (:func:`join_sites`), when known.
        store: the store's URL, for the settings block.
        site_names: scope -> site name, where known (``--sites``); the sites'
            figures name their sites too.
        hosts: a crawl's record per host (``CrawlSummary.scopes``): each row
            then says what happened to the site (``forbidden by robots.txt``,
            ``given up``, ...) and how its URLs ended.
    """
    recorder = sampler.recorder
    names = list(recorder.names()) if recorder is not None else []
    names += [name for name in sorted(sampler.latest) if name not in names]
    joined = sites or {}
    named = {**(site_names or {}),
             **{host: str(site["site"]) for host, site in joined.items() if site.get("site")}}
    names += [host for host in sorted(joined) if host not in names]
    esc = html.escape
    # The site by its name where known, its host beneath; what happened to it in words (the
    # breaker's state and give-ups among it), so the table stays narrower than a screen.
    head = ["site", "state", "sends", "ok", "pushbacks", "errors", "latency", "busy sends/s",
            "peak sends/s", "limit/s", "delay", "slots", "URLs"]
    record = hosts or {}
    if joined:
        head += ["site saw", "site 429+503", "broken rules", "goodput/s", "capacity/s", "ratio"]
    rows = []
    plots = []
    for name in names:
        counts = recorder.scope(name) if recorder is not None else None
        counts = counts if counts is not None else ScopeCounts()
        snap = sampler.latest.get(name)
        points = list(sampler.history.get(name, ()))
        sends = snap.sends if snap is not None else counts.admitted
        latency = counts.latency_sum / counts.latency_count if counts.latency_count else None
        o = counts.outcomes
        errors = o["http_4xx"] + o["http_5xx"] + o["exception"]
        site_name = named.get(name) if named.get(name) != name else None
        shown = f"{site_name} ({name})" if site_name else name
        first = (f'{esc(site_name)}<span class="key">{esc(name)}</span>' if site_name else esc(name))
        host = record.get(name)
        state = scope_state(snap, counts, host) if snap is not None else NONE
        if state == "ok" and counts.given_up:
            state = "given up"  # given up, then its breaker's pause ended
        busy = busy_rate(points)
        # The busiest 5 s sent at least the busy average (a site crawled within one sample has no window).
        peak = max([p.rate for p in points] + ([busy] if busy is not None else []), default=None)
        ended = NONE
        if host is not None:
            ended = ", ".join(f"{count} {outcome}" for outcome, count in sorted(host.outcomes.items())) or "0"
        cells = [state, str(sends), str(o["ok"]), str(counts.pushbacks), str(errors),
                 NONE if latency is None else f"{latency * 1000:.0f} ms", _num(busy), _num(peak),
                 _num(limit_rate(snap)) if snap is not None else NONE,
                 f"{snap.delay:.3g}s" if snap is not None else NONE,
                 str(snap.concurrency) if snap is not None else NONE, ended]
        site = joined.get(name)
        if joined:
            if site is None:
                cells += [NONE] * 6
            else:
                ratio = site.get("goodput_ratio")
                cells += [str(site.get(key, "")) for key in ("requests", "throttled", "violations")]
                cells += [_num(site.get("goodput")), _num(site.get("capacity")),
                          NONE if ratio is None else f"{ratio:.0%}"]
        mark = ' class="attention"' if state not in ("ok", NONE) else ""
        rows.append(f"<tr{mark}><td>{first}</td>" + "".join(f"<td>{esc(cell)}</td>" for cell in cells)
                    + "</tr>")
        label = shown
        plots.append(f'<div class="site"><h3>{esc(label)}</h3>{_plot(points)}</div>')
    facts = ""
    if summary:
        facts = "<ul>" + "".join(f"<li>{esc(str(key))}: {esc(str(value))}</li>"
                                 for key, value in summary.items() if not isinstance(value, dict)) + "</ul>"
    given = recorder.give_ups if recorder is not None else []
    gave = ("<h2>Given up</h2><ul>" + "".join(f"<li class='bad'>{esc(scope)}: {esc(reason)}</li>"
                                            for scope, reason in given) + "</ul>") if given else ""
    table = ("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"
             + "".join(rows) + "</tbody></table>")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(sampler.now()))
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{esc(title)}</h1><p>Written {when}.</p>{facts}"
            f"<h2>Sites</h2>{table}{gave}<h2>Send rate against the limit</h2>"
            f"<p><span style='color:#1f77b4'>&#9473;</span> sends/s, "
            f"<span style='color:#d62728'>&#9476;</span> the limit: the lowest rule that binds "
            f"(a pace the server announced, the rate rampup learned, a Crawl-delay, or what delay and slots "
            f"allow)</p>{''.join(plots)}"
            f"<h2>Settings in force</h2><pre>{esc(effective_limits(settings, store))}</pre></body></html>\n")


def write_report(path: Path, sampler: Sampler, settings: Settings, **kwargs: Any) -> None:
    """Write :func:`render_report` to ``path`` (its folder is created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(sampler, settings, **kwargs), encoding="utf-8")
