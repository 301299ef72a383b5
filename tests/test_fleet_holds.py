"""A fleet keeps a site's ``Retry-After`` as one process does: the hold reaches every worker at once.

A worker's 429 reached the others only through the shared store, with the
refusal's release, which first waits for the worker's earlier releases and
reads the scope's counts (25-230 ms on a loaded machine); and a request
admitted before the hold landed was written whenever its own loop got to it
(0.1-0.25 s after its admission). The site saw requests inside its
``Retry-After`` (``test_redis_fleet.py``'s adaptive fleet failed now and then).
Now the hold goes to the store ahead of the release, and a write that lags its
admission asks the store for its holds first.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict
from yarl import URL

from crawlpace import Settings
from crawlpace._clients._last_look import WRITING, LastLook, NotSent, Writing
from crawlpace.crawl._fetch import LOOK_AFTER, RELOOKS, AiohttpFetcher
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Blocked, Lease, Outcome, open_store
from crawlpace.stores.redis import RedisLease, RedisStore, _keys
from crawlpace.stores.redis.connection import _Call
from crawlpace.testing import MockClock

from .test_fetch import answering, server

SETTINGS = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"concurrency": 4, "delay": 0.0},
                                 "CONCURRENT_REQUESTS": 16})
SCOPE = (("site", 1.0),)


@pytest.mark.redis
async def test_a_refusals_hold_reaches_the_fleet_before_its_release_reads_the_counts(redis_url: str) -> None:
    clock = MockClock()
    url = redis_url.split("?")[0] + f"?namespace=h{uuid.uuid4().hex[:10]}&time=local"
    refused, other = (open_store(url, SETTINGS, clock, random.Random(seed)) for seed in (1, 2))
    assert isinstance(refused, RedisStore)
    earlier = asyncio.Event()

    async def earlier_releases() -> None:  # the refused worker's earlier releases, not answered yet
        await earlier.wait()

    refused._releases.sent = earlier_releases  # type: ignore[method-assign]
    try:
        lease = await refused.acquire(SCOPE)
        assert isinstance(lease, Lease)
        clock.advance(0.01)
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=2.0)
        release = asyncio.ensure_future(
            refused.release(lease, Outcome(status=429, latency=0.01, feedback=(feedback,))))
        for _ in range(50):  # the hold's call leaves at the loop's next turn; its reply a little later
            await asyncio.sleep(0.01)
            got = await other.acquire(SCOPE)
            if isinstance(got, Blocked):
                break
            await other.release(got, Outcome(status=200, latency=0.01))
        assert not release.done()  # the release still waits for the counts
        # Another worker is held for the Retry-After already (it was admitted before).
        assert isinstance(got, Blocked)
        assert got.ready_at is not None
        assert got.ready_at >= clock.now() + 1.9
        assert isinstance(other, RedisStore)
        assert await other.held_for(("site",)) >= 1.9  # what a late write's last look reads
        await other.set_crawl_delay("site", 0.5)  # one slot: nothing else in flight to hold
        assert await other.held_for(("site",)) == 0.0
        earlier.set()
        await asyncio.wait_for(release, timeout=5.0)
    finally:
        earlier.set()
        await refused.aclose()
        await other.aclose()


@dataclass
class _Permit:
    scopes: tuple[str, ...]
    granted_at: float
    outcome: Outcome | None = None


async def test_a_write_that_lags_its_admission_waits_out_the_stores_hold() -> None:
    asked: list[tuple[str, ...]] = []
    slept: list[float] = []

    # another worker's Retry-After
    async def held_for(scopes: tuple[str, ...], lease_id: str = "", siblings: bool = True) -> float:
        asked.append(scopes)
        return 0.75 if len(asked) == 1 else 0.0  # over once waited out

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    noted: list[tuple[str, ...]] = []  # writes told to the store (a Crawl-delay scope's, for the fleet)

    def write_after(scopes: tuple[str, ...]) -> float:  # another worker's write lagged: 0.4 s more
        # (the store keeps such a time only for a Crawl-delay scope: the third permit's)
        return time.monotonic() + 0.4 if len(seen) == 2 else -math.inf
    seen: list[bytes] = []
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    async with server(answering(head, b"ok", seen=seen)) as base:
        http = AiohttpFetcher(user_agent="crawlpace-test/1", timeout=5.0, max_connections=4, trust_env=False,
                              clock=time.monotonic, sleep=sleep)
        try:
            now = time.monotonic()
            paced = LastLook()
            paced.pace("site", 0.25)  # a Crawl-delay scope: one slot, nothing else in flight to hold
            # Admitted a while ago; just admitted; admitted a while ago in a Crawl-delay scope.
            for granted_at, look in ((now - 0.2, LastLook()), (now + 60.0, LastLook()), (now - 0.2, paced)):
                token = WRITING.set(Writing(_Permit(("site",), granted_at), look, time.monotonic, held_for,
                                            write_after, noted.append))
                try:
                    page = await http.get(f"{base}/a", 100)
                finally:
                    WRITING.reset(token)
                assert page.status == 200
        finally:
            await http.aclose()
    assert len(seen) == 3
    # The lagging write waited out the hold (and looked again); the one written at once went without asking.
    assert asked == [("site",), ("site",)]
    assert slept[0] == 0.75
    # The Crawl-delay scope's write waited for the other worker's write. Every write is told to the
    # store, which notes those of the scopes it knows a Crawl-delay of (RedisStore.wrote).
    assert slept[1:] == [pytest.approx(0.4, abs=0.05)]
    assert noted == [("site",)] * 3
    assert LOOK_AFTER <= 0.05  # well within the sites' tolerance for requests already on their way


async def test_a_punctual_write_of_a_scope_that_held_asks_the_store_under_its_lease() -> None:
    """A write that follows its admission at once skips the store's round trip, unless its scope has
    held: then every write is noted, and may have to wait for a sibling still out (the store says
    when to look again). main: such a write went without asking, and its siblings never saw it."""
    asked: list[tuple[tuple[str, ...], str]] = []
    slept: list[float] = []

    async def held_for(scopes: tuple[str, ...], lease_id: str = "", siblings: bool = True) -> float:
        asked.append((scopes, lease_id))
        return 0.02 if len(asked) == 1 else 0.0  # a sibling out, then answered

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    seen: list[bytes] = []
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    async with server(answering(head, b"ok", seen=seen)) as base:
        http = AiohttpFetcher(user_agent="crawlpace-test/1", timeout=5.0, max_connections=4, trust_env=False,
                              clock=time.monotonic, sleep=sleep)
        try:
            for scope in ("held", "plain"):  # just admitted, each
                token = WRITING.set(Writing(_Permit((scope,), time.monotonic() + 60.0), LastLook(),
                                            time.monotonic, held_for, holding=lambda s: s == ("held",),
                                            lease_id=f"{scope}-1"))
                try:
                    page = await http.get(f"{base}/a", 100)
                finally:
                    WRITING.reset(token)
                assert page.status == 200
        finally:
            await http.aclose()
    assert len(seen) == 2
    assert asked == [(("held",), "held-1"), (("held",), "held-1")]  # the plain scope's write: no look
    assert slept == [0.02]


@pytest.mark.redis
async def test_the_last_look_reads_the_hold_on_the_servers_clock_not_a_workers_estimate(
        redis_url: str) -> None:
    """A worker's estimate of the server's time comes from its replies (the midpoint of a call's
    send and its reply); on a loaded machine a call waits in the batch before it leaves and the
    estimate runs ahead by tens of milliseconds, more than a site's tolerance. The last look's
    wait is the hold's end less the server's own time, read in the same round trip."""
    url = redis_url.split("?")[0] + f"?namespace=s{uuid.uuid4().hex[:10]}"
    refused = open_store(url, SETTINGS, MockClock(), random.Random(1))
    assert isinstance(refused, RedisStore)
    clock = MockClock()
    other = open_store(url, SETTINGS, clock, random.Random(2))
    assert isinstance(other, RedisStore)
    assert other.time == "server"
    try:
        got = await other.acquire(SCOPE)  # this worker learns its offset to the server's clock
        assert isinstance(got, Lease)
        lease = await refused.acquire(SCOPE)
        assert isinstance(lease, Lease)
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=2.0)
        await refused.release(lease, Outcome(status=429, latency=0.01, feedback=(feedback,)))
        await refused.flush()
        clock.advance(0.3)  # its estimate of the server's time now runs 0.3 s ahead
        assert await other.held_for(("site",)) >= 1.9  # main: 1.7, a write 0.3 s into the hold
        await other.release(got, Outcome(status=200, latency=0.01))
    finally:
        await refused.aclose()
        await other.aclose()


async def test_a_write_held_by_the_store_looks_again_before_it_goes() -> None:
    """While a write waits out another worker's hold, a request already on its way draws a refusal
    whose hold ends later (the site's quiet time grows with it): the write asks the store again
    before it goes, a bounded number of times. It went at the end of the first hold, inside the
    second (main: one look, one wait)."""
    holds = [0.5, 0.3, 0.0]
    asked: list[float] = []
    slept: list[float] = []

    async def held_for(scopes: tuple[str, ...], lease_id: str = "", siblings: bool = True) -> float:
        asked.append(holds[len(asked)] if len(asked) < len(holds) else 0.2)
        return asked[-1]

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    seen: list[bytes] = []
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    async with server(answering(head, b"ok", seen=seen)) as base:
        http = AiohttpFetcher(user_agent="crawlpace-test/1", timeout=5.0, max_connections=4, trust_env=False,
                              clock=time.monotonic, sleep=sleep)
        try:
            for _ in range(2):  # then a store holding the scope for ever: asked a bounded number of times
                permit = _Permit(("site",), time.monotonic() - 0.2)
                token = WRITING.set(Writing(permit, LastLook(), time.monotonic, held_for))
                try:
                    page = await http.get(f"{base}/a", 100)
                finally:
                    WRITING.reset(token)
                assert page.status == 200
                if len(seen) == 1:
                    assert asked == [0.5, 0.3, 0.0]
                    assert slept == [0.5, 0.3]
        finally:
            await http.aclose()
    assert len(seen) == 2
    assert asked[3:] == [0.2] * (2 * RELOOKS + 1)  # RELOOKS + 1 looks for siblings, RELOOKS for holds
    assert slept[2:] == [0.2] * (2 * RELOOKS + 1)


async def test_a_write_that_waited_for_its_siblings_as_often_as_it_may_looks_once_more_for_a_hold() -> None:
    """A write of a guarded scope waits while a sibling is overdue, looking again every LOOK_AGAIN, at
    most RELOOKS + 1 times. On a loaded fleet the sibling's worker reads its answer late, and that
    answer is often the refusal the write was waiting for: traced (bench/results/retry4.md), writes
    went after their fifth wait without another look, 20-50 ms after that refusal's hold had
    reached the store, and arrived inside it. Now the write looks once more, for holds only (it no
    longer waits for siblings), and waits out the hold it finds. main: five looks, five waits of
    20 ms, and the write went into the hold."""
    asked: list[bool] = []
    slept: list[float] = []

    async def held_for(scopes: tuple[str, ...], lease_id: str = "", siblings: bool = True) -> float:
        asked.append(siblings)
        if siblings:
            return 0.02  # a sibling overdue all along: its worker has not read its answer
        return 1.5 if asked.count(False) == 1 else 0.0  # that answer was a 429: its hold has landed

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    seen: list[bytes] = []
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    async with server(answering(head, b"ok", seen=seen)) as base:
        http = AiohttpFetcher(user_agent="crawlpace-test/1", timeout=5.0, max_connections=4, trust_env=False,
                              clock=time.monotonic, sleep=sleep)
        try:
            token = WRITING.set(Writing(_Permit(("held",), time.monotonic() + 60.0), LastLook(),
                                        time.monotonic, held_for, holding=lambda s: True, lease_id="held-1"))
            try:
                page = await http.get(f"{base}/a", 100)
            finally:
                WRITING.reset(token)
            assert page.status == 200
        finally:
            await http.aclose()
    assert len(seen) == 1
    assert asked == [True] * (RELOOKS + 1) + [False, False]
    assert slept == [0.02] * (RELOOKS + 1) + [1.5]  # main: [0.02] * 5, then written inside the hold


@pytest.mark.redis
async def test_a_refusals_hold_does_not_wait_for_the_batch_call_in_flight(redis_url: str) -> None:
    """A worker's script calls ride in batches, one in flight at a time; on a loaded machine the
    batch in flight is answered and read tens of milliseconds later. A refusal's hold goes at once,
    on a connection of its own (main queued it behind that batch: other workers were admitted)."""
    clock = MockClock()
    url = redis_url.split("?")[0] + f"?namespace=b{uuid.uuid4().hex[:10]}&time=local"
    refused, other = (open_store(url, SETTINGS, clock, random.Random(seed)) for seed in (1, 2))
    assert isinstance(refused, RedisStore)
    answered = asyncio.Event()
    read = refused._conn._read

    async def slow_read(pipe: Any, batch: list[_Call], before: asyncio.Task[None] | None) -> None:
        await answered.wait()  # the batch in flight, its reply not read yet
        await read(pipe, batch, before)

    try:
        lease = await refused.acquire(SCOPE)
        assert isinstance(lease, Lease)
        refused._conn._read = slow_read  # type: ignore[method-assign]
        busy = asyncio.ensure_future(refused.acquire((("elsewhere", 1.0),)))  # the batch in flight
        await asyncio.sleep(0.01)
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=2.0)
        release = asyncio.ensure_future(
            refused.release(lease, Outcome(status=429, latency=0.01, feedback=(feedback,))))
        got: Lease | Blocked | None = None
        for _ in range(50):
            await asyncio.sleep(0.01)
            got = await other.acquire(SCOPE)
            if isinstance(got, Blocked):
                break
            await other.release(got, Outcome(status=200, latency=0.01))
        assert not busy.done()  # the batch was still in flight
        assert isinstance(got, Blocked)
        assert got.ready_at is not None
        assert got.ready_at >= clock.now() + 1.9  # main: held by its pace only (0.56 s)
        answered.set()
        await asyncio.wait_for(asyncio.gather(busy, release), timeout=5.0)
    finally:
        answered.set()
        await refused.aclose()
        await other.aclose()


@pytest.mark.redis
async def test_a_refusals_hold_is_written_before_the_callbacks_the_loop_has_queued(redis_url: str) -> None:
    """A starved worker's loop has many callbacks queued (answers read at once after a stall); a
    refusal's hold sent as a task of its own waited behind all of them before its command left
    (traced in a fleet of 8 at a load of 15-30: 66-78 ms for one hold in ten, up to 3.6 s), while
    the other workers wrote into the hold. Now the releasing task writes it before it first yields:
    the server has it while the callback queued before the release still runs (main: not before)."""
    import redis as sync_redis

    url = redis_url.split("?")[0] + f"?namespace=e{uuid.uuid4().hex[:10]}"  # the server's clock
    refused = open_store(url, SETTINGS, MockClock(), random.Random(1))
    assert isinstance(refused, RedisStore)
    direct = sync_redis.Redis.from_url(redis_url.split("?")[0])
    seen: list[bool] = []

    def queued() -> None:  # a callback the loop runs next; it blocks the loop while it looks
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            if direct.hget(refused._keys("site")[0], "hold") is not None:
                seen.append(True)
                return
            time.sleep(0.005)
        seen.append(False)

    try:
        lease = await refused.acquire(SCOPE)
        assert isinstance(lease, Lease)
        await refused.flush()
        assert await refused.held_for(("site",)) == 0.0  # a look: the worker's own connection is open
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=2.0)
        asyncio.get_running_loop().call_soon(queued)
        await refused.release(lease, Outcome(status=429, latency=0.01, feedback=(feedback,)))
        assert seen == [True]  # main: [False], the hold's task ran after the callback
        assert await refused.held_for(("site",)) > 1.5
    finally:
        direct.close()
        await refused.aclose()


PACED = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"concurrency": 4, "delay": 0.5},
                              "CONCURRENT_REQUESTS": 16})


async def admitted(store: Any, clock: MockClock) -> Lease:
    """A lease of ``SCOPE`` from ``store``, the clock advanced to the scope's next send."""
    for _ in range(10):
        got = await store.acquire(SCOPE)
        if isinstance(got, Lease):
            return got
        assert got.ready_at is not None
        clock.advance(max(got.ready_at - clock.now(), 0.001))
    raise AssertionError("never admitted")


@pytest.mark.redis
async def test_the_writes_a_hold_caught_go_one_by_one_after_it_then_the_admissions(redis_url: str) -> None:
    """Two workers' leases, granted before a third worker's refusal held the scope, are written
    late (a loaded fleet's loops). Their last looks each get a turn after the hold, the scope's
    delay apart, and the store admits nothing new before both turns. main sent both at the hold's
    end, with the store's first admission after it: three requests at once right after the site
    asked for quiet (a bucket with no burst refused two, and held the fleet again)."""
    clock = MockClock()
    url = redis_url.split("?")[0] + f"?namespace=t{uuid.uuid4().hex[:10]}&time=local"
    stores = [open_store(url, PACED, clock, random.Random(seed)) for seed in (1, 2, 3)]
    redis_stores = [store for store in stores if isinstance(store, RedisStore)]
    assert len(redis_stores) == 3
    refused, first, second = redis_stores
    try:
        leases = [await admitted(store, clock) for store in (refused, first, second)]
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=5.0)
        await refused.release(leases[0], Outcome(status=429, latency=0.01, feedback=(feedback,)))
        await refused.flush()
        end = clock.now() + 5.0  # the hold's end (the refusal's answer came just now)
        client = await first._conn.client()
        delay = float(await client.hget(first._keys("site")[0], "delay"))
        assert delay >= 0.5
        waits = [await first.held_for(("site",)), await second.held_for(("site",))]
        assert waits[0] == pytest.approx(5.0, abs=0.01)  # the first at the hold's end
        assert waits[1] == pytest.approx(waits[0] + delay, abs=0.01)  # the next a delay later (main: 5.0)
        clock.advance(5.0)
        got = await refused.acquire(SCOPE)  # the store's first admission after the hold: after both
        assert isinstance(got, Blocked)  # main: admitted at the hold's end
        assert got.ready_at == pytest.approx(end + 2 * delay, abs=0.01)
        clock.advance(delay)
        assert await second.held_for(("site",)) == 0.0  # its turn: the hold is over, it goes
        for store, lease in ((first, leases[1]), (second, leases[2])):
            await store.release(lease, Outcome(status=200, latency=0.01))
    finally:
        for each in stores:
            await each.aclose()


