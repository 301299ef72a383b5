"""The compact, versioned state of a scope policy (policy/state.py): round trips and the upgrade rule."""

from __future__ import annotations

import pickle
import struct

import pytest

from crawlpace._settings._config import Settings
from crawlpace.policy._load_errors import LoadErrors
from crawlpace.policy.admission import Limits
from crawlpace.policy.autothrottle import AutoThrottle
from crawlpace.policy.backoff import Backoff
from crawlpace.policy.breaker import Breaker
from crawlpace.policy.budget import SHARED_LIMIT, HeaderBudget, WindowLog
from crawlpace.policy.quota import QuotaBucket
from crawlpace.policy.rampup import Rampup
from crawlpace.policy.scope import ScopePolicy, ThrottlingScopeManager
from crawlpace.policy.signals import BudgetReading, CoarseReset, ScopeFeedback
from crawlpace.policy.state import (
    FIELDS,
    LAYOUT,
    SETTINGS,
    StateFormatError,
    decode,
    encode,
    export_state,
    restore_state,
)
from crawlpace.stores._policies import PolicyFactory, PolicyFormatError, dump_policy, is_fresh, load_policy

SLOW = ScopeFeedback(failed=False, status=429, backoff=True)
OK = ScopeFeedback(failed=False, status=200, latency=0.2)
FAIL = ScopeFeedback(failed=True, status=503, backoff=True)


def factory(**extra: object) -> PolicyFactory:
    return PolicyFactory(Settings.from_scrapy({"DOWNLOAD_DELAY": 0.5, "BREAKER_ENABLED": True, **extra}))


def learned(policy: ScopePolicy) -> ScopePolicy:
    """Drive ``policy`` through a backoff, a hold, a breaker tally and a Crawl-Delay."""
    policy.on_outcome(10.0, SLOW, generation=policy.generation, sent_at=9.0, expected_use=1.0)
    policy.on_outcome(11.0, ScopeFeedback(failed=False, status=503, backoff=True, hold=30.0),
                      generation=policy.generation, sent_at=10.5, expected_use=1.0)
    policy.on_outcome(12.0, OK, generation=policy.generation, sent_at=11.5, expected_use=1.0)
    policy.set_crawl_delay(2.0, max_delay=60.0, explicit=False, now=12.0)
    return policy


def test_a_learned_policy_comes_back_the_same_through_bytes() -> None:
    make = factory()
    policy = learned(make.new("a.example"))
    blob = dump_policy(policy, make)
    back = load_policy(blob, make, "a.example")
    assert export_state(back) == export_state(policy)
    assert back.limits == policy.limits
    assert back.summary() == policy.summary()
    assert back.gated == policy.gated
    assert back.jitter == policy.jitter
    assert isinstance(back.manager, ThrottlingScopeManager)
    assert back.manager.backoff.level == policy.manager.backoff.level >= 1  # type: ignore[union-attr]
    assert back.breaker is not None
    assert back.breaker.state == policy.breaker.state  # type: ignore[union-attr]
    # It goes on learning as the original would.
    for p in (policy, back):
        p.on_outcome(100.0, OK, generation=p.generation, sent_at=99.0, expected_use=1.0)
    assert export_state(back) == export_state(policy)


def test_rampup_and_quota_state_round_trip() -> None:
    make = factory(THROTTLING_SCOPE_DEFAULTS={"rampup": True, "quota": 100})
    policy = make.new("r.example")
    for i in range(30):
        now = 1.0 + i * 0.1
        policy.on_admit(now, 1.0)
        policy.on_outcome(now + 0.05, SLOW if i == 20 else OK, generation=policy.generation, sent_at=now,
                          expected_use=1.0)
    assert policy.rampup is not None
    assert policy.rampup.phase == "steady"
    back = load_policy(dump_policy(policy, make), make, "r.example")
    assert back.rampup is not None
    assert back.quota is not None
    assert back.rampup.rate == policy.rampup.rate
    assert back.rampup.phase == "steady"
    assert back.quota.remaining(5.0) == policy.quota.remaining(5.0)  # type: ignore[union-attr]
    assert export_state(back) == export_state(policy)


