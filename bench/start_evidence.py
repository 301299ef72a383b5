"""What the start's sends can tell of a token bucket before its first refusal, on a fake clock.

The first hold's fit (``BucketFit._fit_holds``) reads the start's accepted sends and the one refused
send. This script plays a send pattern against a grid of buckets (full at the first send), fits the
record up to the first refusal as the library does (:func:`bucket_fit`, first=True), and reports how
narrow the fit is:

* ``span``: the highest rate over the lowest among the bursts 1-10 that fit (the farm draws bursts
  1-10; the fit itself tries every burst up to the accepted sends): how far apart the buckets the
  record cannot tell apart lie;
* ``near``: the posterior mass (each burst by ``1 / b`` times its band's log-width, the band clipped to
  one token per 40 s hold and the refused pace, as ``belief_of(evidence=True)`` weighs it) within 15 %
  of the true rate;
* ``over``: the posterior mass above the true rate (a bet on the median is a coin flip at 0.5);
* ``t1``: seconds from the first send to the first refusal (what the pattern costs before it).

Patterns: ``main`` (the start's own sends, recorded from the library against an unlimited 3 ms site),
``pause P@k`` (main with a pause of ``P`` seconds after send ``k``), ``slow s@k`` (main with every gap
after send ``k`` stretched ``s`` times: a slower climb).

    python bench/start_evidence.py          # the table
    python bench/start_evidence.py --quick --json   # 6 rates, main and two patterns; one JSON line
    python bench/start_evidence.py --hindsight   # a pause just before the send that was refused

``--hindsight``: for three farm buckets, the fits when a pause of 0-10 s comes just before the send
the start had refused (a timing known only after the refusal: the upper bound of "a pause before the
doubling's last step").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crawlpace.policy._rampup_bucket import bucket_fit
from holds_battery import Answer, crawl_site

RATES = [0.5 * 60.0 ** (i / 11) for i in range(12)]  # 0.5-30/s log-spaced, as the holds farm draws
BURSTS = list(range(1, 11))
HOLD = 40.0  # the least rate kept is one token per hold (the fit's `least`)
NEAR = 0.15


@dataclass
class Unlimited:
    """A site that takes every send, recording when each came."""

    times: list[float]

    def arrive(self, now: float) -> Answer:
        self.times.append(now)
        return Answer(200)


def start_sends(seconds: float = 6.0) -> list[float]:
    """The start's send times (from the first send) against an unlimited 3 ms site."""
    site = Unlimited([])
    asyncio.run(crawl_site(site, 10_000, 0.003, cap=seconds))
    return [t - site.times[0] for t in site.times]


def play(times: list[float], rate: float, burst: int) -> tuple[list[float], float | None]:
    """The accepted sends up to the first refusal, and the refused send's time (None: none)."""
    level, last, accepted = float(burst), 0.0, []
    for at in times:
        level = min(float(burst), level + (at - last) * rate)
        last = at
        if level >= 1.0:
            level -= 1.0
            accepted.append(at)
        else:
            return accepted, at
    return accepted, None


def paused(times: list[float], after: int, pause: float) -> list[float]:
    return [t + (pause if i > after else 0.0) for i, t in enumerate(times)]


def slowed(times: list[float], after: int, stretch: float) -> list[float]:
    if after >= len(times):
        return list(times)
    out = times[: after + 1]
    for a, b in zip(times[after:], times[after + 1:], strict=False):
        out.append(out[-1] + (b - a) * stretch)
    return out