@pytest.mark.redis
async def test_a_write_waits_while_an_earlier_sibling_of_a_scope_that_held_is_out(redis_url: str) -> None:
    """The race a fleet of 8 broke Retry-After with (bench/results/retry2.md): worker A's request
    is refused, but A's loaded loop reads the 429 (and sends its hold) 40-150 ms later; meanwhile
    worker C looked at the store, found no hold, and wrote into it. Now a scope that has held
    notes each write, and a write waits while a sibling written more than TOGETHER before it is
    still out; it goes once the sibling is answered, or waits out the sibling's hold. main: C's
    look found nothing to wait for and wrote at once."""
    from crawlpace.stores.redis import LOOK_AGAIN, TOGETHER

    clock = MockClock()
    url = redis_url.split("?")[0] + f"?namespace=s{uuid.uuid4().hex[:10]}&time=local"
    stores = [open_store(url, SETTINGS, clock, random.Random(seed)) for seed in (1, 2, 3)]
    redis_stores = [store for store in stores if isinstance(store, RedisStore)]
    assert len(redis_stores) == 3
    a, b, c = redis_stores

    async def look(store: RedisStore, lease: Lease) -> float:
        """The last look's wait before writing ``lease`` (0.0: it goes, and is noted)."""
        assert isinstance(lease, RedisLease)
        return await store.held_for(("site",), lease.lease_id)

    def named(lease: Lease) -> str:
        assert isinstance(lease, RedisLease)
        return lease.lease_id

    try:
        # Before any hold, nothing is noted: a write never waits for a sibling.
        first = await admitted(a, clock)
        assert await look(a, first) == 0.0
        assert not a.holding(("site",))
        clock.advance(1.0)
        assert await look(c, await admitted(c, clock)) == 0.0
        client = await a._conn.client()
        notes = _keys.writes_key(a._prefix, "site")
        assert not await client.exists(notes)
        # The scope holds once (a short Retry-After, over by the time the race starts).
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=0.5)
        await a.release(first, Outcome(status=429, latency=0.01, feedback=(feedback,)))
        await a.flush()
        assert a.holding(("site",))
        clock.advance(2.0)
        sibling, together, late = [await admitted(store, clock) for store in (a, b, c)]
        assert not c.holding(("site",))  # not yet heard of the hold
        assert await look(a, sibling) == 0.0  # A writes; the site will refuse it
        assert await client.zscore(notes, named(sibling)) is not None
        clock.advance(TOGETHER / 2)
        assert await look(b, together) == 0.0  # B's write reaches the site with A's: it goes
        clock.advance(TOGETHER)
        # C's comes after: A's answer may be a refusal A has not read yet.
        assert await look(c, late) == LOOK_AGAIN  # main: 0.0, written into the hold A had not sent
        assert c.holding(("site",))  # heard from its look: its next writes look even when punctual
        assert await client.zscore(notes, named(late)) is None  # not written: not noted
        # A reads its 429 and holds the scope; C's next look waits the hold out.
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=2.0)
        await a.release(sibling, Outcome(status=429, latency=0.01, feedback=(feedback,)))
        await a.flush()
        assert await look(c, late) >= 1.9
        clock.advance(2.5)
        # After the hold: B's request is still out (written long ago), so C waits for it too.
        assert await look(c, late) == LOOK_AGAIN
        await b.release(together, Outcome(status=200, latency=0.01))
        await b.flush()
        assert await look(c, late) == 0.0  # every sibling answered: it goes
        assert await client.zscore(notes, named(late)) is not None
        await c.release(late, Outcome(status=200, latency=0.01))
        await c.flush()
        # A look's reply read late (a loaded worker): the sibling it found too young to wait for is
        # older than TOGETHER by the time the write leaves, so the write looks again.
        clock.advance(5.0)
        sibling, slow = [await admitted(store, clock) for store in (a, b)]
        assert await look(a, sibling) == 0.0
        clock.advance(TOGETHER / 2)
        eager = b._conn.call_eager

        async def read_late(name: str, keys: Any, args: Any) -> Any:
            reply = await eager(name, keys, args)
            clock.advance(TOGETHER)
            return reply

        b._conn.call_eager = read_late  # type: ignore[method-assign]
        assert await look(b, slow) == LOOK_AGAIN
        b._conn.call_eager = eager  # type: ignore[method-assign]
        assert await look(b, slow) == LOOK_AGAIN  # the sibling is out, and old enough to wait for now
        for store, lease in ((a, sibling), (b, slow)):
            await store.release(lease, Outcome(status=200, latency=0.01))
    finally:
        for each in stores:
            await each.aclose()


