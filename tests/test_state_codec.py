"""The shared state's codec (policy/state.py): the bytes stay the same, and a policy comes back the same.

The codec works from per-part plans computed once (not from the tables on each
call). These tests pin what must not move with that: the wire format (bytes
written by any crawlpace of layout 1 read the same, and this version writes the
same bytes), and the round trip of a policy with rampup's logs full, edge values
included. They pass on the table-walking codec of 0.7.0 as well.
"""

from __future__ import annotations

import math
import struct
from collections import deque
from collections.abc import Mapping

import pytest

from crawlpace._settings._config import Settings
from crawlpace.policy.admission import Limits
from crawlpace.policy.scope import ScopePolicy
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.policy.state import StateValue, decode, encode, export_state, restore_state
from crawlpace.stores._policies import PolicyFactory, dump_policy, load_policy

SCOPE = "codec.example"

#: Written by crawlpace 0.7.0's encoder (main 38200af) for EDGE below.
GOLDEN = bytes.fromhex(
    "6370010c702e67656e65726174696f6e03030d702e637261776c5f64656c6179000c702e686f6c645f756e74696c01000000"
    "000000f8bf14702e7365727665725f636f6e63757272656e637901000000000000704007722e7068617365030106722e7261"
    "74650100000000008028400a722e5f73616d706c6573020400000000000000e03f00000000000000809c7500883ce4377e00"
    "0000000000f07f07722e5f646f6f72030107622e6c6576656c030009622e6365696c696e6703ff0a6b2e5f6275636b657473"
    "02000008782e667574757265010000000000001cc006722e5f746f7001000000000000f0ff")
EDGE: dict[str, StateValue] = {
    "p.generation": 3, "p.crawl_delay": None, "p.hold_until": -1.5, "p.server_concurrency": 256,
    "r.phase": 1, "r.rate": 12.25, "r._samples": (0.5, -0.0, 1e300, math.inf), "r._door": True,
    "b.level": 0, "b.ceiling": 255, "k._buckets": (), "x.future": -7, "r._top": -math.inf}


def reference_encode(state: Mapping[str, StateValue]) -> bytes:
    """The layout as the module's docstring states it, written out plainly."""
    out = bytearray(b"cp\x01")
    for key, value in state.items():
        name = key.encode("ascii")
        out += bytes([len(name)]) + name
        if value is None:
            out.append(0)
        elif isinstance(value, tuple):
            out += bytes([2]) + struct.pack(f"<H{len(value)}d", len(value), *value)
        elif isinstance(value, int) and 0 <= value <= 255:
            out += bytes([3, int(value)])
        else:
            out += bytes([1]) + struct.pack("<d", value)
    return bytes(out)


def settings() -> Settings:
    return Settings.from_scrapy({"DOWNLOAD_DELAY": 0, "RANDOMIZE_DOWNLOAD_DELAY": False,
                                 "BREAKER_ENABLED": True, "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
                                 "THROTTLING_SCOPE_DEFAULTS": {"rampup": True}})


def learned(factory: PolicyFactory, outcomes: int = 400) -> ScopePolicy:
    """A policy after ``outcomes`` answers at 10/s on a fake clock, a refusal in 40: rampup's logs full."""
    policy = factory.new(SCOPE)
    ok = ScopeFeedback(failed=False, status=200, latency=0.12)
    slow = ScopeFeedback(failed=False, status=429, backoff=True)
    for i in range(outcomes):
        now = 1.0 + i * 0.1
        policy.gate(now, 0.0)
        policy.on_admit(now, 1.0)
        policy.on_outcome(now + 0.12, slow if i % 40 == 39 else ok, generation=policy.generation, sent_at=now,
                          expected_use=1.0)
    return policy


def test_the_bytes_are_those_of_layout_one_both_ways() -> None:
    assert encode(EDGE) == GOLDEN == reference_encode(EDGE)
    back = decode(GOLDEN)
    assert list(back) == list(EDGE)
    assert back == {**EDGE, "r._door": 1, "p.server_concurrency": 256.0, "x.future": -7.0}
    assert math.copysign(1.0, back["r._samples"][1]) == -1.0  # type: ignore[index]


def test_a_policy_with_full_logs_travels_the_same_and_in_the_same_bytes() -> None:
    make = PolicyFactory(settings())
    policy = learned(make)
    state = export_state(policy)
    assert any(isinstance(value, tuple) and len(value) >= 16 for value in state.values())  # logs full
    assert encode(state) == reference_encode(state)
    assert decode(encode(state)) == state
    blob = dump_policy(policy, make)
    back = load_policy(blob, make, SCOPE)
    assert export_state(back) == state
    assert back.limits == policy.limits
    assert back.summary() == policy.summary()
    assert dump_policy(back, make) == blob
    # The copy goes on learning as the original does.
    for p in (policy, back):
        p.gate(60.0, 0.0)
        p.on_admit(60.0, 1.0)
        p.on_outcome(60.1, ScopeFeedback(failed=False, status=200, latency=0.1), generation=p.generation,
                     sent_at=60.0, expected_use=1.0)
    assert export_state(back) == export_state(policy)


def test_edge_values_come_back_in_the_fresh_objects_types() -> None:
    make = PolicyFactory(settings())
    fresh = make.new(SCOPE)
    assert fresh.rampup is not None
    pushbacks = fresh.rampup._pushbacks
    assert isinstance(pushbacks, deque)
    state: dict[str, StateValue] = {
        "p.generation": 300.0,  # a whole number above a byte: a float on the wire, an int back
        "p.server_concurrency": 7.0,  # None when fresh: still an int
        "p.limits": (3.0, 0.25, 0.0, 0.1),  # four values (before the rest was stored)
        "p.hold_until": -math.inf,
        "r.phase": 9,  # no such word: the fresh one stays
        "r._pushbacks": 4.0,  # a number where a history belongs: the fresh one stays
        "r._ok_lat": (0.1, 0.2),
        "k._buckets": (5.0, 2.0, 1.0, 6.0),  # one whole (time, sent, failed) and a cut-off rest
        "x.unknown": 1.0,
    }
    back = restore_state(make.new(SCOPE), decode(encode(state)))
    assert back.generation == 300
    assert type(back.generation) is int
    assert back.server_concurrency == 7
    assert type(back.server_concurrency) is int
    assert back.limits == Limits(3, 0.25, 0.0, 0.1)
    assert back.hold_until == -math.inf
    assert back.rampup is not None
    assert back.rampup.phase == fresh.rampup.phase
    assert list(back.rampup._pushbacks) == list(pushbacks)
    assert list(back.rampup._ok_lat) == [0.1, 0.2]
    assert back.breaker is not None
    assert list(back.breaker._buckets) == [(5.0, 2, 1)]


def test_a_nan_in_the_bytes_leaves_the_fresh_value(caplog: pytest.LogCaptureFixture) -> None:
    blob = encode({"p.hold_until": math.nan, "r.rate": 2.0})
    assert decode(blob) == {"r.rate": 2.0}
    assert "not a number" in caplog.text


@pytest.mark.parametrize("cut", [4, 10, 20])
def test_bytes_cut_short_are_refused_not_misread(cut: int) -> None:
    from crawlpace.policy.state import StateFormatError

    with pytest.raises(StateFormatError):
        decode(GOLDEN[:cut])
