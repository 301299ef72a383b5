"""The all-knowing pacer of ``bench/crawl_efficiency.py``: it reads every site's hidden limits.

Run it as ``python bench/_peers/oracle.py URLS.txt OUT.jsonl FARM.toml``.

It is not a crawler anyone could ship: it builds each site of the farm file with the
simulator's own code (``crawlpace.sim``) and paces every host just under what that site
allows, so that its goodput is the best a polite crawler can hope for. The sites are
found by address, as the farm lays them out: the first on 127.0.0.2, the next on
127.0.0.3, and so on (the simulator's loopback aliases; without them this script cannot
tell the sites apart and exits with an error).

Per profile, each host gets a gap between sends and a cap on requests in flight. Each send is
due one gap after the previous one's due time, not after the moment it went out, so that a send
that woke late (a loaded machine) does not slow every later one; where the limit has nothing to
spare, the gap counts from the actual send instead (``catch_up`` is 0):

* ``queue`` (nginx's ``limit_req`` whose burst waits in line): as many in flight as the line
  holds less its ``delay`` and one spare (4 at most, at least 1), no gap: nginx serves them one
  ``1 / rate`` apart, each new request finding at most that many ahead of it (it is sent after
  an answer), so none is refused and the line is never empty; with ``delay`` of ``burst`` or
  more (``nodelay``), a token bucket of ``burst + 1`` as below;
* ``ratelimit``, ``retryafter``, ``challenge``: 95 % of the token rate, evenly spaced, 4 in flight,
  a late send caught up by at most ``burst - 2`` sends (3 at most); 90 % and 1 in flight when the
  bucket holds at most 2 (no burst room: any arrival early by more than the slack draws a 429),
  from each actual send. The slack leaves room for the jitter of two processes' event loops;
* ``headers``: 95 % of ``limit / window``, evenly spaced (never more than the limit in a window);
* ``crawldelay``: one request at a time, ``delay`` plus 2 % plus 20 ms apart;
* ``quota``: 96 % of *half* the quota per window, evenly spaced. The site's staged brake
  refuses half of the requests once half of a window's quota is used, so the quota's
  second half costs at least one 429 per success: below half, none is ever drawn;
* ``overload``: the in-flight count that serves the most per second given the latency curve and
  the client's own turn between an answer and the next send (:func:`best_inflight`): the knee
  where throughput falls past it, a few more where it stays level, the limit without a knee; no gap;
* ``slow``: ``limit`` in flight, no gap;
* ``flaky``: 8 in flight, no gap;
* ``window`` with fixed windows (aligned to the clock, which the oracle shares with the
  farm: both read the system's monotonic clock): each window's whole count, sent evenly
  from 50 ms after the window opens to 50 ms before it closes (a quarter of the window at
  most), never more than the count in one window, so refused requests are never drawn and
  whether the site counts them does not matter;
* ``window`` with a sliding window: a log of its own answers (each request arrived before its
  answer, so it leaves the window by the answer plus the window), each send going while fewer
  than ``limit`` answers came in the last ``window`` seconds and 5 ms, those still out
  counted in; as many at once as that allows;
* ``window`` with windows each opened by a request (``started``, Flask-Limiter's fixed window):
  a shadow of the site's window opened by the oracle's own send, its whole count sent evenly
  until 50 ms before it closes (a quarter of the window at most); the next window opened once
  the site's has surely closed: 50 ms after the opening send's window, and the window's length
  after that send's answer (the site opened it on arrival, before answering);
* ``reqrate`` (HAProxy's ``http_req_rate``): each send as soon as a shadow of the counter, fed
  with the oracle's own sends (and told the phase of the site's periods), reads at most the
  limit with it, an arrival's lag allowed for (:class:`CounterShadow`): the first period's
  whole count at once (the counter has no previous period yet), then as the previous period's
  weight drains, ``limit - 1`` per period (even sends at the limit would read one more). No
  refusal is drawn, so that the counter counts refusals does not matter;
* ``conncap``: ``cap`` in flight, each slot resting the site's ``lag`` plus 5 ms after its
  answer, so that the site has freed it before it is used again;
* ``shifting``: the base profile's plan, scaled by the factor of the schedule from the
  host's first request on, switching to a lower factor 0.3 s early;
* ``dead``: nothing is sent.

It obeys every site's robots.txt, read from the site itself: a URL the file disallows is
not sent (its line says so).

It sends with aiohttp, as ``crawlpace crawl`` does, so that its own cost per request is no
more than a contender's. Every request has the same 10 s timeout as the crawlpace contenders;
a 5xx, a 429, the farm's challenge page (recorded as a 429 if it is the last answer), a timeout or a failed
connection is sent again after the host's gap, or after the
``Retry-After`` of a 429, which holds the whole host (at most 8 resends), so
the flaky sites' pages all get done. Each URL's final answer is one JSON line ``{"url",
"status", "attempts", "error"}``, written and flushed as soon as it is known.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import sys
import time
import tomllib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import aiohttp

from crawlpace._robotstxt._robots import RobotsRules
from crawlpace.sim import (
    CHALLENGE_PAGE,
    ChallengeSite,
    CrawlDelaySite,
    FlakySite,
    HeadersSite,
    OverloadSite,
    QueueSite,
    QuotaSite,
    RateLimitSite,
    RequestRateSite,
    RetryAfterSite,
    ShiftingSite,
    Site,
    SlotCapSite,
    SlowSite,
    WindowSite,
    parse_farm,
)
from crawlpace.sim._spec import build_site

TIMEOUT = 10.0
RETRIES = 8
#: The user agent the oracle sends, and whose robots.txt rules it obeys.
USER_AGENT = f"crawlpace-oracle (aiohttp/{aiohttp.__version__})"
FIRST_HOST = ipaddress.ip_address("127.0.0.2")
#: Shares of the hidden limits the oracle uses.
RATE_SHARE = 0.95
#: ... of a bucket that holds at most 2, which refuses any two arrivals closer than its gap.
TIGHT_SHARE = 0.9
QUOTA_SHARE = 0.5 * 0.96
CRAWL_DELAY_MARGIN, CRAWL_DELAY_SLACK = 1.02, 0.02
#: Requests in flight on a site whose only limit is its rate (the farm answers in about a millisecond).
RATE_INFLIGHT = 4
FLAKY_INFLIGHT = 8
#: A lower factor of a shifting site's schedule is taken this many seconds early.
SHIFT_LEAD = 0.3
#: Seconds kept clear at each end of a fixed window (at most a quarter of it): an arrival lags its send.
WINDOW_MARGIN = 0.05
#: Seconds a slot of a concurrency cap rests beyond the site's lag: the site frees it ``lag`` after the
#: answer left, and the answer reaches the oracle after that, so a little more covers the clocks' skew.
SLOT_SLACK = 0.005
#: Seconds a request costs the client between an answer and its next send (an event-loop turn on a
#: loaded machine): with it, a site whose throughput stays level past its knee serves more with a few
#: more in flight, and the oracle keeps the fewest that come within ``LOAD_SHARE`` of the best.
CLIENT_TURN = 0.01
LOAD_SHARE = 0.99
#: Of a bucket's burst, how many sends a late send may be caught up by (the rest stays as slack).
CATCH_UP_ROOM = 2
CATCH_UP_MAX = 3
#: Seconds an arrival may lag its send more than the first arrival did (the site's periods start at
#: its first arrival): the counter's shadow keeps its sends this far from either end of a period,
#: and its reading below the limit by the previous period's weight over this long.
COUNTER_LAG = 0.02
COUNTER_BOUNDARY = COUNTER_LAG
#: Seconds past the exact moment the previous period's weight allows a send (the reading is a float).
COUNTER_EPSILON = 1e-6


@dataclass
class Plan:
    """How one host is paced: at most ``inflight`` at once, sends ``gap`` seconds apart.

    ``rest``: seconds each slot waits after its answer before the next send. ``window`` and
    ``count``: at most ``count`` sends in each window of ``window`` seconds aligned to the clock.
    """

    gap: float
    inflight: int
    send: bool = True
    rest: float = 0.0
    window: float | None = None
    count: int = 0
    #: Seconds a late send may be caught up by (a bucket's spare burst): the next send is due
    #: ``gap`` after the previous one's due time, never earlier than ``gap - catch_up`` after it was sent.
    catch_up: float = 0.0
    #: A request-rate counter (HAProxy's ``http_req_rate``): ``count`` per ``period`` seconds, its
    #: reading followed by a shadow of the counter instead of an even gap.
    period: float | None = None
    #: The windows (``window``, ``count``) are opened by a send, not aligned to the clock.
    started: bool = False
    #: ``count`` in any span of ``window`` seconds (a moving window), kept in a log of the sends.
    sliding: bool = False
    #: The share of the counter's first period gone at the site's first arrival (its ``phase``).
    phase: float = 0.0


def best_inflight(site: OverloadSite) -> int:
    """The requests in flight that serve the most per second, the client's own turn counted.

    Each request takes the site's latency at that load plus :data:`CLIENT_TURN`; of the counts that
    come within :data:`LOAD_SHARE` of the best, the fewest. Where the throughput falls past a knee
    (exponent 2) that is the knee; where it stays level (exponent 1) a few more than the knee, which
    cover the client's turn; with no knee, the site's limit.
    """
    served = {n: n / (site.latency(n - 1) + CLIENT_TURN) for n in range(1, site.limit + 1)}
    best = max(served.values())
    return min(n for n, value in served.items() if value >= LOAD_SHARE * best)


class CounterShadow:
    """A copy of HAProxy's ``http_req_rate`` counter (:class:`crawlpace.sim._limits.RequestRate`)
    fed with the oracle's own sends, to know when the next one passes.

    The counter reads ``current + previous * (time left in the period / period)``, the request
    counted; a request passes while that is at most the limit. The site's periods follow its clock:
    the first one began ``phase`` of a period before the first request. :meth:`due` says when a
    send reads within the limit, arrivals' lag allowed for.
    Sent as soon as it allows, the shadow settles at ``limit - 1`` per period: even sends at the limit
    would read ``limit + 1`` (the request counted, a whole previous period).
    """

    def __init__(self) -> None:
        self.start: float | None = None
        self.current = 0
        self.previous = 0

    def _rolled(self, now: float, period: float, phase: float) -> tuple[float, int, int]:
        if self.start is None:
            return now - phase * period, 0, 0
        if now < self.start + period:
            return self.start, self.current, self.previous
        periods = math.floor((now - self.start) / period)
        return self.start + periods * period, 0, self.current if periods == 1 else 0

    def due(self, now: float, limit: int, period: float, phase: float = 0.0) -> float:
        """The earliest time from ``now`` at which one more request reads at most ``limit`` at the site.

        The site's periods are set by its first arrival, a moment after the oracle's first send, so a
        send is kept :data:`COUNTER_BOUNDARY` clear of each end of a period (it falls in the same
        period at the site), and the reading is held below the limit by what that moment can add to
        the previous period's weight (``previous * COUNTER_LAG / period``).
        """
        if self.start is None:
            return now
        at = now
        for _ in range(4):
            start, current, previous = self._rolled(at, period, phase)
            end = start + period
            at = max(at, start + COUNTER_BOUNDARY)
            # The weight of the previous period that may be left when the send reads, at most.
            room = limit - current - 1 - previous * COUNTER_LAG / period
            if room >= 0:
                # The previous period's weight drains linearly: wait until it is down to the room.
                due = at if previous == 0 else max(at, end - room * period / previous + COUNTER_EPSILON)
                if due <= end - COUNTER_BOUNDARY:
                    return due
            at = end + COUNTER_BOUNDARY  # this period is spent: the next opens with it as the previous
        return at

    def take(self, now: float, period: float, phase: float = 0.0) -> None:
        """Count a send at ``now``."""
        self.start, self.current, self.previous = self._rolled(now, period, phase)
        self.current += 1


def plan_of(site: Site, factor: float = 1.0) -> Plan:
    """The pace for ``site`` when its main limit is ``factor`` times the configured one."""
    if isinstance(site, ShiftingSite):
        return plan_of(site.inner, factor)
    if isinstance(site, QueueSite):
        # A new request arrives after an answer, so it finds at most the others in flight ahead of
        # it: an excess of ``inflight + delay`` at most. One place of the line is kept spare: nginx
        # counts whole milliseconds, so an answer may leave up to one early (0.1 % refused without).
        if site.delay < site.burst:
            return Plan(0.0, max(min(site.burst - site.delay - 1, RATE_INFLIGHT), 1))
        if site.burst < 2:
            return Plan(1.0 / (site.rate * factor * TIGHT_SHARE), 1)
        gap = 1.0 / (site.rate * factor * RATE_SHARE)
        return Plan(gap, RATE_INFLIGHT, catch_up=min(site.burst + 1 - CATCH_UP_ROOM, CATCH_UP_MAX) * gap)
    if isinstance(site, RateLimitSite | RetryAfterSite | ChallengeSite):
        # A bucket without room for a burst refuses two sends that arrive closer than its gap:
        # one at a time, so that a late send never lets the next one catch up with it.
        if site.burst <= 2:
            return Plan(1.0 / (site.rate * factor * TIGHT_SHARE), 1)
        gap = 1.0 / (site.rate * factor * RATE_SHARE)
        # A send that woke late may be caught up by what the bucket has to spare beyond one send.
        return Plan(gap, RATE_INFLIGHT, catch_up=min(site.burst - CATCH_UP_ROOM, CATCH_UP_MAX) * gap)
    if isinstance(site, HeadersSite):
        limit = max(round(site.limit * factor), 1)
        return Plan(site.window / (limit * RATE_SHARE), RATE_INFLIGHT)
    if isinstance(site, WindowSite):
        limit = max(round(site.limit * factor), 1)
        if site.kind == "fixed":
            return Plan(0.0, RATE_INFLIGHT, window=site.window, count=limit)
        if site.kind == "started":
            return Plan(0.0, RATE_INFLIGHT, window=site.window, count=limit, started=True)
        return Plan(0.0, RATE_INFLIGHT, window=site.window, count=limit, sliding=True)
    if isinstance(site, RequestRateSite):
        # Sent whenever a shadow of the counter reads low enough (see CounterShadow): the first
        # period's whole count at once, then as the previous period's weight drains, never refused.
        limit = max(round(site.limit * factor), 1)
        return Plan(0.0, RATE_INFLIGHT, period=site.period, count=limit, phase=site.phase)
    if isinstance(site, SlotCapSite):
        return Plan(0.0, max(round(site.cap * factor), 1), rest=site.lag + SLOT_SLACK)
    if isinstance(site, CrawlDelaySite):
        return Plan(site.delay * CRAWL_DELAY_MARGIN + CRAWL_DELAY_SLACK, 1)
    if isinstance(site, QuotaSite):
        return Plan(site.window / (site.quota * QUOTA_SHARE), RATE_INFLIGHT)
    if isinstance(site, OverloadSite):
        return Plan(0.0, best_inflight(site))
    if isinstance(site, SlowSite):
        return Plan(0.0, max(round(site.limit * factor), 1))
    if isinstance(site, FlakySite):
        return Plan(0.0, FLAKY_INFLIGHT)
    return Plan(math.inf, 0, send=False)  # dead: nothing would come back


class Host:
    """One site's pacer: even gaps, a cap on requests in flight, the schedule of a shifting site."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.first: float | None = None
        self.next_send = 0.0
        self.slots = asyncio.Semaphore(max(plan_of(site).inflight, 1))
        self.lock = asyncio.Lock()
        # The clock window the last send fell in, and the sends in it (fixed windows only).
        self.window_index: int | None = None
        self.window_sends = 0
        # When the oracle's send opened the site's current window (``started`` windows only), which
        # of the sends it was, and when its answer came (the site's window began before it).
        self.window_opened: float | None = None
        self.opening = False
        self.sends = 0
        self.opener = -1
        self.opener_answered: float | None = None
        # The latest answers, and the requests still out (a sliding window's log).
        self.answer_log: deque[float] = deque()
        self.out = 0
        # Until when the host asked, in a Retry-After, to be left alone.
        self.held_until = 0.0
        # The site's request-rate counter as the oracle's own sends have moved it (reqrate only).
        self.counter = CounterShadow()

    def plan(self, now: float) -> Plan:
        site = self.site
        if not isinstance(site, ShiftingSite) or self.first is None:
            return plan_of(site)
        elapsed = now - self.first
        factor = 1.0
        for seconds, step in site.changes:
            if elapsed >= seconds or (elapsed + SHIFT_LEAD >= seconds and step < factor):
                factor = step
        return plan_of(site, factor)

    def hold(self, retry_after: str | None) -> None:
        """Send nothing more to this host until a ``Retry-After`` (in seconds) runs out."""
        try:
            seconds = float(retry_after or "")
        except ValueError:
            return
        if math.isfinite(seconds) and seconds > 0:
            self.held_until = max(self.held_until, time.monotonic() + seconds + 0.05)

    def window_slot(self, earliest: float, plan: Plan) -> float:
        """The time of the next send in a fixed window at or after ``earliest``, booked."""
        window = plan.window or 1.0
        margin = min(WINDOW_MARGIN, window / 4)
        step = (window - 2 * margin) / max(plan.count, 1)
        index = math.floor(earliest / window)
        while True:
            if index != self.window_index:
                self.window_index, self.window_sends = index, 0
            start = index * window + margin
            at = max(earliest, start + self.window_sends * step)
            if self.window_sends < plan.count and at <= (index + 1) * window - margin:
                self.window_sends += 1
                return at
            index += 1

    def started_slot(self, earliest: float, plan: Plan) -> float:
        """The time of the next send at or after ``earliest`` in windows opened by a send, booked."""
        window = plan.window or 1.0
        margin = min(WINDOW_MARGIN, window / 4)
        step = (window - 2 * margin) / max(plan.count, 1)
        opened = self.window_opened
        if opened is not None:
            at = max(earliest, opened + self.window_sends * step)
            if self.window_sends < plan.count and at <= opened + window - margin:
                self.window_sends += 1
                return at
            earliest = max(earliest, opened + window + margin)
            if self.opener_answered is not None:
                earliest = max(earliest, self.opener_answered + window + SLOT_SLACK)
        self.window_opened, self.window_sends, self.opening = earliest, 1, True
        return earliest

    def answered(self, now: float, count: int) -> None:
        """A request of a sliding window's plan came back (or failed) at ``now``."""
        self.out = max(self.out - 1, 0)
        self.answer_log.append(now)
        while len(self.answer_log) > count:
            self.answer_log.popleft()

    async def turn(self) -> Plan:
        """Wait for this host's next send time, then book the one after it; return the plan it sent under."""
        async with self.lock:
            while True:
                now = time.monotonic()
                if self.first is None:
                    self.first = now
                plan = self.plan(now)
                held = self.held_until
                due = max(self.next_send, held, now)
                if plan.sliding:
                    free = plan.count - self.out
                    if free <= 0:
                        await asyncio.sleep(SLOT_SLACK)  # every request of the window still out
                        continue
                    if len(self.answer_log) >= free:
                        due = max(due, self.answer_log[-free] + (plan.window or 0.0) + SLOT_SLACK)
                elif plan.window:
                    due = self.started_slot(due, plan) if plan.started else self.window_slot(due, plan)
                if plan.period:
                    due = self.counter.due(due, plan.count, plan.period, plan.phase)
                wait = due - now
                if wait > 0:
                    await asyncio.sleep(wait)
                    now = time.monotonic()
                if self.held_until <= held:
                    break
                # A Retry-After came back while this send waited: wait for it too.
            if plan.period:
                self.counter.take(now, plan.period, plan.phase)
            self.sends += 1
            if plan.sliding:
                self.out += 1
            if plan.started and self.opening:
                # The site's window opens when this send arrives: from when it went, not when it was due.
                self.window_opened, self.opening = now, False
                self.opener, self.opener_answered = self.sends, None
            # From the due time, so that a send that woke late does not slow every later one; but a late
            # send is caught up by at most what the limit spares (nothing but for a bucket with a burst).
            self.next_send = max(due, now - plan.catch_up) + plan.gap
            return plan


