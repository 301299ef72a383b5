"""The pure admission state machine, driven by hand-picked times."""

from __future__ import annotations

import pytest

from crawlpace.policy import Limits, ScopeState


def test_seed_timeline_on_the_bare_state() -> None:
    # Seed 001: concurrency 2, delay 0.3, per-slot 1.0; responses arrive fast.
    state = ScopeState(Limits(concurrency=2, delay=0.3, delay_per_slot=1.0))
    assert state.ready_at(0.0) == float("-inf")
    slot1 = state.admit(0.0)
    state.release(slot1, 0.1)
    assert state.ready_at(0.1) == pytest.approx(0.3)
    slot2 = state.admit(0.3)
    state.release(slot2, 0.4)
    # Request 3: the scope delay allows 0.6, but both slots rest until 1.0 / 1.3.
    assert state.ready_at(0.6) == pytest.approx(1.0)
    state.admit(1.0)
    assert state.sends == 3


def test_full_scope_has_no_ready_time_until_a_release() -> None:
    state = ScopeState(Limits(concurrency=2, delay=0.0, delay_per_slot=0.0))
    a = state.admit(0.0)
    state.admit(0.0)
    assert state.ready_at(5.0) is None
    state.release(a, 5.0)
    assert state.ready_at(5.0) == 0.0  # delay 0: ready since the last send


def test_per_slot_delay_counts_from_the_send_not_the_response() -> None:
    state = ScopeState(Limits(concurrency=1, delay=0.0, delay_per_slot=1.0))
    slot = state.admit(10.0)
    state.release(slot, 10.9)  # slow response: only 0.1 s of rest left
    assert state.ready_at(10.9) == pytest.approx(11.0)
    slot = state.admit(11.0)
    state.release(slot, 13.0)  # response after the per-slot delay: ready at once
    assert state.ready_at(13.0) == pytest.approx(11.0)


def test_a_rest_after_the_answer_holds_the_slot_past_its_release() -> None:
    # A cap that frees a slot 80 ms after its answer: the slot rests that long from the answer, the
    # per-slot delay (counted from the send) still holds where it ends later.
    state = ScopeState(Limits(concurrency=2, delay=0.0, delay_per_slot=0.5, rest=0.08))
    a = state.admit(0.0)
    b = state.admit(0.0)
    state.release(a, 0.3)  # the per-slot delay ends at 0.5, after the rest
    state.release(b, 0.6)  # the rest ends at 0.68
    ready = state.ready_at(0.6)
    assert ready is not None
    assert ready <= 0.6  # the first slot rested till 0.5
    state.admit(0.6)
    assert state.ready_at(0.6) == pytest.approx(0.68)


def test_jitter_factor_scales_both_delays_of_the_send() -> None:
    state = ScopeState(Limits(concurrency=1, delay=2.0, delay_per_slot=4.0))
    slot_ready = state.admit(0.0, factor=0.5)
    assert slot_ready == 2.0
    assert state.next_send == 1.0


def test_lowering_concurrency_retires_resting_slots() -> None:
    state = ScopeState(Limits(concurrency=3, delay=0.0, delay_per_slot=10.0))
    slots = [state.admit(t) for t in (0.0, 1.0, 2.0)]
    for slot in slots:
        state.release(slot, 3.0)
    assert state.resting == 3
    state.set_limits(Limits(concurrency=1, delay=0.0, delay_per_slot=10.0))
    assert state.resting == 1
    # The slot kept is the one that wakes first.
    assert state.ready_at(3.0) == 10.0


def test_lowering_concurrency_below_inflight_waits_for_releases() -> None:
    state = ScopeState(Limits(concurrency=3, delay=0.0, delay_per_slot=0.0))
    leases = [state.admit(0.0) for _ in range(3)]
    state.set_limits(Limits(concurrency=1, delay=0.0, delay_per_slot=0.0))
    state.release(leases[0], 1.0)
    assert state.ready_at(1.0) is None  # still 2 in flight against 1 slot
    state.release(leases[1], 1.0)
    assert state.ready_at(1.0) is None
    state.release(leases[2], 1.0)
    assert state.ready_at(1.0) is not None


