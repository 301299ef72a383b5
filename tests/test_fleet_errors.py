"""A fleet on a flaky site (5xx and hangs that are the site's own, not load) keeps one process's pace.

The verdict on the scope's errors (``policy/_load_errors.py``) is stored
state, one judgement fed by every worker's outcomes: a copy of the shared policy
read anew after another worker's write-back holds it. Before, a worker's
reload forgot its verdict, the next 5xx was believed again and cut the shared
rate, and a fleet of 4 crawled a site failing 5.6 % of its requests some 30
times slower than one process; then each worker kept a verdict of its own, and
each one's first errors still cut the shared rate (8 workers: a quarter of one
process's pace). An outcome applied again after its write-back lost the race
meets the verdict as the newer policy holds it, which has not counted it.

A request that hangs for seconds while the site's other answers stay quick
holds a slot; rampup counts it as a straggler once a later send is answered
(``Rampup.out``/``settled``), and the scope's slots make room for it. One
process's scope tells rampup of each send as it goes; a fleet's admissions
write nothing back, so each worker's release tells the shared record of the
requests that worker still has out. Without that, a fleet's slots never made
room for its hangs, and a flaky site's few hangs filled them.
"""

from __future__ import annotations

import random
import uuid

import pytest

from crawlpace import Settings
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Blocked, Lease, Outcome, Store, open_store
from crawlpace.stores._policies import PolicyFactory
from crawlpace.testing import MockClock

from .redis_server import delivered
from .test_fleet_learning import Bucket, LateSlots, Run
from .test_fleet_learning import measure as crawl_fleet

SETTINGS = Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}, "CONCURRENT_REQUESTS": 16})
SCOPE = (("site", 1.0),)
PAGE = 0.01  # seconds a quick answer takes
HANG_AT, HANG = 8.0, 6.0  # the first send from then on hangs this long, then is answered 200


async def answer(store: Store, lease: Lease, took: float) -> None:
    feedback = ScopeFeedback(backoff=False, status=200, latency=took)
    await store.release(lease, Outcome(status=200, latency=took, feedback=(feedback,)))
    await delivered(store)


async def slots_while_a_request_hangs(stores: list[Store], clock: MockClock) -> tuple[int, int]:
    """The workers take turns at sending every 50 ms, each answered in ``PAGE`` seconds, but the first
    send after ``HANG_AT``, which hangs. Returns the scope's slots just before it, and 3 s into it."""
    hung: tuple[Store, Lease] | None = None
    before = 0
    turn = 0
    while clock.now() < HANG_AT + 3.0:
        store = stores[turn % len(stores)]
        turn += 1
        got = await store.acquire(SCOPE)
        if isinstance(got, Lease):
            if hung is None and clock.now() >= HANG_AT:
                hung = (store, got)
                clock.advance(0.05)
                continue
            clock.advance(PAGE)
            await answer(store, got, PAGE)
        elif not isinstance(got, Blocked):  # pragma: no cover - acquire returns one of the two
            raise AssertionError(got)
        if hung is None:
            before = await concurrency(store)
        clock.advance(0.05 - (PAGE if isinstance(got, Lease) else 0.0))
    during = await concurrency(stores[0])
    assert hung is not None
    await answer(hung[0], hung[1], HANG)
    return before, during


async def concurrency(store: Store) -> int:
    snapshot = await store.snapshot("site")
    assert snapshot is not None
    return snapshot.concurrency


async def measure(url: str, workers: int) -> tuple[int, int]:
    clock = MockClock()
    if url != "memory://":
        url += f"?namespace=s{uuid.uuid4().hex[:10]}&time=local"
    stores = [open_store(url, SETTINGS, clock, random.Random(n)) for n in range(workers)]
    try:
        return await slots_while_a_request_hangs(stores, clock)
    finally:
        for store in stores:
            await store.aclose()


@pytest.mark.redis
async def test_a_fleets_slots_make_room_for_a_straggler_as_one_process_does(redis_url: str) -> None:
    alone = await measure("memory://", 1)
    fleet = await measure(redis_url.split("?")[0], 2)
    # One process: the hung request, overtaken by quick answers, is a straggler with a slot of its own.
    assert alone[1] == alone[0] + 1
    # The fleet's shared record heard of no send but each lease's own: its slots stayed as they were,
    # so a few hangs at once left none free (an errors site ran several times slower in a fleet).
    assert fleet[1] == fleet[0] + 1


class Flaky(Bucket):
    """A site with no limit answering ``share`` of its requests 503 (in a page's time), whatever the pace."""

    def __init__(self, share: float) -> None:
        super().__init__(0.043)
        self.rng, self.share = random.Random(5), share

    def answer(self, at: float, inflight: int) -> tuple[int, float]:
        return (503 if self.rng.random() < self.share else 200), 0.043


