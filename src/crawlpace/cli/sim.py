"""``crawlpace sim``: serve a farm of simulated sites until stopped, then report what they saw."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError
from ..sim import PRIVATE_PREFIX, Farm, builtin_farms
from ..sim._plot import PlotUnavailable, write_plot
from ..sim._random import DEFAULT_SECONDS, RANDOM_KINDS, draw_farm, farm_toml
from ..sim._report import render_table, totals
from ._options import add_json_option
from ._signals import stop_on_signals

__all__ = ["EXIT_USAGE", "QUICK_SECONDS", "add_parser", "load_farm", "run"]

#: How long ``--quick`` serves when no ``--duration`` is given.
QUICK_SECONDS = 5.0
#: Exit status for an invalid farm, port or duration, as for invalid settings.
EXIT_USAGE = 3


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Declare the ``sim`` subcommand and its options."""
    sim = sub.add_parser(
        "sim", parents=[common], help="serve simulated sites with hidden limits on loopback",
        description="Serve a farm of simulated sites, one loopback address each, until Ctrl-C, SIGTERM "
                    "or --duration; then print what each site saw and write it as JSON.")
    sim.add_argument("farm", nargs="?", default="mixed",
                     help="a farm TOML file, the name of a shipped farm, or 'random' for a farm drawn at "
                          "random (default: mixed)")
    sim.add_argument("--list", action="store_true", help="list the shipped farms and exit")
    sim.add_argument("--port", type=int, default=None, help="the port every site shares (default: free)")
    sim.add_argument("--control-port", type=int, default=0,
                     help="port of the JSON control server on 127.0.0.1 (default: free)")
    sim.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    sim.add_argument("--quick", action="store_true", help=f"stop after {QUICK_SECONDS:g} s")
    sim.add_argument("--output", default="crawlpace-sim.json",
                     help="file for the final figures, with timelines (default: %(default)s; '' for none)")
    sim.add_argument("--plot", default=None, metavar="PNG", help="also draw each site's rate over time")
    sim.add_argument("--urls", default=None, metavar="FILE",
                     help="write every page URL of every site to FILE, one per line, to crawl")
    drawn = sim.add_argument_group("random farms (farm 'random')")
    drawn.add_argument("--seed", type=int, default=None,
                       help="seed of the draw (default: a fresh one, printed so the farm can be drawn again)")
    drawn.add_argument("--sites", type=int, default=30, help="sites to draw (default: %(default)s)")
    drawn.add_argument("--seconds", type=float, default=DEFAULT_SECONDS,
                       help="about how long a crawl of each site at its capacity takes "
                            "(default: %(default)g)")
    drawn.add_argument("--kinds", default=None,
                       help=f"comma-separated limiter kinds to draw from "
                            f"(default: all: {', '.join(RANDOM_KINDS)})")
    drawn.add_argument("--write", default=None, metavar="TOML", help="write the drawn farm to this farm file")
    drawn.add_argument("--draw-only", action="store_true",
                       help="print (and --write) the drawn farm, then exit")
    add_json_option(sim)


