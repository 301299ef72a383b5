"""The random farm's ``errors`` sites on a fake clock, each crawled as ``crawlpace crawl`` paces it.

Every ``errors`` site (no limit, 5-30 % of answers 5xx, up to 3 % hangs) of
``crawlpace.sim._random.draw_farm(seed, 30, seconds=60)`` for each farm seed, crawled once per crawl
seed as ``crawlpace crawl`` paces one host: rampup on, 16 workers, the work left told to rampup
(``Throttler.count_work``), a failed page sent again, a 5xx answered in 1 ms (the simulator's flaky site
refuses at once), a page in its latency +/-20 %, a hang under the crawl's 10 s timeout answered 200
late and a longer one timed out (and resent). Variants: ``full`` (as drawn), ``nohang`` (hangs 0: the
pacing alone), ``clean`` (errors 0 too: what the same crawl gets from the site without errors). The
figure is each crawl's active period, first send to last; deterministic, whatever the load.

Besides, each crawl counts what the scope logs: breaker openings and the seconds they paused, the
breaker's samples taken without a pause (under rampup), the errors rule's verdicts ("about load",
"not about load") and a give-up. (verdict1's, errors14's and
hedge1's harness, kept here: theirs lived in /tmp.)

    python bench/errors_farm.py --seeds 1-40 --crawl-seeds 1,2,3 --variants nohang,clean --rows main.jsonl
    python bench/errors_farm.py --seeds 1-40 --crawl-seeds 1,2,3 --variants nohang --rows new.jsonl \\
        --against main.jsonl                     # crawl by crawl against another tree's rows
    python bench/errors_farm.py --seeds 9 --site 9:errors08 --crawl-seeds 3 --variants nohang -v

(``--against`` takes the clean crawls from either file.) Run another tree with ``PYTHONPATH=<tree>/src``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import re
import sys
from typing import Any

from crawlpace import ScopeGivenUp, Settings, Throttler
from crawlpace.sim._random import draw_farm
from crawlpace.testing import MockClock

#: ``crawlpace crawl``'s timeout: a hang at least this long is a failure, resent.
TIMEOUT = 10.0
#: No crawl goes on past this (fake) second.
LIMIT = 300.0
_PAUSED = re.compile(r"paused ([0-9.e+-]+)s")


def parse_seeds(text: str) -> list[int]:
    """``1-12`` or ``3,5,9`` (or both, comma-separated) as a list."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += list(range(int(low), int(high or low) + 1))
    return seeds


class _Events(logging.Handler):
    """Counts what the scope's log says of the breaker and the errors rule."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: dict[str, float] = {"opens": 0, "paused": 0.0, "samples": 0, "load": 0, "own": 0}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "sampled without a pause" in message:  # the breaker's own log (under rampup: no pause)
            self.counts["samples"] += 1
        elif "breaker opened" in message and record.name == "crawlpace.policy.scope":
            self.counts["opens"] += 1
            found = _PAUSED.search(message)
            self.counts["paused"] += float(found.group(1)) if found else 0.0
        elif "not about load" in message:
            self.counts["own"] += 1
        elif ": about load" in message:
            self.counts["load"] += 1


async def crawl(site: dict[str, Any], seed: int, variant: str, verbose: bool = False) -> dict[str, Any]:
    """Crawl one site's pages once; its figures."""
    errors = 0.0 if variant == "clean" else float(site["errors"])
    hangs = 0.0 if variant in ("clean", "nohang") else float(site["hangs"])
    hang, page = float(site["hang"]), float(site["latency"])
    status, pages = int(site["status"]), int(site["pages"])
    clock = MockClock(autojump=True)
    # A string seed is hashed (SHA-512): nearby integer seeds start Python's generator on correlated
    # draws (seed * 1000003 + pages gave crawl seed 2 a first draw under 0.31 on six sites of six).
    rng = random.Random(f"{site['seed']}:{seed}")
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True},
                                     "CONCURRENT_REQUESTS": 16})
    events = _Events()
    log, own = logging.getLogger("crawlpace.policy.scope"), logging.getLogger("crawlpace.policy.breaker")
    log.addHandler(events)
    log.setLevel(logging.DEBUG)
    own.addHandler(events)
    own.setLevel(logging.DEBUG)
    todo = list(range(pages))
    out = 0
    sends: list[float] = []
    given_up = False
    try:
        async with Throttler(settings, clock=clock, rng=random.Random(seed)) as throttler:
            throttler.count_work(lambda scope: (len(todo) + out, False))

            async def worker() -> None:
                nonlocal out, given_up
                while (todo or out) and clock.now() < LIMIT and not given_up:
                    if not todo:
                        await clock.sleep(0.01)
                        continue
                    number = todo.pop(0)
                    out += 1
                    try:
                        async with throttler.slot(f"https://flaky.example/page/{number}") as permit:
                            sends.append(clock.now())
                            draw = rng.random()
                            if verbose:
                                print(f"{clock.now():8.3f} send {number} {'E' if draw < errors else 'ok'}",
                                      file=sys.stderr)
                            if draw < errors:
                                await clock.sleep(0.001)
                                permit.feedback(status=status, latency=0.001)
                                todo.append(number)
                            elif draw < errors + hangs and hang >= TIMEOUT:
                                await clock.sleep(TIMEOUT)
                                permit.feedback(exception=TimeoutError(), latency=TIMEOUT)
                                todo.append(number)
                            else:  # a page, or a hang answered late
                                took = (hang if draw < errors + hangs
                                        else max(page * rng.uniform(0.8, 1.2), 0.0005))
                                await clock.sleep(took)
                                permit.feedback(status=200, latency=took)
                    except ScopeGivenUp:
                        given_up = True
                    finally:
                        out -= 1

            await asyncio.gather(*(worker() for _ in range(16)))
    finally:
        log.removeHandler(events)
        own.removeHandler(events)
    return {"active": sends[-1] - sends[0] if sends else 0.0, "sends": len(sends), "given_up": given_up,
            "left": len(todo), **events.counts}


