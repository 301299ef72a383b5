"""A picture of how a crawler treated each site: its rate over time against the site's capacity.

:func:`write_plot` draws one panel per site from the figures
:meth:`Farm.stats(timeline=True) <crawlpace.sim.Farm.stats>` returns: the
requests that arrived each second (grey bars), the 200s among them (a green
line), the site's hidden capacity (a dashed black step line, where the profile
has one) and the seconds with 429 or 503 answers (red crosses, sized by their
count). All panels share one time axis, counted from the farm's first request.

matplotlib is an optional dependency (``pip install 'crawlpace[plot]'``); it
is imported only when a plot is drawn, with the non-interactive Agg backend.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["PlotUnavailable", "write_plot"]


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _load_pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotUnavailable("plots need matplotlib: pip install 'crawlpace[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _panel(axes: Any, name: str, figures: Mapping[str, Any], origin: float) -> None:
    timeline = figures["timeline"]
    width = float(timeline["bin"])
    shift = (figures["first"] or origin) - origin
    times = [shift + index * width for index in range(len(timeline["requests"]))]
    axes.bar(times, [count / width for count in timeline["requests"]], width=width, align="edge",
             color="#c8c8c8", label="requests/s")
    ok = [count / width for count in timeline["ok"]]
    if ok:
        axes.step([*times, times[-1] + width], [*ok, ok[-1]], where="post", color="#2a9d3c", linewidth=1.2,
                  label="200s/s")
    steps = [(shift + start, value) for start, value in timeline["capacity"] if value is not None]
    if steps:
        end = times[-1] + width if times else shift + 1.0
        xs = [start for start, _ in steps] + [end]
        ys = [value for _, value in steps] + [steps[-1][1]]
        axes.step(xs, ys, where="post", color="black", linestyle="--", linewidth=1.0, label="capacity")
    refused = [(t + width / 2, count) for t, count in zip(times, timeline["refused"], strict=True) if count]
    if refused:
        axes.scatter([t for t, _ in refused], [0.0] * len(refused), marker="x", color="#d62828",
                     s=[12 + 8 * math.sqrt(count) for _, count in refused], label="429/503", zorder=3)
    ratio = figures.get("goodput_ratio")
    tail = "" if ratio is None else f", goodput {ratio:.0%} of capacity"
    violations = figures.get("violations", 0)
    warn = f", {violations} violations" if violations else ""
    axes.set_title(f"{name} ({figures.get('profile', '')}){tail}{warn}", fontsize=9)
    axes.set_ylabel("per second", fontsize=8)
    axes.tick_params(labelsize=7)
    axes.set_ylim(bottom=-0.05 * max(axes.get_ylim()[1], 1.0))


def write_plot(stats: Mapping[str, Mapping[str, Any]], path: str | os.PathLike[str], *,
               title: str = "crawl as the sites saw it") -> None:
    """Draw every site's rate over time into a PNG file.

    Args:
        stats: site name to figures with a ``"timeline"``, as
            ``Farm.stats(timeline=True)`` returns; sites that saw no request
            get an empty panel.
        path: the PNG file to write.
        title: the figure's title.

    Raises:
        PlotUnavailable: when matplotlib is not installed.
        OSError: when the file cannot be written.
    """
    plt = _load_pyplot()
    names = list(stats)
    columns = 2 if len(names) > 1 else 1
    rows = max(math.ceil(len(names) / columns), 1)
    figure, grid = plt.subplots(rows, columns, figsize=(6.0 * columns, 2.4 * rows), sharex=True,
                                squeeze=False)
    firsts = [figures["first"] for figures in stats.values() if figures.get("first") is not None]
    origin = min(firsts) if firsts else 0.0
    for index, name in enumerate(names):
        axes = grid[index // columns][index % columns]
        if stats[name].get("first") is None:
            axes.set_title(f"{name} ({stats[name].get('profile', '')}): no requests", fontsize=9)
            continue
        _panel(axes, name, stats[name], origin)
    for index in range(len(names), rows * columns):
        grid[index // columns][index % columns].set_visible(False)
    for axes in grid[-1]:
        axes.set_xlabel("seconds since the first request", fontsize=8)
    legend: dict[str, Any] = {}
    for row in grid:
        for axes in row:
            for handle, label in zip(*axes.get_legend_handles_labels(), strict=True):
                legend.setdefault(label, handle)
    labels = list(legend)
    handles = [legend[label] for label in labels]
    if handles:
        figure.legend(handles, labels, loc="upper right", fontsize=8, ncols=len(labels))
    figure.suptitle(title, fontsize=11, x=0.01, ha="left")
    figure.tight_layout(rect=(0.0, 0.0, 1.0, 0.97))
    figure.savefig(os.fspath(path), dpi=110)
    plt.close(figure)
