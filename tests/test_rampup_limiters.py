"""Rampup against each kind of limiter, whole crawls in virtual time.

A pure pacer-versus-limiter harness: the throttler with rampup on (as ``crawlpace
crawl`` runs it) paces a few workers on a fake clock, and each request meets a
limiter model that keeps its own books on the times it is handed. Each case
asserts the goodput as a share of the limiter's capacity and the refusals it drew.
The limiters' parameters are not ones rampup was tuned on.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Protocol

import pytest

from crawlpace import Settings, Throttler
from crawlpace._throttle._release import DONT_ADJUST_KEY
from crawlpace.sim._limits import Embargo, FixedWindow, RequestQueue, SlidingWindow, TokenBucket
from crawlpace.sim._rates import budget_headers
from crawlpace.testing import MockClock

URL = "https://site.example/page"


@dataclass
class Response:
    status_code: int
    headers: dict[str, str] = field(default_factory=dict)


class Limiter(Protocol):
    """A limiter model: pure bookkeeping on the times it is handed."""

    @property
    def capacity(self) -> float:
        """Accepted requests per second, at best, over a long run."""

    def arrive(self, now: float) -> Response: ...
    def leave(self, now: float) -> None: ...


@dataclass
class Bucket:
    """A token bucket; refused requests cost nothing. ``hold``: a 429 demands that many
    seconds of silence (``Retry-After``), and requests inside it are refused. ``wait``: a 429
    says when the next token comes, in whole seconds rounded up (as the simulator's buckets do)."""

    rate: float
    burst: float
    hold: int = 0
    wait: bool = False
    bucket: TokenBucket = field(init=False)
    embargo: Embargo = field(default_factory=Embargo)

    def __post_init__(self) -> None:
        self.bucket = TokenBucket(self.rate, self.burst)

    @property
    def capacity(self) -> float:
        return self.rate

    def arrive(self, now: float) -> Response:
        if self.hold and self.embargo.remaining(now) > 0.0:
            return Response(429, {"Retry-After": str(math.ceil(self.embargo.remaining(now)))})
        wait = self.bucket.take(now)
        if wait == 0.0:
            return Response(200)
        if self.hold:
            self.embargo.extend(now, self.hold)
            return Response(429, {"Retry-After": str(self.hold)})
        if self.wait:
            return Response(429, {"Retry-After": str(max(1, math.ceil(wait)))})
        return Response(429)

    def leave(self, now: float) -> None:
        pass


@dataclass
class NoLimit:
    """No limit at all: every request is served (``capacity``: rampup's default cap)."""

    capacity: float = 100.0

    def arrive(self, now: float) -> Response:
        return Response(200)

    def leave(self, now: float) -> None:
        pass


@dataclass
class ClockWindow:
    """``limit`` requests per window of ``window`` seconds aligned to the clock, no headers; ``phase``:
    the share of a window already gone at 0 (as the random farm draws it)."""

    limit: int
    window: float
    phase: float = 0.0
    _index: int = -1
    _used: int = 0

    @property
    def capacity(self) -> float:
        return self.limit / self.window

    def arrive(self, now: float) -> Response:
        index = math.floor(now / self.window + self.phase)
        if index != self._index:
            self._index, self._used = index, 0
        if self._used >= self.limit:
            return Response(429)
        self._used += 1
        return Response(200)

    def leave(self, now: float) -> None:
        pass


@dataclass
class RequestRate:
    """HAProxy's ``sc_http_req_rate(period) gt limit``: every request is counted, refused ones
    too, in a frequency counter that blends the previous period into the current one."""

    limit: float
    period: float
    _start: float = 0.0
    _current: int = 0
    _previous: int = 0

    @property
    def capacity(self) -> float:
        return self.limit / self.period

    def arrive(self, now: float) -> Response:
        periods = math.floor((now - self._start) / self.period)
        if periods >= 1:
            self._previous = self._current if periods == 1 else 0
            self._current = 0
            self._start += periods * self.period
        self._current += 1
        blended = self._current + self._previous * (1.0 - (now - self._start) / self.period)
        return Response(429 if blended > self.limit else 200)

    def leave(self, now: float) -> None:
        pass


@dataclass
class FallingRequestRate(RequestRate):
    """A :class:`RequestRate` counter whose limit is multiplied by ``share`` at ``at`` seconds (a
    shifting limit, as ``crawlpace sim random`` draws them)."""

    at: float = math.inf
    share: float = 1.0

    def arrive(self, now: float) -> Response:
        if now >= self.at:
            self.limit, self.at = self.limit * self.share, math.inf
        return super().arrive(now)


@dataclass
class ConnectionCap:
    """HAProxy's ``sc_conn_cur gt cap``: a 503 at once past ``cap`` in flight; a slot is
    freed ``late`` seconds after its answer leaves."""

    cap: int
    latency: float
    late: float = 0.02
    _inflight: int = 0
    _freed: list[float] = field(default_factory=list)

    @property
    def capacity(self) -> float:
        return self.cap / (self.latency + self.late)

    def arrive(self, now: float) -> Response:
        self._freed = [t for t in self._freed if t > now]
        if self._inflight + len(self._freed) >= self.cap:
            return Response(503)
        self._inflight += 1
        return Response(200)

    def leave(self, now: float) -> None:
        self._inflight -= 1
        self._freed.append(now + self.late)


class _HardLimit:
    """A server that answers 503 at once past ``limit`` requests in flight (the knee servers' door)."""

    limit: int
    _inflight: int

    def arrive(self, now: float) -> Response:
        if self._inflight >= self.limit:
            return Response(503)
        self._inflight += 1
        return Response(200)

    def leave(self, now: float) -> None:
        self._inflight -= 1


@dataclass
class Knee(_HardLimit):
    """A server that slows past ``knee`` requests in flight: each takes ``latency`` times
    (in flight / knee) ** ``exponent`` past it; 503 at once past ``limit`` in flight."""

    knee: int
    latency: float
    exponent: float
    limit: int
    _inflight: int = 0

    @property
    def capacity(self) -> float:
        return self.knee / self.latency

    def service(self) -> float:
        return self.latency * math.pow(max(1.0, self._inflight / self.knee), self.exponent)


@dataclass
class HardKnee(_HardLimit):
    """A server that serves each request ``per_inflight`` seconds slower for every other one it holds,
    and answers 503 at once past ``limit`` in flight: its throughput grows up to the limit."""

    latency: float
    per_inflight: float
    limit: int
    _inflight: int = 0

    @property
    def capacity(self) -> float:
        return self.limit / (self.latency + self.per_inflight * (self.limit - 1))

    def service(self) -> float:
        return self.latency + self.per_inflight * (self._inflight - 1)


@dataclass
class Queue:
    """nginx's ``limit_req rate=R burst=B`` without ``nodelay`` (the simulator's ``queue`` kind, with
    its :class:`~crawlpace.sim._limits.RequestQueue`): a request over the rate waits in line and is served
    ``1 / rate`` after the one ahead, a full line is refused at once with ``status`` (nginx's 503 by
    default). ``delay``: nginx's ``delay=`` (that much of the excess goes without waiting)."""

    rate: float
    burst: int
    delay: int = 0
    status: int = 503
    wait: float = 0.0  # the last accepted request's wait in line
    line: RequestQueue = field(init=False)

    def __post_init__(self) -> None:
        self.line = RequestQueue(self.rate, self.burst, self.delay)

    @property
    def capacity(self) -> float:
        return self.rate

    def arrive(self, now: float) -> Response:
        wait = self.line.take(now)
        if wait is None:
            return Response(self.status)
        self.wait = wait
        return Response(200)

    def leave(self, now: float) -> None:
        pass


class _Unmeasured:
    """A request whose latency the throttler does not learn (the crawl's robots.txt fetch)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.meta = {DONT_ADJUST_KEY: True}


@dataclass
class Outcome:
    accepted: int
    refused: int
    seconds: float
    capacity: float

    @property
    def share(self) -> float:
        return self.accepted / self.seconds / self.capacity


async def crawl(limiter: Limiter, seconds: float, *, latency: float = 0.05, workers: int = 16,
                seed: int = 1, instant: bool = False, lag: float = 0.0, slots: int | None = None,
                hiccups: tuple[float, ...] = (), hiccup: float = 0.0, robots: float = 0.0,
                told: bool = False, epoch: float | None = None, errors: float = 0.0,
                error_status: int = 502, errors_at_once: bool = False, read_late: float = 0.0,
                refusal_as_page: bool = False, robots_counted: bool = False,
                robots_unmeasured: bool = False) -> Outcome:
    """Crawl one site for ``seconds`` of virtual time as ``crawlpace crawl`` paces it.

    A 503 is answered at once (a cap on requests in flight refuses on arrival); with ``instant``,
    a 429 too (a rate limiter in front of the application). ``lag``: each request reaches the
    site up to that many seconds after its send (a loaded crawler machine's own delays).
    ``slots``: the most rampup opens (``rampup_max_concurrency``; None: its default).
    ``hiccups``: the first request sent after each of these times reaches the site ``hiccup``
    seconds late (a stall of the crawler's machine), and its answer comes that much later.
    ``robots``: robots.txt is fetched first, answered in that many seconds and counted by no limiter;
    with ``robots_counted``, it reaches the site at the end of that time (late on the way: a loaded
    crawler's first connection) and the limiter counts it (nginx's ``location /`` covers it); with
    ``robots_unmeasured``, its answer gives the scope no latency, as the crawl's own robots.txt fetch
    (marked ``DONT_ADJUST_KEY``) does: robots.txt's door opens, and the first page goes at once.
    ``told``: the ``lag`` before each arrival is given as the permit's ``lag`` (the crawl's time from
    admission to the fetch, a fleet worker's wait for the store's reply), the latency from then on.
    ``epoch``: the Unix time at the crawl's start, for resets given as a Unix time.
    ``errors``: that share of the requests the limiter accepted fail at the backend, whatever the load:
    answered ``error_status`` after the page's time (errors not about load, on a site with a limit), or
    at once with ``errors_at_once`` (a backend failing at once).
    ``read_late``: each answer is read up to that many seconds after the site let it go (a busy client
    reading its sockets late): its slot is the crawler's till then, and the count in flight it is read
    with may hold requests sent after the site freed its own.
    ``refusal_as_page``: a refusal on arrival takes as long as a page (``latency``), not 1 ms: a site
    whose pages cost nothing (static files, the simulator on loopback) answers both in a round trip.
    ``accepted`` counts the pages served, not those failed."""
    clock = MockClock(autojump=True)
    rng = random.Random(seed)
    defaults: dict[str, object] = {"rampup": True}
    if slots is not None:
        defaults["rampup_max_concurrency"] = slots
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": defaults, "CONCURRENT_REQUESTS": 64})
    accepted = refused = 0
    stalls = sorted(hiccups)
    async with Throttler(settings, clock=clock, rng=random.Random(seed)) as throttler:
        if epoch is not None:
            throttler._releaser._builder.wall_clock = lambda: epoch + clock.now()
        if robots > 0.0:
            robots_txt = "https://site.example/robots.txt"
            async with throttler.slot(_Unmeasured(robots_txt) if robots_unmeasured else robots_txt) as permit:
                await clock.sleep(robots)
                if robots_counted:
                    limiter.arrive(clock.now())
                permit.feedback(Response(200), latency=robots)

        async def worker() -> None:
            nonlocal accepted, refused
            while clock.now() < seconds:
                async with throttler.slot(URL) as permit:
                    if clock.now() >= seconds:
                        permit.feedback(status=200, latency=0.0)
                        break
                    sent = clock.now()
                    delay = 0.0
                    if lag > 0.0:
                        delay = rng.uniform(0.0, lag)
                        await clock.sleep(delay)
                    if stalls and sent >= stalls[0]:
                        stalls.pop(0)
                        delay += hiccup
                        await clock.sleep(hiccup)
                    answer = limiter.arrive(clock.now())
                    failed = answer.status_code == 200 and errors > 0.0 and rng.random() < errors
                    refused_at_once = answer.status_code == 503 or (instant and answer.status_code != 200)
                    service = limiter.service() if isinstance(limiter, Knee | HardKnee) else latency
                    at_once = (refused_at_once and not refusal_as_page) or (failed and errors_at_once)
                    took = 0.001 if at_once else service * rng.uniform(0.9, 1.1)
                    if isinstance(limiter, Queue) and answer.status_code == 200:
                        took += limiter.wait  # held in the line before the page is served
                    await clock.sleep(took)
                    if answer.status_code == 200:
                        limiter.leave(clock.now())
                        if read_late > 0.0:
                            late = rng.uniform(0.0, read_late)
                            took += late
                            await clock.sleep(late)
                        if failed:
                            answer = Response(error_status)  # the backend's own failure
                        else:
                            accepted += 1
                    else:
                        refused += 1
                    if told:
                        permit.feedback(answer, latency=took, lag=delay)
                    else:
                        permit.feedback(answer, latency=clock.now() - sent if hiccups else took)

        await asyncio.gather(*(worker() for _ in range(workers)))
    return Outcome(accepted, refused, seconds, limiter.capacity)


# Before the overshoot episodes (0.7.0's rules), per case: goodput share / refusals.


@pytest.mark.parametrize(("rate", "burst", "hold", "share", "refusals"),
                         [(6.0, 4.0, 4, 0.75, 8),     # was 0.62 / 17: resumed far over the limit
                          (3.0, 3.0, 10, 0.5, 7)])    # was 0.12 / 16: each hold cut by 8 % only
async def test_bursty_buckets_with_retry_after_holds(rate: float, burst: float, hold: int, share: float,
                                                     refusals: int) -> None:
    out = await crawl(Bucket(rate, burst, hold), 150.0)
    assert out.share >= share
    assert out.refused <= refusals


@pytest.mark.parametrize(("rate", "burst", "hold", "seconds", "share", "refusals"),
                         [(12.2, 8.0, 8, 60.0, 0.6, 5),    # was 0.50 / 6: a second hold, then a halving
                          (6.22, 3.0, 13, 60.0, 0.44, 4),  # was 0.27 / 4
                          (10.0, 5.0, 30, 90.0, 0.25, 4)])  # was 0.05 / 5: two 30 s holds after the first
async def test_buckets_with_long_holds_are_paced_at_the_fit_after_one_hold(
        rate: float, burst: float, hold: int, seconds: float, share: float, refusals: int) -> None:
    # After the first hold the sends go at the pace the bucket fit makes worth keeping (a second hold
    # costs as much as the first), and step above it only once a step is likelier to hold than not.
    # The first hold's log-uniform prior (holds16) gains 7-17 % of crawl time over the random farm's
    # holds sites and gives some back here: 12.2/s b8 0.624 with a second hold (0.65 / 4 before),
    # 6.22/s b3 0.456 (0.48 before).
    out = await crawl(Bucket(rate, burst, hold), seconds)
    assert out.share >= share
    assert out.refused <= refusals  # the start's trip, its lock-out's probe, the one hold (the start's rules)


@pytest.mark.parametrize(("rate", "burst", "hold", "share"),
                         [(6.22, 3.0, 17, 0.4),    # was 0.24: paced at 3.6/s for the rest of the minute
                          (5.54, 3.0, 31, 0.24)])  # was 0.13: 1.4/s (0.25 before holds16's prior: 0.2497)
async def test_a_slow_start_does_not_make_a_large_burst_the_likely_fit(
        rate: float, burst: float, hold: int, share: float) -> None:
    # Answers in milliseconds: the start doubles once a second and some 20 sends are accepted before the
    # refusal. Every burst up to 20 fits them (the larger, the lower its rate); taken as equally likely,
    # they made a rate a third of the limit's the pace worth keeping after the one long hold.
    out = await crawl(Bucket(rate, burst, hold), 60.0, latency=0.003)
    assert out.share >= share
    # The start's overshoot, and on 6.22/s a step that the bolder first pace (a hold promises one token
    # per hold) makes worth its 17 s hold: 0.608 of capacity with 2 refusals, 0.504 with 1 before.
    assert out.refused <= (2 if hold < 20 else 1)


async def test_short_holds_are_fitted_from_the_second() -> None:
    # 7.43/s, burst 8, 3 s holds: each hold refills the burst, which carried a pace twice the rate for a
    # second, and the ordinary cuts (x0.9, x0.8) took six holds to come down to it. From the second
    # hold the two stretches pin the bucket.
    out = await crawl(Bucket(7.43, 8.0, 3), 30.0, latency=0.003)
    assert out.share >= 0.6  # was 0.52
    assert out.refused <= 4  # was 6


async def test_the_recall_does_not_search_back_to_a_pace_the_bucket_fit_refused() -> None:
    # The worked timeline of docs/concepts/rampup-fits.md. Before the bucket fit's prior, the step to
    # 13.1/s drew the second hold at 19.6 s and the fit paced at 11.3/s; the recall took 13.1/s for a
    # level held before a fall and searched back up to it at 44 s, which drew a third 8 s hold (4).
    out = await crawl(Bucket(12.2, 8.0, 8), 60.0)
    # With the log-uniform prior of the first hold's fit (bench/results/holds16.md) the first bet is
    # bolder and the step comes later: the start's overshoot and its probe, three holds, and no recall.
    assert out.refused <= 5


async def test_a_bucket_with_no_burst_and_holds_on_a_loaded_machine() -> None:
    # The hard farm's embargo (5/s, 5 s holds) with sends reaching the site up to 50 ms late: a
    # send bunched at a pace under the limit is refused now and then, and is no burst's relapse.
    out = await crawl(Bucket(5.0, 1.0, 5), 60.0, latency=0.003, seed=2, lag=0.05)
    # 0.56 before the episodes; 0.39 when such a refusal halved the level; 0.49 with the bucket fit
    # (_rampup_bucket), whose first pace after the start's hold is a cautious 2.5/s for two holds.
    # 0.44 (0.38-0.49 over seeds 1-8, 0.47-0.54 before) since the start doubles every three answers:
    # it is refused at about 7/s instead of 6/s, with fewer accepted sends for the fit to read.
    assert out.share >= 0.4
    assert out.refused <= 4


async def test_a_slow_bucket_with_no_burst_steps_once_its_sends_show_the_pace() -> None:
    # 0.732/s, no burst, 23 s holds: the start's second send, a second after the first, is refused. One
    # accepted send bounds no rate from below, so the fit's first pace is cautious (0.27/s), and its step
    # waited two holds' lengths (46 s) each time, whatever the sends showed: 0.14 of the limit in two
    # minutes. Two sends at a pace show a bucket with no burst refills at least that, so each step
    # waits one hold's length only.
    out = await crawl(Bucket(0.732, 1.0, 23), 120.0, latency=0.003)
    assert out.share >= 0.2  # was 0.137
    assert out.refused == 1  # the start's overshoot only


@pytest.mark.parametrize(("rate", "burst", "hold", "seconds", "latency", "share", "refusals"),
                         # was 0.351; 0.479 with holds5; 0.428 since a pace weighs the time to finish the
                         # work ahead (its bolder step, to the limit, is refused: a second hold)
                         [(2.92, 1.0, 10, 40.0, 0.003, 0.42, 2),
                          # was 0.111; 0.181 with holds5; 0.310 since, with a step to 1.63/s refused (a
                          # fourth refusal) and the level back at 1.06/s
                          (1.14, 2.0, 43, 150.0, 0.05, 0.16, 4)])
async def test_a_level_likelier_than_not_kept_up_is_stepped_from_after_one_hold(
        rate: float, burst: float, hold: int, seconds: float, latency: float, share: float,
        refusals: int) -> None:
    # The level after a hold waited out a second hold's length unless every burst that still fits the
    # refitted record refilled the pace; the start's accepted sends keep large bursts with low rates in
    # that refit for long. Weighed as the fit weighs them, the record shows the level likelier than not
    # to hold after one hold's length, and the step comes a hold sooner.
    out = await crawl(Bucket(rate, burst, hold), seconds, latency=latency)
    assert out.share >= share
    assert out.refused <= refusals  # the start's overshoot (with its in-flight sends), the fit's holds


async def test_a_wide_fit_after_a_long_hold_does_not_pace_far_under_the_limit() -> None:
    # 0.9/s, no burst, 59 s holds, pages in 3 ms: one accepted send before the start's refusal bounds
    # no rate from below, and the fit spreads the rate over three decades. Weighing a pace's gain over a
    # fixed time made 0.012/s the safe choice, kept for two holds' lengths: 0.04 of the limit in four
    # minutes. Weighing the time to finish the work ahead, a pace ten times too low costs ten times the
    # time, and the first pace is bolder without a second hold.
    out = await crawl(Bucket(0.9, 1.0, 59), 240.0, latency=0.003)
    assert out.share >= 0.2  # was 0.042
    assert out.refused == 1  # the start's overshoot only


@pytest.mark.parametrize(("limit", "window", "refusals"),
                         [(30, 10.0, 25),    # was 0.38 / 64: each refusal of the lock-out halved
                          (100, 60.0, 50)])  # was 0.42 / 81
async def test_fixed_windows_aligned_to_the_clock(limit: int, window: float, refusals: int) -> None:
    out = await crawl(ClockWindow(limit, window), 300.0)
    # the lock-out's cycle gives N / W, paced evenly at the fit's share of it (0.974) after the first
    # lock-out: 0.90-0.93 with this session's rules
    assert out.share >= 0.89
    assert out.refused <= refusals


@dataclass
class LoggedClockWindow(ClockWindow):
    """A clock window that logs every arrival (its time, and whether it was accepted)."""

    log: list[tuple[float, bool]] = field(default_factory=list)

    def arrive(self, now: float) -> Response:
        answer = super().arrive(now)
        self.log.append((now, answer.status_code == 200))
        return answer

    def ends_seen(self) -> list[float]:
        """After each window that refused a request, but the first, how long into the next window its
        first accepted request came: how late the crawl saw that lock-out end."""
        windows: dict[int, list[tuple[float, bool]]] = {}
        for at, accepted in self.log:
            index = math.floor(at / self.window + self.phase)
            windows.setdefault(index, []).append((at - (index - self.phase) * self.window, accepted))
        refused = [index for index, arrivals in windows.items() if not all(ok for _, ok in arrivals)]
        return [next(into for into, ok in windows[index + 1] if ok) for index in sorted(refused)[1:]
                if any(ok for _, ok in windows.get(index + 1, []))]


@pytest.mark.parametrize("seed", [1, 2])
async def test_a_clock_windows_lockout_end_is_probed_at_its_fitted_boundary(seed: int) -> None:
    # 30 per 10 s: each lock-out ends at a window's boundary. The probe gap doubled to 2 s (probe_gap_max)
    # whatever the lock-out's length, so the later lock-outs' ends were seen 1.9 s into the next window, 6
    # of its 30 requests (99429fb7: 1.94 and 1.93 s late, 0.899 and 0.911 of capacity, 20 and 21 refused).
    # Once every send fits a clock window (_rampup_window), the probe goes at its predicted boundary (or
    # halfway between the fits' boundaries where they disagree): the later ends seen 0.23 / 0.22 s and
    # 0.48 / 0.61 s late, 0.982 and 0.961 of capacity, 18 and 20 refused.
    site = LoggedClockWindow(30, 10.0)
    out = await crawl(site, 300.0, seed=seed)
    late = site.ends_seen()
    assert len(late) >= 3
    assert max(late) < 1.0
    assert out.share >= 0.95
    assert out.refused <= 20


@dataclass
class CountedClockWindow(ClockWindow):
    """A clock window with every arrival counted per window, refused ones too (the busiest window the
    bench judges a window site by)."""

    seen: dict[int, int] = field(default_factory=dict)

    def arrive(self, now: float) -> Response:
        index = math.floor(now / self.window + self.phase)
        self.seen[index] = self.seen.get(index, 0) + 1
        return super().arrive(now)


@pytest.mark.parametrize("seed", [1, 3])
async def test_a_clock_windows_refusal_is_no_jitter_against_robots_txts_quick_answer(seed: int) -> None:
    # The random farm's fixed25 of seed 1132014971: 3 per second on the clock, pages in 50 ms,
    # robots.txt in 5 ms. The arrivals' jitter was measured against the quickest accepted answer, which
    # was robots.txt's: every page looked 45 ms late, and a refusal at the pace, a gap no shorter than
    # one the window accepted, was taken for a late arrival. No cut, no probe wait: the next send went
    # one gap later, into the same window, and was refused too: 5 requests in a window of 3 (main
    # dc13e33: 5 and 5, 7 refusals each). The scope's first answer is no page's time.
    site = CountedClockWindow(3, 1.0, 0.25)
    out = await crawl(site, 30.0, seed=seed, instant=True, robots=0.005)
    assert max(site.seen.values()) <= 3 + 1
    assert out.share >= 0.83  # 0.856 on main for both seeds, 0.867 and 0.856 now
    assert out.refused <= 5  # 7 on main


@pytest.mark.parametrize(("rate", "share"), [(3.0, 0.92), (12.0, 0.9)])  # was 0.91 / 5 and 0.77 / 4
async def test_strict_buckets_without_burst(rate: float, share: float) -> None:
    # A refusal just under the shortest accepted gap: paced evenly at that gap, not at half of it.
    out = await crawl(Bucket(rate, 1.0), 120.0)
    assert out.share >= share
    assert out.refused <= 10


@pytest.mark.parametrize(("rate", "share"), [(10.0, 0.83), (25.0, 0.84), (40.0, 0.76)])  # was 0.76, 0.79, 0.7
async def test_the_start_refused_by_a_strict_bucket_searches_past_its_ceiling_within_seconds(
        rate: float, share: float) -> None:
    # nginx limit_req with no burst: 429s at once, robots.txt first, pages in 3 ms. The start's refusal (a
    # gap just under the shortest accepted) was halved and the climb levelled out at 0.84 of the refused
    # rate for the rest of the crawl, the probe beyond it a window away. Now it levels out at the accepted
    # gap's rate and searches up to the refused one's: 9.8/s from 15 s on at 10/s.
    out = await crawl(Bucket(rate, 1.0), 30.0, latency=0.003, robots=0.005, instant=True)
    assert out.share >= share
    assert out.refused <= 3


@pytest.mark.parametrize("rate", [19.0, 29.0])
async def test_a_strict_bucket_that_asks_for_a_second_after_its_start_refusal_is_fitted(rate: float) -> None:
    # The random farm's strict buckets answer a 429 with the wait for the next token, rounded up:
    # Retry-After: 1. Any hold kept the start's refusal from the strict fit, and the climb levelled out
    # at 0.85 of the refused rate for the rest of the crawl: 0.66 and 0.65 of the limit in 20 s. A hold
    # shorter than T.hold_long is the bucket's own wait: the climb levels out at the accepted gap's fit
    # (0.70 of the limit in 20 s, the start and the halving's climb included), with no search above it.
    out = await crawl(Bucket(rate, 1.0, wait=True), 20.0, latency=0.003, robots=0.005)
    assert out.share >= 0.69
    assert out.refused == 1  # the start's only: a search would risk another hold


@pytest.mark.parametrize("rate", [19.0, 25.0])
async def test_the_start_strict_search_stops_short_of_the_refused_gap_by_the_spread(rate: float) -> None:
    # Pages in 20 ms, each send reaching the site up to 5 ms late (told as the permit's lag, as the crawl
    # tells it). The start's strict search climbed to the refused gap itself, and the sends at that pace
    # arrived closer than it again and again: 17 and 15 refusals over three seeds (11 and 10 on seed 2).
    # Its top is now the refused gap plus the arrivals' measured spread.
    refused = 0
    for seed in (1, 2, 3):
        out = await crawl(Bucket(rate, 1.0), 20.0, latency=0.02, seed=seed, robots=0.005, lag=0.005,
                          told=True)
        assert out.share >= 0.66, (seed, out.share)
        refused += out.refused
    assert refused <= 8  # 3 and 5 now: the start's refusal, and at most one of the steady phase's


@pytest.mark.parametrize(("limiter", "share", "refusals"),
                         [(Bucket(15.0, 5.0), 0.85, 3), (RequestRate(30.0, 3.0), 0.7, 6),
                          (ClockWindow(11, 1.0), 0.68, 4)],
                         ids=["bucket-with-burst", "counter", "window"])
async def test_a_start_refusal_that_only_looks_strict_keeps_its_halving(limiter: Limiter, share: float,
                                                                         refusals: int) -> None:
    # A bucket with a burst, a counter that counts refusals and a window fit a bucket with no burst at the
    # start's refusal too (its doubling shortens every gap), and each owes a debt: paced at the fit at
    # once, each drew a second refusal (0.87 / 4, 0.70 / 7 and a longer lock-out, 0.69 / 5).
    out = await crawl(limiter, 20.0, latency=0.003)
    assert out.share >= share
    assert out.refused <= refusals


# Request-rate counters that count refused requests too (HAProxy's http_req_rate): limit per period,
# crawl seconds, and the share and refusals each must keep, with what it was before.
@pytest.mark.parametrize(("limit", "period", "seconds", "share", "refusals"), [
    # was 0.48 / 13: 33 -> 17 -> 8 -> 4/s, a cut per refused resend
    (10.0, 1.0, 120.0, 0.8, 12),
    # was 0.18 / 74. A probe gets through before the blended count has drained: the refusals that
    # follow within a cycle of the lock-out are its drain, not a new overshoot.
    (100.0, 10.0, 150.0, 0.85, 40),
    # HAProxy's 100 per 10 s as bench/real_limiters.py configures it, for half a minute. Was 0.79 / 37:
    # the first lock-out's fit (100 in 12.5 s, a floor since the counter counted the refusals too) was
    # lifted to the geometric middle, 26/s, and the second lock-out and its drain cost ten seconds.
    # Now the counter's estimate (about 9/s), searched up to under its upper bound.
    (100.0, 10.0, 30.0, 0.85, 25),
    # was 0.88 / 215: the probes after the first lock-out's fit climbed back at a probe's pace, and
    # every refusal of the counter's drain after an overshoot cut the rate again.
    # (Since the start doubles past 100/s on these 50 ms pages (start6), the allowance is spent at
    # 160/s, with more refused in flight at the start's overshoot: 60 -> 69 refusals of about 3,000.)
    (600.0, 60.0, 300.0, 0.9, 72),
    # 10 per 20 s: the limit's gap is 2 s, the longest probe gap of a lock-out's first seconds. Was
    # 0.48 / 26: probes at the limit's own pace, each counted, kept the count over the limit for 38 s,
    # and the lock-out's fit with it under half the limit.
    (10.0, 20.0, 200.0, 0.7, 22),
], ids=["10-per-1s", "100-per-10s", "haproxy-short-crawl", "600-per-minute", "slow-10-per-20s"])
async def test_a_request_rate_counter_that_counts_refusals(limit: float, period: float, seconds: float,
                                                           share: float, refusals: int) -> None:
    out = await crawl(RequestRate(limit, period), seconds)
    assert out.share >= share
    assert out.refused <= refusals


# was 24 and 28; 16 and 15 before the start doubled past 100/s (start6: the overshoot has 9-11 in flight
# where it had 5-8, each refused and counted)
@pytest.mark.parametrize(("latency", "refusals"), [(0.04, 18), (0.08, 18)])
async def test_a_counter_refusing_at_once_is_probed_after_a_slot_cut(latency: float, refusals: int) -> None:
    # HAProxy's 429s come back at once, pages in 40-80 ms: the start's overshoot is refused on arrival
    # with several in flight and read as a cap on slots, which opens no episode. The sends after that
    # cut went on at the cut rate (seven refused 12 ms apart, each one counted) until its quiet ended.
    # A send made after the slot cut and refused again is the overshoot's: it opens the episode.
    out = await crawl(RequestRate(100.0, 10.0), 30.0, latency=latency, instant=True)
    assert out.refused <= refusals
    assert out.share >= 0.85  # 0.87 and 0.86 before


# HAProxy's periods follow its own clock, not the crawler's first request: the first period began
# this many seconds before it. Pages in 3 ms (50 ms for 600 per minute), 429s at once.
# At -2.8 s the lock-out ends 1.6 s early and its fit is 11.1/s (limit 10); the search stepped to
# 13.9/s, judged held within 4 s, and after the cut to 10.8/s refused pairs every 0.6 s were excused
# as the counter's drain for the whole fitted cycle (31 refusals). On 600 per minute the excuse ran
# 48 s at 13.2/s. A cut of a level refused within a fitted cycle of the last episode's end excuses
# one refusal as the drain, not more: a drain at an even rate only falls.
# At -6 s the second lock-out is fitted at 3.1/s ("5 through in 1.6 s"). A first probe held back until
# half the counters that fit had drained (when 3 to 22/s fit: a loose fit) shortened that lock-out to
# 1.2 s, its fit to 4/s, over the draining counter: refused at 12.7 s, the recall 5 s late (0.73 / 11).
# Only a fit that bounds the counter closely (few grid points fit) is acted on.
@pytest.mark.parametrize(("limit", "period", "start", "seconds", "latency", "share", "refusals"), [
    (100.0, 10.0, -1.1, 30.0, 0.003, 0.9, 18),
    (100.0, 10.0, -2.8, 30.0, 0.003, 0.9, 16),    # was 31
    (100.0, 10.0, -4.7, 30.0, 0.003, 0.9, 17),
    (100.0, 10.0, -6.0, 30.0, 0.003, 0.85, 16),   # was 0.73 / 11 (counters4), 0.87 / 15 before
    # was 65. 0.92 since the start doubles past 100/s (start6): the allowance is spent by 4 s, the
    # lock-out runs to 57.5 s, and its probes' gap (a quarter of the lock-out so far) sees its end at
    # 70.7 s (60.4 s before): 13 s of sending lost to the late probe, not to the fit.
    (600.0, 60.0, -4.7, 120.0, 0.05, 0.9, 30),
], ids=["100-per-10s-1.1", "100-per-10s-2.8", "100-per-10s-4.7", "100-per-10s-6", "600-per-minute-4.7"])
async def test_a_counter_whose_periods_started_before_the_crawl(limit: float, period: float, start: float,
                                                                seconds: float, latency: float, share: float,
                                                                refusals: int) -> None:
    out = await crawl(RequestRate(limit, period, _start=start), seconds, latency=latency, instant=True)
    assert out.share >= share
    assert out.refused <= refusals


@dataclass
class PeakRequestRate(RequestRate):
    """A :class:`RequestRate` that keeps its highest reading, refused requests counted (the random
    farm's judge of a counter's busiest window: over ``limit + 1`` once two refusals come within one
    count's drain)."""

    peak: float = 0.0

    def arrive(self, now: float) -> Response:
        answer = super().arrive(now)
        self.peak = max(self.peak, self._current + self._previous * (1.0 - (now - self._start) / self.period))
        return answer


@pytest.mark.parametrize(("limit", "period", "start", "share", "refused", "peak"), [
    # r1:reqrate19 of the random farm (seed 499791605, 20 s a site): 93 per 5.4 s, its periods 2.1 s
    # into the first at the first request, 429s at once. The start reached 100/s; the first lock-out's
    # probes went 11 ms, 23 ms, 46 ms... after the refusal, each counted while the counter drained
    # 3 a second: 8 refusals, and the lock-out ran to 7.6 s. After it the counter was still full until
    # its period turned at 8.7 s; the level's refusal there cut again, and that 1.5 s cycle was fitted as
    # a bucket's refill, 0.93/s for ten seconds. Was 0.32 / 12, the busiest reading 97.1 (limit 93); now
    # 0.76 / 9, 95.1 (the drain's probes after the lock-out still go at the level's gap, doubling).
    pytest.param(93.0, 5.4, -2.079, 0.7, 10, 96.0, id="probed-after-its-drain"),
    # stop 42's reqrate17 (seed 788307211, 20 s a site): 10 per 2 s, 0.39 of a period in at the first
    # request, 429s at once. The start's refusal at 3.14 s waited the drain (0.29 s) and that probe
    # passed, the reading just under 10; the next send was refused, and the cycle from the probe to the
    # lock-out after it (one through in 1.2 s) was fitted at 1.15/s, a fifth of the limit's 5/s.
    # Was 0.34 / 4 refusals; now 0.69 / 7 (that lock-out's level stays at the cut, and its next
    # lock-out, 8 through in 2.2 s, is fitted). The busiest reading is 10.6 on both.
    pytest.param(10.0, 2.0, -0.776, 0.6, 8, 11.0, id="still-full-after-its-drain-probe"),
])
async def test_a_counter_refusing_on_arrival_is_paced_after_its_drain(
        limit: float, period: float, start: float, share: float, refused: int, peak: float) -> None:
    limiter = PeakRequestRate(limit, period, _start=start)
    out = await crawl(limiter, 20.0, latency=0.004, instant=True)
    assert out.share >= share
    assert out.refused <= refused
    assert limiter.peak <= peak


async def test_a_counter_refusing_with_few_in_flight_after_a_slot_cut_is_probed() -> None:
    # HAProxy's 100 per 10 s on a loaded machine (each request reaches it up to 20 ms after its send;
    # pages in 30 ms, 429s at once, periods 2.8 s before the crawl), as real HAProxy's -vv logs showed
    # it: the start's first refusal came with several in flight and capped the slots (no episode); the
    # next ones, refused on arrival with too few in flight to be read as a cap's, opened none either,
    # and the sends went on at the cut rate until its quiet ended, each refused and counted (pages
    # 101-107 of a real crawl). Was 0.98 of capacity, 21 refusals, the busiest reading 117; now 1.04,
    # 15, 112 (periods from the first request: 24 -> 19 refusals). (counters9's rule, taken out at its
    # merge: it held for refusals as slow as a page too, and a fleet of 3 workers on a bucket, each
    # seeing only its own sends, probed there: 19.5/s against one process's 22.1/s.)
    limiter = PeakRequestRate(100.0, 10.0, _start=-2.8)
    out = await crawl(limiter, 30.0, latency=0.03, instant=True, lag=0.02)
    assert out.refused <= 18
    assert limiter.peak <= 115.0
    assert out.share >= 0.95


@dataclass
class LoggedRequestRate(RequestRate):
    """A :class:`RequestRate` that keeps the arrival time of every request it refused."""

    refusals: list[float] = field(default_factory=list)

    def arrive(self, now: float) -> Response:
        answer = super().arrive(now)
        if answer.status_code != 200:
            self.refusals.append(now)
        return answer


async def test_a_refusal_read_as_a_counters_drain_is_probed_two_counts_later() -> None:
    # HAProxy's 100 per 10 s for 50 s (bench/limiter_kinds.py --quick), 429s after the page's 50 ms.
    # After the first lock-out's fit (9.2/s) and the search's cut, each refusal at the cut level is read
    # as the overshoot's drain (no cut), and its probe went one level gap (0.11 s) later: refused too,
    # the counter reading over its limit with the first refusal counted, as it does until it has
    # drained two counts (_DRAIN_COUNTS), two of the level's gaps at most. Refused pairs 0.12 s apart
    # at 28.1 and 29.5 s; was 0.926 of capacity / 24 refusals, now 0.93 / 22, one pair (the cut's).
    limiter = LoggedRequestRate(100.0, 10.0)
    out = await crawl(limiter, 50.0)
    late = [at for at in limiter.refusals if at > 15.0]
    pairs = sum(1 for at, later in itertools.pairwise(late) if later - at < 0.15)
    assert late
    assert pairs <= 1
    assert out.refused <= 22
    assert out.share >= 0.92


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(("limit", "period", "start"), [(24.0, 1.7, -0.255), (10.0, 1.6, -1.341)],
                         ids=["24-per-1.7s", "10-per-1.6s"])
async def test_a_counters_first_refusal_on_arrival_waits_its_drain_before_the_next_send(
        limit: float, period: float, start: float, seed: int) -> None:
    # Two random-farm counters of bench/over_limit.py (r1:reqrate09, r3:reqrate12), 429s at once, 50 ms
    # pages. The start's first refusal came back on arrival with several in flight: the slot cut took
    # it and opened no episode, so the next send went at the cut rate 60-70 ms later, refused and
    # counted, and the episode's probes after it: the counter read 26 on 24 (12 on 10), over the limit
    # + 1 a farm allows. A 429 on arrival before any lock-out now waits the counter's drain (two of the
    # cycle's mean accepted gaps) before its first probe. Was 26 / 7 refused / 0.715 of capacity and
    # 12 / 5 / 0.747-0.768; now 24 / 3 / 0.748-0.772 and 10 / 3 / 0.752-0.773.
    limiter = PeakRequestRate(limit, period, _start=start)
    out = await crawl(limiter, 30.0, seed=seed, instant=True, robots=0.005)
    assert math.floor(limiter.peak) <= limit + 1
    assert out.refused <= 4
    assert out.share >= 0.74


async def test_a_counter_fit_on_a_record_too_short_for_its_period_gives_no_fit() -> None:
    # 245 per 6.49 s, periods 2.2 s before the crawl, pages in 4 ms, 429s at once. At the refusal after
    # the first lock-out the record (the last 256 sends, older ones dropped: its first two periods are
    # not judged) spans 3.9 s, and a counter of the true period judges none of its sends: taken as
    # ruled out, only periods of 3.6 s were judged, and they fitted "54 to 58/s" on a 37.7/s counter;
    # the level was lifted to 52.8/s and cut twice, the second time by half. Such a counter fits and
    # is bounded by nothing: no fit. Was 0.64 of capacity / 22 refusals; now 0.65 / 16.
    out = await crawl(RequestRate(245.0, 6.49, _start=-2.235), 30.0, latency=0.004, instant=True)
    assert out.refused <= 18
    assert out.share >= 0.62


async def test_a_counter_fitted_to_every_send_is_paced_between_the_counters_that_fit() -> None:
    # 100 per 10 s, periods 2.8 s before the crawl, pages in 3 ms, 429s at once. After the lock-out, the
    # counters that fit every send let 0.85 to 21/s through; the search's refusals at 18-20 s leave 9.6 to
    # 11.3/s: the level stays over the slowest, and no search or recall climbs past the fastest.
    # Was 0.935 / 21: the recall climbed back to 13.5/s at 44 s and drew seven more refusals.
    out = await crawl(RequestRate(100.0, 10.0, _start=-2.8), 60.0, latency=0.003, instant=True)
    assert out.refused <= 16
    assert out.share >= 0.95


async def test_a_counter_paced_over_the_slowest_fit_after_a_search_is_cut_not_excused() -> None:
    # 93 per 9.2 s, periods 1.7 s before the crawl, pages in 4 ms, 429s at once. The search above the
    # lock-out's fit (9.9/s) was refused at 12.4/s and cut to 9.9/s, over the slowest counter that fits
    # every send (9.7/s): that counter never drains there, and each refusal at the level was excused as
    # the drain, its probe a level's gap later refused too: a refused pair every 0.6 s for 5.5 s.
    # Was 0.93 / 24 refusals; now 0.946 / 11 (cut, and lifted to the slowest counter's rate at once).
    out = await crawl(RequestRate(93.0, 9.2, _start=-1.7), 30.0, latency=0.004, instant=True)
    assert out.refused <= 14
    assert out.share >= 0.93


async def test_a_counter_whose_limit_fell_under_the_lockout_fit_is_cut_after_its_drain() -> None:
    # 26 per 1.3 s falling to 0.61 of it at 6 s: the lock-out then fits 13.9/s, 14 % over the new
    # 12.2/s. A refusal early in the fitted cycle may be the counter's drain (no cut); later ones are
    # the level's own. Was 141 accepted / 28 refused: every refusal within the fitted cycle was
    # excused as the drain, a refused pair every half second.
    out = await crawl(FallingRequestRate(26.0, 1.3, at=6.0, share=0.61), 12.0)
    assert out.refused <= 22
    assert out.accepted >= 144


@pytest.mark.parametrize(("rate", "share"), [(29.9, 0.78), (15.0, 0.8)])  # was 0.66 and 0.75
async def test_a_strict_bucket_refusing_a_send_a_stall_bunched_keeps_its_pace(rate: float,
                                                                               share: float) -> None:
    # Pages in 2 ms; three times in the crawl one request reaches the site 12 ms late (the crawler's
    # machine stalled), so the next one, sent on time, arrives within the bucket's gap of it and is
    # refused at a pace the site took for seconds. Each such refusal was cut, and the climb back
    # took the rest of the crawl; now the answer the stall delayed explains it, and the pace stays
    # (spaced for the arrivals' measured spread). One refusal per stall is the price.
    out = await crawl(Bucket(rate, 1.0), 60.0, latency=0.002, hiccups=(15.0, 30.0, 45.0), hiccup=0.012)
    assert out.share >= share
    assert out.refused <= 5


@pytest.mark.parametrize(("rate", "share"), [(29.9, 0.78), (15.0, 0.84)])  # was 0.68 and 0.79
async def test_a_stall_before_the_fetch_explains_a_strict_buckets_refusal(rate: float, share: float) -> None:
    # The same stalls as a fleet worker meets them: before its fetch (the shared store's reply on its
    # way back, the worker's loop busy), so the fetch's latency holds none of it and the crawl gives
    # it as the permit's lag. Rampup read the arrivals' delays from the latency alone, found none, and
    # cut each refusal as one process did before it knew of stalls.
    out = await crawl(Bucket(rate, 1.0), 60.0, latency=0.002, hiccups=(15.0, 30.0, 45.0), hiccup=0.012,
                      told=True)
    assert out.share >= share
    assert out.refused <= 5


async def test_the_page_after_robots_txt_is_no_gap_a_strict_bucket_accepted() -> None:
    # The same with robots.txt first, answered in 30 ms (enough to open the start's window of one), as
    # every crawl begins: the page the door lets go at once after it was accepted 30 ms after robots.txt
    # (which the site does not count), and as the shortest gap accepted it hid the bucket's own (43 ms):
    # no later refusal could be a late arrival's. Was 0.72: every stall's refusal cut the pace.
    out = await crawl(Bucket(23.1, 1.0), 60.0, latency=0.002, hiccups=(15.0, 30.0, 45.0), hiccup=0.012,
                      robots=0.03)
    assert out.share >= 0.78
    assert out.refused <= 5


@pytest.mark.parametrize(("rate", "robots"), [(10.0, 0.3), (10.0, 1.7), (25.0, 1.7)])
async def test_a_page_sent_at_once_on_a_slow_robots_txt_refused_by_a_strict_bucket_cuts_nothing(
        rate: float, robots: float) -> None:
    # nginx limit_req with no burst at 10/s, on a loaded crawler (bench/real_limiters.py, counters14):
    # robots.txt answered in 1.7 s, most of it on the way there, so nginx logged it 18 ms before the
    # first page, sent at once on its answer (the slow answer opened the start's window of one), and
    # refused that page. The door's rule did not apply (the gap was longer than the starting one), and
    # the cut read it as a limit of about one a second: 0.95/s for 40 s, 0.36 of the oracle. Was 0.44,
    # 0.16, 0.065 of capacity here.
    out = await crawl(Bucket(rate, 1.0), 30.0, latency=0.003, instant=True, robots=robots,
                      robots_counted=True)
    assert out.share >= 0.75
    assert out.refused <= 3


async def test_a_start_refusal_far_under_the_accepted_gap_still_fits_a_strict_bucket() -> None:
    # nginx limit_req with no burst at 8/s (robots.txt counted): the start's doubling went from a gap of
    # 0.150 s accepted straight to 0.112 s refused, under 0.76 of it, so the start's strict fit did not
    # apply and the start's ceiling (6.87/s) held with only the slow probe above it: 0.77 of the limit
    # in 30 s. (On real nginx at 10/s: 0.165 s, then 0.098 s refused; 0.68 of the limit for 45 s.)
    shares = []
    for seed in (1, 2):
        out = await crawl(Bucket(8.0, 1.0), 30.0, latency=0.003, seed=seed, lag=0.002, told=True,
                          instant=True, robots=0.005, robots_counted=True, robots_unmeasured=True)
        shares.append(out.share)
        assert out.refused <= 3, seed
    assert min(shares) >= 0.81, shares

async def test_a_refused_step_of_a_strict_fits_search_goes_back_to_the_fit() -> None:
    # A bucket of 3/s with no burst, Retry-After: ceil(wait), pages of 50 ms: the strict fit paced at
    # 2.85/s (0.342 s accepted, 0.331 s refused), the search above it stepped to 3.78/s and was refused
    # 0.324 s after an accepted send. The refusal is the step's: the fit's gap held. Cut by the
    # ordinary share instead, the scope sat at 2.29/s, under the fit it had held for 8 s: 0.733 of the
    # limit in 20 s on four seeds (0.767-0.783 back at the fit), with as many refusals.
    shares = []
    for seed in (1, 2, 3, 4):
        out = await crawl(Bucket(3.0, 1.0, wait=True), 20.0, latency=0.05, seed=seed, lag=0.002, told=True,
                          instant=True, robots=0.005, robots_unmeasured=True)
        shares.append(out.share)
        assert out.refused <= 4, seed
    assert sum(shares) / len(shares) >= 0.755, shares


async def test_a_refused_search_step_of_nginx_with_no_burst_keeps_the_fit() -> None:
    # nginx limit_req with no burst at 4/s before pages of 100 ms (robots.txt counted): fitted at 3.87/s
    # (0.252 s accepted, 0.166 s refused), the search's step to 4.64/s was refused, and the x0.8 cut
    # left 3.15/s for the rest of the crawl on seed 2: 0.787 of the limit, 0.9 back at the fit.
    shares = []
    for seed in (1, 2, 3, 4):
        out = await crawl(Bucket(4.0, 1.0), 20.0, latency=0.1, seed=seed, lag=0.002, told=True, instant=True,
                          robots=0.005, robots_counted=True, robots_unmeasured=True)
        shares.append(out.share)
        assert out.refused <= 4, seed
    assert sum(shares) / len(shares) >= 0.88, shares


@pytest.mark.parametrize(("rate", "latency", "seed"), [(0.8, 0.05, 1), (1.0, 0.07, 1), (1.5, 0.05, 1),
                                                    (2.0, 0.1, 1)])
async def test_a_slow_strict_bucket_is_no_counter_to_pace_at_least_at(rate: float, latency: float,
                                                                     seed: int) -> None:
    # A bucket with no burst of 1/s before 70 ms pages: its sparse sends also fit request-rate counters
    # letting 1.75 to 3/s through (a counter lets a few through back to back), and the counter's floor
    # lifted every cut back to 1.7/s, over the strict fit's 0.93-1.16/s: 23 refused for 21 accepted in
    # 30 s, one refusal per cycle. Main: 18, 23, 38 and 65 refused.
    out = await crawl(Bucket(rate, 1.0), 30.0, latency=latency, instant=True, seed=seed)
    assert out.refused <= 12
    assert out.share >= 0.75


@pytest.mark.parametrize(("rate", "latency", "robots"), [(10.0, 0.07, 0.005), (15.0, 0.05, 0.005),
                                                      (20.0, 0.03, 0.0)])
async def test_a_strict_buckets_429_read_as_a_slot_cap_still_fits_the_gaps(rate: float, latency: float,
                                                                           robots: float) -> None:
    # nginx limit_req with no burst in front of an application whose pages take 30-70 ms: its 429s come
    # back at once, with a page or two in flight, and read as a cap on requests in flight they cut the
    # slots, never the strict fit. On 10/s (robots.txt's door, as the crawl opens it) the second such
    # refusal came at a gap of 0.094 s after one of 0.109 s was accepted, and the slot cut paced at 6/s
    # from the measured rate for the rest of the crawl. Was 0.57, 0.55 and 0.65 of capacity.
    out = await crawl(Bucket(rate, 1.0), 20.0, latency=latency, instant=True, robots=robots,
                      robots_counted=robots > 0.0, robots_unmeasured=True)
    assert out.share >= 0.75
    assert out.refused <= 4


async def test_a_strict_bucket_refused_far_under_its_accepted_gap() -> None:
    # The start phase's overshoot, then a send 0.118 s after one accepted 0.23 s after the one
    # before: the limit's gap lies between. Was 0.51: the deep cut from the measured rate (still
    # the start's, 4.8/s) left 2.4/s, and the climb beyond took the rest of the crawl.
    out = await crawl(Bucket(7.8, 1.0), 30.0)
    assert out.share >= 0.85
    assert out.refused <= 5


# Connection caps whose slots are freed a little after each answer (nginx limit_conn, HAProxy conn_cur):
# the cap, the service time, how late a slot is freed, and the share and refusals each must keep.
@pytest.mark.parametrize(("cap", "service", "late", "seconds", "share", "refusals"), [
    # was 0.78 / 2: a 503 at 3 in flight capped the slots at 2 for good; 3 were accepted in
    # flight before, so the cap is 3 and the rate spaces the sends.
    (3, 0.1, 0.02, 120.0, 0.82, 8),
    # A request sent as soon as an answer freed its slot is refused, alone in flight: the cap's, not a
    # backend failing at once, since as many were accepted in flight before.
    # (11 since the breaker's sample of the start's refusals (3 of 6) takes no 1 s pause under
    # rampup: seeds 1-6 refused 57 with the pause and 53 without it, share 0.930 -> 0.943.)
    (1, 0.3, 0.05, 60.0, 0.75, 11),   # was 0.15 / 50: taken for the site's own errors
    (2, 0.3, 0.08, 60.0, 0.8, 10),    # was 0.65 / 260
    # was 0.62 / 2: the refusals at the cap opened an overshoot episode, whose end was fitted as a
    # lock-out at the start phase's mean rate (11/s where the cap serves 17.5/s), probed past rarely.
    (7, 0.387, 0.0124, 60.0, 0.8, 8),
    # Capped at 12 and answering at its baseline latency till then: every slot in use, no refusal,
    # latency flat, so slots open past the 8 the start phase and rate limiters get (0.83; 0.70 with
    # 8: the default before).
    (12, 0.2, 0.02, 60.0, 0.78, 4),
    # The lag measured (the longest rest after an answer refused, the shortest accepted at the full
    # count) and each slot rested that long after its answer, as the server frees it: was 0.80 and
    # 0.81, each refusal cutting the rate by a tenth under what the slots serve.
    (3, 0.25, 0.099, 20.0, 0.9, 4),
    # (The start doubling from the first 0.22 s answer meets the cap with fewer answers on record:
    # seeds 1-6 drew 3-6 refusals, 24 in all; 2-4, 19, since the accepted sends bound the lag too.
    # Three of this seed's four come in the start, before any send was accepted at the full count.)
    (6, 0.22, 0.07, 20.0, 0.85, 4),
    # Refused at 8 the moment a ninth slot opened (9 accepted once): capped at 8, the lag was never
    # measured (only a refusal at 9 would) and each refusal cut the rate; was 0.80. The capped count is
    # the full one now, and once the slots rest all 9 are used again. (0.83 since the rest stops at the
    # bracket's accepted top, 28 ms, once the rest of it costs under 5 %: the halving went on to 22 ms,
    # accepted only because the cap is one more than the count resting; seeds 1-6: 0.855 / 16 refusals,
    # 0.865 / 19 before.)
    (9, 0.198, 0.028, 20.0, 0.82, 5),
], ids=["cap-3", "cap-1", "cap-2", "no-rate-lock-out", "slots-past-eight", "lag-rested-3", "lag-rested-6",
        "lag-under-a-capped-count"])
async def test_a_connection_cap_released_late(cap: int, service: float, late: float, seconds: float,
                                              share: float, refusals: int) -> None:
    out = await crawl(ConnectionCap(cap, service, late), seconds, latency=service)
    assert out.share >= share
    assert out.refused <= refusals


@pytest.mark.parametrize(("cap", "service", "late", "seed", "share", "refusals"), [
    (2, 0.3, 0.05, 3, 0.88, 4),      # 0.87 / 7 before
    (6, 0.35, 0.018, 2, 0.91, 3),    # 0.92 / 6 before (a random farm's conncap11)
], ids=["cap-2", "cap-6"])
async def test_a_late_freed_caps_lag_is_bracketed_by_the_sends_it_accepted(
        cap: int, service: float, late: float, seed: int, share: float, refusals: int) -> None:
    # The start doubles from the first slow answer and meets the cap with a few answers on record. The
    # lag was measured from refusals alone: the first 6 ms after an answer, each rest tried twice the
    # last refused one (12, 24, 47, 98 ms on a 50 ms lag), a refusal each. A send accepted with every
    # slot out, right after an answer, bounds the lag from above (none was still held) from the first
    # answer on: the first refusal inside that bracket rests the slots at its middle, and once resting
    # its top costs under 5 % of a slot's cycle, at the top (seeds 1-6: cap 2 36 -> 29 refusals, share
    # 0.875 -> 0.884; cap 6 29 -> 17, 0.916 both).
    out = await crawl(ConnectionCap(cap, service, late), 20.0, latency=service, seed=seed)
    assert out.share >= share
    assert out.refused <= refusals


async def test_a_late_freed_caps_bracket_failed_by_late_arrivals_keeps_its_lower_bound() -> None:
    # Sends reach the site up to 20 ms after they leave (a busy crawler; HAProxy's conn_cur of 4 before
    # 0.1 s pages): an accepted rest reads short by that much, so a refusal came after a longer rest than
    # one accepted. Forgetting the bracket and taking the next accepted rest again drew 12 refusals,
    # three every second or so; the refusal's lower bound holds however late sends arrive.
    out = await crawl(ConnectionCap(4, 0.1, 0.01), 20.0, latency=0.1, lag=0.02, seed=4)
    assert out.share >= 0.8  # 0.82
    assert out.refused <= 5  # 4; main 5


@pytest.mark.parametrize(("lag", "seed"), [(0.02, 2), (0.05, 1), (0.05, 5)])
async def test_a_cap_of_one_reached_late_by_its_requests(lag: float, seed: int) -> None:
    # Sends reach the site up to ``lag`` after they leave (a busy crawler). A send that left just before
    # an answer came is counted in that answer's "2 in flight", though it reached the site after the
    # answer's request left it: the most accepted at once read 2 on a cap of 1, so a send right after
    # an answer, refused by the slot freed late, no longer looked like the cap's, and its refusals were
    # taken for the site's own errors: forgiven, climbing again, the breaker pausing it (0.21-0.26 of
    # capacity with 27-33 refusals in these three). A refusal on arrival now counts the requests it met
    # (those answered since its send), and takes itself out of the count that answer set.
    out = await crawl(ConnectionCap(1, 0.396, 0.00982), 25.0, latency=0.396, lag=lag, seed=seed)
    assert out.share >= 0.7
    assert out.refused <= 8


@pytest.mark.parametrize("late", [0.002, 0.0005])
async def test_a_second_refusal_the_connection_cap_explains_does_not_cut_the_rate(late: float) -> None:
    # nginx's limit_conn / HAProxy's conn_cur of 4 before 0.1 s pages, sends reaching the site up to 5 ms
    # late. The start's refusal came at 5 in flight with 5 once read accepted (a send that left before an
    # answer was read): the cap was set at 5 and the rate cut once. A later refusal at 5 showed the 5 a
    # miscount (cap 4) and cut the rate again, from what the 5 slots sent while resting 48 ms after each
    # answer (a lag read from refusals past the cap): 0.75-0.76 of capacity for the rest of the crawl (real
    # runs: 0.88 x the oracle in half of them, 1.03 in the rest). The cap answers it: no cut, and the lag
    # read at the miscounted count is dropped (main: 0.762 / 3, 0.750 / 3 refusals; now 0.845, 0.832 / 4).
    out = await crawl(ConnectionCap(4, 0.1, late), 15.0, latency=0.1, lag=0.005, seed=3)
    assert out.share >= 0.82
    assert out.refused <= 6


@dataclass
class CappedBucket:
    """A connection cap in front of a token bucket (nginx ``limit_conn`` beside ``limit_req``), both
    refusing with a 503 at once; a request the bucket refuses frees its connection slot at once."""

    cap: ConnectionCap
    bucket: Bucket

    @property
    def capacity(self) -> float:
        return min(self.cap.capacity, self.bucket.capacity)

    def arrive(self, now: float) -> Response:
        if self.cap.arrive(now).status_code != 200:
            return Response(503)
        if self.bucket.arrive(now).status_code != 200:
            self.cap._inflight -= 1
            return Response(503)
        return Response(200)

    def leave(self, now: float) -> None:
        self.cap.leave(now)


@pytest.mark.parametrize("seed", [1, 5])
async def test_a_rate_limit_behind_a_connection_cap_still_cuts(seed: int) -> None:
    # 20/s (burst 5) behind a cap of 4 that serves 39/s: with the slots full, the bucket's refusals come
    # at the cap's count too. Taken as the cap's (no cut at the cap's count, whatever the lag model
    # says), the rate stayed over 20/s: 45-57 refusals in 15 s; each still cuts (4-5, as main).
    out = await crawl(CappedBucket(ConnectionCap(4, 0.1, 0.002), Bucket(20.0, 5.0)), 15.0, latency=0.1,
                      lag=0.005, seed=seed)
    assert out.share >= 0.9
    assert out.refused <= 8


@pytest.mark.parametrize(("latency", "instant", "share"),
                         [(0.05, False, 0.9),   # was 0.94 / 4
                          (0.2, True, 0.9)])    # was 0.84 / 4: the instant 429 read as a cap on slots
async def test_a_quick_bucket_is_not_read_as_a_connection_cap(latency: float, instant: bool,
                                                               share: float) -> None:
    out = await crawl(Bucket(25.0, 5.0), 90.0, latency=latency, instant=instant)
    assert out.share >= share
    # (0.2 s: 10 of 2160 requests, 3 before a refusal read as a cap opened no overshoot episode:
    # the burst's other refusals, at 7-5 in flight, now lower the cap instead of the episode's fit.)
    assert out.refused <= 10


async def test_a_strict_bucket_in_front_of_a_slow_application() -> None:
    # 429s answered at once by a limiter in front of pages that take 0.3 s.
    out = await crawl(Bucket(8.0, 1.0), 90.0, latency=0.3, instant=True)
    # was 0.77 / 8; 0.86 / 2 since the start doubles from the first 0.3 s answer (seeds 1-6: 0.86-0.92,
    # mean 0.887 with 35 refusals; 0.77-0.92, 0.875 with 40 before)
    assert out.share >= 0.85
    assert out.refused <= 8


@pytest.mark.parametrize(("knee", "latency", "exponent", "slots", "share"),
                         [(7, 0.2, 2.0, 8, 0.8),       # 0.86: 8 in flight stay under the knee line
                          (7, 0.2, 2.0, None, 0.9),    # 0.95: the slots opened past 8 reach the line
                          (7, 0.2, 1.0, 8, 0.9),       # 0.97
                          (4, 0.3, 2.0, 8, 0.85),      # was 0.73: rampup's knee (1.6 x baseline) is past it
                          (12, 0.15, 2.0, 16, 0.85),   # was 0.64 with 16 slots allowed
                          (12, 0.15, 2.0, None, 0.85),  # 0.92; 0.64 with the default of 8 slots
                          # 0.96; was 0.80: 16 in flight, answered 1.33 x slower than one alone (under the
                          # knee line), came back together, and the wait for them counted as idleness in
                          # the send rate, which cut the slots to 3-4 after every round
                          (12, 0.33, 1.0, None, 0.9)])
async def test_a_server_that_slows_past_a_knee(knee: int, latency: float, exponent: float, slots: int | None,
                                               share: float) -> None:
    # The load fit (Little's law) holds the count in flight that serves the most; the start phase's
    # overshoot may meet the hard limit (three times the knee) once.
    out = await crawl(Knee(knee, latency, exponent, 3 * knee), 60.0, slots=slots)
    assert out.share >= share
    assert out.refused <= 1


async def test_the_load_fit_measures_a_count_once_it_is_full() -> None:
    # A knee of 2 falling steeply past it (softknee02 of a random farm, about 14 s of pages). The
    # sends right after the hold rose to 3 reached the server with 2 in flight and came back with 3:
    # the fit read 7.2/s at 3 (4/s in truth) and walked 3, 4, 3, 1, 3, 2 (0.60; 0.56 on main).
    out = await crawl(Knee(2, 0.335, 2.0, 6), 14.0)
    # 0.65 since the start doubles from the first 0.335 s answer and meets the knee 0.7 s sooner, its
    # queue deeper (seeds 1-6: 0.55-0.68, mean 0.636; 0.62-0.71, 0.666 before). A random farm's soft
    # knees gain 0.03 on the mean (24 drawn on the fake clock: 0.835-0.864).
    assert out.share >= 0.63
    assert out.refused <= 1


@pytest.mark.parametrize(("latency", "per_inflight", "limit", "share"),
                         [(0.355, 0.0613, 9, 0.85),   # was 0.59: held at 3 in flight by the latency cut
                          (0.15, 0.02, 16, 0.85)])    # was 0.44 with 16 slots allowed
async def test_a_server_slower_with_every_request_it_holds(latency: float, per_inflight: float, limit: int,
                                                            share: float) -> None:
    # Latency grows with every request in flight, yet so does the throughput (in flight / latency),
    # up to a hard limit: latency past rampup's knee line is the load's price here, not overload.
    out = await crawl(HardKnee(latency, per_inflight, limit), 40.0, slots=16)
    assert out.share >= share
    assert out.refused <= 3


@pytest.mark.parametrize(("limiter", "read_late", "seed", "share", "refusals"), [
    # r2:hardknee08 of a random farm: 0.157 s alone, 23.9 ms more per request in flight, 503 at once past
    # 11. An answer read a moment after the site let it go came "with 12 in flight" (a request left
    # between), and every refusal at 12 then read as a slot freed late: the cap stayed 12, each refusal
    # cut the rate (main: 0.883 with 228 refusals; 0.900 / 354 with answers read up to 20 ms late).
    (HardKnee(0.157, 0.0239, 11), 0.01, 1, 0.92, 5),
    (HardKnee(0.157, 0.0239, 11), 0.02, 3, 0.92, 5),
    # A door of 6 read accepted once at 7: the second refusal at 7, in the quiet after the first cut,
    # opened an episode whose end was fitted as a lock-out at half what the 6 serve (0.68 with the cap
    # lowered alone); the capped slots answer it (main: 0.783, capped at 7 and resting each slot).
    (HardKnee(0.2, 0.01, 6), 0.02, 5, 0.88, 4),
], ids=["knee-11-10ms", "knee-11-20ms", "door-6-20ms"])
async def test_a_hard_limit_read_one_too_high_by_answers_read_late(
        limiter: Limiter, read_late: float, seed: int, share: float, refusals: int) -> None:
    # Refusals at a count that outnumber the answers accepted at it say the cap is under it: the cap
    # and the most accepted at once go one lower.
    out = await crawl(limiter, 30.0, latency=0.2, seed=seed, read_late=read_late)
    assert out.share >= share
    assert out.refused <= refusals


@pytest.mark.parametrize(("limiter", "latency", "errors", "at_once", "seed", "share", "refusals"), [
    # A door of 6 in flight (503 at once past it), 3 % of its pages failing 502 after the page's time:
    # a cut for them was judged "not load" and forgiven, the slot cap read from the door with it, and
    # the door's refusals were taken for the site's own errors (a1ccb18: 0.91 with 89 refusals).
    (HardKnee(0.2, 0.0, 6), 0.2, 0.03, False, 0, 0.9, 5),
    # The same with 10 %: also believed again and cut, then judged "not load" on 33 % after the cut
    # against 45 % before (the door's refusals in both), and the breaker paused the site 10 s at a
    # time (a1ccb18: 0.07 with 86 refusals).
    (HardKnee(0.2, 0.0, 6), 0.2, 0.1, False, 1, 0.9, 5),
    # A hard knee of 9 (latency growing with the count) with 10 % (a1ccb18: 0.62 with 245).
    (HardKnee(0.355, 0.0613, 9), 0.2, 0.1, False, 0, 0.88, 10),
    # A connection cap of 4 whose slots are freed 20 ms late, 10 % (a1ccb18: 0.16 with 116).
    (ConnectionCap(4, 0.2, 0.02), 0.2, 0.1, False, 1, 0.88, 12),
    # A door of 6 whose backend fails 20 % at once, one of them alone in flight: every refusal of the
    # door was taken for the site's own errors from then on (a1ccb18: 0.17 with 159).
    (HardKnee(0.2, 0.0, 6), 0.2, 0.2, True, 0, 0.9, 10),
], ids=["door-3pc", "door-10pc", "hardknee-10pc", "conncap-10pc", "door-20pc-at-once"])
async def test_errors_not_about_load_on_a_site_that_caps_its_requests_in_flight(
        limiter: Limiter, latency: float, errors: float, at_once: bool, seed: int, share: float,
        refusals: int) -> None:
    # The site's own errors come at one share whatever is in flight; the cap's refusals come past its
    # count. Weighed by the count each request met, the cap keeps its slots and the errors slow nothing.
    out = await crawl(limiter, 40.0, latency=latency, errors=errors, errors_at_once=at_once, seed=seed)
    assert out.share / (1.0 - errors) >= share  # of what the cap serves with the errors' share out
    assert out.refused <= refusals


@pytest.mark.parametrize(("limiter", "errors", "seed", "share"), [
    # A bucket of 10/s (burst 5), 20 % of its pages failing 502: the verdict "not load" dropped the
    # ceiling its 429s had set, the start doubled past it to 60/s, and the overshoot's refusals fitted
    # a pace of 2.6/s (48e517d: 0.44 with 15 refusals).
    (Bucket(10.0, 5.0), 0.2, 2, 0.85),
    # A bucket of 3/s (burst 3), the same errors: a 502 on a probe of the episode was taken for the
    # bucket's refusal, the probe gap doubled, and the lock-out fit paced it at 1.6/s (48e517d: 0.70).
    (Bucket(3.0, 3.0), 0.2, 4, 0.85),
], ids=["bucket10-20pc", "bucket3-20pc-probe"])
async def test_a_buckets_429s_outlive_the_verdict_on_the_sites_own_5xx(limiter: Limiter, errors: float,
                                                                      seed: int, share: float) -> None:
    # The verdict "not load" concerns the 5xx: the ceiling and the pace the bucket's 429s set stand, and
    # a 5xx is a request the bucket let through.
    out = await crawl(limiter, 40.0, errors=errors, seed=seed)
    assert out.share / (1.0 - errors) >= share
    assert out.refused <= 10


async def test_a_maximum_of_slots_set_by_the_user_is_a_hard_cap() -> None:
    # A knee at 12 would call for more slots; the user's 8 holds: a server refusing past 8 in flight
    # refuses nothing.
    out = await crawl(Knee(12, 0.15, 2.0, 8), 60.0, slots=8)
    assert out.refused == 0
    assert out.share >= 0.6


async def test_a_scope_sends_robots_txt_and_one_page_in_its_first_second() -> None:
    # robots.txt answered in 0.3 s (a loaded crawler, a slow first connection), pages in 3 ms, a
    # bucket of 0.98/s with no burst (strict07 of a random farm). The slow answer opens the window of
    # one, so the first page goes at once: that early page is the one extra request the polite start
    # allows in its first second. Before, the next page went 0.3 s after it: 3 requests in a second.
    clock = MockClock(autojump=True)
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True},
                                     "CONCURRENT_REQUESTS": 64})
    limiter, sends, refused = Bucket(0.98, 1.0), [], 0
    async with Throttler(settings, clock=clock, rng=random.Random(1)) as throttler:
        async with throttler.slot("https://site.example/robots.txt") as permit:
            sends.append(clock.now())
            await clock.sleep(0.3)
            permit.feedback(Response(200), latency=0.3)

        async def worker(pages: list[str]) -> None:
            nonlocal refused
            while pages:
                url = pages.pop(0)
                async with throttler.slot(url) as permit:
                    sends.append(clock.now())
                    answer = limiter.arrive(clock.now())
                    await clock.sleep(0.003)
                    if answer.status_code != 200:
                        refused += 1
                        pages.insert(0, url)
                    permit.feedback(answer, latency=0.003)

        pages = [f"https://site.example/page/{n}" for n in range(6)]
        await asyncio.gather(*(worker(pages) for _ in range(8)))
    busiest = max(sum(1 for t in sends if start <= t < start + 1.0) for start in sends)
    assert busiest <= 2  # the limit (1 a second) + 1
    assert sends[2] - sends[0] >= 1.0
    assert refused <= 2


