"""The start's share of each limiter kind's loss, on a fake clock: the seconds lost before the first fit
and after it, site by site, over fresh random farms.

Each site of ``draw_farm(seed, 30)`` whose kind has a fake-clock model here is crawled once as
``bench/farm_trace.py`` crawls a site (``tests/test_rampup_limiters.crawl``: 16 workers, rampup on,
pages in 20 ms, a model's own service time for the in-flight kinds), until its pages are accepted.
The models: ``bucket``/``strict`` a token bucket (``Retry-After`` of the next token where drawn),
``holds`` a bucket whose 429 demands its embargo, ``fixed``/``flask``/``sliding`` the simulator's own
windows (``FixedWindow`` chained, ``SlidingWindow`` counting refusals where drawn; ``Retry-After`` as
drawn; only the windows with no budget header: a header paces a window from the first answer),
``reqrate`` HAProxy's counter at its drawn phase, ``conncap`` a cap freed ``lag`` late, ``softknee``/
``hardknee`` the knee servers, ``queue`` nginx's line. ``errors`` is ``bench/start_bound.py``'s;
``flask``, ``headers``, ``shifting``, ``challenge`` and ``crawldelay`` are left out (headers, a moving limit,
a browser check, robots.txt).

The loss is measured against the site's capacity ``c`` (its limit, or in flight over service time):
a crawl of ``P`` pages in ``T`` seconds lost ``T - P / c``. It splits at the *first fit*, the time the
start's first episode left the crawl paced by what it learnt: the first ``fit`` (a lock-out's count over
its span) if one came before the second cut, else the first cut (a refusal's, or a knee's latency),
else the end. Before it: ``t - A(t) / c`` (``A(t)`` the pages accepted by then); after it, the rest.
A window's or a bucket's allowance can make the part before negative (pages past the capacity pace).
The oracle's own credit (a burst or a window's count sent at once) is on top of both.
Deterministic: no sockets, no sleeping.

    PYTHONPATH=src python bench/start_share.py --seeds 5101-5110
    PYTHONPATH=src python bench/start_share.py --quick --json
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import logging
import math
import statistics
import sys
from multiprocessing import Pool
from pathlib import Path
from typing import Any

from crawlpace.sim._limits import FixedWindow, SlidingWindow
from crawlpace.sim._random import draw_farm
from crawlpace.sim._rates import budget_headers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _modules import load_file, seed_list

_TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(_TESTS.parent))
limiters = load_file("tests.test_rampup_limiters", _TESTS / "test_rampup_limiters.py")

KINDS = ("bucket", "strict", "holds", "fixed", "sliding", "reqrate", "conncap", "softknee", "hardknee",
         "queue")
#: A page's answer time where the model has none of its own (``farm_trace.py``'s).
LATENCY = 0.02


class Window:
    """A window of the simulator (``FixedWindow`` or ``SlidingWindow``), with the drawn header family
    (``style``, ``"none"`` for none) and ``Retry-After`` (``"none"``, ``"refusals"``, ``"every"``)."""

    def __init__(self, counter: FixedWindow | SlidingWindow, style: str, retry_after: str) -> None:
        self.counter, self.style, self.retry_after = counter, style, retry_after

    @property
    def capacity(self) -> float:
        return self.counter.limit / self.counter.window

    def arrive(self, now: float) -> Any:
        allowed = self.counter.take(now)
        headers: dict[str, str] = {}
        reset = self.counter.reset(now)
        if self.style != "none":
            headers = {name.decode(): value.decode() for name, value in budget_headers(
                self.style, self.counter.limit, self.counter.remaining(now), reset, self.counter.window, now)}
        if not allowed and self.retry_after != "none":
            headers["Retry-After"] = str(max(1, math.ceil(reset)))
        return limiters.Response(200 if allowed else 429, headers)

    def leave(self, now: float) -> None:
        pass


def kind_of(spec: dict[str, Any]) -> str:
    """The farm kind a site was drawn as (its name less its number)."""
    return str(spec["name"]).rstrip("0123456789")


def model(spec: dict[str, Any]) -> tuple[Any, float]:
    """The limiter model of a site, and its page time."""
    kind = kind_of(spec)
    if kind in ("bucket", "strict"):
        wait = bool(spec["retry_after"])
        return limiters.Bucket(float(spec["rate"]), float(spec["burst"]), wait=wait), LATENCY
    if kind == "holds":
        return limiters.Bucket(float(spec["rate"]), float(spec["burst"]), hold=int(spec["embargo"])), LATENCY
    if kind in ("fixed", "flask", "sliding", "headers"):
        limit, window = int(spec["limit"]), float(spec["window"])
        counter: FixedWindow | SlidingWindow
        if spec.get("kind") == "sliding":
            counter = SlidingWindow(limit, window, count_refused=bool(spec.get("count_refused")))
        else:
            counter = FixedWindow(limit, window, chained=spec.get("kind") != "started")
        retry = spec.get("retry_after", "none")
        retry = ("refusals" if retry else "none") if isinstance(retry, bool) else retry
        return Window(counter, str(spec.get("style", "none")), str(retry)), LATENCY
    if kind == "reqrate":
        counter_ = limiters.RequestRate(float(spec["limit"]), float(spec["period"]))
        counter_._start = -float(spec.get("phase", 0.0)) * float(spec["period"])
        return counter_, LATENCY
    if kind == "conncap":
        return limiters.ConnectionCap(int(spec["cap"]), float(spec["latency"]), float(spec["lag"])), float(
            spec["latency"])
    if kind == "softknee":
        return limiters.Knee(int(spec["knee"]), float(spec["latency"]), float(spec["exponent"]),
                             int(spec["limit"])), float(spec["latency"])
    if kind == "hardknee":
        return limiters.HardKnee(float(spec["latency"]), float(spec["per_inflight"]),
                                 int(spec["limit"])), float(spec["latency"])
    if kind == "queue":
        return limiters.Queue(float(spec["rate"]), int(spec["burst"]), int(spec["delay"]),
                              int(spec["status"])), LATENCY
    raise ValueError(kind)


class Logged:
    """A limiter whose accepted arrivals are noted, and the time its pages were all accepted."""

    def __init__(self, inner: Any, pages: int) -> None:
        self.inner, self.pages = inner, pages
        self.now = 0.0
        self.accepted: list[float] = []
        self.refused = 0
        self.done = math.inf

    @property
    def capacity(self) -> float:
        return float(self.inner.capacity)

    def service(self) -> float:
        return float(self.inner.service())

    def arrive(self, now: float) -> Any:
        self.now = now
        answer = self.inner.arrive(now)
        if answer.status_code == 200:
            self.accepted.append(now)
            if len(self.accepted) == self.pages:
                self.done = now
        else:
            self.refused += 1
        return answer

    def leave(self, now: float) -> None:
        self.inner.leave(now)


class _Decisions(logging.Handler):
    def __init__(self, site: Logged) -> None:
        super().__init__(logging.DEBUG)
        self.site = site
        self.seen: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((self.site.now, record.getMessage()))


def per_second(accepted: list[float], end: float) -> list[dict[str, float]]:
    """Accepted sends in each second up to ``end``."""
    return [{"at": float(t),
             "rate": float(bisect.bisect_left(accepted, t + 1.0) - bisect.bisect_left(accepted, t))}
            for t in range(math.ceil(end))]


def first_fit(decisions: list[tuple[float, str]], end: float) -> float:
    """The time the start's first episode ended (see the module's docstring)."""
    cuts = [at for at, text in decisions if "rampup cut:" in text]
    # (The start's fit of a bucket with no burst is said in its cut's line.)
    fits = [at for at, text in decisions if "rampup fit:" in text or "fits the gaps" in text]
    if fits and (len(cuts) < 2 or fits[0] <= cuts[1]):
        return min(fits[0], end)
    return min(cuts[0], end) if cuts else end


def one(job: tuple[int, dict[str, Any]], show: bool = False) -> dict[str, Any]:
    """Crawl one site; its figures (``show``: print rampup's decisions and the accepted sends a second)."""
    seed, spec = job
    inner, latency = model(spec)
    pages = int(spec["pages"])
    site = Logged(inner, pages)
    capacity = site.capacity
    ideal = pages / capacity
    limit = 3.0 * ideal + 10.0
    handler = _Decisions(site)
    log = logging.getLogger("crawlpace.policy.rampup")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        asyncio.run(limiters.crawl(site, limit, latency=latency))
    finally:
        log.removeHandler(handler)
    done = min(site.done, limit)
    fit = first_fit(handler.seen, done)
    if show:
        print(spec)
        for at, text in handler.seen:
            if at <= done:
                print(f"{at:9.3f}  {text}")
        print(" ".join(f"{row['at']:g}:{row['rate']:g}" for row in per_second(site.accepted, done)))
    got = bisect.bisect_right(site.accepted, fit)
    before = fit - got / capacity
    return {"seed": seed, "site": spec["name"], "kind": kind_of(spec), "pages": pages,
            "capacity": round(capacity, 3), "ideal": round(ideal, 3), "crawl": round(done, 3),
            "first_fit": round(fit, 3), "loss_before": round(before, 3),
            "loss_after": round(done - ideal - before, 3), "refused": site.refused,
            "ratio": round(ideal / done, 3)}


def jobs(seeds: list[int], kinds: tuple[str, ...]) -> list[tuple[int, dict[str, Any]]]:
    """Every site of the kinds asked for; windows only where no budget header tells them (the headers pace
    those from the first answer, and the start has nothing to find)."""
    return [(seed, spec) for seed in seeds for spec in draw_farm(seed, 30)["site"]
            if kind_of(spec) in kinds and spec.get("style", "none") == "none"]


def table(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per kind: sites, mean seconds lost before and after the first fit, the start's share of the loss,
    and the mean crawl x capacity."""
    out: dict[str, dict[str, float]] = {}
    for kind in [*KINDS, "all"]:
        some = [r for r in rows if kind in ("all", r["kind"])]
        if not some:
            continue
        before = statistics.mean(r["loss_before"] for r in some)
        after = statistics.mean(r["loss_after"] for r in some)
        lost = sum(max(0.0, r["loss_before"]) + max(0.0, r["loss_after"]) for r in some)
        start = sum(max(0.0, r["loss_before"]) for r in some)
        out[kind] = {"sites": len(some), "before": round(before, 2), "after": round(after, 2),
                     "start_share": round(start / lost, 2) if lost else 0.0,
                     "ratio": round(statistics.mean(r["ratio"] for r in some), 3),
                     "fit_s": round(statistics.mean(r["first_fit"] for r in some), 2),
                     "refused": round(statistics.mean(r["refused"] for r in some), 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="5101-5106", help="farm seeds, 'A-B' or 'A,B' (default 5101-5106)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="kinds to crawl (default: all modelled)")
    parser.add_argument("--rows", help="write every site's figures to this JSON file")
    parser.add_argument("--against", help="rows an earlier run wrote: compare site by site")
    parser.add_argument("--quick", action="store_true", help="one seed, the rate-limited kinds (a minute)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON on the last line")
    parser.add_argument("--trace", help="SEED:SITE: crawl that one site and print rampup's decisions")
    args = parser.parse_args(argv)
    if args.trace:
        seed_text, name = args.trace.split(":")
        spec = next(s for s in draw_farm(int(seed_text), 30)["site"] if s["name"] == name)
        print(json.dumps(one((int(seed_text), spec), show=True)))
        return 0
    kinds = tuple(args.kinds.split(","))
    seeds = seed_list(args.seeds)
    if args.quick:
        seeds, kinds = seeds[:1], ("bucket", "strict", "fixed", "sliding", "reqrate")
    with Pool(2) as pool:
        rows = pool.map(one, jobs(seeds, kinds), chunksize=1)
    if args.rows:
        Path(args.rows).write_text(json.dumps(rows), encoding="utf-8")
    result = table(rows)
    print("| kind | sites | first fit s | lost before s | lost after s | start's share | x capacity "
          "| refused |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for kind, s in result.items():
        print(f"| {kind} | {s['sites']:g} | {s['fit_s']:.2f} | {s['before']:.2f} | {s['after']:.2f} | "
              f"{s['start_share']:.2f} | {s['ratio']:.3f} | {s['refused']:.2f} |")
    if args.against:
        earlier = json.loads(Path(args.against).read_text(encoding="utf-8"))
        before = {(r["seed"], r["site"]): r for r in earlier}
        moved = [(before[(r["seed"], r["site"])], r) for r in rows if (r["seed"], r["site"]) in before
                 and abs(before[(r["seed"], r["site"])]["crawl"] - r["crawl"]) > 1e-9]
        print(f"against {len(before)} sites: {len(moved)} moved")
        for b, r in sorted(moved, key=lambda p: p[1]["crawl"] - p[0]["crawl"]):
            print(f"  {r['seed']}:{r['site']} {b['crawl']:.2f} -> {r['crawl']:.2f} s "
                  f"(x capacity {b['ratio']} -> {r['ratio']}), refused {b['refused']} -> {r['refused']}")
    if args.json:
        print(json.dumps({"benchmark": "start_share", "seeds": args.seeds, "kinds": result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
