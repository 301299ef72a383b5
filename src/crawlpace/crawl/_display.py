"""What a crawl shows while it runs, and the table it ends with.

The live view (rich) has one row per host, busiest first: its delay and
concurrency as the throttler has them now, requests in flight and queued,
its backoff state, and how many of its URLs are done and how many failed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .._throttle._stats import ScopeStats
from ._tallies import ScopeTally

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ._job import CrawlJob, CrawlSummary

__all__ = ["live_view", "render_summary", "summary_rows"]

#: Host rows shown at most in the live view.
MAX_ROWS = 15


def _state(stats: ScopeStats | None) -> str:
    if stats is None:
        return "-"
    parts = []
    if stats.breaker not in ("closed", "off"):
        parts.append(stats.breaker.replace("_", " "))
    if stats.backoff:
        parts.append(f"backoff {stats.backoff}")
    if stats.hold_in:
        parts.append(f"hold {stats.hold_in:.0f}s")
    if stats.crawl_delay is not None:
        parts.append(f"crawl-delay {stats.crawl_delay:g}")
    return ", ".join(parts) or "ok"


def live_view(job: CrawlJob, stats: Mapping[str, ScopeStats], started: float) -> RenderableType:
    """The live view of ``job``: a heading with totals and a table of the busiest hosts."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    summary = job.summary
    queued = job.scheduler.scope_sizes()
    names = set(queued) | {name for name, s in stats.items() if s.inflight} | set(summary.scopes)
    elapsed = max(time.monotonic() - started, 1e-9)
    done = sum(tally.done for tally in summary.scopes.values()) + summary.folded.others.done
    heading = Text(f"crawlpace crawl: {done}/{summary.urls} URLs done, {summary.requests} requests "
                   f"({summary.requests / elapsed:.1f}/s), {job.inflight} in flight, {elapsed:.0f}s",
                   style="bold")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for title in ("host", "delay", "conc", "in flight", "queued", "state", "done", "errors"):
        table.add_column(title, justify="left" if title in ("host", "state") else "right")

    def weight(name: str) -> tuple[int, str]:
        scope = stats.get(name)
        return (-(queued.get(name, 0) + (scope.inflight if scope else 0)), name)

    for name in sorted(names, key=weight)[:MAX_ROWS]:
        scope = stats.get(name)
        tally = summary.scopes.get(name)
        table.add_row(name, "-" if scope is None else f"{scope.delay:.2f}s",
                      "-" if scope is None else str(scope.concurrency),
                      "0" if scope is None else str(scope.inflight), str(queued.get(name, 0)), _state(scope),
                      "0" if tally is None else str(tally.done), "0" if tally is None else str(tally.errors))
    if len(names) > MAX_ROWS:
        table.caption = f"{len(names) - MAX_ROWS} more hosts"
    return Group(heading, table)


def summary_rows(summary: CrawlSummary) -> list[tuple[str, ...]]:
    """One row per host: host, done, ok, errors, requests, and the non-ok outcomes.

    Beyond ``TALLY_LIMIT`` hosts, the least recently counted share a last row.
    """
    rows = [_row(name or "(no host)", tally) for name, tally in sorted(summary.scopes.items())]
    folded = summary.folded
    if folded.hosts:
        rows.append(_row(f"({folded.hosts} more hosts)", folded.others))
    return rows


def _row(name: str, tally: ScopeTally) -> tuple[str, ...]:
    others = ", ".join(f"{kind} {count}" for kind, count in sorted(tally.outcomes.items()) if kind != "ok")
    return (name, str(tally.done), str(tally.outcomes.get("ok", 0)), str(tally.errors), str(tally.requests),
            others or "-")


def render_summary(summary: CrawlSummary) -> str:
    """The closing table in plain text, then one line of totals."""
    header = ("host", "done", "ok", "errors", "requests", "other outcomes")
    rows = [header, *summary_rows(summary)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for number, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) if i in (0, 5) else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip())
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    state = "interrupted" if summary.interrupted else "complete" if summary.complete else "incomplete"
    lines.append("")
    lines.append(f"{state}: {summary.answered}/{summary.urls} URLs answered, {summary.unfinished} left, "
                 f"{summary.requests} requests in {summary.seconds:.1f}s")
    if summary.lost:
        lines.append(f"LOST: about {summary.lost} URLs vanished from the shared frontier (its Redis came "
                     "back empty); enqueue them again")
    return "\n".join(lines)