RAMPUP = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "CONCURRENT_REQUESTS": 16})
WIDE = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"concurrency": 8, "delay": 0.0},
                             "CONCURRENT_REQUESTS": 16})


async def fleet_of(redis_url: str, clock: MockClock, workers: int,
                   settings: Settings = RAMPUP) -> list[RedisStore]:
    """``workers`` stores of one namespace on ``clock`` (every scope paced by rampup by default)."""
    url = redis_url.split("?")[0] + f"?namespace=f{uuid.uuid4().hex[:10]}&time=local"
    stores = [open_store(url, settings, clock, random.Random(seed)) for seed in range(workers)]
    fleet = [store for store in stores if isinstance(store, RedisStore)]
    assert len(fleet) == workers
    return fleet


async def look_at(store: RedisStore, lease: Lease) -> float:
    """The last look's wait before writing ``lease`` (0.0: it goes, and is noted)."""
    assert isinstance(lease, RedisLease)
    return await store.held_for(("site",), lease.lease_id)


@pytest.mark.redis
async def test_a_write_of_a_scope_in_its_start_waits_while_a_sibling_is_overdue(redis_url: str) -> None:
    """A scope's FIRST hold (bench/results/retry3.md): the start climbs above anything the site has
    shown, the site refuses worker A, and A's loaded loop reads the 429 late; worker B looked at the
    store meanwhile and wrote into the hold (fleet8 at stop 54: both broken rules were first holds).
    A scope still in its start is guarded as one that has held: a write waits while a sibling is
    overdue (out longer than TOGETHER plus the scope's answer time after its write). main: B's look
    found nothing to wait for (the scope had never held) and wrote at once."""
    from crawlpace.stores.redis import LOOK_AGAIN, TOGETHER

    clock = MockClock()
    a, b = await fleet_of(redis_url, clock, 2)
    try:
        # The site answers in 10 ms (each worker measured it on an accepted answer).
        warm = await admitted(a, clock)
        assert await look_at(a, warm) == 0.0
        await a.release(warm, Outcome(status=200, latency=0.01))
        await b.release(await admitted(b, clock), Outcome(status=200, latency=0.01))
        await a.flush()
        await b.flush()
        assert a.holding(("site",))  # in its start, on a quick site: every write looks
        assert b.holding(("site",))
        clock.advance(1.0)
        first, second = await admitted(a, clock), await admitted(b, clock)
        assert await look_at(a, first) == 0.0  # A writes; the site will refuse it (its first hold)
        clock.advance(TOGETHER + 0.01 + 0.005)  # A's answer left the site more than TOGETHER ago
        assert await look_at(b, second) == LOOK_AGAIN  # main: 0.0, into the hold A had not sent
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=2.0)
        await a.release(first, Outcome(status=429, latency=0.01, feedback=(feedback,)))
        await a.flush()
        assert await look_at(b, second) >= 1.9  # A's hold has landed: B waits it out
    finally:
        for each in (a, b):
            await each.aclose()