@pytest.mark.parametrize(("rate", "burst", "hold", "latency", "share"),
                         [(5.0, 1.0, 5, 0.03, 0.4),     # was 0.04 / 13: resumed at 28/s after each hold
                          # (0.56 / 3 with the held rules; the bucket fit's cautious first pace after
                          # a 5 s hold gives 0.41 / 6 here, and more on bursty buckets with holds)
                          (3.0, 3.0, 10, 0.05, 0.4)])   # was 0.31 / 5
async def test_a_held_refusal_under_the_window_of_one_resumes_at_what_the_sends_showed(
        rate: float, burst: float, hold: int, latency: float, share: float) -> None:
    # Answers in 30-50 ms (a loaded crawler, or an API some way off) open the window of one at
    # 20-33/s from the first answer; the bucket refuses within a few sends and holds for seconds.
    out = await crawl(Bucket(rate, burst, hold), 60.0, latency=latency, seed=2)
    assert out.share >= share
    assert out.refused <= 6  # 13 before; the bucket fit after a 5 s hold may try twice more


# The start phase of a quick site (answers in 3 ms): a doubling waits for three answers at the pace it
# doubles, within [0.5 s, 1 s] (_rampup_start). With one-second rounds throughout, the cases read
# 26 pages, 0.41 / 1 and 0 refusals.
async def test_a_quick_site_with_no_limit_is_sent_its_pages_within_seconds() -> None:
    out = await crawl(NoLimit(), 5.0, latency=0.003)
    assert out.accepted >= 80  # 1/s, then 2, 4 (one-second rounds), then a doubling every half second
    assert out.refused == 0


