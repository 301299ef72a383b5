"""One source for each rule the Python side and the Lua scripts share (issue 35 item 2).

The scripts' argument layouts are named in ``stores/redis/_script_args.py``: each
script carries the same names in a comment block, and its code reads the
per-scope values at the strides and offsets the layout gives. The weights of
the moving means and the quota's refill come from ``policy/_shared_rules.py``,
prepended to the scripts at load time; run on a real server, the Lua gives
what the Python gives.
"""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from crawlpace.policy import quota
from crawlpace.policy._shared_rules import GAP_WEIGHT, LATENCY_WEIGHT, due_at, refill, rested, spacing
from crawlpace.stores.redis._lua import CLOCK, load_scripts
from crawlpace.stores.redis._script_args import ACQUIRE, LAYOUTS, RELEASE, Layout

from .redis_server import RedisServer


def _source(name: str) -> str:
    return resources.files("crawlpace.stores").joinpath("lua", f"{name}.lua").read_text("utf-8")


def _code(name: str) -> str:
    """The script without its comments."""
    return "\n".join(line for line in _source(name).splitlines() if not line.lstrip().startswith("--"))


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=list(LAYOUTS))
def test_each_script_names_its_arguments_as_the_layout_does(layout: Layout) -> None:
    lines = _source(layout.script).splitlines()
    start = lines.index(layout.comment()[0])
    assert lines[start:start + len(layout.comment())] == layout.comment()


@pytest.mark.parametrize("layout", [ACQUIRE, RELEASE], ids=["acquire", "release"])
def test_the_code_reads_each_scope_at_the_layouts_stride(layout: Layout) -> None:
    code = _code(layout.script)
    head, each = len(layout.head), len(layout.each)
    assert re.findall(r"local base = (\d+) \+ (\d+) \* \(i - 1\)", code) == [(str(head), str(each))]
    # The tail starts right after the last scope's values.
    assert re.findall(r"ARGV\[(\d+) \+ (\d+) \* n\]", code) == [(str(head + 1), str(each))]
    read = {int(k) for k in re.findall(r"ARGV\[base \+ (\d+)\]", code)}
    assert read == set(range(1, each + 1)), "every value of a scope is read, and none beyond them"


def test_the_callers_split_a_cluster_call_by_the_same_layout() -> None:
    from crawlpace.stores.redis import _cluster
    acquire = (_cluster.ACQUIRE_HEAD, _cluster.ACQUIRE_EACH, _cluster.ACQUIRE_KEYS)
    release = (_cluster.RELEASE_HEAD, _cluster.RELEASE_EACH, _cluster.RELEASE_KEYS)
    assert acquire == (len(ACQUIRE.head), len(ACQUIRE.each), len(ACQUIRE.keys))
    assert release == (len(RELEASE.head), len(RELEASE.each), len(RELEASE.keys))
    assert RELEASE.at(1, "free") == len(RELEASE.head) + len(RELEASE.each) + 1


def test_the_store_scripts_hold_no_weight_of_their_own() -> None:
    for name in ("acquire", "release", "allot"):
        code = _code(name)
        assert not re.search(r"\b0\.(2|25|8)\b", code), name
        assert "math.min(qcap, credit + qrate" not in code, name  # the refill is refill()
    loaded = load_scripts("crawlpace.stores", ("acquire",), clocked=("acquire",))["acquire"]
    assert loaded.startswith(CLOCK)
    assert f"local LATENCY_WEIGHT = {LATENCY_WEIGHT!r}" in CLOCK
    assert f"local GAP_WEIGHT = {GAP_WEIGHT!r}" in CLOCK


def test_rampup_measures_its_send_rate_with_the_shared_gap_weight() -> None:
    # policy/_rampup_sends.py (rampup's own file, being reworked apart) keeps its own name for it;
    # once it imports GAP_WEIGHT this test can go.
    sends = pytest.importorskip("crawlpace.policy._rampup_sends")
    assert getattr(sends, "SENT_WEIGHT", GAP_WEIGHT) == GAP_WEIGHT


def test_the_quota_refills_by_the_shared_rule() -> None:
    bucket = quota.QuotaBucket(100.0, 60.0)
    bucket.consume(10.0, 8.0)
    for now in (5.0, 10.0, 10.5, 12.0, 1e6):
        assert bucket.remaining(now) == refill(bucket.capacity - 8.0, 10.0, bucket.capacity, bucket.rate, now)