async def fetch(client: aiohttp.ClientSession, host: Host, url: str) -> dict[str, Any]:
    """One URL, resent after an error, each send paced by its host."""
    status: int | None = None
    error: str | None = None
    attempts = 0
    async with host.slots:
        while True:
            plan = await host.turn()
            index = host.sends
            attempts += 1
            try:
                async with client.get(url, allow_redirects=False) as response:
                    body = await response.read()
                status, error = response.status, None
                if plan.started and index == host.opener:
                    host.opener_answered = time.monotonic()
                if status == 429:
                    host.hold(response.headers.get("retry-after"))
                elif body == CHALLENGE_PAGE:  # the farm's challenge: a refusal, not the page
                    status, error = 429, "challenge page"
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                status, error = None, f"{type(exc).__name__}: {exc}"
            if plan.sliding:
                host.answered(time.monotonic(), plan.count)
            if plan.rest:
                await asyncio.sleep(plan.rest)  # the site frees this slot a moment after the answer
            if (status is not None and status < 500 and status != 429) or attempts > RETRIES:
                return {"url": url, "status": status, "attempts": attempts, "error": error}


async def crawl_host(client: aiohttp.ClientSession, host: Host, urls: deque[str], out: TextIO) -> None:
    async def worker() -> None:
        while urls:
            result = await fetch(client, host, urls.popleft())
            out.write(json.dumps(result) + "\n")
            out.flush()

    await asyncio.gather(*(worker() for _ in range(max(plan_of(host.site).inflight, 1))))


