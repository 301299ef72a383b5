"""The long fuzzing run: every parser against many hostile inputs (the test command runs 150 each).

Targets (``tests/fuzz_targets.py``): robots.txt bodies, Scrapy-style settings,
TOML settings, farm files, URLs and store URLs, response headers, passwords in
every form a store URL can be typed (masking), and whole crawls of URL lists
(unfetchable URLs, dead hosts whose robots.txt fails, invalid ports, numeric
hosts, more of them than the memory bound) that must end with one line each. Each may
return, or raise its documented error (``ConfigError`` for settings and
farms, ``ScopeError`` for a URL the crawl cannot fetch); anything else is a
failure, printed with the smallest input hypothesis found.

``--quick`` gives each target about 8 s (under a minute in all); the default
is 225 s per target (30 minutes in all). ``--json`` ends with one line of
JSON: examples run and failures per target.

Two engines draw the inputs (``--engine``): hypothesis alone (the default),
or atheris (``pip install crawlpace[fuzz]``), libFuzzer's coverage-guided
mutation of bytes, fed through the same hypothesis strategies
(``fuzz_one_input``), with crawlpace's modules instrumented so that inputs
reaching new branches are kept and mutated further. Each atheris target runs
in a process of its own (libFuzzer ends the process when it is done); a
crash's input is saved under the temporary folder the run names. ``both``
runs the two one after the other on the same targets. There is no contender
to compare with, so no ratio is printed.

Run from the repository root: ``python bench/fuzz.py --quick``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import logging
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, settings  # noqa: E402

#: The targets' names (tests/fuzz_targets.py is imported late: atheris must instrument it first).
NAMES = ("farm files", "password forms", "response headers", "robots.txt", "scrapy settings", "toml settings",
         "url lists", "urls and store urls")


def run_target(name: str, seconds: float) -> dict[str, Any]:
    """Fuzz one target with hypothesis for about ``seconds``; returns its figures."""
    from tests.fuzz_targets import TARGETS

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
            if time.monotonic() >= deadline:
                return  # time is up: the rest of the batch passes at once (a slow target's batch would not)
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


def atheris_child(name: str, seconds: float, artifacts: str) -> None:
    """Run one target under atheris in this process, until libFuzzer's time limit ends it."""
    import atheris

    logging.disable(logging.WARNING)
    with atheris.instrument_imports(include=["crawlpace"]):
        from tests.fuzz_targets import TARGETS
    strategy, check = TARGETS[name]

    @settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(value: Any) -> None:
        check(value)

    # The bytes become hypothesis's choices: one strategy per target, whichever engine draws.
    feed = one.hypothesis.fuzz_one_input  # type: ignore[attr-defined]
    atheris.Setup([sys.argv[0], f"-max_total_time={max(1, round(seconds))}", f"-artifact_prefix={artifacts}/",
                   "-print_final_stats=1", "-timeout=20", "-rss_limit_mb=1024"], feed)
    atheris.Fuzz()


def run_atheris(name: str, seconds: float, artifacts: Path) -> dict[str, Any]:
    """Fuzz one target with atheris, in a child process, for about ``seconds``; returns its figures."""
    started = time.monotonic()
    child = subprocess.run([sys.executable, __file__, "--atheris-child", name, "--seconds", str(seconds),
                            "--artifacts", str(artifacts)], capture_output=True, text=True,
                           timeout=seconds + 120)
    log = child.stderr
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log) or re.findall(r"Done (\d+) runs", log)
    failure = ""
    if child.returncode != 0:
        tail = [line for line in log.splitlines() if line.strip()][-12:]
        failure = f"exit {child.returncode}: " + " | ".join(tail)
    return {"examples": int(runs[-1]) if runs else 0, "failure": failure[:2000],
            "seconds": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 8 s per target")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per target")
    parser.add_argument("--engine", choices=("hypothesis", "atheris", "both"), default="hypothesis",
                        help="what draws the inputs (atheris: pip install crawlpace[fuzz])")
    parser.add_argument("--target", action="append", choices=NAMES, metavar="NAME",
                        help="fuzz only this target (repeat for more); all of them by default")
    parser.add_argument("--atheris-child", help=argparse.SUPPRESS)  # one target, in this process
    parser.add_argument("--artifacts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds = args.seconds if args.seconds is not None else 8.0 if args.quick else 225.0
    if args.atheris_child:
        atheris_child(args.atheris_child, seconds, args.artifacts)
        return 0
    logging.disable(logging.WARNING)  # the parsers' warnings about bad input are expected by the thousand
    from tests.fuzz_targets import TARGETS

    if set(TARGETS) != set(NAMES):
        raise SystemExit(f"fuzz: NAMES is out of date; the targets are {sorted(TARGETS)}")
    engines = ["hypothesis", "atheris"] if args.engine == "both" else [args.engine]
    if "atheris" in engines and importlib.util.find_spec("atheris") is None:
        raise SystemExit("fuzz: atheris is not installed; pip install 'crawlpace[fuzz]' (a wheel for Linux "
                         "and macOS on CPython 3.8-3.12), or use --engine hypothesis")
    names = [name for name in NAMES if not args.target or name in args.target]
    artifacts = Path(tempfile.mkdtemp(prefix="crawlpace-fuzz-"))
    print(f"fuzz: {len(names)} targets, {seconds:g} s each, {' and '.join(engines)}; {dt.date.today()}, "
          f"{platform.node()}, Python {platform.python_version()}; crash inputs go to {artifacts}")
    figures: dict[str, Any] = {}
    for engine in engines:
        for name in names:
            if engine == "hypothesis":
                result = run_target(name, seconds)
            else:
                result = run_atheris(name, seconds, artifacts)
            key = name if len(engines) == 1 else f"{engine}: {name}"
            figures[key] = result
            verdict = "ok" if not result["failure"] else f"FAILED: {result['failure']}"
            print(f"  {key:<34} {result['examples']:>8} examples in {result['seconds']:>6.1f} s  {verdict}",
                  flush=True)
    failed = [name for name, result in figures.items() if result["failure"]]
    total = sum(result["examples"] for result in figures.values())
    print(f"{total} examples, {len(failed)} targets failed{': ' + ', '.join(failed) if failed else ''}")
    if args.json:
        print(json.dumps({"seconds_per_target": seconds, "engines": engines, "examples": total,
                          "failed": failed, "targets": figures}, sort_keys=True))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
