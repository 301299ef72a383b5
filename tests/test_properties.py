"""Property-based tests: random arrivals and settings against the admission rules.

Each example runs a real Throttler on the fake clock, records when every
request arrived, was admitted and was released, and then checks the trace
with an independent reading of the rules (not with the code under test).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawlpace import Throttler
from crawlpace.testing import MockClock

EPS = 1e-9
SCOPES = ("a", "b", "c")


@dataclass(frozen=True)
class Limit:
    concurrency: int
    delay: float
    per_slot: float


@dataclass(frozen=True)
class Job:
    arrival: float
    scopes: frozenset[str]
    service: float


@dataclass
class Trace:
    job: Job
    granted: float = -1.0
    released: float = -1.0


tenths = st.integers(min_value=0, max_value=20).map(lambda n: n / 10)
limits = st.builds(Limit, st.integers(1, 4), tenths, tenths)
jobs = st.builds(
    Job,
    tenths,
    st.frozensets(st.sampled_from(SCOPES), min_size=1, max_size=3),
    st.integers(0, 30).map(lambda n: n / 10),
)
scenario = st.tuples(
    st.fixed_dictionaries({s: limits for s in SCOPES}),
    st.integers(1, 6),  # CONCURRENT_REQUESTS
    st.lists(jobs, min_size=1, max_size=24),
)


async def _run(scope_limits: dict[str, Limit], cap: int, job_list: list[Job]) -> list[Trace]:
    clock = MockClock(autojump=True)
    config = {
        "CONCURRENT_REQUESTS": cap,
        "RANDOMIZE_DOWNLOAD_DELAY": False,
        "THROTTLING_SCOPES": {
            name: {"concurrency": lim.concurrency, "delay": lim.delay, "delay_per_slot": lim.per_slot}
            for name, lim in scope_limits.items()
        },
    }
    traces = [Trace(job) for job in job_list]
    async with Throttler(config, clock=clock, rng=random.Random(0)) as throttler:

        async def one(trace: Trace) -> None:
            await clock.sleep(trace.job.arrival)
            async with throttler.slot(scopes=set(trace.job.scopes)):
                trace.granted = clock.now()
                await clock.sleep(trace.job.service)
            trace.released = clock.now()

        await asyncio.gather(*(one(t) for t in traces))
        assert throttler.inflight == 0
        assert throttler.waiting == 0
        for stats in (await throttler.stats()).values():
            assert stats.inflight == 0
    return traces


def _in_scope(traces: list[Trace], scope: str) -> list[Trace]:
    return [t for t in traces if scope in t.job.scopes]


def _admissible(traces: list[Trace], job: Job, at: float, lim: dict[str, Limit], cap: int) -> bool:
    """Could ``job`` be admitted at ``at``, given everything recorded up to ``at``?"""
    started = [t for t in traces if t.granted <= at + EPS]
    if len([t for t in started if t.released > at + EPS]) >= cap:
        return False
    for scope in job.scopes:
        rule = lim[scope]
        mine = [t for t in started if scope in t.job.scopes]
        busy = [t for t in mine if t.released > at + EPS]
        if len(busy) >= rule.concurrency:
            return False
        if mine and max(t.granted for t in mine) + rule.delay > at + EPS:
            return False
        # A slot is unusable while in flight or until delay_per_slot after its send.
        unusable = {id(t) for t in busy} | {id(t) for t in mine if t.granted + rule.per_slot > at + EPS}
        if len(unusable) >= rule.concurrency:
            return False
    return True


def _kept_for_older(traces: list[Trace], trace: Trace, at: float) -> bool:
    """Whether a request that arrived no later than ``trace`` and shares a scope waited at ``at``."""
    return any(other is not trace and other.job.arrival <= trace.job.arrival + EPS
               and other.job.scopes & trace.job.scopes
               and other.job.arrival - EPS <= at < other.granted - 1e-6 for other in traces)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario)
def test_admission_rules_hold(case: tuple[dict[str, Limit], int, list[Job]]) -> None:
    configured, cap, job_list = case
    traces = asyncio.run(_run(configured, cap, job_list))
    # CONCURRENT_REQUESTS caps each scope's own concurrency (seed 001).
    scope_limits = {
        name: Limit(min(rule.concurrency, cap), rule.delay, rule.per_slot)
        for name, rule in configured.items()
    }

    # Every request was admitted, after it arrived, and released after its service.
    for t in traces:
        assert t.granted >= t.job.arrival - EPS
        assert abs(t.released - (t.granted + t.job.service)) < 1e-6

    events = sorted({t.granted for t in traces} | {t.released for t in traces})
    for scope, rule in scope_limits.items():
        mine = sorted(_in_scope(traces, scope), key=lambda t: t.granted)
        sends = [t.granted for t in mine]
        # Never more in flight than the scope's concurrency (a release at the
        # same instant as an admission frees its slot first).
        for at in events:
            live = [t for t in mine if t.granted <= at + EPS and t.released > at + EPS]
            assert len(live) <= rule.concurrency, (scope, at)
        # Never two sends closer than the scope's delay (jitter is off).
        for earlier, later in itertools.pairwise(sends):
            assert later - earlier >= rule.delay - EPS, (scope, earlier, later)
        # Per-slot spacing: in any window of delay_per_slot, at most one send per slot.
        if rule.per_slot > 0:
            for start in sends:
                window = [s for s in sends if start - EPS <= s < start + rule.per_slot - EPS]
                assert len(window) <= rule.concurrency, (scope, start, window)

    # The global cap holds across scopes.
    for at in events:
        assert len([t for t in traces if t.granted <= at + EPS and t.released > at + EPS]) <= cap

    # Work conservation: at no moment did a request wait while all of its
    # scopes (and the global cap) would have admitted it, unless a scope was
    # kept for an older request that shares it and was still waiting (the
    # reservation that keeps multi-scope requests from starving).
    moments = set(events) | {t.job.arrival for t in traces}
    for t in traces:
        for scope in t.job.scopes:
            rule = scope_limits[scope]
            moments |= {o.granted + rule.delay for o in _in_scope(traces, scope)}
            moments |= {o.granted + rule.per_slot for o in _in_scope(traces, scope)}
    for t in traces:
        for at in moments:
            if t.job.arrival - EPS <= at < t.granted - 1e-6 and not _kept_for_older(traces, t, at):
                assert not _admissible(traces, t.job, at, scope_limits, cap), (t, at)
