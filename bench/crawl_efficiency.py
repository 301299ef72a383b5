"""Seven crawl set-ups on the same simulated farm: what each gets out of every site, and how much pushback.

Run it as ``python bench/crawl_efficiency.py`` (about 10 minutes a round; add ``--quick``
for a smoke run of a minute or two and ``--json`` for a machine-readable last line).

Every contender crawls the same list of page URLs, one after the other, each against a
fresh farm of the site simulator (``crawlpace sim``, the ``mixed`` farm unless
``--farm`` names another). ``--contenders NAME,NAME`` picks some of them; this order is
the default:

* **crawlpace-fixed**: ``crawlpace crawl URLS -o OUT.jsonl --quiet --json --delay 1
  --per-host 1``: fixed polite limits, what ``crawlpace crawl`` did by default before it
  became adaptive: robots.txt obeyed, per host 1 request in flight with a 1 s pause
  (jittered) between requests, 16 in flight over all hosts, up to 3 resends after a backoff
  answer or a transient failure, 10 s timeout.
* **crawlpace-rampup**: ``crawlpace crawl URLS -o OUT.jsonl --quiet --json --rampup``, the
  same as ``crawlpace crawl`` without a throttling option: for every host it starts from
  that polite pace and probes upward for the highest rate the site keeps answering without
  pushback. This is the reference of the comparison.
* **scrapy-autothrottle**: ``scrapy runspider bench/_peers/scrapy_list_spider.py`` with
  the spider's own settings: AutoThrottle on at its defaults (target concurrency 1),
  8 in flight per domain, 2 retries on Scrapy's default codes (429 and 503 among them),
  robots.txt obeyed, 10 s timeout.
* **scrapy-at4**: the same spider with ``-s AUTOTHROTTLE_TARGET_CONCURRENCY=4``, the
  AutoThrottle knob people turn when its default is too timid.
* **scrapy-fixed**: the same spider with AutoThrottle off and a fixed polite pace:
  ``-s AUTOTHROTTLE_ENABLED=False -s DOWNLOAD_DELAY=1.0 -s CONCURRENT_REQUESTS_PER_DOMAIN=1``,
  Scrapy's default randomisation of the delay left alone (0.5 to 1.5 s).
* **scrapy-crawlpace**: the same spider under crawlpace's Scrapy add-on, with rampup on for
  every host, the add-on's counterpart of ``crawlpace-rampup``:
  ``-s 'ADDONS={"crawlpace.scrapy.Addon": 100}' -s 'THROTTLING_SCOPE_DEFAULTS={"rampup": true}'
  -s AUTOTHROTTLE_ENABLED=False -s CONCURRENT_REQUESTS_PER_DOMAIN=1``. The last two undo the
  spider's AutoThrottle and its 8 per domain, which the add-on would otherwise take as its own
  limits (and crawlpace refuses AutoThrottle on a scope with rampup), so every host starts from
  the add-on's defaults, as ``crawlpace crawl`` does: 1 slot and 1 s between sends (jittered),
  16 in flight over all hosts. Retries (2, on Scrapy's codes), robots.txt and the 10 s timeout
  are the spider's, as for the other Scrapy rows.
* **aiohttp**: ``bench/_peers/naive_aiohttp.py``, what a quick script does: 8 workers over
  all hosts, a 1 s sleep and a resend after 429, 503 or an exception (3 resends at most),
  no robots.txt, 10 s timeout.

For each run the script starts ``crawlpace sim FARM --urls URLS --output FIG --plot PNG``
as a subprocess (so the farm has a process and a clock of its own), waits until it
serves, runs the contender as another subprocess under a time limit (300 s, 15 s with
``--quick``; past it, SIGTERM, then SIGKILL after a grace period, and the run counts as
cut), stops the farm with SIGTERM and reads the figures it writes on the way out. A run
in which no request reached the farm (a contender that failed to start, say) is flagged
with a WARNING and the last lines of its stderr, so that its zeros are not taken for a
measurement.

The main table has one row per site and contender, the sites in farm order; it is a
pipe table, so it reads the same in a terminal and pasted into markdown. Its columns:

* **requests**, **429+503** and **violations** as the farm counted them (a violation is
  a request sent before a stated ``Retry-After`` ran out, or closer than the site's
  ``Crawl-delay`` to the previous one); a ``challenge`` site's 200 challenge pages count
  among the 429+503, and not among the 200s;
* **goodput/capacity**: the farm's 200s per second over the site's active period (first
  to last request), divided by what the site can sustain; empty for a site without a
  capacity (the flaky and the dead one). A short burst makes this ratio huge: it rewards
  speed, not manners, which is why violations sit next to it;
* **done**: of the site's **pages**, those the contender itself recorded with a final 200
  (its own output file; robots.txt and abandoned URLs do not count), less those the farm
  last answered with a challenge page (a contender that takes one for the page records a 200);
* **last s**: seconds from the contender's start to the site's last request;
* **busiest 1 s / window**: the most requests the site saw within any one second (the simulator's
  own sliding count, whoever sent them: one process or a whole fleet; robots.txt, which no
  limiter of the farm counts, aside), over the most the
  site's rules let through in one second: its highest capacity during the run rounded up to
  whole requests, plus ``burst - 1`` for a token bucket (a full bucket lets its burst through
  at once). A site that counts per window (a window, a request-rate counter, an announced
  window) is judged over its own window instead: the most requests (robots.txt aside) within
  one of its windows as it counts them (any span of a sliding window, or each of its windows
  back to back), over its highest count; a request-rate counter by its highest reading (a
  client within its rule may send more than the limit in one span of a period). Sites whose
  limit is on requests in flight (``overload``, ``slow``) or that have none show the count
  alone. ``!`` marks a second (or window) past that limit + 1.

Under it, one verdict per site: **yes** when crawlpace-rampup has a strictly higher
goodput/capacity than every peer that drew no more 429+503 and broke no more rules than
it did (peers with more pushback are listed as excused: they bought goodput with
refusals), **no** otherwise, with the best such peer's figures; ``-`` for a site with no
capacity. The other crawlpace set-ups (``crawlpace-*``, ``library-*``) are not peers, nor is
``oracle``, which knows the hidden limits. Without ``crawlpace-rampup`` among the
contenders there is no such verdict.

Three more contenders run only when ``--contenders`` names them (``--contenders fleets``
runs the two fleets with ``crawlpace-rampup`` and the oracle): **crawlpace-fleet4** and
**crawlpace-fleet8**, ``bench/_peers/fleet.py``: 4 or 8 ``crawlpace crawl --redis URL``
workers sharing one private ``redis-server`` (started on a free port of 127.0.0.1); each
worker is adaptive, and every host's limits, rampup state and robots.txt live in the
store, so the fleet should learn each site's rate as fast as one process does. The
workers start first, and the URLs go into the shared frontier once every one of them is
up, so that a fleet's site times (and makespan) count from then: its start-up, every
worker importing Python, aiohttp and redis-py on the same cores, is shown apart (the
**start-up s** column of the targets table, and the makespan with it); the time limit
counts from the enqueue, and the start-up may take 240 s more. **crawlpace-fleet1** is the
same with one worker: what the Redis store and the shared frontier cost a lone process,
apart from sharing.

Three more run only when named, the library API as a user would call it:
**library-defaults**, **library-gradual** and **library-rampup**,
``bench/_peers/library_httpx.py``: every URL one ``await client.get(url)`` on
``crawlpace.http.throttled_client(..., robots_txt=True)`` with 8 slots per host and no
delay, all started at once; the second turns on gradual slots
(``THROTTLING_GRADUAL_SLOTS``: each host's slots open 1, 2, 4, 8 as answers come back
well), the third rampup for every host. The client reads each site's robots.txt before
its first page and obeys it.

Some sites have private pages (``/private/N``, the farm's ``private`` key), which their
robots.txt disallows. They are in the URL list, as a sitemap may list them, but are not
pages to be done: a request for one is a ``disallow`` violation, shown apart in the
targets table with the Retry-After and Crawl-delay ones. The oracle reads each site's
robots.txt from the site itself and leaves them alone.

With ``oracle`` among the contenders, the site table gains an **x oracle** column (each
goodput/capacity over the oracle's on that site, both capped at 1), and a last table holds issue 16's
targets for every contender: the mean over the sites with a capacity of goodput/capacity,
each capped at 1 (at least 0.86 and 0.95 x the oracle's), the worst site over the oracle's
(at least 0.75), 429+503 per request (at most 2 %), violations (none), pages done on the
sites that are not dead (all), the makespan, seconds to the last request to such a
site, over the oracle's (at most 1.25), and every site's busiest second (or window) within its
limit + 1 (in every round). Every run reads its farm from one file written in
the work folder, which the oracle reads too.

When both ``scrapy-crawlpace`` and ``scrapy-autothrottle`` ran, a second verdict per site
compares just those two: **yes** when the add-on's goodput/capacity is strictly higher than
AutoThrottle's *and* it drew no more 429+503 and broke no more rules, **no** otherwise with
the reasons (less goodput, more 429+503, more violations), ``-`` for a site with no capacity
(its 429+503 are still shown). The same comparison is made once more on the totals (median
goodput/capacity, summed 429+503 and violations).

Then the totals: pages done, requests, 429+503 and violations summed over the
sites, the median goodput/capacity over the sites that have a capacity, the wall time
from start to exit (interpreter start-up included) and the seconds to the last request
to a site that is not dead, each next to crawlpace-rampup's figure as a ratio (the first
contender's when crawlpace-rampup did not run), and 429+503 and violations per 100 requests.

With ``--repeats R`` (3 by default, 1 with ``--quick``) the contenders take turns R times,
each round starting one further down the list, and each figure printed is its median
over the rounds (so a total is not always the sum of the medians above it, and a
verdict compares medians). ``--plot-dir DIR`` (default ``bench/out/crawl_efficiency``,
``''`` for none) gets the farm's own picture of each run, ``roundN-CONTENDER.png``: every
site's requests and 200s per second over time against its hidden capacity, with the
seconds that drew a 429 or a 503 marked.

``--farm random`` draws a fresh farm per round and holds every site against the oracle's
in the same round; its table adds **to last page x**, a second makespan to the first 200
of each live site's last page (the simulator's ``last_page``). The makespan stops at the
last request; a page whose first send hangs is done when it is first served, and a
contender that sends it again is done sooner than one that waits the hang out. Under the
tables, one line per contender and round names the site that set its makespan (its end, the
oracle's end on that site, and the site that set the oracle's), each one's first request
(seconds from its start to its first arrival at the farm: its start-up, the same cost for the
oracle, which reads robots.txt from the farm file and so sends none), and the makespan counted
from each one's first request (``paced_makespan_over_oracle`` in the JSON): pacing alone, with
the start-ups left out on both sides, also for a fleet, whose makespan counts from its enqueue
while the oracle's counts from its start.

``--quick`` crawls a smaller copy of the farm written on the fly: every site keeps its
profile and limits but serves at most 5 pages, and a ``flaky`` site hangs for at most
3 s (20 s in ``mixed``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import datetime as dt
import json
import math
import os
import platform
import random
import signal
import statistics
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crawlpace.sim import PRIVATE_PREFIX
from crawlpace.sim._random import DEFAULT_SECONDS, RANDOM_KINDS, draw_farm, farm_toml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spawn_env import pin_pythonpath

HERE = Path(__file__).resolve().parent
PEERS = HERE / "_peers"
#: Pages per site and longest hang of a ``flaky`` site in the ``--quick`` farm.
QUICK_PAGES = 5
QUICK_HANG = 3.0
#: Seconds a contender may run (full run, ``--quick``).
LIMIT = 300.0
QUICK_LIMIT = 15.0
#: Seconds between SIGTERM and SIGKILL for a contender past its limit.
GRACE = 5.0
QUICK_GRACE = 2.0
#: Seconds the farm may take to start serving, and to stop and write its figures (and plot). Only a
#: guard against a farm that never answers: at load 40 on two cores a 30-site farm took over 30 s to
#: start or stop, and every round of four developers' runs was lost to a 30 s guard.
SIM_START = 120.0
SIM_STOP = 120.0
#: The contender every other one is measured against.
REFERENCE = "crawlpace-rampup"
#: The second comparison: crawlpace's Scrapy add-on against Scrapy's own AutoThrottle.
ADDON = "scrapy-crawlpace"
ADDON_BASELINE = "scrapy-autothrottle"
#: The all-knowing pacer the issue-16 targets are measured against.
ORACLE = "oracle"
#: Issue 16's targets: mean capped goodput/capacity, its share of the oracle's, the worst site's share of
#: the oracle's, 429+503 per request, and the makespan (seconds to the last live request) over the oracle's.
TARGET_MEAN, TARGET_MEAN_SHARE, TARGET_SITE_SHARE = 0.86, 0.95, 0.75
TARGET_THROTTLED, TARGET_MAKESPAN = 0.02, 1.25
#: The farm's violation kinds, shown apart: a request inside a Retry-After hold, closer than a
#: Crawl-delay, or for a page robots.txt disallows.
VIOLATION_KINDS = ("retry_after", "crawl_delay", "disallow")
#: Where the farm's plots go unless ``--plot-dir`` says otherwise.
PLOT_DIR = HERE / "out" / "crawl_efficiency"


# -- the contenders ------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a file (a line cut short by a kill is skipped)."""
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            row = json.loads(line)
            if isinstance(row, dict):
                rows.append(row)
    return rows