def compare(rows: list[dict[str, Any]], base: list[dict[str, Any]]) -> None:
    """Print the totals of both sets, crawl by crawl where both have it, and each crawl that moved by 5 %."""
    clean = {(r["site"], r["cs"]): r["active"] for r in base + rows if r["variant"] == "clean"}
    before = {(r["site"], r["cs"], r["variant"]): r for r in base}
    for variant in sorted({r["variant"] for r in rows} - {"clean"}):
        pairs = [(before[key], r) for r in rows if r["variant"] == variant
                 and (key := (r["site"], r["cs"], variant)) in before and (r["site"], r["cs"]) in clean]
        if not pairs:
            continue
        ratios = [sorted(clean[(r["site"], r["cs"])] / max(r["active"], 1e-9) for r in side)
                  for side in ([a for a, _ in pairs], [b for _, b in pairs])]
        moved = [(a, b) for a, b in pairs if abs(b["active"] - a["active"]) > 0.05 * a["active"]]
        def total(key: str, side: int, pairs: list[tuple[dict[str, Any], dict[str, Any]]] = pairs) -> float:
            return float(sum(pair[side][key] for pair in pairs))

        print(f"{variant}: {len(pairs)} crawls; "
              f"active s {total('active', 0):.2f} -> {total('active', 1):.2f}; "
              f"mean x clean {sum(ratios[0]) / len(pairs):.3f} -> {sum(ratios[1]) / len(pairs):.3f}; "
              f"p10 {ratios[0][len(pairs) // 10]:.3f} -> {ratios[1][len(pairs) // 10]:.3f}; "
              f"paused s {total('paused', 0):.0f} -> {total('paused', 1):.0f}; "
              f"'about load' {total('load', 0):.0f} -> {total('load', 1):.0f}; "
              f"given up {total('given_up', 0):.0f} -> {total('given_up', 1):.0f}; "
              f"faster {sum(b['active'] < a['active'] for a, b in moved)}, "
              f"slower {sum(b['active'] > a['active'] for a, b in moved)}")
        for a, b in sorted(moved, key=lambda pair: pair[1]["active"] - pair[0]["active"]):
            print(f"  {b['site']} s{b['cs']}: {a['active']:.2f} -> {b['active']:.2f} s (clean "
                  f"{clean[(b['site'], b['cs'])]:.2f}), paused {a['paused']:g} -> {b['paused']:g}, given up "
                  f"{a['given_up']} -> {b['given_up']}")


async def crawl_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every crawl the arguments ask for, its row printed as it comes."""
    rows: list[dict[str, Any]] = []
    for seed in parse_seeds(args.seeds):
        for site in draw_farm(seed, 30, seconds=60)["site"]:
            name = f"{seed}:{site['name']}"
            if not site["name"].startswith("errors") or (args.site and name != args.site):
                continue
            for crawl_seed in parse_seeds(args.crawl_seeds):
                for variant in args.variants.split(","):
                    row = {"site": name, "cs": crawl_seed, "variant": variant,
                           **await crawl(site, crawl_seed, variant, args.verbose),
                           "errors": site["errors"], "hangs": site["hangs"], "latency": site["latency"],
                           "status": site["status"], "pages": site["pages"]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seeds", default="1-12", help="farm seeds, 'A-B' or 'a,b,c' (default 1-12)")
    parser.add_argument("--crawl-seeds", default="1,2,3", help="crawl seeds (default 1,2,3)")
    parser.add_argument("--variants", default="nohang,clean",
                        help="of full, nohang, clean (default nohang,clean)")
    parser.add_argument("--site", help="only this site, 'seed:name' (e.g. 9:errors08)")
    parser.add_argument("--rows", help="write one JSON line per crawl to this file")
    parser.add_argument("--against", help="compare with rows another run wrote")
    parser.add_argument("--quick", action="store_true", help="farm seeds 1-2 and crawl seed 1 only")
    parser.add_argument("--json", action="store_true",
                        help="end with one JSON line of totals (each crawl's row is a JSON line anyway)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log crawlpace at DEBUG with the fake time, and each send, on stderr")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.crawl_seeds = "1-2", "1"
    if args.verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logging.getLogger("crawlpace").addHandler(handler)
        logging.getLogger("crawlpace").setLevel(logging.DEBUG)
    else:  # counted, not printed (Python's last resort would print the breaker's warnings)
        logging.getLogger("crawlpace.policy.scope").propagate = False
        logging.getLogger("crawlpace.policy.breaker").propagate = False
    rows = asyncio.run(crawl_all(args))
    if args.rows:
        with open(args.rows, "w", encoding="utf-8") as file:
            file.writelines(json.dumps(row) + "\n" for row in rows)
    if args.against:
        with open(args.against, encoding="utf-8") as file:
            compare(rows, [json.loads(line) for line in file if line.strip()])
    if args.json:
        variants = sorted({row["variant"] for row in rows})
        print(json.dumps({"benchmark": "errors_farm", "quick": args.quick, "seeds": args.seeds,
                          "crawl_seeds": args.crawl_seeds, "crawls": len(rows),
                          "active_s": {v: round(sum(r["active"] for r in rows if r["variant"] == v), 3)
                                       for v in variants},
                          "given_up": {v: sum(bool(r["given_up"]) for r in rows if r["variant"] == v)
                                       for v in variants}}))


if __name__ == "__main__":
    main()
