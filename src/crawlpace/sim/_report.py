"""The per-site table a farm prints when a run ends, from :meth:`Farm.stats` figures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["COLUMNS", "render_table", "totals"]

#: Column titles, in order.
COLUMNS = ("site", "profile", "requests", "200", "429+503", "violations", "peak/s", "peak conc",
           "goodput/s", "capacity/s", "ratio")


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row(name: str, figures: Mapping[str, Any]) -> tuple[str, ...]:
    ratio = figures.get("goodput_ratio")
    return (name, str(figures.get("profile", "")), str(figures["requests"]), str(figures["ok"]),
            str(figures["throttled"]), str(figures["violations"]), str(figures["peak_per_second"]),
            str(figures["peak_inflight"]), _number(figures["goodput"]), _number(figures["capacity"]),
            "-" if ratio is None else f"{ratio:.0%}")


def totals(stats: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Requests, 200s, refusals and violations summed over every site."""
    keys = ("requests", "ok", "throttled", "violations", "aborted")
    return {key: sum(int(figures[key]) for figures in stats.values()) for key in keys}


def render_table(stats: Mapping[str, Mapping[str, Any]]) -> str:
    """Lay out one row per site, and a total row, in aligned plain-text columns.

    Args:
        stats: site name to its figures, as :meth:`crawlpace.sim.Farm.stats` returns.

    Returns:
        The table, lines joined with newlines, no trailing newline.
    """
    rows = [COLUMNS, *(_row(name, figures) for name, figures in stats.items())]
    summed = totals(stats)
    rows.append(("total", "", str(summed["requests"]), str(summed["ok"]), str(summed["throttled"]),
                 str(summed["violations"]), "", "", "", "", ""))
    widths = [max(len(row[index]) for row in rows) for index in range(len(COLUMNS))]
    lines = []
    for number, row in enumerate(rows):
        cells = [cell.ljust(width) if index < 2 else cell.rjust(width)
                 for index, (cell, width) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if number == 0 or number == len(rows) - 2:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)