def final_statuses(rows: list[dict[str, Any]], ok: Callable[[dict[str, Any]], bool]) -> dict[str, bool]:
    """URL -> whether its last recorded answer counts as a page done."""
    done: dict[str, bool] = {}
    for row in rows:
        url = row.get("url")
        if isinstance(url, str):
            done[url] = ok(row)
    return done


@dataclass(frozen=True)
class Contender:
    """One crawler set-up: how to start it, and how to read which pages it got."""

    key: str
    settings: str
    #: The command line, given the URL file, the output file and the farm file.
    command: Callable[[Path, Path, Path], list[str]]
    page_ok: Callable[[dict[str, Any]], bool]
    #: Whether its stdout ends with a JSON summary (``crawlpace crawl --json``).
    summary: bool = False

    def pages_done(self, output: Path) -> dict[str, bool]:
        return final_statuses(read_jsonl(output), self.page_ok)


def crawlpace_command(*extra: str) -> Callable[[Path, Path, Path], list[str]]:
    def command(urls: Path, output: Path, farm: Path) -> list[str]:
        return [sys.executable, "-m", "crawlpace", "crawl", str(urls), "-o", str(output), "--quiet", "--json",
                *extra]
    return command


def base_command(urls: Path, output: Path, farm: Path) -> list[str]:
    """``crawlpace crawl --rampup`` from the source tree named by ``CRAWLPACE_BASE`` (its ``src``
    folder, e.g. a ``git archive`` of main): a change beside its base in the same run."""
    base = os.environ.get("CRAWLPACE_BASE", "")
    if not base or not Path(base, "crawlpace").is_dir():
        raise SystemExit(f"crawlpace-base: set CRAWLPACE_BASE to a source tree's src folder, not {base!r}")
    argv = ["crawlpace", "crawl", str(urls), "-o", str(output), "--quiet", "--json", "--rampup"]
    code = (f"import runpy, sys; sys.path.insert(0, {base!r}); sys.argv = {argv!r}; "
            "runpy.run_module('crawlpace', run_name='__main__')")
    return [sys.executable, "-c", code]


def scrapy_command(**settings: object) -> Callable[[Path, Path, Path], list[str]]:
    """The spider with some of its settings overridden by ``-s`` (which outranks the spider's own)."""
    overrides = [arg for name, value in settings.items() for arg in ("-s", f"{name}={value}")]

    def command(urls: Path, output: Path, farm: Path) -> list[str]:
        return [sys.executable, "-m", "scrapy", "runspider", str(PEERS / "scrapy_list_spider.py"),
                "-a", f"urls={urls}", "-a", f"out={output}", *overrides]
    return command


def naive_command(urls: Path, output: Path, farm: Path) -> list[str]:
    return [sys.executable, str(PEERS / "naive_aiohttp.py"), str(urls), str(output)]


def fleet_command(workers: int) -> Callable[[Path, Path, Path], list[str]]:
    def command(urls: Path, output: Path, farm: Path) -> list[str]:
        return [sys.executable, str(PEERS / "fleet.py"), str(urls), str(output), str(workers)]
    return command


def library_command(mode: str) -> Callable[[Path, Path, Path], list[str]]:
    def command(urls: Path, output: Path, farm: Path) -> list[str]:
        return [sys.executable, str(PEERS / "library_httpx.py"), str(urls), str(output), mode]
    return command


def oracle_command(urls: Path, output: Path, farm: Path) -> list[str]:
    return [sys.executable, str(PEERS / "oracle.py"), str(urls), str(output), str(farm)]


def crawlpace_ok(row: dict[str, Any]) -> bool:
    return row.get("outcome") == "ok" and row.get("status") == 200


def status_ok(row: dict[str, Any]) -> bool:
    return row.get("status") == 200


CRAWLPACE_DEFAULTS = ("robots.txt, 1 in flight + 1 s delay (jittered) per host, 16 in all, 3 resends, "
                      "10 s timeout")
SCRAPY_BASE = ("CONCURRENT_REQUESTS_PER_DOMAIN 8, RETRY_TIMES 2 on 429/503/5xx/408, ROBOTSTXT_OBEY, "
               "DOWNLOAD_TIMEOUT 10")

#: scrapy-crawlpace's ``-s`` overrides. Scrapy reads JSON for ``ADDONS`` (a component dict);
#: the add-on reads ``THROTTLING_SCOPE_DEFAULTS`` as JSON too. The spider's own
#: ``AUTOTHROTTLE_ENABLED = True`` and ``CONCURRENT_REQUESTS_PER_DOMAIN = 8`` would become
#: crawlpace's limits under the add-on, so both are set back to the add-on's starting point (and
#: crawlpace refuses AutoThrottle on a scope with rampup).
ADDON_SETTINGS: dict[str, object] = {
    "ADDONS": json.dumps({"crawlpace.scrapy.Addon": 100}),
    "THROTTLING_SCOPE_DEFAULTS": json.dumps({"rampup": True}),
    "AUTOTHROTTLE_ENABLED": False,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
}

#: Contenders run only when named in ``--contenders``.
OPTIONAL = frozenset({"crawlpace-base", "crawlpace-fleet1", "crawlpace-fleet4", "crawlpace-fleet8",
                      "library-defaults", "library-gradual", "library-rampup"})
#: The fleets, whose worker start-up is measured apart (see ``bench/_peers/fleet.py``), and the
#: seconds their start-up may take on top of the time limit (which counts from the enqueue).
FLEETS = frozenset({"crawlpace-fleet1", "crawlpace-fleet4", "crawlpace-fleet8"})
FLEET_START = 240.0
#: Short names for ``--contenders``: the fleet rows with what they are measured against.
PRESETS = {"fleets": "crawlpace-rampup,crawlpace-fleet4,crawlpace-fleet8,oracle"}

CONTENDERS: tuple[Contender, ...] = (
    Contender("crawlpace-fixed", f"crawlpace crawl --delay 1 --per-host 1: {CRAWLPACE_DEFAULTS}",
              crawlpace_command("--delay", "1", "--per-host", "1"), crawlpace_ok, summary=True),
    Contender("crawlpace-rampup", f"crawlpace crawl --rampup: rampup on for every host; {CRAWLPACE_DEFAULTS}",
              crawlpace_command("--rampup"), crawlpace_ok, summary=True),
    Contender("crawlpace-base", "crawlpace crawl --rampup from the tree in CRAWLPACE_BASE (a base)",
              base_command, crawlpace_ok, summary=True),
    Contender("scrapy-autothrottle", f"AutoThrottle on, its defaults (target concurrency 1); {SCRAPY_BASE}",
              scrapy_command(), status_ok),
    Contender("scrapy-at4", f"AutoThrottle on, AUTOTHROTTLE_TARGET_CONCURRENCY 4; {SCRAPY_BASE}",
              scrapy_command(AUTOTHROTTLE_TARGET_CONCURRENCY=4), status_ok),
    Contender("scrapy-fixed",
              "AutoThrottle off, DOWNLOAD_DELAY 1.0 with Scrapy's default randomisation (0.5-1.5 s), "
              "CONCURRENT_REQUESTS_PER_DOMAIN 1, RETRY_TIMES 2 on 429/503/5xx/408, ROBOTSTXT_OBEY, "
              "DOWNLOAD_TIMEOUT 10",
              scrapy_command(AUTOTHROTTLE_ENABLED=False, DOWNLOAD_DELAY=1.0,
                             CONCURRENT_REQUESTS_PER_DOMAIN=1),
              status_ok),
    Contender("scrapy-crawlpace",
              "crawlpace's Scrapy add-on (ADDONS crawlpace.scrapy.Addon) with rampup on for every host "
              "(THROTTLING_SCOPE_DEFAULTS rampup), starting from its defaults: 1 slot + 1 s delay (jittered) "
              "per host, CONCURRENT_REQUESTS 16; AutoThrottle off; RETRY_TIMES 2 on 429/503/5xx/408, "
              "ROBOTSTXT_OBEY, DOWNLOAD_TIMEOUT 10",
              scrapy_command(**ADDON_SETTINGS), status_ok),
    Contender("aiohttp",
              "naive: 8 workers, 1 s pause + resend on 429/503/exception (3 resends), no robots.txt, "
              "10 s timeout",
              naive_command, status_ok),
    Contender("crawlpace-fleet1",
              f"1 worker of crawlpace crawl --redis, as crawlpace-fleet4: what the Redis store and the "
              f"shared frontier cost one process, apart from sharing; {CRAWLPACE_DEFAULTS}",
              fleet_command(1), crawlpace_ok),
    Contender("crawlpace-fleet4",
              f"4 workers of crawlpace crawl --redis (adaptive, as without a throttling option) on one "
              f"private redis-server, the URLs put in its shared frontier by crawlpace enqueue; "
              f"{CRAWLPACE_DEFAULTS} per worker",
              fleet_command(4), crawlpace_ok),
    Contender("crawlpace-fleet8",
              f"8 workers of crawlpace crawl --redis, as crawlpace-fleet4; {CRAWLPACE_DEFAULTS} per worker",
              fleet_command(8), crawlpace_ok),
    Contender("library-defaults",
              "crawlpace.http.throttled_client as a library user sets it up: 8 slots per host, no delay, "
              "CONCURRENT_REQUESTS 64, the wrapper's 3 resends of a backoff answer plus 3 of a 5xx by the "
              "caller, every URL started at once, robots.txt obeyed (robots_txt=True), 10 s timeout",
              library_command("defaults"), status_ok),
    Contender("library-gradual",
              "the same with THROTTLING_GRADUAL_SLOTS on: each host's 8 slots open 1, 2, 4, 8 as its "
              "answers come back well, and close on a refusal",
              library_command("gradual"), status_ok),
    Contender("library-rampup",
              "the same with THROTTLING_SCOPE_DEFAULTS rampup on for every host",
              library_command("rampup"), status_ok),
    Contender("oracle",
              "the all-knowing pacer (bench/_peers/oracle.py): reads every site's hidden limits from the "
              "farm file and paces each host just under them; resends 5xx, 429 and errors (8 at most), "
              "10 s timeout",
              oracle_command, status_ok),
)


# -- the farm -------------------------------------------------------------------------


def farm_source(name: str) -> dict[str, Any]:
    """The farm's parsed TOML, from a file or a shipped farm's name."""
    return tomllib.loads(full_farm(name))


def toml_value(value: object) -> str:
    """A farm value written as TOML (numbers, booleans, strings and lists of them).

    JSON spells these the way TOML does; NaN and infinities, which JSON cannot, are refused.
    """
    return json.dumps(value, allow_nan=False)


def full_farm(name: str) -> str:
    """The farm's TOML text, from a file or a shipped farm's name."""
    path = Path(name)
    if path.exists():
        return path.read_text(encoding="utf-8")
    return resources.files("crawlpace.sim").joinpath("farms", f"{name}.toml").read_text("utf-8")