def draw_random(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The farm ``crawlpace sim random`` asks for, and its TOML text (with the command that draws it again).

    Raises:
        ValueError: for a bad seed, count, time or kind.
    """
    seed = random.SystemRandom().randrange(2**31) if args.seed is None else args.seed
    if seed < 0:
        raise ValueError(f"--seed {seed} must be 0 or more")
    kinds = RANDOM_KINDS if args.kinds is None else tuple(kind.strip() for kind in args.kinds.split(",")
                                                          if kind.strip())
    spec = draw_farm(seed, args.sites, seconds=args.seconds, kinds=kinds)
    again = (f"crawlpace sim random --seed {seed} --sites {args.sites} --seconds {args.seconds:g}"
             + ("" if args.kinds is None else f" --kinds {','.join(kinds)}"))
    return spec, farm_toml(spec, f"A random farm: {again}")


def _is_random(name: str) -> bool:
    return name == "random" and not Path(name).exists()


def load_farm(name: str, port: int | None = None, control_port: int = 0) -> Farm:
    """A farm from a TOML file, or a shipped farm by name when no such file exists.

    Raises:
        FileNotFoundError: when there is neither.
        ConfigError: for an invalid farm.
        ValueError: for a port outside 0 to 65535.
    """
    path = Path(name)
    if not path.exists() and name in builtin_farms():
        return Farm.builtin(name, port=port, control=True, control_port=control_port)
    if not path.exists() and not name.endswith(".toml"):
        raise FileNotFoundError(f"no farm file {name!r} and no shipped farm of that name; "
                                f"shipped farms: {', '.join(builtin_farms())}")
    return Farm.from_toml(path, port=port, control=True, control_port=control_port)


def _describe(farm: Farm) -> str:
    lines = [f"{'site':<14}{'profile':<12}{'url':<26}capacity/s"]
    for site in farm.sites:
        capacity = site.app.capacity
        lines.append(f"{site.name:<14}{site.profile:<12}{site.url:<26}"
                     f"{'-' if capacity is None else f'{capacity:g}'}")
    lines.append(f"live figures: {farm.control_url}/stats   sites: {farm.control_url}/sites")
    return "\n".join(lines)


def _page_urls(farm: Farm) -> list[str]:
    """Every site's pages, then its private ones (which its robots.txt disallows)."""
    return [url for site in farm.sites for url in (
        *(f"{site.url}/page/{number}" for number in range(1, site.app.pages + 1)),
        *(f"{site.url}{PRIVATE_PREFIX}{number}" for number in range(1, site.app.private + 1)))]


async def _serve(args: argparse.Namespace,
                 drawn: dict[str, Any] | None) -> tuple[dict[str, dict[str, Any]], float]:
    """Serve until stopped; return every site's figures, with timelines, and the seconds served."""
    farm = (load_farm(args.farm, args.port, args.control_port) if drawn is None
            else Farm(drawn, port=args.port, control=True, control_port=args.control_port))
    duration = args.duration if args.duration is not None else QUICK_SECONDS if args.quick else None
    stop = asyncio.Event()
    async with farm:
        with stop_on_signals(stop.set):  # before the banner: a script may signal as soon as it reads it
            return await _until_stopped(args, farm, stop, duration)


async def _until_stopped(args: argparse.Namespace, farm: Farm, stop: asyncio.Event,
                         duration: float | None) -> tuple[dict[str, dict[str, Any]], float]:
    """Print the banner, serve until ``stop`` or ``duration``, and return the figures."""
    print(f"crawlpace sim: {len(farm.sites)} sites of farm {args.farm!r}"
          f"{'' if farm.aliases else ' (no loopback aliases: one port per site on 127.0.0.1)'}")
    print(_describe(farm), flush=True)
    if args.urls:
        text = "\n".join(_page_urls(farm)) + "\n"
        await asyncio.to_thread(Path(args.urls).write_text, text, "utf-8")
        print(f"page URLs written to {args.urls}")
    print("serving; Ctrl-C or SIGTERM stops and prints the table"
          + (f" (stopping by itself after {duration:g} s)" if duration is not None else ""), flush=True)
    started = time.monotonic()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(duration):
            await stop.wait()
    return farm.stats(timeline=True), time.monotonic() - started


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace sim`` with parsed arguments; return the exit status."""
    if args.list:
        for name in builtin_farms():
            farm = Farm.builtin(name)
            print(f"{name}: " + ", ".join(f"{site.name} ({site.profile})" for site in farm.spec.sites))
        return 0
    if args.duration is not None and not args.duration > 0:
        print(f"crawlpace sim: --duration {args.duration:g} must be a positive number of seconds",
              file=sys.stderr)
        return EXIT_USAGE
    drawn: dict[str, Any] | None = None
    if _is_random(args.farm):
        try:
            drawn, text = draw_random(args)
        except ValueError as exc:
            print(f"crawlpace sim: cannot draw a random farm: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if args.write:
            Path(args.write).write_text(text, encoding="utf-8")
        print(text)
        if args.write:
            print(f"random farm written to {args.write}")
        if args.draw_only:
            return 0
    elif args.draw_only or args.write:
        print("crawlpace sim: --draw-only and --write go with the farm 'random'", file=sys.stderr)
        return EXIT_USAGE
    try:
        report, served = asyncio.run(_serve(args, drawn))
    except ConfigError as exc:
        print(f"crawlpace sim: invalid farm:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError) as exc:
        print(f"crawlpace sim: cannot serve the farm: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print()
    print(render_table(report))
    if args.output:
        saved = {"farm": args.farm, "served_seconds": served, "sites": report}
        Path(args.output).write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
        print(f"figures written to {args.output}")
    if args.plot:
        try:
            write_plot(report, args.plot, title=f"crawlpace sim: farm {args.farm}")
            print(f"plot written to {args.plot}")
        except PlotUnavailable as exc:
            print(f"no plot: {exc}")
    if args.json:
        figures = {name: {key: value for key, value in site.items() if key != "timeline"}
                   for name, site in report.items()}
        print(json.dumps({"farm": args.farm, "served_seconds": round(served, 3), "totals": totals(report),
                          "sites": figures}, sort_keys=True))
    return 0