# A site answering in 30-50 ms with no limit: the start doubles from the window of one, and past 100/s
# (the most gaps can pace) once per round trip while the slots it opens on evidence show it (its cap
# is slots over latency, not 100/s). Eight in flight serve 267/s at 30 ms and 160/s at 50 ms.
@pytest.mark.parametrize(("latency", "least"), [(0.03, 1200), (0.05, 700)])  # 459 and 429 at a 100/s cap
async def test_a_site_with_no_limit_answering_in_tens_of_ms_is_not_capped_at_100_per_second(
        latency: float, least: int) -> None:
    out = await crawl(NoLimit(), 5.0, latency=latency)
    assert out.accepted >= least
    assert out.refused == 0


async def test_a_quick_strict_bucket_of_40_per_second_is_reached_seconds_sooner() -> None:
    out = await crawl(Bucket(40.0, 1.0), 10.0, latency=0.003)
    assert out.share >= 0.5
    assert out.refused <= 2


async def test_a_quick_start_does_not_pass_a_few_per_second_sooner() -> None:
    # The hard farm's embargo (5/s, no burst, 5 s of silence after a 429) in a crawl of 5 pages: under
    # 3/s the doubling still takes a whole second, so the pages are in before the pace passes 5/s.
    limiter, clock, refused = Bucket(5.0, 1.0, 5), MockClock(autojump=True), 0
    settings = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True},
                                     "CONCURRENT_REQUESTS": 64})
    pages = [f"https://site.example/page/{n}" for n in range(5)]
    async with Throttler(settings, clock=clock, rng=random.Random(1)) as throttler:
        async with throttler.slot("https://site.example/robots.txt") as permit:
            await clock.sleep(0.003)
            permit.feedback(Response(200), latency=0.003)

        async def worker() -> None:
            nonlocal refused
            while pages:
                url = pages.pop(0)
                async with throttler.slot(url) as permit:
                    answer = limiter.arrive(clock.now())
                    await clock.sleep(0.003)
                    if answer.status_code != 200:
                        refused += 1
                        pages.append(url)
                    permit.feedback(answer, latency=0.003)

        await asyncio.gather(*(worker() for _ in range(8)))
    assert refused == 0
    assert clock.now() < 4.0