@pytest.mark.redis
async def test_a_look_for_holds_only_lets_a_write_go_past_an_overdue_sibling_but_not_into_a_hold(
        redis_url: str) -> None:
    """The last look's final one (``siblings=False``, once the write has waited for its siblings as
    often as it may) waits out a hold the store keeps and nothing else: past a sibling still out it
    goes, and is noted, so the writes after it wait for it in turn. main: no such look (the write
    went on its last wait, unlooked)."""
    from crawlpace.stores.redis import LOOK_AGAIN, TOGETHER

    clock = MockClock()
    a, b, c = await fleet_of(redis_url, clock, 3, WIDE)
    try:
        for store in (a, b, c):  # each measured the site's 10 ms answers
            await store.release(await admitted(store, clock), Outcome(status=200, latency=0.01))
            await store.flush()
        # The scope has held once (a short hold, over by now): its writes are guarded.
        await a._conn.call_eager("hold", [a._keys("site")[0]], [await a._now_arg(), "0.5"])
        clock.advance(1.0)
        first, second, third = await admitted(a, clock), await admitted(b, clock), await admitted(c, clock)
        assert await look_at(a, first) == 0.0  # A writes; its worker will read the answer late
        clock.advance(TOGETHER + 0.01 + 0.005)  # A is overdue
        assert await look_at(b, second) == LOOK_AGAIN
        assert isinstance(second, RedisLease)
        assert isinstance(third, RedisLease)
        assert await b.held_for(("site",), second.lease_id, siblings=False) == 0.0  # B goes: noted
        clock.advance(TOGETHER + 0.01 + 0.005)  # now B is overdue as well
        assert await look_at(c, third) == LOOK_AGAIN
        await a.release(first, Outcome(status=200, latency=0.01))  # A answered: B still out
        await a.flush()
        assert await look_at(c, third) == LOOK_AGAIN  # B was noted as it went
        feedback = ScopeFeedback(backoff=True, status=429, latency=0.01, hold=2.0)
        await b.release(second, Outcome(status=429, latency=0.01, feedback=(feedback,)))
        await b.flush()
        assert await c.held_for(("site",), third.lease_id, siblings=False) >= 1.9  # B's hold: waited out
    finally:
        for each in (a, b, c):
            await each.aclose()


