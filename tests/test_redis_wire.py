"""What the shared store puts on the wire: the batch's bytes, and how little a usual admission sends.

Each value a script call carries costs the server about as much as reading a
hash field (``bench/redis_instructions.py``), so the store leaves out what a
script would read as empty. These tests pin that down: the packing of a batch,
the short form of a usual release, the full form wherever a value is needed,
and that the server reads the short form as the full one.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from crawlpace import Settings
from crawlpace.policy.admission import Limits
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Blocked, Lease, Outcome, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.stores.redis._batch import pack, pack_each
from crawlpace.testing import MockClock

from .redis_server import delivered

SETTINGS = Settings.from_scrapy({
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "THROTTLING_SCOPES": {
        "plain": {"concurrency": 4, "delay": 0.0, "delay_per_slot": 0.0},
        "one": {"concurrency": 1, "delay": 0.0, "delay_per_slot": 0.0},
        "paced": {"concurrency": 4, "delay": 0.0, "delay_per_slot": 2.0},
        "q": {"concurrency": 2, "delay": 0.0, "delay_per_slot": 0.0, "quota": 10.0, "window": 100.0},
    },
})


@pytest.mark.parametrize("command", [
    ("EVALSHA", "f00d", "2", "k1", "k2", "0.5", ""),  # all text: the one-pass path
    ("EVALSHA", "f00d", 2, "k1", 1.5, 3),  # numbers are formatted first
    ("EVALSHA", "f00d", "1", b"raw\r\nbytes", "x"),  # bytes: argument by argument
    ("SET", "clé", "välue"),  # not ASCII: lengths in bytes, not characters
])
def test_a_batch_packs_as_each_command_would_alone(command: tuple[Any, ...]) -> None:
    assert pack([command]) == pack_each(command)
    assert pack([command, command]) == pack_each(command) * 2


def _spy(store: RedisStore) -> list[tuple[str, list[str], list[Any]]]:
    """Record every script call the store queues on its connection."""
    calls: list[tuple[str, list[str], list[Any]]] = []
    connection = store.connection
    submit = connection.submit

    def recording(name: str, keys: Any, args: Any) -> Any:
        calls.append((name, list(keys), list(args)))
        return submit(name, keys, args)

    connection.submit = recording  # type: ignore[method-assign]
    return calls


@pytest.mark.redis
async def test_a_usual_release_sends_its_short_form_and_counts_in_full(redis_url: str) -> None:
    store = open_store(f"{redis_url}&time=local", SETTINGS, MockClock(), random.Random(1))
    assert isinstance(store, RedisStore)
    try:
        calls = _spy(store)
        for latency in (1.0, 3.0):
            lease = await store.acquire((("plain", 1.0),))
            assert isinstance(lease, Lease)
            await store.release(lease, Outcome(status=200, latency=latency))
        await delivered(store)
        acquire = next(call for call in calls if call[0] == "acquire")
        release = next(call for call in calls if call[0] == "release")
        # An acquire without quota: no empty quota values; a release with nothing to write back,
        # no resting slot and no quota: 4 head values and 5 of its scope, 2 keys of 4. The acquire's
        # scope sends its copy's policy version too, and its policy key, so that a reply carries a
        # newer policy and no read follows a stale grant (bench/results/calls3.md): 7 values, 4 keys.
        assert (len(acquire[1]), len(acquire[2])) == (4, 5 + 7)
        assert (len(release[1]), len(release[2])) == (2, 4 + 5)
        snap = await store.snapshot("plain")
        assert snap is not None
        assert (snap.sends, snap.responses, snap.errors, snap.inflight) == (2, 2, 0, 0)
        assert snap.last_latency == 3.0
        assert snap.mean_latency == pytest.approx(1.4)  # 1.0, then a fifth of the way to 3.0
    finally:
        await store.aclose()


@pytest.mark.redis
async def test_a_release_sends_every_value_it_needs(redis_url: str) -> None:
    store = open_store(f"{redis_url}&time=local", SETTINGS, MockClock(), random.Random(1))
    assert isinstance(store, RedisStore)
    try:
        calls = _spy(store)
        lease = await store.acquire((("paced", 1.0), ("q", 1.0)))
        assert isinstance(lease, Lease)
        # Scope "paced" rests its slot (all four keys go), scope "q" is charged 2 more quota units.
        plain = ScopeFeedback(failed=False, status=200)
        used = ScopeFeedback(failed=False, status=200, consumed_quota=3.0)
        await store.release(lease, Outcome(status=200, latency=0.5, feedback=(plain, used)))
        await delivered(store)
        release = next(call for call in calls if call[0] == "release")
        assert len(release[1]) == 8
        assert len(release[2]) == 4 + 19 + 19
        assert release[2][-3:] != ["", "", ""]
        paced, quota = await store.snapshot("paced"), await store.snapshot("q")
        assert paced is not None
        assert quota is not None
        assert (paced.inflight, paced.resting, paced.responses) == (0, 1, 1)
        # A bucket of 1 unit: 1 expected at admission, 2 more charged at release (the clock stood still).
        assert quota.quota_remaining == pytest.approx(-2.0)
    finally:
        await store.aclose()



@pytest.mark.redis
async def test_a_released_slot_rests_the_stored_rest_after_its_answer(redis_url: str) -> None:
    # A cap that frees its slot a moment after the answer (Limits.rest, learned by rampup): the release
    # script rests the slot that long from the release, by the rule the memory store applies
    # (_shared_rules.rested), for every worker: before, a fleet's slot was free at once.
    clock = MockClock()
    store = open_store(f"{redis_url}&time=local", SETTINGS, clock, random.Random(1))
    other = open_store(f"{redis_url}&time=local", SETTINGS, clock, random.Random(2))
    assert isinstance(store, RedisStore)
    try:
        lease = await store.acquire((("one", 1.0),))
        assert isinstance(lease, Lease)
        policy = store._policies.policy("one")
        policy.limits = Limits(1, 0.0, 0.0, 0.0, rest=0.25)
        assert await store._writer.write("one", store._policies.entry("one").version, policy, clock.now())
        clock.advance(1.0)
        await store.release(lease, Outcome(status=200, latency=1.0))
        await delivered(store)
        blocked = await other.acquire((("one", 1.0),))
        assert isinstance(blocked, Blocked)
        assert blocked.ready_at == pytest.approx(clock.now() + 0.25)
        clock.advance(0.25)
        assert isinstance(await other.acquire((("one", 1.0),)), Lease)
    finally:
        await store.aclose()
        await other.aclose()