def quick_farm(spec: dict[str, Any]) -> str:
    """A copy of the farm with at most ``QUICK_PAGES`` pages per site and short hangs."""
    lines = ["# Written by bench/crawl_efficiency.py --quick: the farm, with fewer pages and shorter hangs."]
    lines += [f"{key} = {toml_value(value)}" for key, value in spec.items() if key != "site"]
    for site in spec.get("site", []):
        shrunk = dict(site)
        shrunk["pages"] = min(int(site.get("pages", 50)), QUICK_PAGES)
        if site.get("profile") == "flaky":
            shrunk["hang"] = min(float(site.get("hang", 30.0)), QUICK_HANG)
        lines += ["", "[[site]]", *(f"{key} = {toml_value(value)}" for key, value in shrunk.items())]
    return "\n".join(lines) + "\n"


@dataclass
class SimProcess:
    """A running ``crawlpace sim``."""

    process: asyncio.subprocess.Process
    urls: Path
    figures: Path


async def start_sim(farm: str, folder: Path, plot: Path | None = None) -> SimProcess:
    """``crawlpace sim FARM`` in ``folder``, once it serves; with ``plot``, it draws that PNG as it stops."""
    urls, figures = folder / "urls.txt", folder / "sim.json"
    with (folder / "sim.stderr").open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawlpace", "sim", farm, "--urls", str(urls), "--output", str(figures),
            *(["--plot", str(plot)] if plot is not None else []),
            stdout=asyncio.subprocess.PIPE, stderr=err, cwd=folder, preexec_fn=die_with_parent)
    assert process.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(SIM_START):
            while True:
                line = (await process.stdout.readline()).decode("utf-8", "replace")
                if not line:
                    raise RuntimeError("crawlpace sim ended before serving:\n" + "".join(seen)
                                       + (folder / "sim.stderr").read_text(errors="replace"))
                seen.append(line)
                if line.startswith("serving"):
                    break
        if not urls.exists():
            raise RuntimeError(f"crawlpace sim wrote no URL file:\n{''.join(seen)}")
    except BaseException:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    return SimProcess(process, urls, figures)


async def stop_sim(sim: SimProcess) -> dict[str, Any]:
    """SIGTERM the farm; return the figures it wrote."""
    sim.process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(SIM_STOP):
        await sim.process.communicate()
    return load_json(sim.figures)


def load_json(path: Path) -> dict[str, Any]:
    figures: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return figures


# -- one run --------------------------------------------------------------------------


@dataclass
class SiteFigures:
    """One site in one run of one contender."""

    pages: int
    done: int
    requests: int
    ok: int
    throttled: int
    violations: int
    violation_kinds: dict[str, int]
    goodput: float | None
    capacity: float | None
    goodput_ratio: float | None
    last_request: float | None
    #: The most requests the site saw within any one second (the simulator's own count), and the
    #: most its rules let through in one (None for a site whose limit is not a rate per second).
    busiest_second: int | None = None
    second_limit: float | None = None
    #: For a site that counts its limit per window (a window, a request-rate counter, an announced
    #: window): the most limited requests it saw within one of its own windows, counted as it counts
    #: them, the window's seconds, and its highest count during the run.
    busiest_window: int | None = None
    window: float | None = None
    window_limit: float | None = None
    #: The same busiest window with the first lock-out's refusals left out (the simulator's
    #: ``peak_per_window_without_lockout``): None before one ended, or from a farm that does not report it.
    busiest_window_without_lockout: int | None = None
    #: Seconds from the contender's start to the first 200 of the site's last page to get one (the
    #: simulator's ``last_page``): when the site was done, which a hung send answered later does not move.
    last_page: float | None = None
    #: Seconds from the contender's start (a fleet's enqueue) to the site's first arrival, robots.txt
    #: included: how long the contender took to reach the site at all (its start-up, for the first site).
    first_request: float | None = None

    @property
    def judged(self) -> tuple[float, float] | None:
        """The busiest figure and the limit the site is judged by: its own window's where it counts
        per window, else its one-second limit; None when its limit is not a rate."""
        if self.window_limit is not None and self.busiest_window is not None:
            return float(self.busiest_window), self.window_limit
        if self.second_limit is not None and self.busiest_second is not None:
            return float(self.busiest_second), self.second_limit
        return None

    @property
    def over_limit(self) -> bool:
        """True when the busiest second (or window, see :attr:`judged`) passed the site's limit plus one."""
        judged = self.judged
        return judged is not None and judged[0] > judged[1] + 1

    @property
    def over_limit_without_lockout(self) -> bool:
        """True when the site's own window passed its limit plus one with the first lock-out's refused
        probes left out, which no crawler that does not know the window keeps within the limit (a
        second figure beside :attr:`over_limit`, which stays the verdict)."""
        return (self.window_limit is not None and self.busiest_window_without_lockout is not None
                and self.busiest_window_without_lockout > self.window_limit + 1)


@dataclass
class Run:
    """One contender against one fresh farm."""

    contender: str
    round: int
    wall: float
    exit_code: int | None
    cut: bool
    sites: dict[str, SiteFigures] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    #: The farm's picture of the run, when one was asked for and written.
    plot: str | None = None
    #: Set when no request reached the farm: the contender failed (its stderr's last lines).
    error: str | None = None
    #: A fleet's worker start-up: seconds from the contender's start until its URLs were enqueued,
    #: every worker ready (``fleet.json``); its site times count from then. None for the others.
    startup: float | None = None

    def total(self, key: str) -> int:
        return sum(int(getattr(site, key)) for site in self.sites.values())

    def kind_total(self, kind: str) -> int:
        """Violations of one kind (``retry_after``, ``crawl_delay``, ``disallow``) over the sites."""
        return sum(site.violation_kinds.get(kind, 0) for site in self.sites.values())

    @property
    def last_live_request(self) -> float | None:
        """Seconds to the last request to a site that is not dead (capacity 0)."""
        times = [site.last_request for site in self.sites.values()
                 if site.capacity != 0 and site.last_request is not None]
        return max(times) if times else None

    @property
    def last_live_page(self) -> float | None:
        """Seconds to the last page served to a site that is not dead: the crawl's end as a user waits for
        it, where :attr:`last_live_request` is the last send (a page sent again because its first send
        hung is done at its first answer, the hung send's tail aside)."""
        times = [site.last_page for site in self.sites.values()
                 if site.capacity != 0 and site.last_page is not None]
        return max(times) if times else None

    @property
    def first_live_request(self) -> float | None:
        """Seconds to the first request to a site that is not dead: the contender's start-up (its
        interpreter, imports, set-up) before any pacing; a fleet's counts from its enqueue."""
        times = [site.first_request for site in self.sites.values()
                 if site.capacity != 0 and site.first_request is not None]
        return min(times) if times else None

    def last_live_site(self) -> str | None:
        """The live site whose last request came last: the one that set :attr:`last_live_request`."""
        ends = {name: site.last_request for name, site in self.sites.items()
                if site.capacity != 0 and site.last_request is not None}
        return max(ends, key=lambda name: ends[name]) if ends else None

    @property
    def mean_capped(self) -> float | None:
        """The mean goodput/capacity over the sites that have a capacity, each capped at 1."""
        ratios = [min(site.goodput_ratio, 1.0) for site in self.sites.values()
                  if site.goodput_ratio is not None and site.capacity]
        return statistics.fmean(ratios) if ratios else None

    @property
    def live_pages(self) -> tuple[int, int]:
        """Pages done and pages, over the sites that are not dead (capacity 0)."""
        live = [site for site in self.sites.values() if site.capacity != 0]
        return sum(site.done for site in live), sum(site.pages for site in live)

    @property
    def sites_over_limit(self) -> list[str]:
        """The sites whose busiest second (or window) passed their limit plus one."""
        return [name for name, site in self.sites.items() if site.over_limit]

    @property
    def sites_over_limit_without_lockout(self) -> list[str]:
        """The sites whose own window passed their limit plus one without their first lock-out's refusals."""
        return [name for name, site in self.sites.items() if site.over_limit_without_lockout]

    @property
    def median_ratio(self) -> float | None:
        ratios = [site.goodput_ratio for site in self.sites.values() if site.goodput_ratio is not None]
        return statistics.median(ratios) if ratios else None


#: Seconds between two looks for a fleet's start-up (``fleet.json``) while it starts.
STARTUP_POLL = 0.25
#: Linux's prctl option that sends a signal to a process when its parent dies.
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before it runs its program: the kernel kills it when this script dies (Linux).

    A ``preexec_fn`` (``bench/_peers/fleet.py`` has its twin for its workers, which a
    script run apart cannot import from here): a benchmark killed outright would otherwise
    leave its farm and crawlers running. Elsewhere it does nothing.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


async def run_process(command: list[str], folder: Path, limit: float, grace: float,
                      startup: Callable[[], float | None] | None = None) -> tuple[int | None, bool]:
    """Run a contender with a time limit; return its exit code and whether it was cut.

    With ``startup`` (a fleet: the seconds its workers took to start, once it is
    known), the limit counts from the end of that start-up, which may itself take
    up to :data:`FLEET_START` seconds. The contender runs in a session of its own
    (its whole process group is stopped at the limit) and is killed by the kernel
    should this script die first.
    """
    with (folder / "stdout.txt").open("wb") as out, (folder / "stderr.txt").open("wb") as err:
        process = await asyncio.create_subprocess_exec(*command, stdout=out, stderr=err, cwd=folder,
                                                       start_new_session=True, preexec_fn=die_with_parent)
    begin = time.monotonic()
    deadline = begin + limit + (FLEET_START if startup is not None else 0.0)
    try:
        while True:
            if startup is not None and (took := startup()) is not None:
                deadline, startup = begin + took + limit, None
            left = deadline - time.monotonic()
            if left <= 0.0:
                raise TimeoutError
            try:
                await asyncio.wait_for(process.wait(), left if startup is None else min(left, STARTUP_POLL))
                return process.returncode, False
            except TimeoutError:
                continue
    except TimeoutError:
        stop_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            stop_group(process.pid, signal.SIGKILL)
            await process.wait()
        return process.returncode, True
    finally:
        if process.returncode is None:  # interrupted (Ctrl-C): leave no crawler behind
            stop_group(process.pid, signal.SIGKILL)


def stop_group(pid: int, signum: int) -> None:
    """Signal the contender's process group (it was started in a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def disallowed(url: str) -> bool:
    """Whether ``url`` is one of a site's private pages, which its robots.txt disallows.

    They are in the URL list (as a sitemap may list them) but are not pages to be done: a
    contender that obeys robots.txt leaves them alone, and a request for one is a ``disallow``
    violation in the farm's count.
    """
    return urlsplit(url).path.startswith(PRIVATE_PREFIX)


def site_of(url: str, prefixes: dict[str, str]) -> str | None:
    for prefix, name in prefixes.items():
        if url.startswith(prefix):
            return name
    return None


async def run_one(contender: Contender, round_no: int, farm: str, folder: Path, limit: float,
                  grace: float, plot: Path | None = None) -> Run:
    clear_plot(plot)
    sim = await start_sim(farm, folder, plot)
    fleet = contender.key in FLEETS
    try:
        started = time.monotonic()
        exit_code, cut = await run_process(contender.command(sim.urls, folder / "out.jsonl", Path(farm)),
                                           folder, limit, grace,
                                           (lambda: fleet_startup(folder)) if fleet else None)
        wall = time.monotonic() - started
    finally:
        figures = await stop_sim(sim)
    startup = fleet_startup(folder) if fleet else None
    run = Run(contender.key, round_no, wall, exit_code, cut, startup=startup)
    tally(run, contender, folder, sim.urls, figures, started + (startup or 0.0), plot, farm_source(farm))
    return run


def fleet_startup(folder: Path) -> float | None:
    """Seconds the fleet took to start before its URLs went in (``fleet.json``), if it got that far."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return float(json.loads((folder / "fleet.json").read_text(encoding="utf-8"))["startup"])
    return None


