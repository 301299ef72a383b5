"""The store contract, run against every store: memory, and a real redis-server."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from crawlpace import ConfigError, QuotaError, Settings
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Blocked, Lease, MemoryStore, Outcome, Store, open_store
from crawlpace.stores.redis import RedisStore
from crawlpace.testing import MockClock

from .redis_cluster import RedisCluster
from .redis_server import RedisServer, delivered

StoreMaker = Callable[[Settings, MockClock], Store]

SETTINGS = Settings.from_scrapy({
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "THROTTLING_SCOPES": {
        "a": {"concurrency": 2, "delay": 0.5, "delay_per_slot": 1.0},
        "b": {"concurrency": 1, "delay": 0.0, "delay_per_slot": 0.0},
        "brk": {"concurrency": 2, "delay": 0.0, "delay_per_slot": 0.0,
                "breaker": {"min_requests": 3, "error_share": 0.1, "pause": 10.0, "give_up_after": 2}},
        # Eight slots, no delay, no backoff jitter: a burst's first cut is exact.
        "burst": {"concurrency": 8, "delay": 0.0, "delay_per_slot": 0.0, "backoff": {"jitter": 0.0}},
        # The same breaker, slow to give up: a failed probe opens it again.
        "reopen": {"concurrency": 2, "delay": 0.0, "delay_per_slot": 0.0,
                   "breaker": {"min_requests": 3, "error_share": 0.1, "pause": 10.0, "give_up_after": 50}},
        # 10 units per 100 s: a bucket of 1 unit (a tenth), refilled at 0.09 units a second.
        "q": {"concurrency": 2, "delay": 0.0, "delay_per_slot": 0.0, "quota": 10.0, "window": 100.0},
        # Four slots, no delay, opened gradually (docs/concepts/gradual-slots.md).
        "g": {"concurrency": 4, "delay": 0.0, "delay_per_slot": 0.0, "gradual_slots": True},
    },
})


@pytest.fixture(params=["memory", *(pytest.param(kind, marks=pytest.mark.redis)
                                     for kind in ("redis", "valkey", "cluster"))])
async def store_and_clock(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Store, MockClock]]:
    """Each store, on the fake clock (the Redis store told to use it instead of the server's).

    The Redis store runs on a real redis-server, a real valkey-server and a
    real three-node Redis Cluster.
    """
    clock = MockClock()
    url = "memory://"
    namespace = f"namespace=t{uuid.uuid4().hex[:12]}&time=local"
    if request.param == "cluster":
        nodes: RedisCluster = request.getfixturevalue("redis_cluster")
        url = f"{nodes.url}&{namespace}"
    elif request.param != "memory":
        server: RedisServer = request.getfixturevalue(f"{request.param}_server")
        url = f"{server.url}?{namespace}"
    store = open_store(url, SETTINGS, clock, random.Random(1))
    yield store, clock
    await store.aclose()


FAILURE = Outcome(status=500, feedback=(ScopeFeedback(failed=True, status=500),))


async def fail_three(store: Store, clock: MockClock, scope: str) -> None:
    """Three failed requests of ``scope``, 0.1 s apart: its breaker opens for its first pause."""
    for _ in range(3):
        lease = await store.acquire(((scope, 1.0),))
        assert isinstance(lease, Lease)
        await store.release(lease, FAILURE)
        clock.advance(0.1)


async def test_admits_then_says_when(store_and_clock: tuple[Store, MockClock]) -> None:
    store, _clock = store_and_clock
    lease = await store.acquire((("a", 1.0),))
    assert isinstance(lease, Lease)
    assert lease.granted_at == 0.0
    blocked = await store.acquire((("a", 1.0),))
    assert blocked == Blocked(0.5, (("a", 0.5),))
    await store.release(lease, Outcome(status=200, latency=0.1))
    snap = await store.snapshot("a")
    assert snap is not None
    assert (snap.inflight, snap.sends, snap.responses, snap.resting) == (0, 1, 1, 1)


async def test_multi_scope_admission_is_all_or_nothing(store_and_clock: tuple[Store, MockClock]) -> None:
    store, _clock = store_and_clock
    held = await store.acquire((("b", 1.0),))
    assert isinstance(held, Lease)
    result = await store.acquire((("a", 1.0), ("b", 1.0)))
    assert result == Blocked(None, (("b", None),))
    snap_a = await store.snapshot("a")
    # "a" was not held while "b" refused (a shared store may keep no state for it at all).
    assert snap_a is None or (snap_a.inflight, snap_a.sends) == (0, 0)
    await store.release(held, Outcome())
    both = await store.acquire((("a", 1.0), ("b", 1.0)))
    assert isinstance(both, Lease)
    assert len(both.slot_ready) == 2


async def test_blocked_reports_the_latest_time_over_scopes(
        store_and_clock: tuple[Store, MockClock]) -> None:
    store, clock = store_and_clock
    first = await store.acquire((("a", 1.0),))
    assert isinstance(first, Lease)
    await store.release(first, Outcome())
    clock.advance(0.1)
    result = await store.acquire((("a", 1.0), ("c", 1.0)))
    # "a" waits for its 0.5 s delay; "c" (defaults) is free.
    assert result == Blocked(0.5, (("a", 0.5),))
    assert "a" in await store.scopes()
    snap_c = await store.snapshot("c")
    assert snap_c is None or snap_c.sends == 0


async def test_outcomes_are_counted(store_and_clock: tuple[Store, MockClock]) -> None:
    store, _clock = store_and_clock
    for outcome in (Outcome(status=200, latency=1.0), Outcome(error="TimeoutError"),
                    Outcome(status=503, latency=3.0)):
        lease = await store.acquire((("b", 1.0),))
        assert isinstance(lease, Lease)
        await store.release(lease, outcome)
    snap = await store.snapshot("b")
    assert snap is not None
    assert (snap.responses, snap.errors, snap.last_latency) == (2, 1, 3.0)
    assert snap.mean_latency == pytest.approx(1.4)  # 1.0 then 20 % of the way to 3.0
    assert await store.snapshot("never.example") is None
    await store.aclose()


async def test_a_burst_of_pushback_backs_off_once(store_and_clock: tuple[Store, MockClock]) -> None:
    store, clock = store_and_clock
    refused = Outcome(status=429, feedback=(ScopeFeedback(backoff=True, status=429),))
    first = await store.acquire((("a", 1.0),))
    assert isinstance(first, Lease)
    clock.advance(0.5)
    second = await store.acquire((("a", 1.0),))
    assert isinstance(second, Lease)
    await store.release(first, refused)
    await store.release(second, refused)  # sent under the same generation: no second step
    snap = await store.snapshot("a")
    assert snap is not None
    assert (snap.backoff, snap.generation, snap.delay) == (1, 1, 1.0)
    # The longer delay counts from the last send (0.5): nothing before 1.5.
    assert await store.acquire((("a", 1.0),)) == Blocked(1.5, (("a", 1.5),))


async def test_a_backoff_recovers_and_the_shorter_delay_counts_from_the_last_send(
        store_and_clock: tuple[Store, MockClock]) -> None:
    """Recovery is Python's rule, the delay's anchor on the last send is the store's: both must agree."""
    store, clock = store_and_clock
    refused = Outcome(status=429, feedback=(ScopeFeedback(backoff=True, status=429),))
    lease = await store.acquire((("a", 1.0),))
    assert isinstance(lease, Lease)
    await store.release(lease, refused)
    for _ in range(2):  # a quiet window (BACKOFF_WINDOW, 60 s): SETTLE of the rate refused; another: a probe
        clock.advance(61.0)
        lease = await store.acquire((("a", 1.0),))
        assert isinstance(lease, Lease)
        sent = clock.now()
        await store.release(lease, Outcome(status=200, feedback=(ScopeFeedback(status=200),)))
    snap = await store.snapshot("a")
    assert snap is not None
    assert (snap.backoff, snap.delay) == (0, 0.5)
    # The configured 0.5 s again, from the last send: not the backed-off 1 s.
    blocked = await store.acquire((("a", 1.0),))
    assert blocked == Blocked(sent + 0.5, (("a", sent + 0.5),))


async def test_a_hold_stops_every_send_until_it_ends(store_and_clock: tuple[Store, MockClock]) -> None:
    store, clock = store_and_clock
    lease = await store.acquire((("b", 1.0),))
    assert isinstance(lease, Lease)
    await store.release(lease, Outcome(status=200, feedback=(ScopeFeedback(status=200, hold=5.0),)))
    assert await store.acquire((("b", 1.0),)) == Blocked(5.0, (("b", 5.0),))
    clock.advance(5.0)
    assert isinstance(await store.acquire((("b", 1.0),)), Lease)


async def test_crawl_delay_gives_one_slot_and_spacing(store_and_clock: tuple[Store, MockClock]) -> None:
    store, _clock = store_and_clock
    await store.set_crawl_delay("c", 2.0)
    lease = await store.acquire((("c", 1.0),))
    assert isinstance(lease, Lease)
    await store.release(lease, Outcome(status=200, latency=0.1))
    assert await store.acquire((("c", 1.0),)) == Blocked(2.0, (("c", 2.0),))
    snap = await store.snapshot("c")
    assert snap is not None
    assert (snap.concurrency, snap.crawl_delay) == (1, 2.0)


async def test_an_announced_pace_spaces_sends_until_it_runs_out(
        store_and_clock: tuple[Store, MockClock]) -> None:
    store, clock = store_and_clock
    lease = await store.acquire((("b", 1.0),))
    assert isinstance(lease, Lease)
    paced = Outcome(status=200, feedback=(ScopeFeedback(status=200, pace=2.0, pace_for=10.0),))
    await store.release(lease, paced)
    assert await store.acquire((("b", 1.0),)) == Blocked(2.0, (("b", 2.0),))
    clock.advance(11.0)  # the budget's window is over: no pace any more
    first = await store.acquire((("b", 1.0),))
    assert isinstance(first, Lease)
    await store.release(first, Outcome(status=200))
    assert isinstance(await store.acquire((("b", 1.0),)), Lease)


async def test_the_breaker_opens_lets_one_probe_through_and_closes(
        store_and_clock: tuple[Store, MockClock]) -> None:
    store, clock = store_and_clock
    await fail_three(store, clock, "brk")
    snap = await store.snapshot("brk")
    assert snap is not None
    assert snap.breaker == "open"
    blocked = await store.acquire((("brk", 1.0),))
    assert isinstance(blocked, Blocked)
    assert blocked.ready_at == pytest.approx(0.2 + 10.0 / 6)  # the first pause: a sixth of pause
    clock.advance(10.0 / 6)
    probe = await store.acquire((("brk", 1.0),))
    assert isinstance(probe, Lease)
    assert isinstance(await store.acquire((("brk", 1.0),)), Blocked)  # one probe at a time
    await store.release(probe, Outcome(status=200, feedback=(ScopeFeedback(status=200),)))
    snap = await store.snapshot("brk")
    assert snap is not None
    assert snap.breaker == "closed"
    assert isinstance(await store.acquire((("brk", 1.0),)), Lease)


async def test_a_refusal_reads_the_requests_in_flight_at_its_answer(
        store_and_clock: tuple[Store, MockClock]) -> None:
    # Eight sent together and answered in 40 ms: the refused one was sent at 200 a second, so the
    # first cut halves that (docs/concepts/backoff.md). The Redis store counted the requests in
    # flight at the refused one's admission (1: 25 a second, a cut to 0.08 s): a fleet cut deeper.
    store, clock = store_and_clock
    leases = [await store.acquire((("burst", 1.0),)) for _ in range(8)]
    assert all(isinstance(lease, Lease) for lease in leases)
    clock.advance(0.04)
    first, *rest = [lease for lease in leases if isinstance(lease, Lease)]
    await store.release(first, Outcome(status=429, feedback=(ScopeFeedback(backoff=True, status=429),)))
    for lease in rest:
        await store.release(lease, Outcome(status=200, feedback=(ScopeFeedback(status=200),)))
    snap = await store.snapshot("burst")
    assert snap is not None
    assert snap.backoff == 1
    assert snap.delay == pytest.approx(0.01)


async def test_a_failed_probe_opens_the_breaker_again_for_a_longer_pause(
        store_and_clock: tuple[Store, MockClock]) -> None:
    # A shared store admits the probe in its script: the worker's own copy of the breaker still
    # said "open" for a pause that was over, so the reopening went unwritten (seed 19 of the trace).
    store, clock = store_and_clock
    await fail_three(store, clock, "reopen")
    clock.advance(10.0 / 6)
    probe = await store.acquire((("reopen", 1.0),))
    assert isinstance(probe, Lease)
    await store.release(probe, FAILURE)
    snap = await store.snapshot("reopen")
    assert snap is not None
    assert snap.breaker == "open"
    blocked = await store.acquire((("reopen", 1.0),))
    assert isinstance(blocked, Blocked)
    assert blocked.ready_at == pytest.approx(clock.now() + 2 * 10.0 / 6)  # the next pause: twice the first


async def test_a_quota_refuses_until_its_bucket_has_refilled(
        store_and_clock: tuple[Store, MockClock]) -> None:
    store, clock = store_and_clock
    with pytest.raises(QuotaError, match="whole quota is 10 per 100s"):
        await store.acquire((("q", 11.0),))
    for _ in range(2):
        lease = await store.acquire((("q", 0.5),))
        assert isinstance(lease, Lease)
        await store.release(lease, Outcome(status=200))
    snap = await store.snapshot("q")
    assert snap is not None
    assert snap.quota_remaining == pytest.approx(0.0)
    blocked = await store.acquire((("q", 0.5),))
    # Half a unit short, refilled at 0.09 units a second.
    assert isinstance(blocked, Blocked)
    assert blocked.ready_at == pytest.approx(0.5 / 0.09)
    assert blocked.waiting_on == (("q", blocked.ready_at),)
    assert blocked.ready_at is not None
    clock.advance(blocked.ready_at - clock.now())
    held = await store.acquire((("q", 0.5),))
    assert isinstance(held, Lease)  # admitted at exactly the time it was told
    assert isinstance(await store.acquire((("q", 0.5),)), Blocked)
    assert isinstance(await store.acquire((("q", 0.0),)), Lease)  # no use: no quota needed


async def test_a_quota_is_reconciled_with_the_actual_use(store_and_clock: tuple[Store, MockClock]) -> None:
    store, _clock = store_and_clock
    lease = await store.acquire((("q", 1.0),))
    assert isinstance(lease, Lease)
    assert isinstance(await store.acquire((("q", 1.0),)), Blocked)  # the bucket is empty
    # The request used nothing after all: the refund lets one more through.
    await store.release(lease, Outcome(status=200, feedback=(ScopeFeedback(status=200, consumed_quota=0.0),)))
    again = await store.acquire((("q", 1.0),))
    assert isinstance(again, Lease)
    # This one used 3 units, not 1: the bucket owes 2 more, and waits 3 units of refill.
    await store.release(again, Outcome(status=200, feedback=(ScopeFeedback(status=200, consumed_quota=3.0),)))
    blocked = await store.acquire((("q", 1.0),))
    assert isinstance(blocked, Blocked)
    assert blocked.ready_at == pytest.approx(3.0 / 0.09)
    assert blocked.waiting_on == (("q", blocked.ready_at),)
    snap = await store.snapshot("q")
    assert snap is not None
    assert snap.quota_remaining == pytest.approx(-2.0)


@pytest.mark.redis
async def test_workers_on_one_redis_share_what_they_learn(redis_url: str) -> None:
    clock = MockClock()
    url = redis_url + "&time=local"
    one, two = (open_store(url, SETTINGS, clock, random.Random(n)) for n in (1, 2))
    try:
        lease = await one.acquire((("b", 1.0),))
        assert isinstance(lease, Lease)
        # Worker two sees worker one's slot in use ...
        assert await two.acquire((("b", 1.0),)) == Blocked(None, (("b", None),))
        await one.release(lease, Outcome(status=503, feedback=(ScopeFeedback(backoff=True, failed=True,
                                                                             status=503),)))
        await delivered(one)
        # ... and the backoff it caused: delay 0 backs off to BACKOFF_MIN_DELAY, 1 s.
        assert await two.acquire((("b", 1.0),)) == Blocked(1.0, (("b", 1.0),))
        clock.advance(1.0)
        again = await two.acquire((("b", 1.0),))
        assert isinstance(again, Lease)
        assert again.generations == (1,)
        await two.release(again, Outcome(status=200, latency=0.1))
        await delivered(two)  # one worker reads what another released
        snap = await one.snapshot("b")
        assert snap is not None
        assert (snap.sends, snap.responses, snap.errors, snap.backoff) == (2, 2, 0, 1)
    finally:
        await one.aclose()
        await two.aclose()

async def test_a_probe_out_as_long_as_its_pause_lets_another_go(
        store_and_clock: tuple[Store, MockClock]) -> None:
    # A probe that hangs held a flaky site for the hang (30 % 503s, 1 % hangs of 5 s: 6 s after a
    # pause of 1 s). Out as long as the pause it followed, it lets one more probe go, on every store:
    # the Redis store's probe gate (acquire.lua) keeps the breaker's rule (Breaker.blocked_until).
    store, clock = store_and_clock
    await fail_three(store, clock, "reopen")
    pause = 10.0 / 6  # the first pause: a sixth of the pause
    clock.advance(pause)
    hung = await store.acquire((("reopen", 1.0),))
    assert isinstance(hung, Lease)
    sent = clock.now()
    clock.advance(pause / 2)
    blocked = await store.acquire((("reopen", 1.0),))
    assert isinstance(blocked, Blocked)
    assert blocked.ready_at == pytest.approx(sent + pause)  # not "until its answer" (None)
    clock.advance(pause / 2)
    second = await store.acquire((("reopen", 1.0),))
    assert isinstance(second, Lease)
    assert isinstance(await store.acquire((("reopen", 1.0),)), Blocked)  # one probe at a time again
    await store.release(second, Outcome(status=200, feedback=(ScopeFeedback(status=200),)))
    snap = await store.snapshot("reopen")
    assert snap is not None
    assert snap.breaker == "closed"
    await store.release(hung, Outcome(status=200, feedback=(ScopeFeedback(status=200),)))


@pytest.mark.redis
async def test_only_one_worker_probes_a_half_open_scope(redis_url: str) -> None:
    clock = MockClock()
    url = redis_url + "&time=local"
    one, two = (open_store(url, SETTINGS, clock, random.Random(n)) for n in (1, 2))
    try:
        await fail_three(one, clock, "brk")
        # A release is sent without waiting for its reply: the other worker's next call may reach
        # the server first. Wait until the server has them (what a worker sees across processes).
        await delivered(one)
        assert isinstance(await two.acquire((("brk", 1.0),)), Blocked)  # open for every worker
        clock.advance(10.0)
        probe = await two.acquire((("brk", 1.0),))
        assert isinstance(probe, Lease)
        # The scope has a second slot, but the probe is alone: worker one waits too.
        assert isinstance(await one.acquire((("brk", 1.0),)), Blocked)
        await two.release(probe, Outcome(status=200, feedback=(ScopeFeedback(status=200),)))
        await delivered(two)
        assert isinstance(await one.acquire((("brk", 1.0),)), Lease)
    finally:
        await one.aclose()
        await two.aclose()


async def test_memory_store_forgets_idle_scopes_only() -> None:
    clock = MockClock()
    store = MemoryStore(SETTINGS, clock, random.Random(1))
    busy = store.acquire_nowait((("busy", 1.0),))
    assert isinstance(busy, Lease)
    for i in range(10):
        lease = store.acquire_nowait(((f"s{i}", 1.0),))
        assert isinstance(lease, Lease)
        store.release_nowait(lease, Outcome())
    assert len(store) == 11
    assert store.evict_idle() == 0  # every scope still has its 1 s delay pending
    clock.advance(1.0)
    assert store.evict_idle() == 10  # the one in flight stays
    assert len(store) == 1
    store.release_nowait(busy, Outcome())


async def test_memory_store_stays_small_when_every_admission_is_a_new_scope() -> None:
    """A broad crawl: each host seen once; the amortised sweep must keep up with the new scopes."""
    clock = MockClock()
    store = MemoryStore(SETTINGS, clock, random.Random(1))
    most = 0
    for i in range(30_000):
        lease = store.acquire_nowait(((f"h{i}.example", 1.0),))
        assert isinstance(lease, Lease)
        store.release_nowait(lease, Outcome(status=200))
        clock.advance(0.01)  # 100 hosts a second: a host is idle 60 s (the breaker's window) later
        most = max(most, len(store))
    assert store.evicted > 20_000
    assert most < 15_000  # about 6 000 are within the breaker's window at any time, plus one sweep's worth


def test_store_urls() -> None:
    assert isinstance(open_store("memory://", SETTINGS, MockClock(), random.Random()), MemoryStore)
    redis = open_store("redis://127.0.0.1:6379/0?namespace=job1&lease=12", SETTINGS, MockClock(),
                       random.Random())
    assert isinstance(redis, RedisStore)
    assert (redis.namespace, redis.lease, redis.time) == ("job1", 12.0, "server")
    with pytest.raises(ConfigError, match="lease='x' is not a number"):
        open_store("redis://127.0.0.1:6379/0?lease=x", SETTINGS, MockClock(), random.Random())
    with pytest.raises(ConfigError, match="time='moon' is not one of server, synced, local"):
        open_store("redis://127.0.0.1:6379/0?time=moon", SETTINGS, MockClock(), random.Random())
    with pytest.raises(ConfigError, match="fallback='disk' is not known"):
        open_store("redis://127.0.0.1:6379/0?fallback=disk", SETTINGS, MockClock(), random.Random())
    with pytest.raises(ConfigError, match="fallback_workers='0' is not a whole number"):
        open_store("redis://127.0.0.1:6379/0?fallback=memory&fallback_workers=0", SETTINGS, MockClock(),
                   random.Random())
    with pytest.raises(ConfigError, match="unknown scheme 'ftp'"):
        open_store("ftp://x", SETTINGS, MockClock(), random.Random())


async def _settled(store: Store) -> None:
    """Let a shared store's releases land: each good answer of a round moves the stored slots, and a
    worker's write-back that its own previous one beat is applied again once the reply is in."""
    flush = getattr(store, "flush", None)
    if flush is not None:
        await flush()


async def _fill(store: Store, scope: str) -> list[Lease]:
    """Every lease ``scope`` admits now; the next acquire must find every slot busy."""
    leases: list[Lease] = []
    while True:
        got = await store.acquire(((scope, 1.0),))
        if not isinstance(got, Lease):
            assert isinstance(got, Blocked)
            assert got.waiting_on == ((scope, None),)
            return leases
        leases.append(got)


async def test_gradual_slots_open_one_two_four_and_close_on_a_refusal(
        store_and_clock: tuple[Store, MockClock]) -> None:
    # Both stores open a no-delay scope's slots the same way: one until the site
    # answers well, then twice as many per round of good answers; a refusal closes all but one.
    store, clock = store_and_clock
    well = Outcome(status=200, latency=0.1, feedback=(ScopeFeedback(status=200),))
    opened: list[int] = []
    for _round in range(3):
        leases = await _fill(store, "g")
        opened.append(len(leases))
        clock.advance(0.1)
        for lease in leases:
            await store.release(lease, well)
        await _settled(store)
    assert opened == [1, 2, 4]
    leases = await _fill(store, "g")
    assert len(leases) == 4
    refused = Outcome(status=429, feedback=(ScopeFeedback(backoff=True, status=429),))
    await store.release(leases[0], refused)
    for lease in leases[1:]:
        await store.release(lease, well)
    snap = await store.snapshot("g")
    assert snap is not None
    assert snap.concurrency == 1