@dataclass
class AnnouncedWindow:
    """A window that tells its budget in every answer, in one of the sim's header families
    (``crawlpace.sim.budget_headers``), and ``Retry-After`` with each 429."""

    counter: SlidingWindow | FixedWindow
    style: str
    retry_after: bool = True
    epoch: float = 0.0  # the Unix time at the crawl's start, for resets given as a Unix time

    @property
    def capacity(self) -> float:
        return self.counter.limit / self.counter.window

    def arrive(self, now: float) -> Response:
        allowed = self.counter.take(now)
        reset = self.counter.reset(now)
        headers = {name.decode(): value.decode() for name, value in budget_headers(
            self.style, self.counter.limit, self.counter.remaining(now), reset, self.counter.window,
            self.epoch + now)}
        if allowed or not self.retry_after:
            return Response(200 if allowed else 429, headers)
        return Response(429, {**headers, "Retry-After": str(max(1, math.ceil(reset)))})

    def leave(self, now: float) -> None:
        pass


async def test_a_moving_window_announced_in_the_draft_07_dictionary_is_paced_at_its_count() -> None:
    # ``RateLimit: limit=4, remaining=0, reset=1`` and ``RateLimit-Policy: 4;w=1`` (a random farm's
    # sliding04): at the window's full pace every answer shows none left for a whole-second "1".
    # Read as a spent budget, each held the site for that second: 0.56 of it, 11 refusals.
    out = await crawl(AnnouncedWindow(SlidingWindow(4, 1.0), "draft07"), 20.0)
    assert out.share >= 0.9
    assert out.refused == 0


