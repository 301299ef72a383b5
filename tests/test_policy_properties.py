"""Property-based tests of a scope's adaptive policy under arbitrary feedback."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from crawlpace import AutoThrottleConfig, BackoffConfig, ScopeConfig, ScopeFeedback
from crawlpace.policy.scope import ScopePolicy


@dataclass(frozen=True)
class Event:
    advance: float
    feedback: ScopeFeedback | None
    stale: bool


feedbacks = st.builds(
    ScopeFeedback,
    backoff=st.booleans(),
    failed=st.booleans(),
    hold=st.none() | st.floats(min_value=0.0, max_value=300.0),
    pace=st.none() | st.floats(min_value=0.0, max_value=300.0),
    pace_for=st.floats(min_value=0.0, max_value=300.0),
    latency=st.none() | st.floats(min_value=0.0, max_value=1e6),
    status=st.none() | st.sampled_from([200, 301, 404, 429, 500, 503]),
)
events = st.builds(Event, advance=st.floats(min_value=0.0, max_value=500.0),
                   feedback=st.none() | feedbacks, stale=st.booleans())


@settings(max_examples=120, deadline=None)
@given(
    concurrency=st.integers(min_value=1, max_value=32),
    delay=st.floats(min_value=0.0, max_value=10.0),
    factor=st.floats(min_value=1.0, max_value=4.0),
    max_delay=st.floats(min_value=10.0, max_value=600.0),
    autothrottle=st.booleans(),
    crawl_delay=st.none() | st.floats(min_value=0.0, max_value=1e9),
    history=st.lists(events, max_size=60),
)
def test_limits_stay_within_their_bounds(concurrency: int, delay: float, factor: float,
                                         max_delay: float, autothrottle: bool,
                                         crawl_delay: float | None, history: list[Event]) -> None:
    config = ScopeConfig(concurrency=concurrency, delay=delay, delay_per_slot=0.0,
                         backoff=BackoffConfig(delay_factor=factor, max_delay=max_delay))
    at = AutoThrottleConfig(enabled=autothrottle, max_delay=60.0)
    policy = ScopePolicy("s", config, concurrency_cap=64, autothrottle=at)
    now = 0.0
    if crawl_delay is not None:
        policy.set_crawl_delay(crawl_delay, max_delay=60.0, explicit=False, now=now)
    # Every delay input the policy may take is bounded; the result must be too.
    ceiling = max(delay, max_delay, 60.0, 300.0)
    for event in history:
        now += event.advance
        generation = policy.generation - (1 if event.stale else 0)
        policy.on_admit(now, 1.0)
        policy.on_outcome(now, event.feedback, generation=generation, sent_at=now, expected_use=1.0)
        policy.refresh(now)
        limits = policy.limits
        assert 1 <= limits.concurrency <= concurrency
        assert delay <= limits.delay <= ceiling
        assert 0.0 <= limits.floor <= limits.delay
        assert policy.hold_until <= now + 300.0
        gate = policy.gate(now, 1.0)
        assert gate is None or gate <= now + max(300.0, config.breaker.pause) or policy.given_up


@settings(max_examples=100, deadline=None)
@given(bursts=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=12))
def test_one_level_per_generation_however_large_the_burst(bursts: list[int]) -> None:
    config = ScopeConfig(concurrency=64, delay=0.0, backoff=BackoffConfig(max_delay=1e6))
    policy = ScopePolicy("s", config, concurrency_cap=64)
    now = 0.0
    for size in bursts:
        # Every request of a burst was sent under the same generation.
        generation = policy.generation
        for _ in range(size):
            policy.on_outcome(now, ScopeFeedback(backoff=True, status=429), generation=generation,
                              sent_at=now, expected_use=1.0)
        now += 1.0
    assert policy.generation == len(bursts)
    assert policy.limits.delay == 2.0 ** (len(bursts) - 1)
