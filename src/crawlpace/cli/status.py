"""``crawlpace status``: the per-scope state of a whole fleet of workers that share a store.

The workers of a fleet keep their admission state (slots in flight, sends,
backoff, holds, the breaker, rampup) in one Redis or Valkey store; this command
reads it back, one row per scope, without sending a request or taking a slot.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import random
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from .._clock import AsyncioClock
from .._exceptions import StoreUnreachable
from .._redact import redact
from .._settings._config import Settings
from ..frontier._shared import FrontierCounts
from ..stores import ScopeSnapshot, Store, open_store
from ._options import URL_FORMS, add_json_option, add_store_options, store_url

__all__ = ["COLUMNS", "EXIT_NO_STORE", "TIMEOUT", "StatusReport", "StoreUnreachable", "add_parser",
           "render", "render_table", "run", "shown"]

#: Exit status when the store cannot be read: unreachable, or a memory store.
EXIT_NO_STORE = 2
#: Seconds each read of the store may take before it counts as unreachable.
TIMEOUT = 10.0
#: The table's columns.
COLUMNS = ("scope", "in flight", "delay", "ready in", "sends", "responses", "errors", "backoff", "hold",
           "breaker", "crawl-delay", "rampup")
_LEFT = frozenset({0, 9})  # scope and breaker; the figures are right-aligned

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class StatusReport:
    """What the store holds.

    Attributes:
        store: the store's URL, with any password masked.
        namespace: the namespace read.
        snapshots: one per scope with state, sorted by scope.
        missing: scopes asked for with ``--scope`` that have no state.
        frontier: the shared frontier's figures, when this namespace has one.
    """

    store: str
    namespace: str
    snapshots: tuple[ScopeSnapshot, ...]
    missing: tuple[str, ...] = ()
    frontier: FrontierCounts | None = None

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (a number that is not finite becomes ``None``)."""
        data = {"store": self.store, "namespace": self.namespace,
                "scopes": [dataclasses.asdict(snapshot) for snapshot in self.snapshots],
                "missing": list(self.missing),
                "frontier": None if self.frontier is None else self.frontier.as_dict()}
        result: dict[str, Any] = _finite(data)
        return result


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Declare the ``status`` subcommand and its options."""
    status = sub.add_parser(
        "status", parents=[common], help="show the per-scope state of a fleet sharing a Redis store",
        description="Read the per-scope state that a fleet of workers keeps in a shared Redis/Valkey "
                    "store and print one row per scope. Exit status: 0 when the store was read, 2 when "
                    "it cannot be reached or holds no fleet state (memory://), 3 for invalid settings.")
    add_store_options(status, store_help=f"the store the workers share: {URL_FORMS} (the same URL as their "
                      "--store)", namespace_help="the crawl job's namespace (default: the URL's namespace "
                      "option, else crawlpace)")
    status.add_argument("--scope", action="extend", nargs="+", default=None, metavar="NAME",
                        help="show only these scopes (repeatable)")
    status.add_argument("--config", help="the workers' crawlpace TOML settings file (needed to read the "
                        "state of scopes with a custom scope manager)")
    add_json_option(status)


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace status`` with parsed arguments; return the exit status."""
    settings = Settings.from_toml(args.config) if args.config else Settings()
    url = store_url(args.store, args.namespace)
    try:
        report = asyncio.run(_read(url, settings, args.scope))
    except StoreUnreachable as exc:
        print(f"crawlpace status: {redact(exc)}", file=sys.stderr)
        return EXIT_NO_STORE
    if report is None:
        print(f"crawlpace status: {shown(args.store)} is a memory store, which holds no fleet state: it "
              "lives inside one process; give the Redis URL the workers share (--store redis://host:6379/0)",
              file=sys.stderr)
        return EXIT_NO_STORE
    print(render(report))
    if args.json:
        print(json.dumps(report.as_dict(), sort_keys=True))
    return 0


async def _read(url: str, settings: Settings, only: list[str] | None) -> StatusReport | None:
    """Everything the store at ``url`` holds (``None``: a store local to this process)."""
    from ..stores.redis import RedisStore  # light without redis-py, but only needed here

    store: Store = open_store(url, settings, AsyncioClock(), random.Random())
    if not store.shared:
        await store.aclose()
        return None
    shown_url = shown(store.url if isinstance(store, RedisStore) else url)
    namespace = store.namespace if isinstance(store, RedisStore) else ""
    errors = _store_errors()
    try:
        names = sorted(set(only)) if only else sorted(set(await _answer(store.scopes(), shown_url)))
        snapshots = []
        missing = []
        for name in names:
            snapshot = await _answer(store.snapshot(name), shown_url)
            if snapshot is None:
                missing.append(name)  # asked for, or expired between the listing and now
            else:
                snapshots.append(snapshot)
        frontier = await _frontier(url, shown_url)
    except errors as exc:
        raise StoreUnreachable(f"cannot read the store {shown_url}: {_reason(exc)}") from exc
    except StoreUnreachable as exc:
        if exc.__cause__ is None:  # said already (no answer in time)
            raise
        raise StoreUnreachable(f"cannot read the store {shown_url}: {_reason(exc)}") from exc
    finally:
        with contextlib.suppress(*errors):
            await store.aclose()
    return StatusReport(shown_url, namespace, tuple(snapshots), tuple(missing) if only else (), frontier)