async def test_the_last_request_a_header_leaves_goes_before_its_reset() -> None:
    # X-RateLimit-Remaining: 1 with X-RateLimit-Reset-After: 1.5 (a random farm's headers13, 2 per
    # 1.5 s): paced at T / R, the window's second request went on its reset, into the next window,
    # and every window served one (0.79 of the site here, 0.57 on the farm).
    out = await crawl(AnnouncedWindow(FixedWindow(2, 1.5), "reset-after"), 20.0)
    assert out.share >= 0.95
    assert out.refused == 0


@pytest.mark.parametrize("style", ["ietf", "draft07"])
async def test_a_moving_window_of_one_is_not_sent_its_next_before_the_first_leaves(style: str) -> None:
    # One request per 2 s, refusals counted, no Retry-After (a random farm's sliding12: 0.22 of the
    # oracle, 18 refusals for 10 pages): each "r=0;t=2" held the scope 0.05 s, and the even pace
    # (0.97 of the window) sent the next at 1.94 s, refused: 0.2-0.8 of the site, 2-9 refusals.
    # Then an edge learned from an earlier window still ended some holds before the one request
    # left the window (seeds 2, 3 and 6: 2-4 refusals).
    for seed in (1, 2, 3, 6):
        window = SlidingWindow(1, 2.0, count_refused=True)
        out = await crawl(AnnouncedWindow(window, style, retry_after=False), 20.0, seed=seed)
        assert out.share >= 0.9
        assert out.refused == 0