def test_lua_applies_the_rules_as_python_does(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    try:
        script = CLOCK + """
local credit, at = refill(tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), now)
return {num(credit), num(at), num(LATENCY_WEIGHT), num(GAP_WEIGHT)}
"""
        cases = [  # now, credit, at, capacity, rate
            (10.0, 3.0, 4.0, 10.0, 0.5), (10.0, -2.5, 9.0, 10.0, 1.5), (4.0, 3.0, 4.0, 10.0, 0.5),
            (3.0, 3.0, 4.0, 10.0, 0.5), (100.0, 1.0, 2.0, 6.0, 0.25), (7.0, 0.125, 6.9, 1e9, 3.3),
        ]
        for now, credit, at, capacity, rate in cases:
            reply = client.eval(script, 0, repr(now), repr(credit), repr(at), repr(capacity), repr(rate))
            got = [float(x) for x in reply]
            assert got[0] == refill(credit, at, capacity, rate, now)
            assert got[1] == max(now, at)
            assert got[2:] == [LATENCY_WEIGHT, GAP_WEIGHT]
        # No state stored: a full bucket as of now.
        reply = client.eval(script, 0, "5", "", "", "10", "1")
        assert [float(x) for x in reply[:2]] == [10.0, 5.0]
    finally:
        client.close()


def test_lua_rests_a_released_slot_as_python_does(redis_server: RedisServer) -> None:
    # policy/admission.py's release and release.lua rest a slot by one rule (Limits.rest).
    client = redis.Redis.from_url(redis_server.url)
    try:
        script = CLOCK + "return num(rested(tonumber(ARGV[2]), now, tonumber(ARGV[3])))"
        for now, ready, rest in [(10.0, 9.0, 0.25), (10.0, 10.5, 0.25), (10.0, 10.1, 0.25), (10.0, 9.0, 0.0),
                                 (10.0, 12.0, 0.0), (3.5, 3.0, 0.125)]:
            got = float(client.eval(script, 0, repr(now), repr(ready), repr(rest)))
            assert got == rested(ready, now, rest)
        # No rest stored (a policy written before it existed): the slot's own readiness.
        assert float(client.eval(script, 0, "10", "9.5", "")) == 9.5
    finally:
        client.close()


def test_lua_counts_a_sends_gap_as_python_does(redis_server: RedisServer) -> None:
    # Rampup's own record (policy/_rampup_sends.py) and acquire.lua count a send's gap by one rule: from
    # when the scope's pace let it go, or its lateness if longer; from the previous send when not known.
    client = redis.Redis.from_url(redis_server.url)
    try:
        script = CLOCK + "return string.format('%.17g', spacing(now, tonumber(ARGV[2]), tonumber(ARGV[3])))"
        for now, last, due in [(10.025, 10.0, 10.01), (10.03, 10.0, 10.01), (10.0, 9.0, 9.5),
                               (10.0, 9.0, 10.0), (10.0, 9.0, 10.5), (10.0, 9.0, 8.0), (10.0, 9.0, 9.0),
                               (100.0, 9.0, 9.1)]:
            got = float(client.eval(script, 0, repr(now), repr(last), repr(due)))
            assert got == spacing(now, last, due)
        assert spacing(10.025, 10.0, 10.01) == pytest.approx(0.015)  # 15 ms late after a 10 ms gap
        assert spacing(10.015, 10.0, 10.01) == pytest.approx(0.01)  # 5 ms late: the gap it was due at
        assert spacing(100.0, 9.0, 9.1) == pytest.approx(90.9)  # idle: its lateness is the gap
        # Not known (no "next" stored): from the previous send.
        assert float(client.eval(script, 0, "10", "9.25", "")) == 0.75 == spacing(10.0, 9.25, None)
    finally:
        client.close()


def test_lua_tells_when_a_send_was_due_as_python_does(redis_server: RedisServer) -> None:
    # The memory store and acquire.lua tell by one rule whether a send's due time counts (spacing).
    client = redis.Redis.from_url(redis_server.url)
    try:
        script = CLOCK + ("local due = due_at(tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))\n"
                          "if due == nil then return '' end return string.format('%.17g', due)")
        for taken, concurrency in ((0, 4), (2, 4), (3, 4), (0, 1), (5, 4)):
            got = client.eval(script, 0, "0", "12.5", str(taken), str(concurrency))
            want = due_at(12.5, taken, concurrency)
            assert (None if got == b"" else float(got)) == want
        assert due_at(12.5, 2, 4) == 12.5  # a slot to spare: the pace let it go
        assert due_at(12.5, 3, 4) is None  # the last free slot: it may have waited for the slot
    finally:
        client.close()