def test_a_given_up_scope_stays_given_up_with_a_reason() -> None:
    make = factory(BREAKER_MIN_REQUESTS=1, BREAKER_GIVE_UP_AFTER=1, BREAKER_PAUSE=1.0)
    policy = make.new("g.example")
    now = 0.0
    while not policy.given_up and now < 100.0:
        now += 1.0
        policy.gate(now, 0.0)
        if policy.breaker is not None:
            policy.breaker.on_send(now)
        policy.on_outcome(now, FAIL, generation=policy.generation, sent_at=now, expected_use=0.0)
    assert policy.given_up
    back = load_policy(dump_policy(policy, make), make, "g.example")
    assert back.given_up
    assert back.breaker is not None
    assert back.breaker.reason


def test_the_bytes_are_compact() -> None:
    make = factory()
    blob = dump_policy(learned(make.new("a.example")), make)
    assert blob[:3] == b"cp" + bytes([LAYOUT])
    # A backoff (with the times of its last answers, up to 16), a hold, a Crawl-Delay, a breaker tally,
    # and the verdict on its 5xx (11 numbers, each with its name: about 200 bytes).
    assert len(blob) < 400 + 8 * 16 + 200, len(blob)
    assert len(dump_policy(make.new("fresh.example"), make)) == 3


def test_a_fresh_policy_is_fresh_and_a_learned_one_is_not() -> None:
    make = factory()
    assert is_fresh(make.new("a.example"), make)
    assert not is_fresh(learned(make.new("a.example")), make)


def test_unknown_fields_are_ignored_and_missing_ones_keep_the_fresh_value() -> None:
    make = factory()
    state = export_state(learned(make.new("a.example")))
    state["b.some_future_field"] = 7.0  # a newer version added this
    del state["p.pace"]  # an older version did not have this
    back = restore_state(make.new("a.example"), decode(encode(state)))
    assert back.pace == make.new("a.example").pace
    assert back.manager is not None
    assert back.manager.generation == state["b.generation"]
    assert not hasattr(back.manager, "some_future_field")


def test_a_newer_layout_is_refused_clearly() -> None:
    blob = bytearray(encode({"p.generation": 3}))
    blob[2] = LAYOUT + 1
    with pytest.raises(StateFormatError, match=r"layout 2, written by a newer crawlpace.*upgrade"):
        decode(bytes(blob))
    with pytest.raises(PolicyFormatError, match="newer crawlpace"):
        load_policy(bytes(blob), factory(), "a.example")


def test_an_old_pickle_and_garbage_are_refused() -> None:
    make = factory()
    with pytest.raises(PolicyFormatError, match=r"a pickle \(crawlpace 0.6"):
        load_policy(pickle.dumps({"x": 1}), make, "a.example")
    with pytest.raises(StateFormatError, match="not crawlpace state"):
        decode(b"hello")
    with pytest.raises(StateFormatError, match="cut short"):
        decode(encode({"p.pace": 1.5})[:-3])
    with pytest.raises(StateFormatError, match="unknown kind"):
        decode(b"cp\x01\x01x\x09")


def test_a_word_outside_the_list_is_left_out_not_a_crash(caplog: pytest.LogCaptureFixture) -> None:
    make = factory(THROTTLING_SCOPE_DEFAULTS={"rampup": True})
    policy = make.new("r.example")
    assert policy.rampup is not None
    policy.rampup.phase = "warp"
    state = export_state(policy)
    assert "r.phase" not in state
    assert "WORDS" in caplog.text
    state["r.phase"] = 99
    assert restore_state(make.new("r.example"), state).rampup.phase == "start"  # type: ignore[union-attr]


def test_numbers_keep_their_types() -> None:
    state = decode(encode({"a": 3, "b": 2.5, "c": None, "d": (1.0, 2.0), "e": 1000}))
    assert state == {"a": 3, "b": 2.5, "c": None, "d": (1.0, 2.0), "e": 1000.0}
    assert struct.calcsize("<d") == 8


@pytest.mark.parametrize(("prefix", "cls"), [("p", ScopePolicy), ("b", Backoff), ("a", AutoThrottle),
                                             ("q", QuotaBucket), ("k", Breaker), ("r", Rampup),
                                             ("h", HeaderBudget), ("e", LoadErrors), ("w", WindowLog)])
def test_every_attribute_of_a_policy_is_either_shared_state_or_a_setting(prefix: str, cls: type) -> None:
    slots = {name for part in cls.__mro__ for name in getattr(part, "__slots__", ())}  # Rampup: its state too
    state, settings = set(FIELDS[prefix]), set(SETTINGS[prefix])
    unclassified = slots - state - settings
    assert not unclassified, (
        f"{cls.__name__} has attributes policy/state.py does not know: {sorted(unclassified)}. Add each "
        f"to FIELDS[{prefix!r}] if it is learned state other workers must share (a number, None, a "
        f"word listed in WORDS, or numbers in a sequence), or to SETTINGS[{prefix!r}] if it comes from "
        "the settings or is derived")
    assert not (state & settings)
    assert (state | settings) <= slots, sorted((state | settings) - slots)