async def test_a_server_answering_in_a_quarter_second_doubles_from_its_first_answer() -> None:
    # 0.25 s answers, 20 ms slower per request held, a 503 past 8 in flight (a random farm's hard
    # knee). The doubling waited for three answers to confirm the window of one (0.75 s at one in
    # flight): 21-22 pages in the first 2 s. A latency past latency_signal + latency_noise is the
    # server's own (a busy crawler adds less), and later answers can only widen the window.
    out = await crawl(HardKnee(0.25, 0.02, 8), 2.0)
    assert out.accepted >= 26  # 29-30 now
    assert out.refused <= 1


async def test_a_millisecond_site_whose_first_answer_the_crawler_slowed_keeps_its_slow_start() -> None:
    # A 3 ms site behind a bucket of 2/s with no burst; the crawler's machine delays the first answer
    # 40 ms (under latency_signal + latency_noise): no window of one to double from, as before. (Taken
    # for the server's time, it started the doubling at 25/s: 0.70 of the site and 10 refusals.)
    out = await crawl(Bucket(2.0, 1.0), 10.0, latency=0.003, hiccups=(0.0,), hiccup=0.04)
    assert out.share >= 0.85  # 0.90
    assert out.refused <= 6


@dataclass
class EpochClockWindow:
    """``limit`` per ``window`` seconds in windows aligned to the site's clock, which the crawl meets
    ``phase`` seconds into one; ``X-RateLimit-Reset`` names each window's end as a Unix time, rounded
    up to a whole second (the crawl's clock agrees with the site's: the crawl starts at ``epoch``)."""

    limit: int
    window: float
    phase: float
    epoch: float
    counter: ClockWindow = field(init=False)

    def __post_init__(self) -> None:
        self.counter = ClockWindow(self.limit, self.window)

    @property
    def capacity(self) -> float:
        return self.limit / self.window

    def arrive(self, now: float) -> Response:
        at = now + self.phase
        allowed = self.counter.arrive(at).status_code == 200
        reset = (math.floor(at / self.window) + 1) * self.window - at
        left = max(self.limit - self.counter._used, 0)
        headers = {name.decode(): value.decode() for name, value in budget_headers(
            "x-ratelimit", self.limit, left, reset, self.window, self.epoch + now)}
        if allowed:
            return Response(200, headers)
        return Response(429, {**headers, "Retry-After": str(max(1, math.ceil(reset)))})

    def leave(self, now: float) -> None:
        pass