def clear_plot(plot: Path | None) -> None:
    """Remove an earlier run's picture, so that it cannot pass for this run's if the farm draws none."""
    if plot is not None:
        plot.unlink(missing_ok=True)


#: Profiles whose limit is a rate (requests per second or per window); the others limit requests
#: in flight (``overload``, ``slow``) or have none (``flaky``, ``dead``).
RATE_PROFILES = frozenset({"ratelimit", "challenge", "retryafter", "crawldelay", "quota", "queue"})
#: Of those, the token buckets: a full bucket lets ``burst`` requests through at once (nginx's queue
#: takes ``burst`` beyond the one it serves: a bucket of ``burst + 1``).
BUCKET_PROFILES = frozenset({"ratelimit", "challenge", "retryafter", "queue"})

#: Profiles that count requests per window (of any length): judged over their own window, not per second.
WINDOW_PROFILES = frozenset({"window", "reqrate", "headers"})


def site_capacities(site: dict[str, Any]) -> list[float]:
    """A site's capacities during the run: the simulator's record of every change, else its capacity."""
    steps = (site.get("timeline") or {}).get("capacity") or []
    capacities = [float(value) for _at, value in steps if value is not None]
    if not capacities and site.get("capacity") is not None:
        capacities = [float(site["capacity"])]
    return capacities


def window_limit(site: dict[str, Any]) -> float | None:
    """The most requests a site that counts per window lets through in one of its windows: its
    highest capacity during the run times the window (its count, rescaled where the limit shifts);
    None for a site that does not count per window (the simulator reports no ``window``)."""
    span, capacities = site.get("window"), site_capacities(site)
    if span is None or site.get("peak_per_window") is None or not capacities:
        return None
    return float(round(max(capacities) * float(span), 3))


def second_limit(site: dict[str, Any], spec: dict[str, Any]) -> float | None:
    """The most requests a site's rules let through within one second, or None when its limit is
    not a rate per second.

    Its highest capacity during the run (the simulator's record of every change), rounded up to
    whole requests (sends ``1 / rate`` apart), plus, for a token bucket, the ``burst - 1``
    requests a full bucket lets through at once beyond the rate. A site that counts per window (a
    window, a request-rate counter) is judged over its own window instead (:func:`window_limit`):
    per second, a window of several seconds has no limit short of its whole count.
    """
    profile = str(spec.get("profile", site.get("profile", "")))
    if profile == "shifting":
        profile = str(spec.get("base", ""))
    capacities = site_capacities(site)
    if not capacities or profile in WINDOW_PROFILES:
        return None
    if profile not in RATE_PROFILES:
        return None
    # Sends at least 1 / rate apart fit ceil(rate) in any second (1 for a rate under 1/s, not 0.7);
    # a full bucket adds the rest of its burst at once.
    extra = max(int(spec.get("burst", 1)) - (profile != "queue"), 0) if profile in BUCKET_PROFILES else 0
    return float(math.ceil(max(capacities) - 1e-9) + extra)


def tally(run: Run, contender: Contender, folder: Path, url_file: Path, figures: dict[str, Any],
          started: float, plot: Path | None = None, spec: dict[str, Any] | None = None) -> None:
    """Fill ``run`` from the farm's figures, the contender's own output and the farm's picture.

    ``spec`` is the farm as written (for each site's one-second limit; without it, none is set; a
    site that counts per window is judged over its own window, which the farm reports).
    """
    specs = {str(site.get("name")): site for site in (spec or {}).get("site", [])}
    if plot is not None and plot.exists():
        run.plot = str(plot)
    urls = [line for line in url_file.read_text(encoding="utf-8").split() if line]
    output = folder / "out.jsonl"
    sites: dict[str, dict[str, Any]] = figures["sites"]
    prefixes = {f"{site['url']}/": name for name, site in sites.items()}
    pages = dict.fromkeys(sites, 0)
    for url in urls:
        name = site_of(url, prefixes)
        if name is not None and not disallowed(url):
            pages[name] += 1
    done = dict.fromkeys(sites, 0)
    # A page whose last answer from the farm was a challenge page is not done, whatever the
    # contender recorded: one that took the challenge for content recorded a 200.
    challenged = {f"{site['url']}{path}" for site in sites.values()
                  for path in site.get("challenged_paths", ())}
    for url, ok in contender.pages_done(output).items():
        name = site_of(url, prefixes)
        if ok and name is not None and not disallowed(url) and url.split("?", 1)[0] not in challenged:
            done[name] += 1
    for name, site in sites.items():
        last = site.get("last")
        run.sites[name] = SiteFigures(
            pages=pages[name], done=done[name], requests=int(site["requests"]), ok=int(site["ok"]),
            throttled=int(site["throttled"]), violations=int(site["violations"]),
            violation_kinds={str(k): int(v) for k, v in dict(site.get("violation_kinds") or {}).items()},
            goodput=site.get("goodput"), capacity=site.get("capacity"),
            goodput_ratio=site.get("goodput_ratio"),
            last_request=None if last is None else round(float(last) - started, 3),
            # (robots.txt aside, which no limiter of the farm counts, as the window's figure leaves it)
            busiest_second=site.get("peak_limited_per_second", site.get("peak_per_second")),
            second_limit=second_limit(site, specs[name]) if name in specs else None,
            busiest_window=site.get("peak_per_window"), window=site.get("window"),
            window_limit=window_limit(site),
            busiest_window_without_lockout=site.get("peak_per_window_without_lockout"),
            last_page=None if site.get("last_page") is None else round(float(site["last_page"]) - started, 3),
            first_request=None if site.get("first") is None else round(float(site["first"]) - started, 3))
    if run.total("requests") == 0:
        tail = (folder / "stderr.txt").read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        run.error = f"no request reached the farm (exit {run.exit_code}); its stderr ends: " + (
            " / ".join(tail) if tail else "(empty)")
    if contender.summary:
        lines = (folder / "stdout.txt").read_text(encoding="utf-8", errors="replace").splitlines()
        for line in reversed(lines):
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    run.summary = json.loads(line)
                break


# -- medians over the rounds ------------------------------------------------------------------


def median_of(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


SITE_KEYS = ("pages", "done", "requests", "ok", "throttled", "violations", "goodput_ratio", "last_request",
             "last_page", "busiest_second", "second_limit", "busiest_window", "window", "window_limit")


def site_medians(runs: list[Run], site: str) -> dict[str, float | None]:
    return {key: median_of([getattr(run.sites[site], key) for run in runs]) for key in SITE_KEYS}


def total_medians(runs: list[Run]) -> dict[str, float | None]:
    return {
        "pages": median_of([run.total("pages") for run in runs]),
        "done": median_of([run.total("done") for run in runs]),
        "requests": median_of([run.total("requests") for run in runs]),
        "ok": median_of([run.total("ok") for run in runs]),
        "throttled": median_of([run.total("throttled") for run in runs]),
        "violations": median_of([run.total("violations") for run in runs]),
        **{f"violations_{kind}": median_of([run.kind_total(kind) for run in runs])
           for kind in VIOLATION_KINDS},
        "goodput_ratio": median_of([run.median_ratio for run in runs]),
        "mean_capped": median_of([run.mean_capped for run in runs]),
        "live_done": median_of([run.live_pages[0] for run in runs]),
        "live_pages": median_of([run.live_pages[1] for run in runs]),
        "wall": median_of([run.wall for run in runs]),
        "last_live_request": median_of([run.last_live_request for run in runs]),
        "last_live_page": median_of([run.last_live_page for run in runs]),
        "startup": median_of([run.startup for run in runs]),
        "cut_runs": sum(run.cut for run in runs),
        # The worst round: a site over its limit + 1 (per second, or per its own window) in any round counts.
        "over_limit": max((len(run.sites_over_limit) for run in runs), default=0),
    }



# -- verdicts ------------------------------------------------------------------------------


Figures = dict[str, dict[str, float | None]]


def brief(figures: Figures, key: str) -> dict[str, Any]:
    mine = figures[key]
    return {"contender": key, "goodput_ratio": mine["goodput_ratio"], "throttled": mine["throttled"],
            "violations": mine["violations"], "done": mine["done"]}


def site_verdict(figures: Figures, contenders: list[Contender], has_capacity: bool) -> dict[str, Any]:
    """Whether the reference beats every peer on goodput/capacity at no more pushback.

    The peers are the other crawlers (plain ``crawlpace``, the same crawler without rampup, is
    not one). A peer that drew more 429+503, or broke more rules, than the reference bought
    its goodput with pushback and is set aside ("excused"). The verdict is ``"yes"`` when the
    reference's goodput/capacity is strictly above that of every remaining peer, ``"no"``
    otherwise (the runner-up is the best of them), and ``None`` when there is nothing to
    compare (no capacity, or no figure for the reference).
    """
    mine = figures[REFERENCE]
    result: dict[str, Any] = {"verdict": None, "reference": brief(figures, REFERENCE), "runner_up": None,
                              "excused": []}
    ratio = mine["goodput_ratio"]
    if ratio is None:
        result["why_none"] = ("the site has no capacity" if not has_capacity
                              else f"no goodput/capacity for {REFERENCE}")
        return result
    peers = [c.key for c in contenders if c.key not in (REFERENCE, ORACLE) and not c.key.startswith(
             ("crawlpace-", "library-"))
             and figures[c.key]["goodput_ratio"] is not None]

    def pushier(key: str) -> bool:
        theirs = figures[key]
        return ((theirs["throttled"] or 0.0) > (mine["throttled"] or 0.0)
                or (theirs["violations"] or 0.0) > (mine["violations"] or 0.0))

    fair = [key for key in peers if not pushier(key)]
    result["excused"] = [key for key in peers if pushier(key)]
    if not fair:
        result.update(verdict="yes")
        return result
    runner = max(fair, key=lambda key: figures[key]["goodput_ratio"] or 0.0)
    result.update(verdict="yes" if ratio > (figures[runner]["goodput_ratio"] or 0.0) else "no",
                  runner_up=brief(figures, runner))
    return result


def addon_verdict(figures: Figures, has_capacity: bool) -> dict[str, Any]:
    """Whether the Scrapy add-on got more goodput than Scrapy's AutoThrottle at no more pushback.

    ``"yes"`` when ``scrapy-crawlpace``'s goodput/capacity is strictly above
    ``scrapy-autothrottle``'s and it drew no more 429+503 and broke no more rules; ``"no"``
    otherwise, with the reasons (``less goodput``, ``more 429+503``, ``more violations``);
    ``None`` for a site without a capacity or a missing figure. The 429+503 and violations
    are compared all the same, so a site without a capacity still shows who pushed harder.
    ``autothrottle_pushier`` says what AutoThrottle drew or broke more of (so that a "no" for
    less goodput shows when AutoThrottle bought its goodput with pushback).
    """
    mine, theirs = figures[ADDON], figures[ADDON_BASELINE]
    result: dict[str, Any] = {"verdict": None, "addon": brief(figures, ADDON),
                              "autothrottle": brief(figures, ADDON_BASELINE), "reasons": []}
    more_throttled = (mine["throttled"] or 0.0) > (theirs["throttled"] or 0.0)
    more_violations = (mine["violations"] or 0.0) > (theirs["violations"] or 0.0)
    result["more_throttled"], result["more_violations"] = more_throttled, more_violations
    result["autothrottle_pushier"] = [what for what, more in (
        ("429+503", (theirs["throttled"] or 0.0) > (mine["throttled"] or 0.0)),
        ("violations", (theirs["violations"] or 0.0) > (mine["violations"] or 0.0))) if more]
    ratio, other = mine["goodput_ratio"], theirs["goodput_ratio"]
    if ratio is None or other is None:
        result["why_none"] = ("the site has no capacity" if not has_capacity
                              else "no goodput/capacity for " + (ADDON if ratio is None else ADDON_BASELINE))
        return result
    reasons = [reason for reason, bad in (("less goodput", ratio <= other), ("more 429+503", more_throttled),
                                          ("more violations", more_violations)) if bad]
    result.update(verdict="no" if reasons else "yes", reasons=reasons,
                  goodput_over_autothrottle=round(ratio / other, 3) if other else None)
    return result


def addon_total_verdict(totals: Figures) -> dict[str, Any]:
    """The same comparison on the totals: median goodput/capacity, summed 429+503 and violations."""
    mine, theirs = totals[ADDON], totals[ADDON_BASELINE]
    ratio, other = mine["goodput_ratio"], theirs["goodput_ratio"]
    reasons = [reason for reason, bad in (
        ("less goodput", ratio is None or other is None or ratio <= other),
        ("more 429+503", (mine["throttled"] or 0.0) > (theirs["throttled"] or 0.0)),
        ("more violations", (mine["violations"] or 0.0) > (theirs["violations"] or 0.0))) if bad]
    return {"verdict": "no" if reasons else "yes", "reasons": reasons,
            "addon": {key: mine[key] for key in ("goodput_ratio", "throttled", "violations", "done", "wall")},
            "autothrottle": {key: theirs[key] for key in ("goodput_ratio", "throttled", "violations", "done",
                                                          "wall")},
            "goodput_over_autothrottle": None if ratio is None or not other else round(ratio / other, 3)}


# -- report --------------------------------------------------------------------------------


def fmt(value: float | None, kind: str = "n") -> str:
    if value is None:
        return "-"
    if kind == "%":
        return f"{value:.0%}"
    if kind == "s":
        return f"{value:.1f}"
    if kind == "x":
        return f"{value:.2f}"
    return f"{value:g}" if value != int(value) else f"{int(value)}"


def pipe_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Aligned lines of a markdown pipe table; the first ``left`` columns flush left, the rest right."""
    widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.ljust(w) if i < left else cell.rjust(w)
                                 for i, (cell, w) in enumerate(zip(cells, widths, strict=True))) + " |"

    rule = "|" + "|".join((":" + "-" * (w + 1)) if i < left else ("-" * (w + 1) + ":")
                          for i, w in enumerate(widths)) + "|"
    return [line(headers), rule, *(line(row) for row in rows)]


def over_oracle(mine: float | None, oracle: float | None) -> float | None:
    """A figure over the oracle's (None without both, or when the oracle's is 0)."""
    return None if mine is None or not oracle else round(mine / oracle, 3)


def site_over_oracle(mine: float | None, oracle: float | None) -> float | None:
    """A site's goodput/capacity over the oracle's, each capped at 1 as the mean caps them.

    On a site of a few slow pages the oracle sends them all at once, and its goodput over so
    short an active period can be many times the capacity; uncapped, that made any contender
    look near 0 there.
    """
    return over_oracle(None if mine is None else min(mine, 1.0), None if oracle is None else min(oracle, 1.0))


def print_site_table(names: list[str], contenders: list[Contender], sites: dict[str, Figures]) -> None:
    with_oracle = any(c.key == ORACLE for c in contenders)
    headers = ("site", "contender", "goodput/capacity", *(("x oracle",) if with_oracle else ()), "429+503",
               "violations", "done", "pages", "requests", "last s", "busiest 1 s / window")
    rows: list[list[str]] = []
    for name in names:
        for index, c in enumerate(contenders):
            mine = sites[name][c.key]
            versus = ([fmt(site_over_oracle(mine["goodput_ratio"], sites[name][ORACLE]["goodput_ratio"]),
                           "x")] if with_oracle else [])
            rows.append([name if index == 0 else "", c.key, fmt(mine["goodput_ratio"], "%"), *versus,
                         fmt(mine["throttled"]), fmt(mine["violations"]), fmt(mine["done"]),
                         fmt(mine["pages"]), fmt(mine["requests"]), fmt(mine["last_request"], "s"),
                         busiest_cell(mine["busiest_second"], mine["second_limit"])
                         if mine["window_limit"] is None else
                         busiest_cell(mine["busiest_window"], mine["window_limit"], mine["window"])])
    print("\n".join(pipe_table(headers, rows, left=2)))
    print("  goodput/capacity: 200s per second of the site's active period over its capacity (- for none); "
          "done: of its pages, those the contender recorded with a final 200; last s: seconds from the "
          "contender's start to the site's last request; busiest 1 s / window: the most requests the site "
          "saw within one second / the most its rules let through in one (its highest capacity, plus a "
          "token bucket's burst - 1; none for a limit on requests in flight), or, for a site that counts "
          "per window, within one of its windows (as it counts them: any span, or windows back to back; "
          "a request-rate counter's highest reading) / its count ('in T s'); '!' past that + 1")


def busiest_cell(busiest: float | None, limit: float | None, window: float | None = None) -> str:
    """``busiest/limit`` (``in T s`` for a window of ``T`` seconds), marked ``!`` past the limit plus one."""
    if busiest is None:
        return "-"
    if limit is None:
        return fmt(busiest)
    span = "" if window is None else f" in {window:g} s"
    return f"{fmt(busiest)}/{fmt(limit)}{span}" + (" !" if busiest > limit + 1 else "")


def site_figures(who: dict[str, Any]) -> str:
    """One contender's figures on one site, as the verdict lines quote them."""
    return (f"{fmt(who['goodput_ratio'], '%')} of capacity, {fmt(who['throttled'])} 429+503, "
            f"{fmt(who['violations'])} violations")