def judge(times: list[float], rate: float, burst: int) -> dict[str, float] | None:
    accepted, refused = play(times, rate, burst)
    if refused is None or not accepted:
        return None
    fits = bucket_fit(accepted, [refused], first=True)
    if not fits:
        return None
    gap = refused - accepted[-1]
    top = 1.0 / gap if gap > 0.0 else math.inf
    farm = [(lo, hi) for b, lo, hi, _ in fits if b <= max(BURSTS)]
    span = max(hi for _, hi in farm) / max(min(lo for lo, _ in farm), 1e-9) if farm else math.inf
    mass = near = over = 0.0
    for _, lo, hi, weight in fits:
        lo, hi = max(lo, 1.0 / HOLD), min(hi, top)
        if hi <= lo:
            continue
        width = math.log(hi / lo)
        w = weight * width
        mass += w
        a, b = max(lo, rate / (1 + NEAR)), min(hi, rate * (1 + NEAR))
        if b > a:
            near += w * math.log(b / a) / width
        if hi > rate:
            over += w * math.log(hi / max(lo, rate)) / width
    if mass <= 0.0:
        return None
    return {"span": span, "near": near / mass, "over": over / mass, "t1": refused}


def row(name: str, times: list[float], base: list[float]) -> dict[str, float | str]:
    spans, nears, overs, costs = [], [], [], []
    for rate in RATES:
        for burst in BURSTS:
            got, was = judge(times, rate, burst), judge(base, rate, burst)
            if got is None or was is None:
                continue
            spans.append(got["span"])
            nears.append(got["near"])
            overs.append(got["over"])
            costs.append(got["t1"] - was["t1"])
    return {"pattern": name, "buckets": len(spans), "span_median": statistics.median(spans),
            "near_mean": statistics.mean(nears), "over_mean": statistics.mean(overs),
            "over_within_0.35_0.65": sum(0.35 <= o <= 0.65 for o in overs) / len(overs),
            "extra_t1_mean": statistics.mean(costs)}


def hindsight(base: list[float]) -> None:
    for rate, burst in [(2.37, 8), (20.7, 5), (10.4, 6)]:  # holds18, holds27, holds07
        refused_at = len(play(base, rate, burst)[0])  # the index of the send refused
        for pause in (0.0, 1.0, 3.0, 10.0):
            accepted, refused = play(paused(base, refused_at - 1, pause), rate, burst)
            fits = bucket_fit(accepted, [refused or 0.0], first=True)
            bands = " ".join(f"b{b}:{lo:.3g}-{hi:.3g}" for b, lo, hi, _ in fits)
            print(f"{rate}/s b{burst}, pause {pause:g} s before send {refused_at}: {len(accepted)} accepted, "
                  f"refused at {refused or 0.0:.2f} s | {bands}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="6 rates, main and two patterns")
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    parser.add_argument("--hindsight", action="store_true")
    args = parser.parse_args()
    base = start_sends()
    if args.hindsight:
        hindsight(base)
        return
    patterns: list[tuple[str, list[float]]] = [("main", base)]
    if args.quick:
        RATES[:] = RATES[::2]
        patterns += [("pause 1@8", paused(base, 8, 1.0)), ("slow 2@8", slowed(base, 8, 2.0))]
    else:
        for pause in (1.0, 3.0, 10.0):
            for after in (4, 8, 16):
                patterns.append((f"pause {pause:g}@{after}", paused(base, after, pause)))
        for stretch in (2.0, 4.0):
            for after in (2, 8):
                patterns.append((f"slow {stretch:g}@{after}", slowed(base, after, stretch)))
    rows = [row(name, times, base) for name, times in patterns]
    if args.json:
        print(json.dumps({"patterns": rows}))
        return
    print(f"{'pattern':14s} {'buckets':>7s} {'span (b1-10)':>12s} {'near 15%':>9s} {'over':>6s} "
          f"{'coin flips':>10s} {'+t1 s':>7s}")
    for r in rows:
        print(f"{r['pattern']:14s} {r['buckets']:7d} {r['span_median']:12.2f} {r['near_mean']:9.3f} "
              f"{r['over_mean']:6.3f} {r['over_within_0.35_0.65']:10.2f} {r['extra_t1_mean']:7.2f}")


if __name__ == "__main__":
    main()