@pytest.mark.parametrize("phase", [0.0, 0.25, 0.38, 0.5, 0.63, 0.75, 0.88, 0.95])
async def test_a_clock_window_with_reset_moments_is_paced_alike_from_any_phase(phase: float) -> None:
    # 7 per 1 s on the clock, X-RateLimit-Reset as a Unix time (a random farm's r3:fixed12: 0.58 x oracle
    # in one run, 1.00 in another). The first answer's window was met part spent: taken for a window
    # begun by that request, the log gated at 7 per 0.4-0.9 s: 0.59-0.98 of the site with 1-6 refusals
    # whenever the window ended in the second half of a wall-clock second (0.95, none, otherwise).
    site = EpochClockWindow(7, 1.0, phase, 1_800_000_000.37)
    out = await crawl(site, 20.0, epoch=site.epoch)
    assert out.share >= 0.92
    assert out.refused <= 1


@dataclass
class Watched:
    """Another limiter with every arrival on record: the most it saw in any span of ``span`` seconds
    (the busiest window the bench judges a window site by)."""

    inner: AnnouncedWindow
    span: float
    arrivals: list[float] = field(default_factory=list)

    @property
    def capacity(self) -> float:
        return self.inner.capacity

    def arrive(self, now: float) -> Response:
        self.arrivals.append(now)
        return self.inner.arrive(now)

    def leave(self, now: float) -> None:
        self.inner.leave(now)

    def busiest(self) -> int:
        times, top, first = self.arrivals, 0, 0
        for last, at in enumerate(times):
            while times[first] + self.span <= at:
                first += 1
            top = max(top, last - first + 1)
        return top


