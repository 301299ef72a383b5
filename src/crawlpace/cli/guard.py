"""``crawlpace guard``: the site owner's commands (``ranges``: refresh a crawler's published IP ranges)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._exceptions import ConfigError

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Declare the ``guard`` subcommand and its own subcommands."""
    guard = sub.add_parser("guard", parents=[common], help="site owner's tools for crawlpace.guard",
                           description="Tools for the owner of a site behind crawlpace.guard.")
    inner = guard.add_subparsers(dest="guard_command", required=True, metavar="TOOL")
    ranges = inner.add_parser(
        "ranges", parents=[common], help="refresh a crawler's IP ranges from its published JSON file",
        description="Check a crawler's published IP ranges (the JSON file Google or Bing publish, "
                    "downloaded by you) and write the ranges file the guard reads "
                    "(bot_ranges={'googlebot': 'googlebot.txt'}). Exit status: 0, 3 for a file that is "
                    "not a published list (nothing is written).")
    ranges.add_argument("--from", dest="source", required=True, metavar="FILE",
                        help="the downloaded JSON file, e.g. googlebot.json")
    ranges.add_argument("--out", metavar="FILE",
                        help="the ranges file to write (replaced atomically); without it, only check")
    ranges.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace guard ...``; return the exit status."""
    from ..guard._ranges import refresh

    try:
        found = refresh(args.source, args.out)
    except ValueError as exc:
        raise ConfigError([f"--from: {exc}"]) from None
    if args.json:
        print(json.dumps({"ranges": len(found.ranges), "created": found.created,
                          "added": [str(net) for net in found.added],
                          "removed": [str(net) for net in found.removed], "written": args.out}))
    else:
        print(f"{args.source}: {found.describe()}" + (f"; written to {args.out}" if args.out else ""))
    return 0
