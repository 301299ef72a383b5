"""The async facade on the fake clock: waiting, fairness, cancellation, feedback."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import pytest

from crawlpace import NotReady, Permit, PermitError, ScopeError, Throttler, ThrottlerClosed
from crawlpace.testing import MockClock

from .conftest import ThrottlerFactory

SEED_EXAMPLE = {
    "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
    "DOWNLOAD_DELAY": 0.3,
    "DOWNLOAD_DELAY_PER_SLOT": 1.0,
}


async def test_seed_timeline_is_exact(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler(SEED_EXAMPLE)
    sends: list[float] = []

    async def fetch(i: int) -> None:
        async with throttler.slot(f"https://example.com/{i}") as permit:
            sends.append(clock.now())
            await clock.sleep(0.05)
            permit.feedback(status=200)

    await asyncio.gather(*(fetch(i) for i in range(3)))
    assert sends == [0.0, 0.3, 1.0]


async def test_defaults_space_sends_one_second_apart(clock: MockClock,
                                                    make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler()
    sends: list[float] = []

    async def fetch() -> None:
        async with throttler.slot("https://example.com/"):
            sends.append(clock.now())

    await asyncio.gather(*(fetch() for _ in range(4)))
    assert sends == [0.0, 1.0, 2.0, 3.0]


async def test_hosts_are_throttled_apart(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler()
    sends: dict[str, list[float]] = {}

    async def fetch(url: str) -> None:
        async with throttler.slot(url) as permit:
            sends.setdefault(permit.scopes[0], []).append(clock.now())

    urls = ["https://toscrape.com/a", "https://books.toscrape.com/a",
            "https://toscrape.com/b", "https://books.toscrape.com/b"]
    await asyncio.gather(*(fetch(u) for u in urls))
    assert sends == {"toscrape.com": [0.0, 1.0], "books.toscrape.com": [0.0, 1.0]}


@dataclass
class _Meter:
    """Counts requests in flight per scope and remembers the peaks."""

    now: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)

    def enter(self, scopes: tuple[str, ...]) -> None:
        for s in scopes:
            self.now[s] = self.now.get(s, 0) + 1
            self.peak[s] = max(self.peak.get(s, 0), self.now[s])

    def leave(self, scopes: tuple[str, ...]) -> None:
        for s in scopes:
            self.now[s] -= 1


async def test_seed_multi_scope_example_holds_under_load(clock: MockClock,
                                                         make_throttler: ThrottlerFactory) -> None:
    # Seed 001: the registrable domain caps its subdomains together.
    throttler = make_throttler({
        "CONCURRENT_REQUESTS": 1000,
        "DOWNLOAD_DELAY": 0.0,
        "DOWNLOAD_DELAY_PER_SLOT": 0.0,
        "THROTTLING_SCOPES": {
            "toscrape.com": {"concurrency": 32},
            "books.toscrape.com": {"concurrency": 24},
            "quotes.toscrape.com": {"concurrency": 16},
        },
    })
    meter = _Meter()

    async def fetch(child: str, i: int) -> None:
        async with throttler.slot(scopes={"toscrape.com", child}) as permit:
            meter.enter(permit.scopes)
            await clock.sleep(0.5 + (i % 7) * 0.1)
            meter.leave(permit.scopes)

    jobs = [fetch("books.toscrape.com", i) for i in range(200)]
    jobs += [fetch("quotes.toscrape.com", i) for i in range(200)]
    await asyncio.gather(*jobs)
    assert meter.peak == {"toscrape.com": 32, "books.toscrape.com": 24, "quotes.toscrape.com": 16}
    assert throttler.inflight == 0
    assert throttler.waiting == 0


async def test_global_cap_limits_all_scopes_together(clock: MockClock,
                                                     make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"CONCURRENT_REQUESTS": 3, "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
                                "DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0})
    meter = _Meter()

    async def fetch(host: str) -> None:
        async with throttler.slot(f"https://{host}/"):
            meter.enter(("all",))
            await clock.sleep(1.0)
            meter.leave(("all",))

    await asyncio.gather(*(fetch(f"h{i % 5}.example") for i in range(20)))
    assert meter.peak["all"] == 3
    assert clock.now() == pytest.approx(7.0)  # ceil(20 / 3) rounds of 1 s


async def test_waiters_of_a_scope_are_served_in_arrival_order(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.5, "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    order: list[int] = []

    async def fetch(i: int) -> None:
        await clock.sleep(i * 0.01)  # arrive in index order
        async with throttler.slot("https://example.com/"):
            order.append(i)

    await asyncio.gather(*(fetch(i) for i in reversed(range(6))))
    assert order == list(range(6))


async def test_a_waiter_blocked_elsewhere_does_not_hold_up_a_free_scope(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"THROTTLING_SCOPES": {"slow": {"delay": 10.0}},
                                "DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    first = await throttler.acquire(scopes="slow")
    await first.release()
    sends: dict[str, float] = {}

    async def both() -> None:  # needs "slow", which rests until t=10
        async with throttler.slot(scopes={"slow", "fast"}):
            sends["both"] = clock.now()

    async def fast_only() -> None:  # arrives later, only needs "fast"
        await clock.sleep(1.0)
        async with throttler.slot(scopes="fast"):
            sends["fast"] = clock.now()

    await asyncio.gather(both(), fast_only())
    assert sends == {"both": 10.0, "fast": 1.0}


async def test_requests_sharing_scopes_in_any_order_never_deadlock(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    done = 0

    async def fetch(scopes: list[str]) -> None:
        nonlocal done
        async with throttler.slot(scopes={s: 1.0 for s in scopes}):
            await clock.sleep(0.1)
        done += 1

    orders = [["a", "b"], ["b", "a"], ["b", "c", "a"], ["c", "a"]] * 10
    await asyncio.gather(*(fetch(o) for o in orders))
    assert done == 40
    assert clock.now() == pytest.approx(4.0)  # each pair conflicts: one at a time


async def test_cancelled_waiter_holds_nothing(clock: MockClock,
                                              make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    holder = await throttler.acquire(scopes={"a", "b"})
    waiter = asyncio.create_task(throttler.acquire(scopes={"a", "b"}))
    await asyncio.sleep(0)
    assert throttler.waiting == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert throttler.waiting == 0
    await holder.release()
    stats = await throttler.stats()
    assert {name: (s.inflight, s.queued) for name, s in stats.items()} == {"a": (0, 0), "b": (0, 0)}
    # Both scopes are free again: a new request goes straight through.
    permit = await throttler.try_acquire(scopes={"a", "b"})
    assert isinstance(permit, Permit)
    await permit.release()


async def test_cancel_right_after_grant_gives_the_slot_back(clock: MockClock,
                                                           make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    holder = await throttler.acquire(scopes="a")
    waiter = asyncio.create_task(throttler.acquire(scopes="a"))
    await asyncio.sleep(0)
    await holder.release()  # marks "a": the pump will grant the waiter...
    await asyncio.sleep(0)  # ...run the pump: the future now holds a lease
    waiter.cancel()  # ...and the waiting task is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert throttler.inflight == 0
    stats = await throttler.scope_stats("a")
    assert stats is not None
    assert stats.inflight == 0


async def test_try_acquire_says_when(clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 2.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    permit = await throttler.try_acquire("https://example.com/")
    assert isinstance(permit, Permit)
    await permit.release()
    result = await throttler.try_acquire("https://example.com/")
    assert isinstance(result, NotReady)
    assert not result
    assert result.ready_at == 2.0
    assert result.waiting_on == (("example.com", 2.0),)


async def test_try_acquire_reports_full_scopes_without_a_time(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    held = await throttler.acquire(scopes="a")
    result = await throttler.try_acquire(scopes={"a": 1.0, "b": 1.0})
    assert isinstance(result, NotReady)
    assert result.ready_at is None
    assert result.waiting_on == (("a", None),)
    await held.release()


async def test_try_acquire_does_not_jump_the_queue(clock: MockClock,
                                                   make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 5.0})
    held = await throttler.acquire(scopes="a")
    waiter = asyncio.create_task(throttler.acquire(scopes="a"))
    await asyncio.sleep(0)
    await held.release()
    result = await throttler.try_acquire(scopes="a")
    assert isinstance(result, NotReady)
    assert result.waiting_on == (("a", None),)
    permit = await waiter
    assert permit.granted_at == 5.0
    await permit.release()


async def test_feedback_records_status_and_latency(clock: MockClock,
                                                   make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler()

    class Response:
        status_code = 503

    async with throttler.slot("https://example.com/") as permit:
        await clock.sleep(0.25)
        permit.feedback(Response())
    assert permit.outcome is not None
    assert permit.outcome.status == 503
    assert permit.outcome.latency == pytest.approx(0.25)
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert (stats.responses, stats.errors) == (1, 0)
    assert stats.last_latency == pytest.approx(0.25)


@pytest.mark.parametrize(("lag", "stalled", "given"), [(0.03, False, 0.03), (-1.0, False, 0.0),
                                                    (float("nan"), False, 0.0), (0.03, True, 0.0)])
async def test_a_permits_lag_reaches_each_scopes_feedback(make_throttler: ThrottlerFactory, lag: float,
                                                           stalled: bool, given: float) -> None:
    # The time from the admission to the fetch (a fleet worker's wait for the store's reply): rampup
    # reads the arrivals' spread from it. Nonsense is none, and a stall's lag is this process's own.
    throttler = make_throttler()
    async with throttler.slot("https://example.com/") as permit:
        permit.feedback(status=200, latency=0.002, lag=lag, stalled=stalled)
    assert permit.outcome is not None
    assert [signal.lag for signal in permit.outcome.feedback] == [given]


async def test_exception_in_block_is_fed_back_and_reraised(clock: MockClock,
                                                           make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler()
    with pytest.raises(TimeoutError):
        async with throttler.slot("https://example.com/") as permit:
            raise TimeoutError("read timed out")
    assert permit.released
    assert permit.outcome is not None
    assert permit.outcome.error == "TimeoutError"
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert (stats.inflight, stats.errors) == (0, 1)


async def test_feedback_after_release_is_an_error(make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler()
    permit = await throttler.acquire("https://example.com/")
    await permit.release()
    await permit.release()  # a second release is harmless
    with pytest.raises(PermitError, match="feedback given after the permit was released"):
        permit.feedback(status=200)


async def test_closing_fails_waiters_and_refuses_new_requests(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 100.0})
    held = await throttler.acquire(scopes="a")
    waiter = asyncio.create_task(throttler.acquire(scopes="a"))
    await asyncio.sleep(0)
    await throttler.aclose()
    with pytest.raises(ThrottlerClosed):
        await waiter
    with pytest.raises(ThrottlerClosed):
        await throttler.acquire(scopes="a")
    await held.release()


async def test_bad_scopes_are_rejected(make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler()
    with pytest.raises(ScopeError, match="at least one scope"):
        await throttler.acquire(scopes=set())
    with pytest.raises(ScopeError, match="has no host"):
        await throttler.acquire("not a url")
    with pytest.raises(TypeError, match="give a request"):
        await throttler.acquire()


async def test_stats_and_repr_show_the_scope(clock: MockClock,
                                             make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"CONCURRENT_REQUESTS_PER_DOMAIN": 4, "DOWNLOAD_DELAY": 0.5})
    held = [await throttler.acquire("https://example.com/") for _ in range(2)]
    waiter = asyncio.create_task(throttler.acquire("https://example.com/"))
    await asyncio.sleep(0)
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert (stats.concurrency, stats.delay, stats.inflight, stats.queued, stats.sends) == \
        (4, 0.5, 2, 1, 2)
    assert stats.ready_in == pytest.approx(0.5)  # the second send was at 0.5
    assert repr(stats) == ("<Scope example.com delay=0.50s inflight=2/4 queued=1 sends=2 "
                           "next_in=500ms>")
    assert repr(throttler) == "<Throttler open inflight=2/16 waiting=1 scopes_with_queues=1>"
    assert stats.as_dict()["scope"] == "example.com"
    third = await waiter
    for permit in [*held, third]:
        await permit.release()
    assert await throttler.scope_stats("nowhere.example") is None


async def test_many_waiters_log_one_warning(clock: MockClock, make_throttler: ThrottlerFactory,
                                            caplog: pytest.LogCaptureFixture) -> None:
    throttler = make_throttler({"DELAYED_REQUESTS_WARN_THRESHOLD": 5, "DOWNLOAD_DELAY": 0.01})
    with caplog.at_level(logging.WARNING, logger="crawlpace"):
        async def fetch() -> None:
            async with throttler.slot(scopes="a"):
                pass

        await asyncio.gather(*(fetch() for _ in range(12)))
    warnings = [r for r in caplog.records if "DELAYED_REQUESTS_WARN_THRESHOLD" in r.getMessage()]
    assert len(warnings) == 1


async def test_inactive_settings_are_announced(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crawlpace"):
        throttler = Throttler({"AUTOTHROTTLE_ENABLED": True,
                               "THROTTLING_SCOPES": {"api.example": {"rampup": True}}})
    await throttler.aclose()
    assert "setting does not work as written: AUTOTHROTTLE_ENABLED for scope 'api.example'" in caplog.text


async def test_real_clock_spacing_without_sleeping_for_it() -> None:
    # The default clock with zero delays: nothing waits, all five go at once.
    async with Throttler({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0,
                          "CONCURRENT_REQUESTS_PER_DOMAIN": 5}) as throttler:
        permits = [await throttler.acquire("https://example.com/") for _ in range(5)]
        assert throttler.inflight == 5
        for permit in permits:
            await permit.release()
        assert throttler.inflight == 0


async def test_a_failing_store_fails_the_waiters_instead_of_hanging(
        clock: MockClock, caplog: pytest.LogCaptureFixture) -> None:
    from crawlpace import Settings
    from crawlpace._scoping._scopes import Demand
    from crawlpace.stores import Blocked, Lease, MemoryStore

    class BrokenStore(MemoryStore):
        broken = False

        def acquire_nowait(self, demands: tuple[Demand, ...]) -> Lease | Blocked:
            if self.broken:
                raise RuntimeError("store went away")
            return super().acquire_nowait(demands)

    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0})
    store = BrokenStore(settings, clock)
    async with Throttler(settings, store=store, clock=clock) as throttler:
        held = await throttler.acquire(scopes="a")
        waiter = asyncio.create_task(throttler.acquire(scopes="a"))
        await asyncio.sleep(0)
        store.broken = True
        await held.release()
        with pytest.raises(RuntimeError, match="store went away"):
            await waiter
    assert "admitting waiters of scope 'a' failed" in caplog.text


async def test_many_waiters_on_one_scope_are_all_served(clock: MockClock,
                                                        make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0.001, "DOWNLOAD_DELAY_PER_SLOT": 0.0})
    order: list[int] = []

    async def fetch(i: int) -> None:
        async with throttler.slot(scopes="a"):
            order.append(i)

    await asyncio.gather(*(fetch(i) for i in range(2000)))
    assert order == list(range(2000))
    assert clock.now() == pytest.approx(1.999)


async def test_feedback_without_a_status_is_not_counted_as_a_response(
        clock: MockClock, make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler()
    async with throttler.slot("https://example.com/") as permit:
        permit.feedback()  # latency only
    stats = await throttler.scope_stats("example.com")
    assert stats is not None
    assert (stats.responses, stats.errors, stats.last_latency) == (0, 0, 0.0)


async def test_nowait_paths_answer_at_once_or_say_an_await_is_needed(clock: MockClock) -> None:
    from types import SimpleNamespace as Answer

    from crawlpace import ThrottlingManager

    class Awaited(ThrottlingManager):
        async def get_scopes(self, request: object) -> str:
            return "api"

        async def get_response_backoff(self, response: object) -> dict[str, object]:
            return await super().get_response_backoff(response)

    settings = {"CONCURRENT_REQUESTS_PER_DOMAIN": 1, "DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}
    async with Throttler(settings, clock=clock) as plain:
        permit = plain.try_acquire_nowait("https://a.example/1")
        assert isinstance(permit, Permit)
        refused = plain.try_acquire_nowait("https://a.example/2")
        assert isinstance(refused, NotReady)
        assert refused.ready_at is None
        permit.feedback(status=200)
        assert permit.release_nowait()
        assert permit.released
        assert isinstance(plain.try_acquire_nowait("https://a.example/2"), Permit)
    async with Throttler(settings, clock=clock, manager=Awaited()) as managed:
        assert managed.try_acquire_nowait("https://a.example/1") is None  # the manager must be awaited
        permit = await managed.try_acquire("https://a.example/1")
        assert isinstance(permit, Permit)
        assert permit.scopes == ("api",)
        permit.feedback(Answer(status_code=200, headers={}))
        assert not permit.release_nowait()
        assert not permit.released
        await permit.release()
        assert permit.released