def test_a_learned_budget_window_travels_to_another_worker() -> None:
    make = factory()
    policy = make.new("a.example")
    reading = BudgetReading(remaining=7.0, quota=8.0, window=1.0, span=1.0)
    policy.on_outcome(1.0, ScopeFeedback(status=200, budget=reading), generation=0, sent_at=0.999,
                      expected_use=1.0)
    policy.on_outcome(1.2, ScopeFeedback(status=200, budget=BudgetReading(8.0 - 1.0, 8.0, 1.0, 1.0)),
                      generation=0, sent_at=1.1, expected_use=1.0)  # the count went up: a new window
    assert policy.budget is not None
    state = decode(encode(export_state(policy)))
    other = restore_state(make.new("a.example"), state)
    assert other.budget is not None
    assert (other.budget.edge_lo, other.budget.edge_hi) == (policy.budget.edge_lo, policy.budget.edge_hi)
    assert other.budget.window == 1.0


def test_a_window_log_travels_to_another_worker_up_to_its_shared_limit() -> None:
    # A fleet's window log is one log of every worker's answers (policy/budget.py WindowLog): its
    # answers, the accepted (sent, answered) pairs and the length learned travel with the state.
    make = factory()
    policy = make.new("a.example")
    for sent, answered, left in ((0.0, 0.1, 2.0), (0.5, 0.6, 1.0), (1.0, 1.1, 0.0)):
        coarse = CoarseReset(remaining=left, limit=3.0, reset=4.0 - answered)
        policy.on_outcome(answered, ScopeFeedback(status=200, coarse=coarse), generation=0, sent_at=sent,
                          expected_use=1.0)
    log = policy.window_log
    assert log is not None
    assert log.accepted
    other = restore_state(make.new("a.example"), decode(encode(export_state(policy))))
    assert other.window_log is not None
    assert list(other.window_log.accepted) == list(log.accepted)
    assert list(other.window_log.answers) == list(log.answers)
    assert (other.window_log.lo, other.window_log.hi) == (log.lo, log.hi)
    assert other.gated
    # A budget of thousands would write kilobytes per answer: such a log stays with its worker.
    log.limit = SHARED_LIMIT + 1.0
    assert not any(key.startswith("w.") for key in export_state(policy))


def test_a_server_announced_concurrency_travels_as_a_whole_number() -> None:
    make = factory()
    policy = make.new("a.example")
    policy.on_outcome(1.0, ScopeFeedback(failed=False, status=200, concurrency=3), generation=0, sent_at=0.5,
                      expected_use=1.0)
    assert policy.server_concurrency == 3
    back = load_policy(dump_policy(policy, make), make, "a.example")
    assert back.server_concurrency == 3
    assert isinstance(back.server_concurrency, int)
    assert back.limits == policy.limits


def test_the_verdict_on_errors_and_the_rest_after_an_answer_travel_to_another_worker() -> None:
    # One judgement of a scope's errors for a fleet (policy/_load_errors.py), and the rest a slot takes
    # after its answer (Limits.rest), which the Redis release applies from the stored limits.
    make = factory()
    policy = make.new("e.example")
    errors = policy.load_errors = LoadErrors()
    errors.plain, errors.share, errors.tolerable, errors.recent, errors.recent_n = True, 0.14, 0.2, 0b1011, 4
    policy.limits = Limits(3, 0.1, 0.0, 0.0, rest=0.08)
    back = load_policy(dump_policy(policy, make), make, "e.example")
    assert back.load_errors is not None
    assert (back.load_errors.plain, back.load_errors.share, back.load_errors.tolerable) == (True, 0.14, 0.2)
    assert (back.load_errors.recent, back.load_errors.recent_n) == (0b1011, 4)
    assert back.limits.rest == 0.08
    assert export_state(back) == export_state(policy)
    # A policy without errors has no verdict, and a blob written before the rest existed reads as none.
    assert load_policy(dump_policy(make.new("f.example"), make), make, "f.example").load_errors is None
    state = export_state(policy)
    state["p.limits"] = (3.0, 0.1, 0.0, 0.0)
    assert restore_state(make.new("e.example"), state).limits == Limits(3, 0.1, 0.0, 0.0)