class SoonestWindow(SlidingWindow):
    """A moving window that announces a reset of 0 while requests are left (no request has to leave
    it before the next may go), and once spent the seconds until its oldest counted one leaves."""

    __slots__ = ()

    def reset(self, now: float) -> float:
        return 0.0 if self.remaining(now) >= 1 else super().reset(now)


@pytest.mark.parametrize(("limit", "window", "style", "share"), [
    (4, 1.0, "reset-after", 0.88),   # was 0.61-0.64, 14-17 refusals, 7 in a second of 4
    (6, 2.3, "reset-after", 0.88),   # was 0.54-0.61, 5-10 refusals
    (10, 4.0, "trio", 0.95),         # was 0.64, 5-6 refusals
    (4, 1.0, "trio", 0.9)])          # was 0.56, 11-13 refusals
async def test_a_moving_window_announced_without_its_length_is_learned_from_its_spent_answers(
        limit: int, window: float, style: str, share: float) -> None:
    # ``X-RateLimit-Reset-After`` or the RateLimit-* trio with no policy: 0 while requests are left, and
    # once spent the seconds until the oldest counted one leaves. No answer said how long the window
    # is, so rampup's climb pipelined past the budget. An accepted answer that spent it was the
    # limit-th counted: the oldest is the limit-th latest accepted, and the window lies between the
    # two ends that pair allows; the scope's log of answers then gates its sends.
    site = Watched(AnnouncedWindow(SoonestWindow(limit, window), style), window)
    out = await crawl(site, 20.0)
    assert out.share >= share
    assert out.refused <= 2  # the climb's requests already out when the budget first ran out
    assert site.busiest() <= limit + 1


@pytest.mark.parametrize(("limit", "window", "style", "share"), [
    (4, 1.0, "reset-after", 0.85),   # was 0.71, 8 refusals (0.89 and 1 now)
    (6, 2.3, "reset-after", 0.9),    # was 0.96, 2 refusals (0.96 and none now)
    (8, 2.0, "reset-after", 0.9),    # was 0.75, 11 refusals (0.93 and 1 now)
    (10, 4.0, "trio", 0.93)])        # was 0.86 (0.96 now)
async def test_a_moving_window_announcing_its_oldest_requests_end_is_told_by_a_budget_partly_back(
        limit: int, window: float, style: str, share: float) -> None:
    # ``limits``' moving window (Flask-Limiter, and the random farm's sliding sites): the reset is the
    # oldest counted request's end, requests left or not, so the "0 while requests are left" tell never
    # comes. Read as a fixed window's, each spent budget's reset let the scope send several at once,
    # where one request had left: 0.71 of 4 per 1 s and 8 refusals, each held by its Retry-After. A
    # fixed window gives its budget back whole, to requests sent after the last one it counted: an
    # answer with more left, or a later end, that counts more than that, is a moving window's.
    site = Watched(AnnouncedWindow(SlidingWindow(limit, window), style), window)
    out = await crawl(site, 20.0)
    assert out.share >= share
    assert out.refused <= 1  # the first spent budget's reset, read as a fixed window's
    assert site.busiest() <= limit + 1


@pytest.mark.parametrize(("limit", "window", "epoch"),
                         [(3, 2.7, 1_700_000_000.0), (5, 4.2, 1_700_000_000.81)])
async def test_a_moving_window_with_whole_second_reset_moments_is_learned_from_its_spent_answers(
        limit: int, window: float, epoch: float) -> None:
    # ``X-RateLimit-Reset`` as a Unix time, rounded up, on a moving window of a length that is no whole
    # number of seconds (the random farm's r3:sliding03, 2 per 1.4 s: 0.70 x oracle, no refusal). The
    # first answers' resets bound the length only to within a second (3 per 2.7 s was paced as 3 per
    # 3 s); spread evenly, the budget never came back whole, no answer was a window's first again,
    # and the scope stayed at that pace: 0.90 and 0.84 of the site. Every answer that spends the
    # budget bounds the length too: its window began after the limit-th latest accepted send.
    site = Watched(AnnouncedWindow(SlidingWindow(limit, window), "x-ratelimit", epoch=epoch), window)
    out = await crawl(site, 30.0, latency=0.02, epoch=epoch)
    assert out.share >= 0.93
    assert out.refused <= 1
    assert site.busiest() <= limit


@dataclass
class Judged:
    """Another limiter, judged as the simulator judges every site: a request that comes while a
    refusal's ``Retry-After`` still runs (more than ``tolerance`` after that answer) breaks it."""

    inner: AnnouncedWindow
    tolerance: float = 0.01
    embargo: Embargo = field(default_factory=Embargo)
    violations: int = 0

    @property
    def capacity(self) -> float:
        return self.inner.capacity

    def arrive(self, now: float) -> Response:
        if self.embargo.violated(now, self.tolerance):
            self.violations += 1
        answer = self.inner.arrive(now)
        wait = answer.headers.get("Retry-After")
        if answer.status_code >= 400 and wait is not None:
            self.embargo.extend(now, float(wait))
        return answer

    def leave(self, now: float) -> None:
        self.inner.leave(now)


@pytest.mark.parametrize(("limit", "window", "seed"), [(5, 9.1, 1), (8, 7.5, 2)])
async def test_a_refusals_retry_after_stands_while_the_window_log_gates(limit: int, window: float,
                                                                        seed: int) -> None:
    # A random farm's r3:sliding27: 5 per 9.1 s moving, refusals counted, the RateLimit-* trio and
    # Retry-After on refusals. The trio's whole-second resets taught the log 9 s, so its sixth request
    # was refused; the refusal's "Retry-After: 2" (the reset, rounded up) was dropped as the spent
    # budget's hold, and the log's pace sent the next 1.7-1.9 s later: a broken Retry-After. (The
    # second page's 0.5 s stall puts the window's second request a second after its first, as the
    # crawl's 1 s start delay did.)
    site = Judged(AnnouncedWindow(SlidingWindow(limit, window, count_refused=True), "trio"))
    out = await crawl(site, 20.0, seed=seed, latency=0.003, instant=True, robots=0.005,
                      hiccups=(1.4,), hiccup=0.5)
    assert site.violations == 0
    assert out.refused <= 1
    assert out.share >= 0.8


@pytest.mark.parametrize(("limit", "window"), [(2, 2.3), (2, 1.4)])
async def test_a_budget_announced_in_whole_seconds_from_now_is_spread_before_its_earliest_reset(
        limit: int, window: float) -> None:
    # The RateLimit-* trio on windows that follow each other from the first request (random farms'
    # headers kind): "RateLimit-Reset: 2" is a reset anywhere in (1, 2] s, rounded up. Taken as 1.5 s
    # and spread, the window's last request went after a reset of 1.3 s, into the next window, and
    # each window served one request: 0.58-0.69 and 0.60-0.63 of the site. Spread over the earliest
    # the reset may be, the whole budget goes in its window.
    site = AnnouncedWindow(FixedWindow(limit, window), "trio")
    out = await crawl(site, 20.0, instant=True, robots=0.005)
    assert out.share >= 0.8  # 0.92 and 0.875 now
    assert out.refused == 0


# nginx's limit_req with a burst and no nodelay (the random farm's `queue` kind): rate, burst, delay=,
# refusal status, page latency, seed; the share each must keep, and what main (48e517d) got.
@pytest.mark.parametrize(("rate", "burst", "delay", "status", "latency", "seed", "share"), [
    (2.96, 8, 0, 429, 0.003, 2, 0.9),    # was 0.69: latency cuts to 6.0, 3.0, 1.5/s, and a slow climb back
    (2.21, 10, 0, 503, 0.003, 11, 0.9),  # was 0.72
    (3.72, 13, 7, 429, 0.003, 15, 0.9),  # was 0.63 (two-stage: the first 7 of the line go at once)
    (13.0, 18, 0, 429, 0.003, 1, 0.85),  # was 0.75
    (9.86, 12, 0, 429, 0.1, 0, 0.85),    # was 0.72: pages of 0.1 s behind the line
])
async def test_a_line_in_front_of_a_fixed_rate_is_paced_at_the_rate_its_answers_leave(
        rate: float, burst: int, delay: int, status: int, latency: float, seed: int, share: float) -> None:
    # The line's wait grows while the sends outrun its rate, and the latency rule read it as overload:
    # cut after cut (the backlog, not the present rate), then a climb back that took most of the crawl.
    # Its answers leave in turn one 1 / rate apart: rampup paces at that rate, drains the line's backlog
    # on the climb back to it, and keeps the line short without a refusal.
    out = await crawl(Queue(rate, burst, delay, status), 30.0, latency=latency, instant=True, robots=0.005,
                      seed=seed)
    assert out.share >= share
    assert out.refused == 0


# The same line where its pages cost nothing (nginx's static files, the simulator on loopback): a
# refusal takes as long as a page, so it is no refusal on arrival by its time. Rate, burst, delay=,
# seed; what main (55cd895) got: share / refused in 40 s.
@pytest.mark.parametrize(("rate", "burst", "delay", "seed"), [
    (15.6, 3, 2, 0),  # was 0.11 / 76: queue09 of seed 1145499104 (real HTTP: 414 of 647 refused, 0.02-0.05)
    (18.0, 1, 0, 0),  # was 0.73 / 596
    (5.0, 1, 0, 0),   # was 0.96 / 79
    (8.0, 2, 1, 0),   # was 0.94 / 54
])
async def test_a_full_lines_refusals_as_quick_as_its_pages_are_load(
        rate: float, burst: int, delay: int, seed: int) -> None:
    # Each 503 came while the latest accepted answer had waited in the line and the request sent
    # before it was still waiting: the line was full. Weighed as the site's own errors, the first was
    # judged so at once (1 of 22 outcomes), the pace doubled on, and the circuit breaker paused the
    # site for 10 s again and again. Read as the line's, they are load: rampup's cut answers them.
    out = await crawl(Queue(rate, burst, delay, 503), 40.0, latency=0.002, instant=True, robots=0.005,
                      seed=seed, refusal_as_page=True)
    assert out.share >= 0.85  # 0.875-0.94 now
    assert out.refused <= 4  # 2 now


async def test_a_hold_bounds_a_slow_bucket_with_no_burst_from_below() -> None:
    # 0.65/s, no burst, 41 s holds, pages in 3 ms: one page accepted, the start's second send refused.
    # The record says only "under 1/s", and the fit spread the rate down to 0.001/s and paced at
    # a tenth of the limit after the hold. The hold promises a send through at its end, so the rate is
    # at least one token per 41 s: the first pace is bolder, still with no second hold.
    out = await crawl(Bucket(0.65, 1.0, 41), 120.0, latency=0.003)
    assert out.share >= 0.33  # was 0.282
    assert out.refused == 1  # the start's overshoot only


@pytest.mark.parametrize(("rate", "hiccup"), [(10.0, 0.03), (29.9, 0.012)])
async def test_a_strict_bucket_that_stalls_often_spaces_the_send_after_a_late_answer(rate: float,
                                                                                     hiccup: float) -> None:
    # nginx limit_req with no burst on a loaded crawler (bench/results/real4.md): nine times in the
    # crawl a request reaches the site late, and its answer comes that much late, before the next send
    # goes. Once the first such refusal showed the site counts arrival gaps, the next send waits a gap
    # after the late arrival, not after the stamp. Was a refusal for every stall (10; 0.825 and 0.871).
    stalls = tuple(float(t) for t in range(6, 60, 6))
    out = await crawl(Bucket(rate, 1.0), 60.0, latency=0.002, hiccups=stalls, hiccup=hiccup)
    assert out.refused <= 5
    assert out.share >= 0.88