def hosts_of(farm: Path) -> dict[str, Site]:
    """Each site of the farm by the address the simulator gives it."""
    spec = parse_farm(tomllib.loads(farm.read_text(encoding="utf-8")))
    return {str(FIRST_HOST + index): build_site(site) for index, site in enumerate(spec.sites)}


async def main(urls: list[str], output: Path, farm: Path) -> None:
    sites = hosts_of(farm)
    # Each site's robots.txt, read from the site itself (the oracle knows every site's content).
    rules = {host: RobotsRules.parse(site.content.robots, USER_AGENT) for host, site in sites.items()}
    queues: dict[str, deque[str]] = {}
    forbidden: list[str] = []
    for url in urls:
        host = urlsplit(url).hostname or ""
        if host not in sites:
            sys.exit(f"oracle: {url} is on no site of {farm} (the farm needs its loopback aliases)")
        if not rules[host].allowed(url):
            forbidden.append(url)
            continue
        queues.setdefault(host, deque()).append(url)
    # No cap on connections (each host's plan caps its own), no proxy from the environment.
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=TIMEOUT)
    with output.open("w", encoding="utf-8") as out:
        for url in forbidden:
            out.write(json.dumps({"url": url, "status": None, "attempts": 0,
                                  "error": "disallowed by robots.txt"}) + "\n")
        async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                         headers={"User-Agent": USER_AGENT}) as client:
            await asyncio.gather(*(crawl_host(client, Host(sites[host]), queue, out)
                                   for host, queue in queues.items() if plan_of(sites[host]).send))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: oracle.py URLS.txt OUT.jsonl FARM.toml")
    lines = Path(sys.argv[1]).read_text(encoding="utf-8").split()
    asyncio.run(main([line for line in lines if line], Path(sys.argv[2]), Path(sys.argv[3])))