async def _frontier(url: str, shown_url: str) -> FrontierCounts | None:
    """The shared frontier's figures; None when no URL was ever queued in this namespace."""
    from ..frontier._shared import SharedFrontier

    frontier = SharedFrontier(url, worker="crawlpace-status")
    try:
        counts = await _answer(frontier.counts(), shown_url)
    finally:
        await frontier.aclose()
    return counts if counts.enqueued else None


async def _answer(call: Awaitable[_T], url: str) -> _T:
    """Await one read of the store, for at most :data:`TIMEOUT` seconds."""
    try:
        return await asyncio.wait_for(call, TIMEOUT)
    except TimeoutError:
        raise StoreUnreachable(f"cannot read the store {url}: no answer within {TIMEOUT:g}s") from None


def _store_errors() -> tuple[type[Exception], ...]:
    """What a store raises when its server cannot be reached or misbehaves."""
    try:
        from redis.exceptions import RedisError
    except ImportError:  # pragma: no cover - without the redis extra no Redis store opens
        return (OSError,)
    return (OSError, RedisError)


def _reason(exc: BaseException) -> str:
    """The driver's words for what went wrong (a store's own translation is unwrapped)."""
    if isinstance(exc, StoreUnreachable) and isinstance(exc.__cause__, Exception):
        exc = exc.__cause__
    text = redact(" ".join(str(exc).split()))
    return text or type(exc).__name__


def shown(url: str) -> str:
    """``url`` with any password replaced by ``***``, fit to be printed."""
    return redact(url)


def render(report: StatusReport) -> str:
    """The header line and the table (or a line saying there is nothing), no trailing newline."""
    count = len(report.snapshots)
    where = f"{report.store}, namespace {report.namespace!r}"
    lines = [f"crawlpace status: {where}: {count} scope{'' if count == 1 else 's'}"]
    if report.snapshots:
        lines.append(render_table(report.snapshots))
    elif not report.missing:
        lines.append("no scope has state here: no worker has sent through this namespace yet, its state "
                     "expired, or the namespace differs from the workers' --namespace")
    lines.extend(f"scope {name!r}: no state in this store" for name in report.missing)
    if report.frontier is not None:
        lines.append(render_frontier(report.frontier))
    return "\n".join(lines)


def render_frontier(counts: FrontierCounts) -> str:
    """One paragraph on the shared frontier: what waits, who holds what, what is done."""
    outcomes = ", ".join(f"{count} {name}" for name, count in sorted(counts.outcomes.items())) or "none yet"
    lines = [f"frontier: {counts.queued} URLs queued over {counts.scopes} hosts, {counts.claimed} claimed, "
             f"{counts.done} done ({outcomes}) of {counts.enqueued} enqueued",
             f"  {counts.requeued} claims expired and were redone, {counts.returned} handed back by "
             f"stopping workers, {counts.duplicates} answered twice"]
    for name, age in sorted(counts.workers.items()):
        lines.append(f"  worker {name}: last heard {age:.1f}s ago")
    return "\n".join(lines)


def render_table(snapshots: tuple[ScopeSnapshot, ...] | list[ScopeSnapshot]) -> str:
    """One aligned row per scope, under a header and a rule, no trailing newline."""
    rows = [COLUMNS, *(_row(snapshot) for snapshot in snapshots)]
    widths = [max(len(row[index]) for row in rows) for index in range(len(COLUMNS))]
    lines = []
    for number, row in enumerate(rows):
        cells = [cell.ljust(width) if index in _LEFT else cell.rjust(width)
                 for index, (cell, width) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _row(snap: ScopeSnapshot) -> tuple[str, ...]:
    ready = "full" if snap.ready_in is None else "now" if snap.ready_in <= 0.0 else _seconds(snap.ready_in)
    return (snap.scope, f"{snap.inflight}/{snap.concurrency}", _seconds(snap.delay), ready, str(snap.sends),
            str(snap.responses), str(snap.errors), str(snap.backoff),
            "-" if snap.hold_in is None else _seconds(snap.hold_in), snap.breaker,
            "-" if snap.crawl_delay is None else f"{snap.crawl_delay:g}s",
            "-" if snap.rampup is None else f"{snap.rampup.rate:.3g}/s")


def _seconds(value: float) -> str:
    return f"{value:.2f}s" if math.isfinite(value) else str(value)


def _finite(value: Any) -> Any:
    """``value`` with every float that JSON cannot hold (inf, nan) replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