@pytest.mark.redis
async def test_a_site_that_answers_slowly_keeps_its_writes_side_by_side(redis_url: str) -> None:
    """The wait is bounded by the scope's answer time: on a site answering in 300 ms, a sibling out
    less than that plus TOGETHER cannot have been refused and read, so nobody waits for it, and the
    fleet keeps several requests in flight (retry2's rule made every write wait while a sibling
    written 50 ms before it was out: one request per answer time after a single hold). Only a
    sibling overdue (out longer than its answer time plus TOGETHER) holds a write back."""
    from crawlpace.stores.redis import LOOK_AGAIN, TOGETHER

    clock = MockClock()
    fleet = await fleet_of(redis_url, clock, 4, WIDE)
    try:
        for store in fleet:  # each worker has measured the site's 300 ms answers
            await store.release(await admitted(store, clock), Outcome(status=200, latency=0.3))
            await store.flush()
        slow = await fleet_of(redis_url, clock, 1)
        await slow[0].release(await admitted(slow[0], clock), Outcome(status=200, latency=0.3))
        await slow[0].aclose()
        assert not slow[0].holding(("site",))  # in its start, but slow: its writes do not look
        # The scope has held once (a short hold, over by now): every write is guarded.
        # (Its hold alone, as a refusal's reaches the store: the fixed policy's cut of its slots is
        # not what this test is about.)
        first = fleet[0]
        await first._conn.call_eager("hold", [first._keys("site")[0]], [await first._now_arg(), "0.5"])
        clock.advance(2.0)
        leases = [await admitted(store, clock) for store in fleet]
        for store, lease in zip(fleet, leases, strict=True):  # one write every 80 ms: all go
            assert await look_at(store, lease) == 0.0
            assert store.holding(("site",))  # (the first look's reply said the scope has held)
            clock.advance(0.08)
        # The first sibling has been out 320 ms: not yet overdue (300 ms + TOGETHER).
        clock.advance(TOGETHER)  # now the first is overdue: a fifth write waits for it
        late = await admitted(fleet[1], clock)
        assert await look_at(fleet[1], late) == LOOK_AGAIN
        await fleet[0].release(leases[0], Outcome(status=200, latency=0.3))
        await fleet[0].flush()
        assert await look_at(fleet[1], late) == 0.0
    finally:
        for each in fleet:
            await each.aclose()


