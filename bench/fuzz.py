"""The long fuzzing run: every parser against many hostile inputs (the test command runs 150 each).

Targets (``tests/fuzz_targets.py``): robots.txt bodies, Scrapy-style settings,
TOML settings, farm files, URLs and store URLs, response headers. Each may
return, or raise its documented error (``ConfigError`` for settings and
farms, ``ScopeError`` for a URL the crawl cannot fetch); anything else is a
failure, printed with the smallest input hypothesis found.

``--quick`` gives each target about 8 s (under a minute in all); the default
is 5 minutes per target (30 minutes in all). ``--json`` ends with one line of
JSON: examples run and failures per target. Hypothesis, the fuzzer here, is
compared with nothing: there is no contender, so no ratio is printed.
atheris is not used: it has no wheel for this Python, and hypothesis reaches
the same parsers.

Run from the repository root: ``python bench/fuzz.py --quick``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings
from tests.fuzz_targets import TARGETS


def run_target(name: str, seconds: float) -> dict[str, Any]:
    """Fuzz one target for about ``seconds``; returns its figures."""
    strategy, check = TARGETS[name]
    examples = 0
    deadline = time.monotonic() + seconds
    failure = ""
    batches = 0
    while time.monotonic() < deadline and not failure:
        batches += 1
        counted = 0
        last: Any = None

        @settings(max_examples=2000, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def run(value: Any) -> None:
            nonlocal counted, last
            counted += 1
            last = value
            check(value)

        try:
            run()
        except Exception as exc:  # a parser let an undocumented error out, or broke an assertion
            failure = f"{type(exc).__name__}: {exc} (input: {last!r})"[:2000]
        examples += counted
    return {"examples": examples, "batches": batches, "failure": failure,
            "seconds": round(seconds - max(0.0, deadline - time.monotonic()), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 8 s per target")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per target")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the parsers' warnings about bad input are expected by the thousand
    seconds = args.seconds if args.seconds is not None else 8.0 if args.quick else 300.0
    print(f"fuzz: {len(TARGETS)} targets, {seconds:g} s each; {dt.date.today()}, {platform.node()}, "
          f"Python {platform.python_version()}")
    figures: dict[str, Any] = {}
    for name in sorted(TARGETS):
        result = figures[name] = run_target(name, seconds)
        verdict = "ok" if not result["failure"] else f"FAILED: {result['failure']}"
        print(f"  {name:<22} {result['examples']:>8} examples in {result['seconds']:>6.1f} s  {verdict}")
    failed = [name for name, result in figures.items() if result["failure"]]
    total = sum(result["examples"] for result in figures.values())
    print(f"{total} examples, {len(failed)} targets failed{': ' + ', '.join(failed) if failed else ''}")
    if args.json:
        print(json.dumps({"seconds_per_target": seconds, "examples": total, "failed": failed,
                          "targets": figures}, sort_keys=True))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