def test_resting_slots_beyond_a_lower_limit_delay_the_next_send() -> None:
    state = ScopeState(Limits(concurrency=2, delay=0.0, delay_per_slot=5.0))
    first = state.admit(0.0)
    second = state.admit(1.0)
    state.release(first, 2.0)
    state.release(second, 2.0)
    # Both slots rest (until 5 and 6); with 2 slots, the first wakes at 5.
    assert state.ready_at(2.0) == 5.0


def test_a_new_delay_counts_from_the_last_send_both_ways() -> None:
    state = ScopeState(Limits(concurrency=2, delay=1.0, delay_per_slot=0.0))
    state.admit(10.0)
    state.set_limits(Limits(concurrency=2, delay=0.25, delay_per_slot=0.0))
    assert state.ready_at(10.1) == 10.25  # not the 11.0 the old delay scheduled
    state.set_limits(Limits(concurrency=2, delay=3.0, delay_per_slot=0.0))
    assert state.ready_at(10.1) == 13.0
    # A floor (Crawl-Delay, a server's pace) still holds under a shorter delay.
    state.set_limits(Limits(concurrency=2, delay=0.1, delay_per_slot=0.0, floor=2.0))
    assert state.ready_at(10.1) == 12.0


def test_a_shorter_per_slot_delay_wakes_resting_slots_sooner() -> None:
    state = ScopeState(Limits(concurrency=1, delay=0.0, delay_per_slot=1.0))
    state.release(state.admit(10.0), 10.05)
    assert state.ready_at(10.1) == 11.0
    state.set_limits(Limits(concurrency=1, delay=0.0, delay_per_slot=0.25))
    assert state.ready_at(10.1) == 10.25


def test_a_shorter_per_slot_delay_keeps_the_jitter_in_proportion() -> None:
    # A jittered rest of 1.04 s under a 1 s per-slot delay (robots.txt's slot, at the starting
    # delay): under 0.01 s it rests 0.0104 s, not the 0.05 s the old delay's jitter left
    # when the shift alone was taken off.
    state = ScopeState(Limits(concurrency=1, delay=0.0, delay_per_slot=1.0))
    state.release(state.admit(0.0, factor=1.04), 0.005)
    assert state.ready_at(0.005) == pytest.approx(1.04)
    state.set_limits(Limits(concurrency=1, delay=0.0, delay_per_slot=0.01))
    assert state.ready_at(0.005) == pytest.approx(0.0104)
    # A slot sent before the latest send wakes no sooner than its own send under the new
    # delay (0.416 for the one sent at 0 with the same jitter): here the shift is the sooner.
    state = ScopeState(Limits(concurrency=2, delay=0.0, delay_per_slot=1.0))
    early, late = state.admit(0.0, factor=1.04), state.admit(0.5)
    state.release(early, 0.6)
    state.release(late, 0.6)
    state.set_limits(Limits(concurrency=2, delay=0.0, delay_per_slot=0.4))
    assert sorted(state._resting or []) == pytest.approx([1.04 - 0.6, 0.5 + 0.4])
    assert min(state._resting or []) >= 0.4 * 1.04


def test_idle_only_when_nothing_pending() -> None:
    state = ScopeState(Limits(concurrency=1, delay=1.0, delay_per_slot=2.0))
    assert state.is_idle(0.0)
    slot = state.admit(0.0)
    assert not state.is_idle(0.5)  # in flight
    state.release(slot, 0.5)
    assert not state.is_idle(1.5)  # the slot rests until 2.0
    assert state.is_idle(2.0)


def test_repr_shows_the_state() -> None:
    state = ScopeState(Limits(concurrency=4, delay=0.5, delay_per_slot=1.0))
    state.admit(0.0)
    assert repr(state) == "<ScopeState inflight=1/4 delay=0.5s per_slot=1s resting=0 sends=1>"