def print_verdicts(names: list[str], verdicts: dict[str, dict[str, Any]]) -> None:
    print()
    if not verdicts:
        print(f"no verdict against {REFERENCE}: it was not among the contenders")
        return
    print(f"verdict per site: yes = {REFERENCE} has a higher goodput/capacity than every peer that drew "
          "no more 429+503 and broke no more rules (peers with more are 'excused')")
    width = max(len(name) for name in names)

    def figures(who: dict[str, Any]) -> str:
        return f"{who['contender']} {site_figures(who)}"

    for name in names:
        verdict = verdicts[name]
        if verdict["verdict"] is None:
            print(f"{name:<{width}}  -    {verdict['why_none']}")
            continue
        runner = verdict["runner_up"]
        excused = ", ".join(verdict["excused"]) or "none"
        print(f"{name:<{width}}  {verdict['verdict']:<3}  {figures(verdict['reference'])}; "
              f"runner-up {figures(runner) if runner else 'none'}; excused: {excused}")
    decided = [name for name in names if verdicts[name]["verdict"] is not None]
    beaten = [name for name in decided if verdicts[name]["verdict"] == "yes"]
    print(f"{REFERENCE}: yes on {len(beaten)} of the {len(decided)} sites with a verdict"
          + (f"; no on {', '.join(name for name in decided if name not in beaten)}"
             if len(beaten) < len(decided) else ""))


def print_addon_verdicts(names: list[str], verdicts: dict[str, dict[str, Any]],
                         total: dict[str, Any]) -> None:
    print()
    print(f"add-on vs AutoThrottle per site: yes = {ADDON} has a higher goodput/capacity than "
          f"{ADDON_BASELINE} and drew no more 429+503 and broke no more rules")
    width = max(len(name) for name in names)
    for name in names:
        verdict = verdicts[name]
        both = (f"add-on {site_figures(verdict['addon'])}; "
                f"AutoThrottle {site_figures(verdict['autothrottle'])}")
        if verdict["verdict"] is None:
            print(f"{name:<{width}}  -    {verdict['why_none']}; {both}")
            continue
        why = f" ({', '.join(verdict['reasons'])})" if verdict["reasons"] else ""
        pushier = verdict.get("autothrottle_pushier") or []
        if verdict["verdict"] == "no" and pushier:
            why += f"; AutoThrottle drew more {' and '.join(pushier)}"
        print(f"{name:<{width}}  {verdict['verdict']:<3}  {both}{why}")
    decided = [name for name in names if verdicts[name]["verdict"] is not None]
    won = [name for name in decided if verdicts[name]["verdict"] == "yes"]
    print(f"add-on vs AutoThrottle: yes on {len(won)} of the {len(decided)} sites with a verdict"
          + (f"; no on {', '.join(name for name in decided if name not in won)}" if len(won) < len(decided)
             else ""))
    mine, theirs = total["addon"], total["autothrottle"]
    why = f" ({', '.join(total['reasons'])})" if total["reasons"] else ""
    print(f"add-on vs AutoThrottle in the totals: {total['verdict']}{why}: median goodput/capacity "
          f"{fmt(mine['goodput_ratio'], '%')} vs {fmt(theirs['goodput_ratio'], '%')} "
          f"(x{fmt(total['goodput_over_autothrottle'], 'x')}), 429+503 {fmt(mine['throttled'])} vs "
          f"{fmt(theirs['throttled'])}, violations {fmt(mine['violations'])} vs {fmt(theirs['violations'])}, "
          f"pages done {fmt(mine['done'])} vs {fmt(theirs['done'])}")


def ratios(contenders: list[Contender], totals: Figures) -> dict[str, dict[str, Any]]:
    """Each contender's totals over the reference's (see :func:`ratio_base`), and its refusals and
    violations per request."""
    base = totals[ratio_base(contenders)]

    def over(mine: float | None, theirs: float | None) -> float | None:
        return None if mine is None or not theirs else round(mine / theirs, 3)

    result: dict[str, dict[str, Any]] = {}
    for contender in contenders:
        mine = totals[contender.key]
        requests = mine["requests"]

        def per_100(count: float | None, requests: float | None = requests) -> float | None:
            return None if count is None or not requests else round(100 * count / requests, 1)

        wall, done = mine["wall"], mine["done"]
        result[contender.key] = {
            "wall_over_reference": over(wall, base["wall"]),
            "last_live_request_over_reference": over(mine["last_live_request"], base["last_live_request"]),
            "pages_done_over_reference": over(done, base["done"]),
            "requests_over_reference": over(requests, base["requests"]),
            "goodput_ratio_over_reference": over(mine["goodput_ratio"], base["goodput_ratio"]),
            "pages_per_minute_of_wall": None if done is None or not wall else round(60 * done / wall, 1),
            "throttled_per_100_requests": per_100(mine["throttled"]),
            "violations_per_100_requests": per_100(mine["violations"]),
        }
    return result


def print_totals(contenders: list[Contender], totals: Figures, ratio: dict[str, dict[str, Any]],
                 runs: list[Run]) -> None:
    print()
    print(f"totals; x ref = this contender's figure over {ratio_base(contenders)}'s; "
          "/100 req = per 100 requests")
    headers = ("contender", "wall s", "x ref", "live s", "x ref", "done", "x ref", "requests", "429+503",
               "/100 req", "violations", "/100 req", "goodput/capacity", "exit codes")
    rows: list[list[str]] = []
    for c in contenders:
        mine, r = totals[c.key], ratio[c.key]
        codes = ",".join("-" if run.exit_code is None else str(run.exit_code)
                         for run in runs if run.contender == c.key)
        cut = int(mine["cut_runs"] or 0)
        rows.append([c.key, fmt(mine["wall"], "s"), fmt(r["wall_over_reference"], "x"),
                     fmt(mine["last_live_request"], "s"), fmt(r["last_live_request_over_reference"], "x"),
                     fmt(mine["done"]), fmt(r["pages_done_over_reference"], "x"), fmt(mine["requests"]),
                     fmt(mine["throttled"]), fmt(r["throttled_per_100_requests"]), fmt(mine["violations"]),
                     fmt(r["violations_per_100_requests"]), fmt(mine["goodput_ratio"], "%"),
                     codes + (f" ({cut} cut)" if cut else "")])
    print("\n".join(pipe_table(headers, rows)))
    print("  wall s: start to exit; live s: start to the last request to a site that is not dead; "
          "goodput/capacity: the median over the sites that have a capacity; cut: stopped at the time limit")


