"""A first lock-out probed where the refusals seen let a sliding window end, against doubling.

A counter that counts refused requests stays locked while probes keep coming, so each early probe
costs a refusal and lengthens the lock-out. The rule measured here places every probe at the earliest
time the sends so far allow the lock-out to end: a refused probe at ``t`` says the window still held
its limit at ``t``, which bounds the windows that fit (``bench/lockout_model.py``'s sliding windows
over every send, refused ones counted). ``any``: the earliest end over every fitting window; ``shortest``:
the end of the shortest fitting window alone (the lower bound on ``W`` the refusals give).

For each case (the harness of ``tests/test_rampup_limiters.py``, rampup on, 429s at once) the crawl
runs on the fake clock up to its first refusal. From the limiter's state there, the tool prints:

- when the limiter would let a send through with nothing more sent (``true_end``, a 1 ms scan);
- main's doubling probes: refused, the accepted probe's time, and the end its own refused probes
  left (the lock-out they added);
- the rule's probes, each sent to the same limiter at the bound: refused, the accepted one's time.

Deterministic: no sockets, no sleeping.

    PYTHONPATH=src python bench/lockout_bound.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _modules import load_file


def _model() -> ModuleType:
    """``bench/lockout_model.py`` (its windows, bounds and harness: one source of truth)."""
    return load_file("_lockout_model", Path(__file__).resolve().parent / "lockout_model.py")


model = _model()
harness = model.harness

#: The rule gives up a minute after the first refusal (no case here comes near it).
GIVE_UP = 60.0

#: (name, limiter factory, seconds, page latency). The first six are ``lockout_model.py``'s cases; the
#: last five were first run after the rule's verdict on the first six was read.
CASES: list[tuple[str, Callable[[], Any], float, float]] = [
    ("HAProxy 100/10 s from 0, 3 ms", lambda: harness.RequestRate(100, 10.0), 15.0, 0.003),
    ("HAProxy 100/10 s from -2.8 s, 3 ms", lambda: harness.RequestRate(100, 10.0, _start=-2.8), 15.0, 0.003),
    ("HAProxy 100/10 s from -6 s, 3 ms", lambda: harness.RequestRate(100, 10.0, _start=-6.0), 15.0, 0.003),
    ("window 11/1 s phase 0.7, 50 ms", lambda: harness.ClockWindow(11, 1.0, 0.7), 30.0, 0.05),
    ("window 20/2 s phase 0, 3 ms", lambda: harness.ClockWindow(20, 2.0, 0.0), 30.0, 0.003),
    ("window 50/5 s phase 0.3, 3 ms", lambda: harness.ClockWindow(50, 5.0, 0.3), 30.0, 0.003),
    ("HAProxy 100/10 s from 0, 20 ms", lambda: harness.RequestRate(100, 10.0), 15.0, 0.02),
    ("HAProxy 60/6 s from -1.5 s, 10 ms", lambda: harness.RequestRate(60, 6.0, _start=-1.5), 15.0, 0.01),
    ("HAProxy 10/1.4 s from -0.06 s, 20 ms", lambda: harness.RequestRate(10, 1.4, _start=-0.06), 20.0, 0.02),
    ("HAProxy 30/3 s from 0, 10 ms", lambda: harness.RequestRate(30, 3.0), 15.0, 0.01),
    ("window 30/3 s phase 0.5, 10 ms", lambda: harness.ClockWindow(30, 3.0, 0.5), 30.0, 0.01),
]


def bound(sends: list[tuple[float, bool]], variant: str) -> float:
    """The earliest time after the last send at which a sliding window fitting every send lets one
    through (``any``), or the shortest fitting window does (``shortest``); ``inf`` if none fits."""
    times = [at for at, _ in sends]
    fitting = [w for w in model.WINDOWS if (b := model._bounds(sends, times, w))[0] <= b[1]]
    if variant == "shortest":
        fitting = fitting[:1]
    ends = [model._opens(times, w, model._bounds(sends, times, w)[1], times[-1]) for w in fitting]
    return min(ends, default=math.inf)


def opens(limiter: Any, after: float) -> float:
    """The first millisecond after ``after`` at which ``limiter`` lets a send through, nothing else sent."""
    at = after
    while at < after + GIVE_UP:
        at += 0.001
        if copy.deepcopy(limiter).arrive(at).status_code == 200:
            return at
    return math.inf


def probe_at_bound(limiter: Any, sends: list[tuple[float, bool]], variant: str) -> tuple[int, float]:
    """Probe ``limiter`` (its state after ``sends``) at the rule's bound until one is accepted: the
    refused probes and the accepted one's time (``inf`` if none within :data:`GIVE_UP`)."""
    sends = list(sends)
    start, refused = sends[-1][0], 0
    while True:
        at = max(bound(sends, variant), sends[-1][0] + 0.001)
        if at > start + GIVE_UP:
            return refused, math.inf
        ok = limiter.arrive(at).status_code == 200
        sends.append((at, ok))
        if ok:
            return refused, at
        refused += 1


def read(name: str, make: Callable[[], Any], seconds: float, latency: float) -> dict[str, Any]:
    logged = model._Logged(make(), [])
    asyncio.run(harness.crawl(logged, seconds, latency=latency, instant=True, robots=0.005,
                              robots_counted=True, robots_unmeasured=True))
    sends = logged.sends
    first = next(i for i, (_, ok) in enumerate(sends) if not ok)
    end = next(i for i in range(first, len(sends)) if sends[i][1])
    at_first, at_last = make(), make()
    for k, (at, _) in enumerate(sends[:end]):
        if k <= first:
            at_first.arrive(at)
        at_last.arrive(at)
    true_end = opens(at_first, sends[first][0])
    row: dict[str, Any] = {
        "case": name, "first_refusal": round(sends[first][0], 3), "true_end": round(true_end, 3),
        "doubling": {"refused": end - first - 1, "accepted_at": round(sends[end][0], 3),
                     "end_its_probes_left": round(opens(at_last, sends[end - 1][0]), 3)},
    }
    for variant in ("any", "shortest"):
        refused, at = probe_at_bound(copy.deepcopy(at_first), sends[: first + 1], variant)
        row[variant] = {"refused": refused, "accepted_at": round(at, 3) if math.isfinite(at) else None}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--quick", action="store_true", help="the first two cases only")
    args = parser.parse_args()
    rows = [read(*case) for case in (CASES[:2] if args.quick else CASES)]
    print("| case | true end | doubling: refused, accepted at, end its probes left | bound (any): refused, "
          "accepted at | bound (shortest W): refused, accepted at |")
    print("|:--|--:|:--|:--|:--|")
    for r in rows:
        d, a, s = r["doubling"], r["any"], r["shortest"]
        print(f"| {r['case']} | {r['true_end']} | {d['refused']}, {d['accepted_at']}, "
              f"{d['end_its_probes_left']} | {a['refused']}, {a['accepted_at']} "
              f"| {s['refused']}, {s['accepted_at']} |")
    if args.json:
        print(json.dumps({"benchmark": "lockout_bound", "cases": rows}))


if __name__ == "__main__":
    main()