@pytest.mark.parametrize("heard_during", ["look", "wait"])
async def test_a_hold_this_worker_hears_while_its_write_asks_the_store_stops_the_write(
        heard_during: str) -> None:
    """A fleet's write of a guarded scope asks the store and may wait for a sibling (20 ms at a time);
    meanwhile this worker reads a sibling's refusal and notes its hold, while the hold's call to the
    store is still on its way. The write went on the store's word (main: its local look was read only
    before the first look); now it reads it again after every look and every wait, and is not written."""
    look = LastLook()
    granted = time.monotonic() - 0.2
    refusal = Outcome(status=429, feedback=(ScopeFeedback(backoff=True, hold=5.0),))
    refused = _Permit(("site",), granted, refusal)
    asked: list[bool] = []
    slept: list[float] = []

    async def held_for(scopes: tuple[str, ...], lease_id: str = "", siblings: bool = True) -> float:
        asked.append(siblings)
        if heard_during == "look":
            look.note(refused, time.monotonic())  # read while the look's reply was on its way
            return 0.0  # the store has no hold yet: go
        return 0.02 if len(asked) == 1 else 0.0  # a sibling overdue, then answered

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        look.note(refused, time.monotonic())  # read during the wait

    fetcher = AiohttpFetcher(user_agent="test", timeout=5.0, max_connections=4, trust_env=False,
                             clock=time.monotonic, sleep=sleep)
    try:
        params = aiohttp.TraceRequestHeadersSentParams("GET", URL("http://127.0.0.1/page/2"), CIMultiDict())
        token = WRITING.set(Writing(_Permit(("site",), granted), look, time.monotonic, held_for,
                                    holding=lambda s: True, lease_id="site-2"))
        try:
            with pytest.raises(NotSent):
                await fetcher._last_look(fetcher._session, SimpleNamespace(), params)
        finally:
            WRITING.reset(token)
    finally:
        await fetcher.aclose()
    assert asked == [True]  # stopped at once, no further look
    assert slept == ([] if heard_during == "look" else [0.02])
