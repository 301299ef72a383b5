"""A crawl's first lock-out read by a sliding window that counts every send: where it ends, what it fits.

Rampup's first lock-out (an overshoot, then probes whose gap doubles until one is accepted) costs
HAProxy's request-rate counter most of its refusals (``bench/results/counters17.md``), and a sparser
probe schedule costs windows with short periods the time it finds their end late. This replays one
fake-clock crawl per case (the harness of ``tests/test_rampup_limiters.py``, rampup on, robots.txt as
the crawl fetches it, 429s at once) up to the first send accepted after the first refusal, and reads
the sends with the model a counter that counts refused requests suggests: a window of ``W`` seconds
that lets a send through while at most ``N`` sends (accepted or refused, the send itself included)
fell in the ``W`` seconds up to it. No phase: the window slides.

For each send of the lock-out (the overshoot, every probe, the accepted one), it prints how many
windows ``W`` of the grid (:data:`WINDOWS`, 0.05 s to 47 s, eight per doubling) still fit every send
before it with some ``N``, and the earliest time after the send before it at which any of them lets
a send through: a probe sent before that time would be refused whatever the window (provably
wasted). At the accepted send it prints the rates ``N / W`` of the windows that fit every send, beside
the limiter's own rate, and what ``fit_counter`` (``policy/_rampup_counter.py``: HAProxy's blended
counter, ``N`` per ``T`` from a phase) makes of the same sends. Deterministic: no sockets, no sleeping.

    PYTHONPATH=src python bench/lockout_model.py [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from crawlpace.policy._rampup_counter import fit_counter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _modules import load_file


def _harness() -> ModuleType:
    """The harness and limiter models of ``tests/test_rampup_limiters.py`` (one source of truth)."""
    tests = Path(__file__).resolve().parent.parent / "tests"
    return load_file("test_rampup_limiters", tests / "test_rampup_limiters.py")


harness = _harness()

#: The windows tried: 0.05 s to 47 s, eight per doubling (a grid bound, not tuning: a finer one moves
#: the bounds printed by a few percent, not which probes they allow).
WINDOWS = [0.05 * 2.0 ** (i / 8) for i in range(80)]

#: (name, limiter, seconds, page latency): the first lock-out comes within the first 5 s.
CASES: list[tuple[str, Any, float, float]] = [
    ("HAProxy 100 per 10 s, periods from 0, 3 ms", harness.RequestRate(100, 10.0), 15.0, 0.003),
    ("HAProxy 100 per 10 s, periods from -2.8 s, 3 ms",
     harness.RequestRate(100, 10.0, _start=-2.8), 15.0, 0.003),
    ("HAProxy 100 per 10 s, periods from -6 s, 3 ms",
     harness.RequestRate(100, 10.0, _start=-6.0), 15.0, 0.003),
    ("window 11 per 1 s, phase 0.7, 50 ms", harness.ClockWindow(11, 1.0, 0.7), 30.0, 0.05),
    ("window 20 per 2 s, phase 0, 3 ms", harness.ClockWindow(20, 2.0, 0.0), 30.0, 0.003),
    ("window 50 per 5 s, phase 0.3, 3 ms", harness.ClockWindow(50, 5.0, 0.3), 30.0, 0.003),
]


@dataclass
class _Logged:
    """A limiter whose every arrival, and its answer, is kept."""

    limiter: Any
    sends: list[tuple[float, bool]]

    @property
    def capacity(self) -> float:
        return float(self.limiter.capacity)

    def arrive(self, now: float) -> Any:
        answer = self.limiter.arrive(now)
        self.sends.append((now, answer.status_code == 200))
        return answer

    def leave(self, now: float) -> None:
        self.limiter.leave(now)


def _bounds(sends: list[tuple[float, bool]], times: list[float], window: float) -> tuple[int, float]:
    """The limits ``N`` a sliding ``window`` fitting every send allows: at least the count any accepted
    send saw, under the count any refused one saw (each send counts itself)."""
    low, high = 0, math.inf
    for at, ok in sends:
        seen = bisect_right(times, at) - bisect_right(times, at - window)
        if ok:
            low = max(low, seen)
        else:
            high = min(high, seen - 1)
    return low, high


def _opens(times: list[float], window: float, limit: float, after: float) -> float:
    """The earliest time past ``after`` at which a send sees at most ``limit`` (itself counted) in the
    ``window`` up to it, with nothing sent after ``times``: just after ``after``, or as a send ages out."""
    for at in sorted([after] + [t + window for t in times if t + window > after]):
        seen = len(times) - bisect_right(times, at + 1e-9 - window)
        if seen + 1 <= limit:
            return at
    return math.inf


def _read(name: str, limiter: Any, seconds: float, latency: float) -> dict[str, Any]:
    logged = _Logged(limiter, [])
    asyncio.run(harness.crawl(logged, seconds, latency=latency, instant=True, robots=0.005,
                              robots_counted=True, robots_unmeasured=True))
    sends = logged.sends
    first = next(i for i, (_, ok) in enumerate(sends) if not ok)
    end = next(i for i in range(first, len(sends)) if sends[i][1])
    steps = []
    wasted = 0
    for j in range(first, end + 1):
        before = sends[:j]
        times = [at for at, _ in before]
        fitting = [w for w in WINDOWS if (b := _bounds(before, times, w))[0] <= b[1]]
        earliest = math.inf
        for w in fitting:
            earliest = min(earliest, _opens(times, w, _bounds(before, times, w)[1], times[-1]))
        sent, ok = sends[j]
        if j > first and not ok and sent < earliest:
            wasted += 1
        steps.append({"sent": round(sent, 3), "accepted": ok, "windows": len(fitting),
                      "shortest": round(fitting[0], 2) if fitting else None,
                      "earliest_end": round(earliest, 3) if j > first and math.isfinite(earliest) else None})
    upto = sends[: end + 1]
    times = [at for at, _ in upto]
    rates = [(b[0] / w, b[1] / w) for w in WINDOWS if (b := _bounds(upto, times, w))[0] <= b[1]]
    span = [round(min(lo for lo, _ in rates), 2), round(max(hi for _, hi in rates), 2)] if rates else None
    fit = fit_counter(upto, sends[end][0] - sends[0][0], now=sends[end][0])
    return {
        "case": name, "rate": round(logged.capacity, 3), "accepted_before": first,
        "refused_probes": end - first - 1, "provably_wasted": wasted, "steps": steps,
        "windows_fitting": len(rates),
        "window_rates": span,
        "fit_counter": None if fit is None else [round(fit.low.rate, 2), round(fit.high, 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first case only")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    rows = []
    for name, limiter, seconds, latency in CASES[:1] if args.quick else CASES:
        row = _read(name, limiter, seconds, latency)
        rows.append(row)
        print(f"## {name}: {row['accepted_before']} accepted before the first refusal, "
              f"{row['refused_probes']} refused probes, {row['provably_wasted']} provably wasted")
        print("| send | answer | windows that fit the sends before it | shortest | earliest end they allow |")
        print("|---:|---|---:|---:|---:|")
        for step in row["steps"]:
            answer = "accepted" if step["accepted"] else "refused"
            print(f"| {step['sent']:.3f} | {answer} | {step['windows']} | {step['shortest']} "
                  f"| {step['earliest_end']} |")
        rates = row["window_rates"]
        said = "none" if rates is None else f"{rates[0]:.3g} to {rates[1]:.3g}/s"
        counter = row["fit_counter"]
        blended = "no fit (too loose)" if counter is None else f"{counter[0]:.3g} to {counter[1]:.3g}/s"
        print(f"\nAt the accepted send: {row['windows_fitting']} sliding windows fit every send, letting "
              f"{said} through; the limiter's rate {row['rate']:.3g}/s; fit_counter: {blended}.\n")
    if args.json:
        print(json.dumps({"benchmark": "lockout_model", "quick": args.quick, "cases": rows}))


if __name__ == "__main__":
    main()
