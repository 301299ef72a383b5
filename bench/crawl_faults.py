"""``crawlpace crawl`` against sites whose trouble is not a rate limit, and a fixed limit under pushback.

Run it as ``python bench/crawl_faults.py`` (``--quick`` for a run under a
minute, ``--json`` for a machine-readable last line).

Four sites on loopback, each crawled on its own by a ``CrawlJob`` (the
command's adaptive defaults unless said otherwise):

* ``flaky503``: no limit, a quarter of the answers 503 at random. Reported:
  its sends a second as a share of the same site's with no errors (the
  reference, measured in the same run: the site's capacity as the crawl
  finds it), with the adaptive defaults and with fixed limits (``--delay 0.02
  --per-host 4``, 50/s). Pages a second are lower by the resends a 503 costs.
* ``hangs``: no limit, 21 % of the answers 500 and 2 % hanging 30 s (the
  crawl's timeout is 3 s). Reported: pages fetched, pages given up.
* ``fixed``: ``--delay 0.05 --per-host 1`` (20/s) against a token bucket of
  10/s (bursts of 2) answering 429 without ``Retry-After``. Reported: sends
  per 10 s after the first 20 s (per 1 s after the first 2 s with ``--quick``), their
  spread (max / min), and refusals.
* ``counted``: a limiter that counts refused requests too (HAProxy's
  ``http_req_rate``), 10/s over a sliding second, ``--retries 3``. Reported:
  the most sends any URL got (at most 4 allowed).

``--quick`` crawls fewer pages and cuts each crawl at 8 s (300 s in the full run); a cut
crawl's outcomes say ``unfinished (time limit)``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import os
import platform
import random
import tempfile
import time
from collections import Counter, defaultdict, deque
from pathlib import Path
from typing import Any

from crawlpace import Settings
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.sim import SimServer
from crawlpace.sim._asgi import Receive, Scope, Send, respond

HOST = "127.0.0.2"


class App:
    """An ASGI site; :meth:`answer` decides each page's status (robots.txt: 404)."""

    def __init__(self) -> None:
        self.sends: defaultdict[str, list[float]] = defaultdict(list)
        self.rng = random.Random(11)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        path, now = str(scope.get("path")), time.monotonic()
        if path == "/robots.txt":
            await respond(send, 404, b"")
            return
        self.sends[path].append(now)
        status, wait = self.answer(now)
        if wait:
            await asyncio.sleep(wait)
        await respond(send, status, b"page" if status == 200 else b"no")

    def answer(self, now: float) -> tuple[int, float]:
        return 200, 0.0


class Flaky503(App):
    def __init__(self, share: float) -> None:
        super().__init__()
        self.share = share

    def answer(self, now: float) -> tuple[int, float]:
        return (503 if self.rng.random() < self.share else 200), 0.0


class Hangs(App):
    def answer(self, now: float) -> tuple[int, float]:
        draw = self.rng.random()
        return (500, 0.0) if draw < 0.21 else (200, 30.0 if draw < 0.23 else 0.0)


class Bucket(App):
    def __init__(self, rate: float, burst: float) -> None:
        super().__init__()
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, time.monotonic()

    def answer(self, now: float) -> tuple[int, float]:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 200, 0.0
        return 429, 0.0


class Counted(App):
    """Refuses over ``limit`` requests in the last second, refused ones counted (HAProxy's http_req_rate)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.window = limit, deque[float]()

    def answer(self, now: float) -> tuple[int, float]:
        self.window.append(now)
        while self.window and self.window[0] <= now - 1.0:
            self.window.popleft()
        return (429 if len(self.window) > self.limit else 200), 0.0


def adaptive() -> Settings:
    """The command's defaults with no throttling option: rampup for every host, 64 in flight."""
    settings = Settings()
    return dataclasses.replace(settings, concurrent_requests=64,
                               scope_defaults=dataclasses.replace(settings.scope_defaults, rampup=True))


def fixed(delay: float, per_host: int) -> Settings:
    settings = Settings()
    return dataclasses.replace(settings, scope_defaults=dataclasses.replace(
        settings.scope_defaults, delay=delay, delay_per_slot=delay, concurrency=per_host))


async def crawl(app: App, settings: Settings, pages: int, *, retries: int = 3, read_timeout: float = 10.0,
                limit: float = 300.0) -> tuple[Counter[str], float]:
    with tempfile.TemporaryDirectory() as folder:
        async with SimServer(app, HOST) as server:
            job = CrawlJob(settings, CrawlOptions(output=Path(folder) / "out.jsonl", trust_env=False,
                                                  retries=retries, timeout=read_timeout))
            started = time.monotonic()
            try:
                summary = await asyncio.wait_for(job.run([f"{server.url}/p{n}" for n in range(pages)]), limit)
                outcomes = Counter(summary.outcomes)
            except TimeoutError:  # what it answered so far, and that it was cut
                outcomes = Counter(job.summary.outcomes)
                outcomes["unfinished (time limit)"] += 1
            return outcomes, time.monotonic() - started