# 4 workers on a site failing 5.6 % of its requests: 2.7/s against one process's 89/s from 6 s to 12 s
# when each worker's verdict was forgotten at every reload of its copy; then 29/s (a write-back that
# lost the race was redone on a verdict already reached, keeping the cuts the verdict forgives).
# 8 workers on a site failing 14 % (errors23 of seed 468236748): when each worker judged alone, each
# one's first errors cut the shared rate again, and the 8 (a few outcomes each) sent 24-55/s. The
# verdict is stored state now: every worker's outcomes feed one judgement, as one process's do.
@pytest.mark.redis
@pytest.mark.parametrize(("workers", "share", "seconds", "spans"), [
    (4, 0.056, 12.0, ((6.0, 12.0),)),
    (8, 0.14, 8.0, ((2.0, 4.0), (4.0, 6.0), (6.0, 8.0))),
], ids=["4-workers-5.6%", "8-workers-14%"])
async def test_a_fleet_judges_a_sites_errors_once_as_one_process_does(
        redis_url: str, workers: int, share: float, seconds: float,
        spans: tuple[tuple[float, float], ...]) -> None:
    url = redis_url.split("?")[0]
    alone = await crawl_fleet("memory://", 1, latency=0.043, seconds=seconds, site=Flaky(share))
    fleet = await crawl_fleet(url, workers, latency=0.043, seconds=seconds, site=Flaky(share))
    assert len(fleet.by_worker) == workers
    for start, end in spans:
        assert fleet.per_second(start, end) >= 0.9 * alone.per_second(start, end)


def test_a_caps_instant_503_told_late_is_a_cap_not_an_error() -> None:
    # A fleet's worker writes its request a moment after the store granted it (0.1-0.25 s on a loaded
    # machine), so the time from the grant to the answer is no measure of how quick a refusal was:
    # the answer's own latency is. A cap's 503 in 2 ms with five in flight (pages take 0.12 s) is a
    # cap on requests in flight, left to rampup; taken for a slow error, it was judged with
    # the site's own errors, and once the verdict was shared every worker ignored the cap's refusals.
    policy = PolicyFactory(SETTINGS).new("site")
    assert policy.rampup is not None
    for i in range(12):
        sent = i * 0.05
        policy.on_admit(sent, 1.0)
        ok = ScopeFeedback(backoff=False, status=200, latency=0.12)
        policy.on_outcome(sent + 0.12, ok, generation=policy.generation, sent_at=sent, expected_use=1.0,
                          inflight=4)
    policy.on_admit(1.0, 1.0)
    generation = policy.rampup.generation
    refused = ScopeFeedback(backoff=True, status=503, latency=0.002)
    policy.on_outcome(1.2, refused, generation=policy.generation, sent_at=1.0, expected_use=1.0, inflight=5)
    assert policy.load_errors is None  # not weighed as an error that may or may not be load
    assert policy.rampup.generation > generation  # rampup's pushback, as a cap's refusal is


@pytest.mark.redis
async def test_a_fleet_on_a_cap_of_one_freed_late_rests_its_slot_as_one_process_does(redis_url: str) -> None:
    # A cap of one request whose slot is freed 83 ms after its 0.135 s answer (conncap02 of seed
    # 313565000): the refusal of a send 68 ms after an answer, alone in flight, was read as the site's
    # own error (a slot freed late was looked for within half a page's time); the verdict that such
    # errors are not load, shared, stopped every worker cutting for them: 120 refusals of 138 sends
    # (one process: 2 of 61). A refusal sooner after an answer than any accepted send is a slot freed late.
    url = redis_url.split("?")[0]
    alone = await crawl_fleet("memory://", 1, latency=0.135, seconds=20.0, site=LateSlots(0.135, 1, 0.083))
    fleet = await crawl_fleet(url, 4, latency=0.135, seconds=20.0, site=LateSlots(0.135, 1, 0.083))
    assert alone.refused <= 5
    assert fleet.refused <= 5
    assert len(fleet.sends) - fleet.refused >= 0.85 * (len(alone.sends) - alone.refused)


