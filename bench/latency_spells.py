"""A quick token bucket whose answers slow down in spells that our rate does not cause, on a fake clock.

On a loaded machine the random farm (one process on the same cores as the crawler) answers every site
slower for seconds at a time, whatever the crawler sends; rampup reads each such spell as the site's knee
and cuts its rate with no refusal, and the largest fast sites then set the farm's makespan
(``bench/results/makespan1.md``). This replays that on the harness of ``tests/test_rampup_limiters.py``:
a token bucket (the random farm's bucket05: 44.1/s, burst 20, Retry-After) whose answers take 3 ms, or
``slow`` seconds inside each spell, the spells fixed in time. Printed per case: goodput over capacity,
refusals, and the share of capacity in the last 30 s (after the last cut, whether the rate came back).
Deterministic: no sockets, no sleeping.

    PYTHONPATH=src python bench/latency_spells.py [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from limiter_kinds import harness  # the test harness's models, loaded once (one source of truth)

#: Seconds each case runs, and the tail over which the rate is read again.
SECONDS, TAIL = 150.0, 30.0


#: The harness's server whose answer times it asks for (``service``); loaded at run time, so untyped.
_TIMED: Any = harness.HardKnee


@dataclass
class SpellBucket(_TIMED):  # type: ignore[misc]  # (a subclass of the harness's untyped class)
    """A token bucket whose accepted requests take ``quick`` seconds, or ``slow`` inside a spell.

    A subclass of the harness's ``HardKnee`` only so that the harness asks it for each answer's time
    (``service``); it has no limit on requests in flight."""

    rate: float = 44.1
    burst: float = 20.0
    quick: float = 0.003
    spells: tuple[tuple[float, float, float], ...] = ()
    now: float = 0.0
    accepted_at: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.inner = harness.Bucket(self.rate, self.burst, 1)

    @property
    def capacity(self) -> float:
        return self.rate

    def arrive(self, now: float) -> Any:
        self.now = now
        answer = self.inner.arrive(now)
        if answer.status_code == 200:
            self._inflight += 1
            self.accepted_at.append(now)
        return answer

    def leave(self, now: float) -> None:
        self._inflight -= 1

    def service(self) -> float:
        for start, end, slow in self.spells:
            if start <= self.now < end:
                return slow
        return self.quick


Spells = tuple[tuple[float, float, float], ...]


def spells_every(first: float, every: float, length: float, slow: float) -> Spells:
    """Spells of ``length`` seconds at ``slow`` seconds an answer, one every ``every`` from ``first`` on."""
    starts: list[float] = []
    at = first
    while at < SECONDS:
        starts.append(at)
        at += every
    return tuple((start, start + length, slow) for start in starts)


#: (name, spells): each spell (start, end, seconds an answer takes inside it).
CASES: list[tuple[str, Spells]] = [
    ("steady 3 ms", ()),
    ("50 ms for the first 10 s (a baseline learned at load), then 3 ms", ((0.0, 10.0, 0.05),)),
    ("3 ms; spells of 0.1 s answers, 5 s long, every 20 s", spells_every(10.0, 20.0, 5.0, 0.1)),
    ("3 ms; spells of 0.1 s answers, 1 s long, every 20 s", spells_every(10.0, 20.0, 1.0, 0.1)),
    ("50 ms for 10 s, then spells of 0.1-0.25 s, 3 s long, every 15 s",
     ((0.0, 10.0, 0.05), *((start, end, 0.1 + 0.05 * (index % 4))
                           for index, (start, end, _slow) in enumerate(spells_every(15.0, 15.0, 3.0, 0.1))))),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two cases: steady, and 5 s spells")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    args = parser.parse_args()
    rows = []
    print("| case | goodput / capacity | refusals | last 30 s / capacity |")
    print("|---|---:|---:|---:|")
    for name, spells in [CASES[0], CASES[2]] if args.quick else CASES:
        site = SpellBucket(latency=0.003, per_inflight=0.0, limit=10**6, spells=spells)
        out = asyncio.run(harness.crawl(site, SECONDS, latency=0.003))
        tail = sum(1 for at in site.accepted_at if at >= SECONDS - TAIL) / TAIL / site.rate
        rows.append({"case": name, "share": round(out.share, 3), "refused": out.refused,
                     "tail": round(tail, 3)})
        print(f"| {name} | {out.share:.3f} | {out.refused} | {tail:.2f} |", flush=True)
    if args.json:
        print(json.dumps({"benchmark": "latency_spells", "quick": args.quick, "seconds": SECONDS,
                          "rows": rows}))


if __name__ == "__main__":
    main()