def good_per_second(app: App, seconds: float) -> float:
    return sum(len(times) for times in app.sends.values()) / seconds


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How big each part of the run is: pages per crawl, the longest a crawl may take, and the
    ``fixed`` case's settling time and bin (seconds)."""

    flaky_pages: int
    hang_pages: int
    fixed_pages: int
    counted_pages: int
    limit: float
    settle: float
    bin: float


#: The full run, and ``--quick``: 7 crawls that together stay under a minute on an idle machine
#: (each is cut at ``limit`` anyway, and says so in its outcomes).
FULL = Sizes(flaky_pages=2000, hang_pages=245, fixed_pages=900, counted_pages=300, limit=300.0, settle=20.0,
             bin=10.0)
QUICK = Sizes(flaky_pages=150, hang_pages=30, fixed_pages=70, counted_pages=40, limit=8.0, settle=2.0,
              bin=1.0)


async def run(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    size = QUICK if quick else FULL
    for name, settings in (("flaky503", adaptive()), ("flaky503_fixed", fixed(0.02, 4))):
        clean, errors = Flaky503(0.0), Flaky503(0.25)
        _, clean_seconds = await crawl(clean, settings, size.flaky_pages, limit=size.limit)
        outcomes, seconds = await crawl(errors, settings, size.flaky_pages, limit=size.limit)
        clean_rate, rate = good_per_second(clean, clean_seconds), good_per_second(errors, seconds)
        out[name] = {"sends_per_s": rate, "reference_sends_per_s": clean_rate, "share": rate / clean_rate,
                     "pages_per_s": outcomes["ok"] / seconds, "outcomes": dict(outcomes)}

    hangs = Hangs()
    outcomes, seconds = await crawl(hangs, adaptive(), size.hang_pages, read_timeout=3.0, limit=size.limit)
    out["hangs"] = {"outcomes": dict(outcomes), "seconds": seconds,
                    "requests": sum(map(len, hangs.sends.values()))}

    bucket = Bucket(10.0, 2.0)
    outcomes, seconds = await crawl(bucket, fixed(0.05, 1), size.fixed_pages, retries=10, limit=size.limit)
    times = sorted(t for ts in bucket.sends.values() for t in ts)
    first = times[0]
    bins = Counter(int((t - first) // size.bin) for t in times if t - first >= size.settle)
    full = [bins[key] for key in sorted(bins)][:-1]  # the last bin is cut short by the end
    least = min(full, default=0)
    out["fixed"] = {"bin_seconds": size.bin, "sends_per_bin": full,
                    "spread": max(full) / least if least else None,
                    "refusals": sum(len(ts) for ts in bucket.sends.values()) - outcomes["ok"],
                    "pages_per_s": outcomes["ok"] / seconds, "limit": 10.0}

    counted = Counted(10)
    outcomes, seconds = await crawl(counted, adaptive(), size.counted_pages, retries=3, limit=size.limit)
    out["counted"] = {"max_sends_per_url": max(map(len, counted.sends.values())), "outcomes": dict(outcomes),
                      "pages_per_s": outcomes["ok"] / seconds}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer pages, 1 s bins, each crawl cut at 8 s: a run under a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    started = time.monotonic()
    results = asyncio.run(run(args.quick))
    results["seconds"] = round(time.monotonic() - started, 1)
    hangs, fixed_, counted = results["hangs"], results["fixed"], results["counted"]
    for name in ("flaky503", "flaky503_fixed"):
        flaky = results[name]
        print(f"{name}: {flaky['sends_per_s']:.1f} sends/s, {flaky['share']:.2f} of the same site with "
              f"no errors ({flaky['reference_sends_per_s']:.1f}/s); {flaky['pages_per_s']:.1f} pages/s; "
              f"outcomes {flaky['outcomes']}")
    print(f"hangs: outcomes {hangs['outcomes']} in {hangs['seconds']:.0f} s, {hangs['requests']} requests")
    print(f"fixed: sends per {fixed_['bin_seconds']:g} s {fixed_['sends_per_bin']} "
          f"(spread {fixed_['spread']}), "
          f"{fixed_['refusals']} refusals, {fixed_['pages_per_s']:.1f} pages/s against a 10/s limit")
    print(f"counted: at most {counted['max_sends_per_url']} sends of one URL; outcomes {counted['outcomes']}")
    print(f"load average {os.getloadavg()[0]:.1f}; whole benchmark {results['seconds']:.1f} s")
    if args.json:
        date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        print(json.dumps({"bench": "crawl_faults", "date": date,
                          "python": platform.python_version(), "load": os.getloadavg()[0], **results}))


if __name__ == "__main__":
    main()