def oracle_targets(names: list[str], contenders: list[Contender], sites: dict[str, Figures],
                   totals: Figures) -> dict[str, dict[str, Any]]:
    """Each contender against the oracle and issue 16's targets (empty without the oracle).

    Per contender: the mean capped goodput/capacity and its share of the oracle's, the worst
    site's goodput/capacity over the oracle's (and which site), 429+503 per request,
    violations, live pages done of all, the makespan over the oracle's, and which targets hold.
    """
    if ORACLE not in {c.key for c in contenders}:
        return {}
    oracle = totals[ORACLE]
    result: dict[str, dict[str, Any]] = {}
    for c in contenders:
        mine = totals[c.key]
        per_site = {name: site_over_oracle(sites[name][c.key]["goodput_ratio"],
                                      sites[name][ORACLE]["goodput_ratio"]) for name in names}
        known = {name: value for name, value in per_site.items() if value is not None}
        worst = min(known, key=lambda name: known[name]) if known else None
        requests, throttled = mine["requests"], mine["throttled"]
        share = None if not requests or throttled is None else round(throttled / requests, 4)
        mean = mine["mean_capped"]
        mean_share = over_oracle(mean, oracle["mean_capped"])
        makespan = over_oracle(mine["last_live_request"], oracle["last_live_request"])
        startup, last = mine.get("startup"), mine["last_live_request"]
        with_startup = None if startup is None or last is None else over_oracle(last + startup,
                                                                                 oracle["last_live_request"])
        done, pages = mine["live_done"], mine["live_pages"]
        checks = {
            f"mean >= {TARGET_MEAN:g}": mean is not None and mean >= TARGET_MEAN,
            f"mean >= {TARGET_MEAN_SHARE:g} x oracle": (mean_share is not None
                                                        and mean_share >= TARGET_MEAN_SHARE),
            f"every site >= {TARGET_SITE_SHARE:g} x oracle": (worst is not None
                                                              and known[worst] >= TARGET_SITE_SHARE),
            f"429+503 <= {TARGET_THROTTLED:.0%}": share is not None and share <= TARGET_THROTTLED,
            "0 violations": (mine["violations"] or 0) == 0,
            "every live page done": done is not None and done == pages,
            f"makespan <= {TARGET_MAKESPAN:g} x oracle": makespan is not None and makespan <= TARGET_MAKESPAN,
            "busiest second (window) <= limit + 1": not mine["over_limit"],
        }
        result[c.key] = {"mean_capped": mean, "mean_over_oracle": mean_share, "sites_over_oracle": per_site,
                         "worst_site": worst, "worst_over_oracle": None if worst is None else known[worst],
                         "throttled_share": share, "violations": mine["violations"],
                         "violation_kinds": {kind: mine[f"violations_{kind}"] for kind in VIOLATION_KINDS},
                         "live_done": done,
                         "live_pages": pages, "makespan_over_oracle": makespan, "targets": checks,
                         "pages_makespan_over_oracle": over_oracle(mine["last_live_page"],
                                                                   oracle["last_live_page"]),
                         "startup": startup, "makespan_with_startup_over_oracle": with_startup,
                         "sites_over_limit": int(mine["over_limit"] or 0),
                         "targets_met": sum(checks.values()), "targets_total": len(checks)}
    return result


def print_oracle_targets(contenders: list[Contender], targets: dict[str, dict[str, Any]]) -> None:
    print()
    if not targets:
        print(f"no comparison with the oracle: {ORACLE} was not among the contenders")
        return
    print("against the oracle (issue 16's targets; x oracle = this contender's figure over the oracle's)")
    headers = ("contender", "mean capped", "x oracle", "worst site", "x oracle", "429+503 %", "violations",
               "Retry-After / Crawl-delay / Disallow",
               "live done", "makespan x oracle", "start-up s", "with it x oracle", "over limit",
               "targets met")
    rows = []
    for c in contenders:
        t = targets[c.key]
        rows.append([c.key, fmt(t["mean_capped"], "%"), fmt(t["mean_over_oracle"], "x"),
                     t["worst_site"] or "-", fmt(t["worst_over_oracle"], "x"),
                     "-" if t["throttled_share"] is None else f"{100 * t['throttled_share']:.1f}",
                     fmt(t["violations"]),
                     " / ".join(fmt(t["violation_kinds"][kind]) for kind in VIOLATION_KINDS),
                     f"{fmt(t['live_done'])}/{fmt(t['live_pages'])}",
                     fmt(t["makespan_over_oracle"], "x"), fmt(t["startup"], "s"),
                     fmt(t["makespan_with_startup_over_oracle"], "x"), fmt(t["sites_over_limit"]),
                     f"{t['targets_met']}/{t['targets_total']}"])
    print("\n".join(pipe_table(headers, rows)))
    for c in contenders:
        if c.key == ORACLE:
            continue
        missed = [name for name, held in targets[c.key]["targets"].items() if not held]
        print(f"  {c.key}: " + ("every target met" if not missed else "missed: " + "; ".join(missed)))
    print("  mean capped: the mean over the sites with a capacity of goodput/capacity, each capped at 1; "
          "makespan: seconds to the last request to a live site, a fleet's counted from the moment its "
          "URLs went in (every worker started); start-up s: a fleet's seconds from its start to then "
          "(median), and the makespan with it; over limit: sites whose busiest second (or own window, "
          "for a site that counts per window) passed their limit + 1 (the worst round); "
          "Retry-After / Crawl-delay / Disallow: the violations "
          "by kind (a request inside a Retry-After hold, closer than a Crawl-delay, or for a page "
          "robots.txt disallows)")


def peer_versions() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in ("crawlpace", "scrapy", "twisted", "aiohttp", "httpx"):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


async def run_rounds(chosen: list[Contender], repeats: int, farm: str, root: Path, limit: float,
                     grace: float, plot_dir: Path | None, progress: bool) -> list[Run]:
    """Every contender ``repeats`` times, each round starting with the next one."""
    runs: list[Run] = []
    for round_no in range(repeats):
        shift = round_no % len(chosen)
        for contender in chosen[shift:] + chosen[:shift]:
            folder = fresh_folder(root / f"round{round_no + 1}-{contender.key}")
            plot = None if plot_dir is None else plot_dir / f"round{round_no + 1}-{contender.key}.png"
            run = await run_one(contender, round_no + 1, farm, folder, limit, grace, plot)
            runs.append(run)
            if progress:
                print(f"  round {round_no + 1}/{repeats}: {contender.key}: {run.wall:.1f} s, "
                      f"{run.total('done')}/{run.total('pages')} pages, exit {run.exit_code}"
                      f"{' (cut at the time limit)' if run.cut else ''}", file=sys.stderr, flush=True)
                if run.error:
                    print(f"    WARNING: {run.error}", file=sys.stderr, flush=True)
    return runs


def fresh_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def prepare_plot_dir(path: Path) -> None:
    """Create the folder; a new one gets a .gitignore, so that its pictures stay out of commits."""
    if not path.exists():
        path.mkdir(parents=True)
        (path / ".gitignore").write_text(
            "# Written by bench/crawl_efficiency.py: plots are not committed.\n*\n", encoding="utf-8")


def report(args: argparse.Namespace, chosen: list[Contender], runs: list[Run], repeats: int, limit: float,
           started: float) -> None:
    names = list(runs[0].sites)
    sites = {name: {c.key: site_medians([r for r in runs if r.contender == c.key], name) for c in chosen}
             for name in names}
    totals = {c.key: total_medians([r for r in runs if r.contender == c.key]) for c in chosen}
    ratio = ratios(chosen, totals)
    keys = {c.key for c in chosen}
    capacity = {name: any(run.sites[name].capacity for run in runs) for name in names}
    verdicts = ({name: site_verdict(sites[name], chosen, capacity[name]) for name in names}
                if REFERENCE in keys else {})
    addon_verdicts = ({name: addon_verdict(sites[name], capacity[name]) for name in names}
                      if {ADDON, ADDON_BASELINE} <= keys else {})
    addon_total = addon_total_verdict(totals) if addon_verdicts else None
    plots = [run.plot for run in runs if run.plot is not None]
    print()
    print(f"{'medians over ' + str(repeats) + ' rounds' if repeats > 1 else 'one round'}, "
          f"one row per site and contender")
    print_site_table(names, chosen, sites)
    print_verdicts(names, verdicts)
    if addon_total is not None:
        print_addon_verdicts(names, addon_verdicts, addon_total)
    print_totals(chosen, totals, ratio, runs)
    targets = oracle_targets(names, chosen, sites, totals)
    print_oracle_targets(chosen, targets)
    if plots:
        print(f"\nplots (rate over time per site against its capacity): {len(plots)} in "
              f"{Path(plots[0]).parent}: " + ", ".join(Path(plot).name for plot in plots))
    elif args.plot_dir:
        print("\nno plots: the farm drew none (is matplotlib installed? see sim.stdout of a run)")
    failed = [run for run in runs if run.error]
    if failed:
        print()
        for run in failed:
            print(f"WARNING: round {run.round}, {run.contender}: {run.error}; its figures above are zeros, "
                  f"not a measurement")
    print(f"\nwhole benchmark: {time.monotonic() - started:.1f} s")
    if args.json:
        print(json.dumps({
            "benchmark": "crawl_efficiency",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "versions": peer_versions(),
            "farm": args.farm,
            "quick": args.quick,
            "quick_pages": QUICK_PAGES if args.quick else None,
            "quick_hang": QUICK_HANG if args.quick else None,
            "repeats": repeats,
            "limit_seconds": limit,
            "reference": REFERENCE if REFERENCE in keys else None,
            "ratio_base": ratio_base(chosen),
            "contenders": {c.key: c.settings for c in chosen},
            "sites": sites,
            "verdicts": verdicts,
            "addon_verdicts": addon_verdicts,
            "addon_total_verdict": addon_total,
            "totals": totals,
            "ratios": ratio,
            "oracle_targets": targets,
            "plots": plots,
            "failed_runs": [{"round": run.round, "contender": run.contender, "error": run.error}
                            for run in failed],
            "runs": [asdict(run) for run in runs],
            "seconds": round(time.monotonic() - started, 1),
        }, sort_keys=True))


def pick_contenders(names: str) -> list[Contender]:
    """The contenders named (comma-separated), in the standard order.

    Without the reference among them there are no reference verdicts, and the ratios are
    over the first contender chosen (see :func:`ratio_base`).
    """
    wanted = [name.strip() for name in PRESETS.get(names.strip(), names).split(",") if name.strip()]
    known = {c.key for c in CONTENDERS}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise SystemExit(f"unknown contender(s): {', '.join(unknown)}; choose from: {', '.join(known)}")
    if not wanted:
        raise SystemExit("name at least one contender")
    return [c for c in CONTENDERS if c.key in wanted]


def ratio_base(contenders: list[Contender]) -> str:
    """Whose totals the ratios are over: the reference when it ran, else the first contender."""
    keys = [c.key for c in contenders]
    return REFERENCE if REFERENCE in keys else keys[0]


def benchmark(args: argparse.Namespace) -> None:
    repeats: int = args.repeats or (1 if args.quick else 3)
    limit: float = args.limit or (QUICK_LIMIT if args.quick else LIMIT)
    grace = QUICK_GRACE if args.quick else GRACE
    chosen = pick_contenders(args.contenders)
    plot_dir = Path(args.plot_dir).resolve() if args.plot_dir else None
    if plot_dir is not None:
        prepare_plot_dir(plot_dir)
    spec = farm_source(args.farm)
    started = time.monotonic()
    print(f"crawl efficiency: farm {args.farm}{' (quick copy)' if args.quick else ''}, "
          f"{len(spec.get('site', []))} sites, {len(chosen)} contenders, {repeats} round(s), "
          f"limit {limit:g} s per contender, Python {platform.python_version()}", flush=True)
    with contextlib.ExitStack() as stack:
        if args.workdir:
            root = Path(args.workdir).resolve()
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="crawl-efficiency-")))
        # Every run reads the farm from one file, so that the oracle can read the hidden limits too.
        farm_file = root / ("quick-farm.toml" if args.quick else "farm.toml")
        farm_file.write_text(quick_farm(spec) if args.quick else full_farm(args.farm), encoding="utf-8")
        farm = str(farm_file)
        runs = asyncio.run(run_rounds(chosen, repeats, farm, root, limit, grace, plot_dir,
                                      progress=not args.json))
    report(args, chosen, runs, repeats, limit, started)


# -- random farms ----------------------------------------------------------------------------