@pytest.mark.parametrize(("rest", "cap"), [(0.1, True), (0.01, False)])
def test_a_lone_refusal_sooner_after_an_answer_than_any_accepted_send_is_a_slot_freed_late(
        rest: float, cap: bool) -> None:
    # One request at a time, each sent ``rest`` after the previous answer (0.12 s pages), all accepted;
    # then one is refused in 2 ms, sent 80 ms after an answer (past half a page's time). After rests of
    # 0.1 s it fits a cap of one whose slot is still held (the rate's cut rests it; before, it was taken
    # for the site's own error); after rests of 10 ms, accepted, it does not: a backend failing at once,
    # weighed with the site's errors.
    policy = PolicyFactory(SETTINGS).new("site")
    assert policy.rampup is not None
    sent = 0.0
    for _ in range(12):
        policy.on_admit(sent, 1.0)
        ok = ScopeFeedback(backoff=False, status=200, latency=0.12)
        policy.on_outcome(sent + 0.12, ok, generation=policy.generation, sent_at=sent, expected_use=1.0,
                          inflight=1)
        sent += 0.12 + rest
    sent += 0.08 - rest
    policy.on_admit(sent, 1.0)
    refused = ScopeFeedback(backoff=True, status=503, latency=0.002)
    policy.on_outcome(sent + 0.002, refused, generation=policy.generation, sent_at=sent, expected_use=1.0,
                      inflight=1)
    assert (policy.load_errors is None) is cap


class HangPastACapOfOne(Bucket):
    """A site taking one request at a time (13 ms pages; a request that finds the last one unanswered is
    refused with 503 at once), whose ``nth`` request hangs 10 s, answered 200 then, without holding the
    one slot (a backend's own stall, as a flaky site's hangs are: the others still get answers)."""

    def __init__(self, nth: int) -> None:
        super().__init__(0.013)
        self.busy_until, self.count, self.nth = -1.0, 0, nth
        self.hung_at: float | None = None

    def answer(self, at: float, inflight: int) -> tuple[int, float]:
        if at < self.busy_until:
            return 503, 0.002
        self.count += 1
        if self.count == self.nth:
            self.hung_at = at
            return 200, 10.0
        self.busy_until = at + 0.013
        return 200, 0.013


async def pages_during_the_hang(url: str, workers: int) -> float:
    site = HangPastACapOfOne(100)
    run: Run = await crawl_fleet(url, workers, latency=0.013, seconds=15.0, site=site)
    assert site.hung_at is not None
    return run.ok_per_second(site.hung_at + 0.5, site.hung_at + 9.5)


# A scope learned to take one request at a time (a cap of one slot: a flaky site's quick 5xx at two in
# flight read so, errors02 of seed 1464465244), and a request hangs. One process counts it hung once it is
# out longer than the site's answers take (``Rampup.hung_out``, at the wake the send set) and gives it a
# slot of its own. A fleet's shared record of sends out keeps sends long answered, so no worker counted
# hangs: the hang held the one slot and every worker fell silent until it ended (0 pages in those 9 s;
# 10 s per timed-out hang, a flaky site crawled 5 times slower). Now the worker whose request hangs counts
# it from its own record, at the wake its send set, and shares it with the fleet (``_hung_sends``).
@pytest.mark.redis
@pytest.mark.parametrize("workers", [2, 4])
async def test_a_fleet_makes_room_for_a_hang_past_a_cap_of_one_slot_as_one_process_does(
        redis_url: str, workers: int) -> None:
    alone = await pages_during_the_hang("memory://", 1)
    fleet = await pages_during_the_hang(redis_url.split("?")[0], workers)
    assert alone >= 15.0  # of about 20 a second before the hang
    assert fleet >= 0.9 * alone


def test_a_workers_hangs_join_the_fleets_shared_ones_once_and_leave_when_they_end() -> None:
    # Pages answered in 13 ms, one at a time; then this worker has two requests out, one sent 2 s ago
    # (hung) and one just now, and the stored record holds another worker's hang. This worker's count
    # is both hangs; applied again (a write-back redone on a newer copy) it adds nothing twice; once its
    # own hang ends, its entry leaves the record and the other worker's stays.
    policy = PolicyFactory(SETTINGS).new("site")
    rampup = policy.rampup
    assert rampup is not None
    for i in range(20):
        sent = i * 0.05
        policy.on_admit(sent, 1.0)
        ok = ScopeFeedback(backoff=False, status=200, latency=0.013)
        policy.on_outcome(sent + 0.013, ok, generation=policy.generation, sent_at=sent, expected_use=1.0,
                          inflight=1)
    out: list[float] = [1.0, 2.999]
    mine: list[float] = []
    rampup.own_sends(out, mine)
    stored: tuple[float, ...] = (1.5,)  # another worker's hang, in the stored policy
    rampup._hung_sends = stored
    assert rampup.hung_out(3.0)[0] == 2  # its own hang (1.0) and the other worker's; 2.999 is not late
    rampup.note_hung(3.0)
    assert list(rampup._hung_sends) == [1.0, 1.5]
    rampup.note_hung(3.0)
    assert list(rampup._hung_sends) == [1.0, 1.5]
    out.remove(1.0)  # answered (``SharedPolicies.answered``)
    rampup.note_hung(3.1)
    assert list(rampup._hung_sends) == [1.5]
    assert rampup.hung_out(3.1)[0] == 1
