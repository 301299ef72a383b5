"""Plain scopes of the memory store: one shared policy and a success tally: fewer bytes, same rules."""

from __future__ import annotations

import gc
import random
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from crawlpace import Settings
from crawlpace.policy.breaker import Breaker
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.policy.tally import count_success, tally_is_idle
from crawlpace.stores import Lease, MemoryStore, Outcome
from crawlpace.testing import MockClock

WINDOW = 60.0


def _state(breaker: Breaker) -> tuple[object, ...]:
    return (breaker.state, breaker._buckets, breaker._total, breaker._failed, breaker._recent_n,
            breaker._recent, breaker.consecutive_failures)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=200.0), min_size=1, max_size=40),
       st.lists(st.booleans(), max_size=15))
def test_a_tally_of_successes_absorbed_is_the_breaker_those_successes_would_have_left(
        gaps: list[float], later: list[bool]) -> None:
    direct = Breaker(window=WINDOW)
    tally: tuple[float, ...] = ()
    now = 0.0
    for gap in gaps:
        # Mostly forward, sometimes out of order (a late answer of an early request).
        now = now + gap if gap < 150.0 else max(0.0, now - gap / 50.0)
        direct.on_outcome(now, failed=False, sent_at=now)
        tally = count_success(tally, now, WINDOW)
        direct_idle = direct.is_idle(now)
        assert tally_is_idle(tally, now, WINDOW) == direct_idle
    grown = Breaker(window=WINDOW)
    grown.absorb(tally)
    grown._prune(now // (WINDOW / 12))
    direct._prune(now // (WINDOW / 12))
    assert _state(grown) == _state(direct)
    for failed in later:  # from here on both are ordinary breakers and stay alike
        now += 1.0
        assert grown.on_outcome(now, failed=failed, sent_at=now) == direct.on_outcome(
            now, failed=failed, sent_at=now)
        assert _state(grown) == _state(direct)


def _settings() -> Settings:
    return Settings.from_scrapy({"DOWNLOAD_DELAY": 0.25, "DOWNLOAD_DELAY_PER_SLOT": 0.0,
                                 "RANDOMIZE_DOWNLOAD_DELAY": False, "CONCURRENT_REQUESTS_PER_DOMAIN": 2})


def _admit(store: MemoryStore, name: str, outcome: Outcome) -> bool:
    lease = store.acquire_nowait(((name, 1.0),))
    if not isinstance(lease, Lease):
        return False
    store.release_nowait(lease, outcome)
    return True


def test_a_plain_scope_opens_its_breaker_exactly_when_a_scope_with_its_own_policy_does() -> None:
    clock = MockClock()
    plain = MemoryStore(_settings(), clock, random.Random(1))
    own = MemoryStore(_settings(), clock, random.Random(1))
    own._plain_policy = lambda name: None  # type: ignore[method-assign]  # every scope gets its own
    ok, failed = Outcome(status=200, latency=0.05), Outcome(status=500, latency=0.05,
                                                          feedback=(ScopeFeedback(failed=True, status=500),))
    history = []
    for i in range(40):
        outcome = failed if i in (12, 20, 21, 22, 23, 24, 25) else ok
        admitted = [_admit(store, "a.example", outcome) for store in (plain, own)]
        assert admitted[0] == admitted[1]
        views = [store.snapshot_nowait("a.example") for store in (plain, own)]
        assert views[0] == views[1]
        history.append(views[0].breaker if views[0] else None)
        clock.advance(0.5)
    assert "open" in history  # the failures did open it, on both
    assert plain._scopes["a.example"].oks is None  # the first failure gave it a policy of its own


def test_a_plain_scope_costs_at_most_300_bytes_while_kept_and_is_forgotten_once_idle() -> None:
    clock = MockClock()
    store = MemoryStore(_settings(), clock, random.Random(1))
    ok = Outcome(status=200, latency=0.05)
    _admit(store, "warm.example", ok)
    names = [f"host-{i}.example" for i in range(2_000)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for name in names:
        assert _admit(store, name, ok)
    per_scope = (tracemalloc.get_traced_memory()[0] - before) / len(names)
    tracemalloc.stop()
    assert per_scope <= 300
    clock.advance(30.0)
    assert store.evict_idle() == 0  # their successes are still in the breaker's window
    clock.advance(WINDOW)
    assert store.evict_idle() == len(names) + 1