#: Sites of a random farm, and the contenders on it, by default and with ``--quick``.
RANDOM_SITES, QUICK_RANDOM_SITES = 30, 8
RANDOM_CONTENDERS = "crawlpace-rampup,crawlpace-fleet4,crawlpace-fleet8,oracle"
QUICK_RANDOM_CONTENDERS = "crawlpace-rampup,oracle"
#: The share of the worst sites the random-farm report quotes (its 10th percentile).
LOW_PERCENTILE = 0.10


def kind_of(name: str) -> str:
    """A random farm site's kind: its name without the number (``fixed07`` -> ``fixed``)."""
    return name.rstrip("0123456789")


def percentile(values: Sequence[float], share: float) -> float | None:
    """The ``share`` quantile of ``values`` (linear between the closest ranks), None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    position = share * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def random_site_ratio(mine: SiteFigures, oracle: SiteFigures) -> float | None:
    """A site's goodput over the oracle's in the same round: goodput/capacity each capped at 1
    where the site has a capacity (see :func:`site_over_oracle`), plain goodput where it has none;
    times the share of the oracle's pages done that the contender did too.

    The goodput is the farm's 200s over the site's active period, so a contender that leaves
    pages behind (takes a challenge page for the page, gives URLs up) ends the period early
    and kept its goodput: without the share, a site crawled too fast, half of it answered with
    challenges, read as 1.0 x oracle.
    """
    ratio = site_over_oracle(mine.goodput_ratio, oracle.goodput_ratio) if mine.capacity else (
        over_oracle(mine.goodput, oracle.goodput))
    if ratio is None or not oracle.done:
        return ratio
    return round(ratio * min(mine.done / oracle.done, 1.0), 3)


def worst_excess(runs: Sequence[Run]) -> dict[str, Any] | None:
    """The site-round whose busiest second (or window) went furthest past its limit (or came
    closest to it), as ``{site, busiest, limit, excess}``; None when no site has such a limit.

    ``excess`` is the busiest second (or window, see :attr:`SiteFigures.judged`) minus the limit: the
    target is at most 1. ``window`` is the seconds it was counted over.
    """
    worst: dict[str, Any] | None = None
    for run in runs:
        for name, site in run.sites.items():
            judged = site.judged
            if judged is None:
                continue
            excess = round(judged[0] - judged[1], 3)
            if worst is None or excess > worst["excess"]:
                worst = {"site": f"r{run.round}:{name}", "busiest": judged[0], "limit": judged[1],
                         "window": site.window if site.window_limit is not None else 1.0, "excess": excess}
    return worst


def own_share(site: SiteFigures) -> float | None:
    """A site's own share of its capacity, whoever else ran: goodput/capacity capped at 1, times the
    share of its pages done; None for a site without a capacity or a goodput. Unlike the ratio to the
    oracle it does not flatter a contender where the oracle is weak."""
    if not site.capacity or site.goodput_ratio is None:
        return None
    return min(site.goodput_ratio, 1.0) * min(site.done / max(site.pages, 1), 1.0)


#: The figures of one round that ``--repeats`` also gives as medians over the rounds.
ROUND_KEYS = ("mean_over_oracle", "p10_over_oracle", "pushback_share", "makespan_over_oracle",
              "pages_makespan_over_oracle", "paced_makespan_over_oracle", "own_share_mean", "own_share_p10")


def paced_span(run: Run) -> float | None:
    """Seconds from the first request to a live site to the last: the makespan with the contender's
    start-up left out, the same for every contender (the oracle's included, and a fleet's)."""
    first, last = run.first_live_request, run.last_live_request
    return None if first is None or last is None else last - first


def makespan_setter(run: Run, oracle: Run) -> dict[str, Any] | None:
    """Which live site set the run's makespan and which set the oracle's, with their ends (seconds from
    each one's start), the oracle's end on the run's site, and each one's first request (its start-up)."""
    name, theirs = run.last_live_site(), oracle.last_live_site()
    if name is None or theirs is None:
        return None
    there = oracle.sites.get(name)
    return {"site": name, "end": run.last_live_request,
            "oracle_end_there": None if there is None else there.last_request,
            "oracle_site": theirs, "oracle_end": oracle.last_live_request,
            "first_request": run.first_live_request, "oracle_first_request": oracle.first_live_request}


def round_figures(run: Run, oracle: Run) -> dict[str, Any]:
    """One contender's run against the oracle's of the same round: per site, its ratio to the oracle
    (:func:`random_site_ratio`) and its own share of capacity (:func:`own_share`); their mean and
    10th percentile, the pushback share and the makespan over the oracle's."""
    ratios = {name: random_site_ratio(site, oracle.sites[name]) for name, site in run.sites.items()}
    shares = {name: own_share(site) for name, site in run.sites.items()}
    known = [value for value in ratios.values() if value is not None]
    owned = [value for value in shares.values() if value is not None]
    requests = run.total("requests")

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return {
        "ratios": ratios, "shares": shares,
        "mean_over_oracle": rounded(statistics.fmean(known)) if known else None,
        "p10_over_oracle": rounded(percentile(known, LOW_PERCENTILE)),
        "pushback_share": round(run.total("throttled") / requests, 4) if requests else None,
        "makespan_over_oracle": over_oracle(run.last_live_request, oracle.last_live_request),
        "pages_makespan_over_oracle": over_oracle(run.last_live_page, oracle.last_live_page),
        "paced_makespan_over_oracle": over_oracle(paced_span(run), paced_span(oracle)),
        "makespan_site": makespan_setter(run, oracle),
        "own_share_mean": rounded(statistics.fmean(owned)) if owned else None,
        "own_share_p10": rounded(percentile(owned, LOW_PERCENTILE)),
    }


def random_summary(contender: str, runs: list[Run]) -> dict[str, Any]:
    """One contender over every round of the random farm, each site against the oracle of its round.

    The figures are pooled over the rounds (every site-round one sample); ``round_medians`` holds the
    median over the rounds of each round's own figures (:data:`ROUND_KEYS`), and ``per_round`` those.
    ``own_share_*`` is each site's goodput/capacity whatever the oracle got (:func:`own_share`), the
    honest figure where the oracle is weak; ``oracle_share_by_kind`` gives the oracle's for comparison.
    """
    mine_runs = {run.round: run for run in runs if run.contender == contender}
    oracles = {run.round: run for run in runs if run.contender == ORACLE}
    ratios: list[float] = []
    shares: list[float] = []
    by_kind: dict[str, list[float]] = {}
    share_by_kind: dict[str, list[float]] = {}
    oracle_by_kind: dict[str, list[float]] = {}
    worst: list[tuple[float, str]] = []
    makespans: list[float] = []
    per_round: list[dict[str, Any]] = []
    for round_no, run in sorted(mine_runs.items()):
        oracle = oracles.get(round_no)
        if oracle is None:
            continue
        figures = round_figures(run, oracle)
        per_round.append({"round": round_no, **{key: figures[key] for key in ROUND_KEYS},
                          "makespan_site": figures["makespan_site"]})
        for name, ratio in figures["ratios"].items():
            share, theirs = figures["shares"][name], own_share(oracle.sites[name])
            if share is not None:
                shares.append(share)
                share_by_kind.setdefault(kind_of(name), []).append(share)
            if theirs is not None:
                oracle_by_kind.setdefault(kind_of(name), []).append(theirs)
            if ratio is None:
                continue
            ratios.append(ratio)
            by_kind.setdefault(kind_of(name), []).append(ratio)
            worst.append((ratio, f"r{round_no}:{name}"))
        if figures["makespan_over_oracle"] is not None:
            makespans.append(figures["makespan_over_oracle"])
    requests = sum(run.total("requests") for run in mine_runs.values())
    throttled = sum(run.total("throttled") for run in mine_runs.values())

    def kinds(values: dict[str, list[float]]) -> dict[str, float]:
        return {kind: round(statistics.fmean(found), 3) for kind, found in sorted(values.items())}

    return {
        "rounds": len(mine_runs),
        "sites": len(ratios),
        "mean_over_oracle": None if not ratios else round(statistics.fmean(ratios), 3),
        "p10_over_oracle": None if not ratios else round(percentile(ratios, LOW_PERCENTILE) or 0.0, 3),
        "own_share_mean": None if not shares else round(statistics.fmean(shares), 3),
        "own_share_p10": None if not shares else round(percentile(shares, LOW_PERCENTILE) or 0.0, 3),
        "pushback_share": None if not requests else round(throttled / requests, 4),
        "requests": requests,
        "throttled": throttled,
        "violations": sum(run.total("violations") for run in mine_runs.values()),
        "violation_kinds": {kind: sum(run.kind_total(kind) for run in mine_runs.values())
                            for kind in VIOLATION_KINDS},
        "makespan_over_oracle": median_of(makespans),
        "makespans_over_oracle": makespans,
        "pages_makespan_over_oracle": median_of([figures["pages_makespan_over_oracle"]
                                                 for figures in per_round]),
        "paced_makespan_over_oracle": median_of([figures["paced_makespan_over_oracle"]
                                                 for figures in per_round]),
        "first_request": median_of([run.first_live_request for run in mine_runs.values()]),
        "per_round": per_round,
        "round_medians": {key: median_of([figures[key] for figures in per_round]) for key in ROUND_KEYS},
        "pages_done": sum(run.total("done") for run in mine_runs.values()),
        "pages": sum(run.total("pages") for run in mine_runs.values()),
        "sites_over_limit": sum(len(run.sites_over_limit) for run in mine_runs.values()),
        "sites_over_limit_without_lockout": sum(len(run.sites_over_limit_without_lockout)
                                              for run in mine_runs.values()),
        "over_limit_sites": [f"r{run.round}:{name}" for run in mine_runs.values()
                             for name in run.sites_over_limit],
        "over_limit_without_lockout_sites": [f"r{run.round}:{name}" for run in mine_runs.values()
                                           for name in run.sites_over_limit_without_lockout],
        "worst_excess": worst_excess(list(mine_runs.values())),
        "startup": median_of([run.startup for run in mine_runs.values()]),
        "cut_runs": sum(run.cut for run in mine_runs.values()),
        "by_kind": kinds(by_kind),
        "own_share_by_kind": kinds(share_by_kind),
        "oracle_share_by_kind": kinds(oracle_by_kind),
        "worst_sites": [{"site": name, "over_oracle": round(ratio, 3)} for ratio, name in sorted(worst)[:6]],
    }


def excess_cell(worst: dict[str, Any] | None) -> str:
    """``+2 (r1:bucket03 14/12)``: the worst busiest second (``in T s``: window) over its limit, '-'
    when none has a limit."""
    if worst is None:
        return "-"
    window = worst.get("window")
    span = "" if window in (None, 1.0) else f" in {window:g} s"
    return f"{worst['excess']:+g} ({worst['site']} {worst['busiest']:g}/{worst['limit']:g}{span})"


def share_cell(mean: float | None, low: float | None) -> str:
    """``0.85 / 0.62``: an own share of capacity's mean and 10th percentile."""
    return f"{fmt(mean, 'x')} / {fmt(low, 'x')}"


def print_random_report(chosen: list[Contender], summaries: dict[str, dict[str, Any]]) -> None:
    print()
    print("random farms: each site's goodput over the oracle's in the same round (goodput/capacity "
          "capped at 1; plain goodput where a site has no capacity) times the share of the oracle's "
          "pages done that it did, pooled over the rounds; own share: goodput/capacity capped at 1 times "
          "the share of its pages done, whatever the oracle got")
    headers = ("contender", "sites", "mean x oracle", "p10 x oracle", "own share mean / p10", "429+503 %",
               "violations", "makespan x oracle", "to last page x", "start-up s", "pages done", "over limit",
               "worst excess", "cut")
    rows = []
    for c in chosen:
        t = summaries[c.key]
        rows.append([c.key, fmt(t["sites"]), fmt(t["mean_over_oracle"], "x"), fmt(t["p10_over_oracle"], "x"),
                     share_cell(t["own_share_mean"], t["own_share_p10"]),
                     "-" if t["pushback_share"] is None else f"{100 * t['pushback_share']:.1f}",
                     fmt(t["violations"]), fmt(t["makespan_over_oracle"], "x"),
                     fmt(t["pages_makespan_over_oracle"], "x"), fmt(t["startup"], "s"),
                     f"{t['pages_done']}/{t['pages']}", fmt(t["sites_over_limit"]),
                     excess_cell(t["worst_excess"]), fmt(t["cut_runs"])])
    print("\n".join(pipe_table(headers, rows)))
    rounds = max((summaries[c.key]["rounds"] for c in chosen), default=0)
    if rounds > 1:
        print()
        print(f"medians over the {rounds} rounds of each round's own figures")
        rows = []
        for c in chosen:
            m = summaries[c.key]["round_medians"]
            rows.append([c.key, fmt(m["mean_over_oracle"], "x"), fmt(m["p10_over_oracle"], "x"),
                         share_cell(m["own_share_mean"], m["own_share_p10"]),
                         "-" if m["pushback_share"] is None else f"{100 * m['pushback_share']:.1f}",
                         fmt(m["makespan_over_oracle"], "x"), fmt(m["pages_makespan_over_oracle"], "x")])
        print("\n".join(pipe_table(("contender", "mean x oracle", "p10 x oracle", "own share mean / p10",
                                     "429+503 %", "makespan x oracle", "to last page x"), rows)))
    kinds = sorted({kind for c in chosen for kind in summaries[c.key]["by_kind"]})
    if kinds:
        print()
        print("by limiter kind: mean x oracle, and each contender's own share of capacity")
        rows = [[kind, *(fmt(summaries[c.key]["by_kind"].get(kind), "x") for c in chosen if c.key != ORACLE),
                 *(fmt(summaries[c.key]["own_share_by_kind"].get(kind), "x") for c in chosen)]
                for kind in kinds]
        kind_headers = ("kind", *(f"{c.key} x oracle" for c in chosen if c.key != ORACLE),
                        *(f"{c.key} share" for c in chosen))
        print("\n".join(pipe_table(kind_headers, rows)))
    for c in chosen:
        if summaries[c.key]["over_limit_sites"]:
            print(f"  {c.key}: over their limit + 1 (per second, or per window): "
                  + ", ".join(summaries[c.key]["over_limit_sites"]))
            after = summaries[c.key]["over_limit_without_lockout_sites"]
            print(f"  {c.key}: of those, over it without their first lock-out's refusals: "
                  + (", ".join(after) or "none"))
        if c.key != ORACLE and summaries[c.key]["worst_sites"]:
            print(f"  {c.key}: worst sites " + ", ".join(
                f"{item['site']} {item['over_oracle']:.2f}" for item in summaries[c.key]["worst_sites"]))
        if c.key != ORACLE:
            for figures in summaries[c.key]["per_round"]:
                line = makespan_line(figures)
                if line:
                    print(f"  {c.key}: {line}")
    print("  p10: the 10th percentile of the sites; makespan: the median over the rounds of the seconds "
          "to the last request to a live site over the oracle's; to last page: the same to the first 200 of "
          "each live site's last page (a hung send's tail aside); over limit: site-rounds whose busiest "
          "second (own window, for a site that counts per window) passed their limit + 1; worst excess: "
          "the largest busiest second (window) minus that "
          "limit (target at most +1), with the site-round, busiest and limit; the sites are named after "
          "their kind (see crawlpace.sim._random)")


def makespan_line(figures: dict[str, Any]) -> str:
    """``r1: makespan set by bucket05 at 153.8 s (...)``: the site that ended a round last, against the
    oracle's end there and its own last site, and both start-ups ('' without the figures)."""
    where = figures.get("makespan_site")
    if not where:
        return ""
    end, there, own = (fmt(where[key], "s") for key in ("end", "oracle_end_there", "oracle_end"))
    first, theirs = fmt(where["first_request"], "s"), fmt(where["oracle_first_request"], "s")
    return (f"r{figures['round']}: makespan set by {where['site']} at {end} s (the oracle's there {there} s; "
            f"its own set by {where['oracle_site']} at {own} s); first request {first} s after the start "
            f"(the oracle's {theirs} s); makespan from the first request "
            f"{fmt(figures.get('paced_makespan_over_oracle'), 'x')} x oracle")


def random_seeds(args: argparse.Namespace, repeats: int) -> list[int]:
    """One seed per round: ``--seed`` and the next ones, or fresh ones (never fixed)."""
    if args.seed is not None:
        return [args.seed + index for index in range(repeats)]
    fresh = random.SystemRandom()
    return [fresh.randrange(2**31) for _ in range(repeats)]


async def random_rounds(chosen: list[Contender], seeds: list[int], sites: int, seconds: float, quick: bool,
                        root: Path, limit: float, grace: float, plot_dir: Path | None,
                        progress: bool, kinds: tuple[str, ...] = RANDOM_KINDS) -> list[Run]:
    """Each round on a farm of its own seed, every contender on it, the first contender turning."""
    runs: list[Run] = []
    for round_no, seed in enumerate(seeds, 1):
        spec = draw_farm(seed, sites, seconds=seconds, kinds=kinds)
        only = "" if kinds == RANDOM_KINDS else f" --kinds {','.join(kinds)}"
        text = farm_toml(spec, f"crawl_efficiency.py --farm random, round {round_no}: crawlpace sim random "
                               f"--seed {seed} --sites {sites} --seconds {seconds:g}{only}")
        farm_file = root / f"round{round_no}-farm.toml"
        farm_file.write_text(quick_farm(tomllib.loads(text)) if quick else text, encoding="utf-8")
        print(f"round {round_no}: seed {seed} (replay: --farm random --seed {seed} --repeats 1 "
              f"--sites {sites}{only}{' --quick' if quick else ''})", flush=True)
        shift = (round_no - 1) % len(chosen)
        for contender in chosen[shift:] + chosen[:shift]:
            folder = fresh_folder(root / f"round{round_no}-{contender.key}")
            plot = None if plot_dir is None else plot_dir / f"random-round{round_no}-{contender.key}.png"
            run = await run_one(contender, round_no, str(farm_file), folder, limit, grace, plot)
            runs.append(run)
            if progress:
                print(f"  round {round_no}: {contender.key}: {run.wall:.1f} s, "
                      f"{run.total('done')}/{run.total('pages')} pages, exit {run.exit_code}"
                      f"{' (cut at the time limit)' if run.cut else ''}", file=sys.stderr, flush=True)
                if run.error:
                    print(f"    WARNING: {run.error}", file=sys.stderr, flush=True)
    return runs


def random_benchmark(args: argparse.Namespace) -> None:
    """``--farm random``: a fresh farm per round, each contender's sites over the oracle's."""
    repeats: int = args.repeats or (1 if args.quick else 3)
    limit: float = args.limit or (QUICK_LIMIT if args.quick else LIMIT)
    grace = QUICK_GRACE if args.quick else GRACE
    sites: int = args.sites or (QUICK_RANDOM_SITES if args.quick else RANDOM_SITES)
    kinds = RANDOM_KINDS if args.kinds is None else tuple(
        kind.strip() for kind in args.kinds.split(",") if kind.strip())
    unknown = sorted(set(kinds) - set(RANDOM_KINDS))
    if unknown or not kinds:
        raise SystemExit(f"--kinds {args.kinds!r}: use one or more of: {', '.join(RANDOM_KINDS)}")
    default = QUICK_RANDOM_CONTENDERS if args.quick else RANDOM_CONTENDERS
    chosen = pick_contenders(args.contenders or default)
    if ORACLE not in {c.key for c in chosen}:
        raise SystemExit("--farm random measures every site against the oracle: add oracle to --contenders")
    plot_dir = Path(args.plot_dir).resolve() if args.plot_dir else None
    if plot_dir is not None:
        prepare_plot_dir(plot_dir)
    seeds = random_seeds(args, repeats)
    started = time.monotonic()
    print(f"crawl efficiency: random farms of {sites} sites{' (quick copies)' if args.quick else ''}, "
          f"{len(chosen)} contenders, {repeats} round(s), seeds {', '.join(map(str, seeds))}, "
          f"limit {limit:g} s "
          f"per contender, Python {platform.python_version()}", flush=True)
    with contextlib.ExitStack() as stack:
        if args.workdir:
            root = Path(args.workdir).resolve()
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="crawl-efficiency-random-")))
        runs = asyncio.run(random_rounds(chosen, seeds, sites, args.seconds, args.quick, root, limit, grace,
                                         plot_dir, progress=not args.json, kinds=kinds))
    summaries = {c.key: random_summary(c.key, runs) for c in chosen}
    print_random_report(chosen, summaries)
    failed = [run for run in runs if run.error]
    for run in failed:
        print(f"WARNING: round {run.round}, {run.contender}: {run.error}; its figures are zeros, "
              f"not a measurement")
    print(f"\nwhole benchmark: {time.monotonic() - started:.1f} s")
    if args.json:
        print(json.dumps({
            "benchmark": "crawl_efficiency",
            "farm": "random",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "versions": peer_versions(),
            "quick": args.quick,
            "seeds": seeds,
            "sites": sites,
            "seconds_per_site": args.seconds,
            "repeats": repeats,
            "limit_seconds": limit,
            "contenders": {c.key: c.settings for c in chosen},
            "summaries": summaries,
            "failed_runs": [{"round": run.round, "contender": run.contender, "error": run.error}
                            for run in failed],
            "runs": [asdict(run) for run in runs],
            "seconds": round(time.monotonic() - started, 1),
        }, sort_keys=True))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help=f"a farm of at most {QUICK_PAGES} pages per site, one round (1-2 min)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--farm", default="mixed",
                        help="a shipped farm's name, a farm TOML file, or 'random': a farm drawn afresh each "
                             "round (default: mixed)")
    parser.add_argument("--seed", type=int, default=None,
                        help="--farm random: the first round's seed, the next rounds' follow it "
                             "(default: fresh seeds, printed)")
    parser.add_argument("--sites", type=int, default=0,
                        help=f"--farm random: sites per farm (default {RANDOM_SITES}, "
                             f"quick {QUICK_RANDOM_SITES})")
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS,
                        help="--farm random: about how long each site takes at its capacity "
                             "(default %(default)g)")
    parser.add_argument("--kinds", default=None,
                        help=f"--farm random: comma-separated limiter kinds to draw from "
                             f"(default: all: {', '.join(RANDOM_KINDS)})")
    parser.add_argument("--repeats", type=int, default=0,
                        help="rounds over all contenders (default 3, quick 1)")
    parser.add_argument("--limit", type=float, default=0.0,
                        help=f"seconds a contender may run (default {LIMIT:g}, quick {QUICK_LIMIT:g})")
    parser.add_argument("--contenders", default=None,
                        help=f"comma-separated subset of: {', '.join(c.key for c in CONTENDERS)}, or "
                             f"'fleets' ({PRESETS['fleets']}) "
                             f"(default all but {', '.join(sorted(OPTIONAL))}; the verdicts need "
                             f"{REFERENCE}, and {ADDON} with {ADDON_BASELINE}; --farm random: "
                             f"{RANDOM_CONTENDERS}, quick {QUICK_RANDOM_CONTENDERS})")
    parser.add_argument("--plot-dir", default=str(PLOT_DIR),
                        help="folder for one PNG per run, roundN-CONTENDER.png ('' for none; "
                             "default: bench/out/crawl_efficiency)")
    parser.add_argument("--workdir", default=None,
                        help="keep every farm's and contender's files here (default: a temporary folder)")
    return parser.parse_args(argv)


def stop_on_signals() -> None:
    """Make SIGTERM and SIGHUP (an outer ``timeout``, a closed terminal) stop this script as Ctrl-C
    does: the run under way stops its contender's process group and the farm on the way out."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.default_int_handler)


def main(argv: list[str] | None = None) -> None:
    pin_pythonpath()  # the crawls it starts run this tree's crawlpace (bench/_spawn_env.py)
    stop_on_signals()
    args = parse_args(argv)
    if args.farm == "random" and not Path(args.farm).exists():
        random_benchmark(args)
        return
    if args.contenders is None:
        args.contenders = ",".join(c.key for c in CONTENDERS if c.key not in OPTIONAL)
    benchmark(args)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: every child was stopped on the way out
        sys.exit("crawl_efficiency: interrupted")
