"""SyncThrottler, the blocking facade, and the httpx.Client transport built on it.

The facade runs the throttler on a loop thread of its own; these tests check
what that promises: blocked callers sleep rather than spin, timeouts and
closing free waiting threads, a permit is never lost, and an httpx.Client
behaves like the async client against simulated sites.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from crawlpace import NotReady, PermitError, ScopeGivenUp, SyncPermit, SyncThrottler, ThrottlerClosed
from crawlpace.http import (
    ATTEMPTS_EXTENSION,
    SCOPES_EXTENSION,
    ThrottledSyncTransport,
    throttled_client,
    throttled_sync_client,
)
from crawlpace.sim import DeadSite, OverloadSite, RetryAfterSite, SimServer, Site

from .redis_server import RedisServer
from .sim_thread import Recorder, serve_in_thread

HOST = "127.0.0.2"
FAST: dict[str, Any] = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}
SLACK = 0.02


def paced(delay: float) -> dict[str, Any]:
    return {"DOWNLOAD_DELAY": delay, "DOWNLOAD_DELAY_PER_SLOT": 0.0, "RANDOMIZE_DOWNLOAD_DELAY": False}


# --- the facade -------------------------------------------------------------------------------------


def test_a_blocked_caller_sleeps_instead_of_spinning() -> None:
    with SyncThrottler(paced(0.6)) as throttler:
        throttler.acquire("http://127.0.0.2/").release()
        cpu, wall = time.process_time(), time.monotonic()
        throttler.acquire("http://127.0.0.2/").release()
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    assert wall >= 0.6 - SLACK
    # A polling loop would burn most of the wait; sleeping on a lock burns next to nothing.
    assert cpu < 0.1 * wall


def test_many_threads_share_one_slot_and_lose_no_permit() -> None:
    settings = {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 3}
    inside = 0
    peak = 0
    lock = threading.Lock()

    def work(throttler: SyncThrottler) -> None:
        nonlocal inside, peak
        with throttler.slot("http://127.0.0.2/") as permit:
            with lock:
                inside += 1
                peak = max(peak, inside)
            time.sleep(0.005)  # the "request": something that holds the slot for a moment
            with lock:
                inside -= 1
            permit.feedback(status=200)

    with SyncThrottler(settings) as throttler, ThreadPoolExecutor(12) as pool:
        list(pool.map(lambda _: work(throttler), range(60)))
        stats = throttler.scope_stats(HOST)
        assert throttler.throttler.inflight == 0
    assert peak == 3
    assert stats is not None
    assert (stats.sends, stats.responses) == (60, 60)


def test_a_timeout_withdraws_the_request() -> None:
    with SyncThrottler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1}) as throttler:
        held = throttler.acquire("http://127.0.0.2/")
        with pytest.raises(TimeoutError, match="no permit"):
            throttler.acquire("http://127.0.0.2/", timeout=0.05)
        assert throttler.throttler.waiting == 0
        held.release()
        throttler.acquire("http://127.0.0.2/", timeout=1.0).release()


def test_closing_frees_waiting_threads() -> None:
    throttler = SyncThrottler({**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    held = throttler.acquire("http://127.0.0.2/")
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            throttler.acquire("http://127.0.0.2/")
        except BaseException as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 5.0
    while throttler.throttler.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.005)  # waiting for the other thread to queue, not for a throttle
    throttler.close()
    waiter.join(5.0)
    assert [type(error) for error in errors] == [ThrottlerClosed]
    # Releasing after close says so instead of hanging.
    with pytest.raises(ThrottlerClosed):
        held.release()
    with pytest.raises(ThrottlerClosed):
        throttler.acquire("http://127.0.0.2/")
    throttler.close()  # twice is fine


def test_permits_report_and_refuse_late_feedback() -> None:
    with SyncThrottler(FAST) as throttler:
        with throttler.slot("http://127.0.0.2/") as permit:
            assert isinstance(permit, SyncPermit)
            permit.feedback(status=503)
        assert permit.released
        assert permit.outcome is not None
        assert permit.outcome.status == 503
        with pytest.raises(PermitError):
            permit.feedback(status=200)


def test_an_exception_in_the_block_is_fed_back() -> None:
    with SyncThrottler(FAST) as throttler:
        with pytest.raises(TimeoutError), throttler.slot("http://127.0.0.2/") as permit:
            raise TimeoutError("read timed out")
        assert permit.outcome is not None
        assert permit.outcome.error == "TimeoutError"


def test_a_blocking_client_hears_a_hold_before_its_release_reaches_the_store(
        redis_server: RedisServer) -> None:
    """The blocking clients' release (``SyncPermit._report``) tells the last look of a refusal's hold once
    its outcome is known, before a shared store's round trips: there, a hold heard only after the
    release let the client's other threads write into it (the async clients' race, in threads)."""
    store = f"{redis_server.url}?namespace=t{uuid.uuid4().hex[:12]}"
    heard: list[float | None] = []
    with SyncThrottler(FAST, store=store) as throttler:
        permit = throttler.acquire("http://127.0.0.2/")
        answer = httpx.Response(429, headers={"Retry-After": "5"})
        permit._report(answer, latency=0.01, heard=lambda inner: heard.append(
            inner.outcome.feedback[0].hold if inner.outcome is not None else None))
        assert permit.released
    assert heard == [5.0]


def test_try_acquire_never_waits() -> None:
    with SyncThrottler(paced(30.0)) as throttler:
        first = throttler.try_acquire("http://127.0.0.2/")
        assert isinstance(first, SyncPermit)
        first.release()
        second = throttler.try_acquire("http://127.0.0.2/")
        assert isinstance(second, NotReady)
        assert second.ready_at is not None
        assert second.ready_at - throttler.now() == pytest.approx(30.0, abs=0.5)


def test_store_objects_are_refused() -> None:
    with pytest.raises(TypeError, match="takes a store URL"):
        SyncThrottler(store=object())  # type: ignore[arg-type]


# --- the httpx.Client transport ------------------------------------------------------------------


def test_httpx_client_retries_a_429_after_the_wait() -> None:
    site = RetryAfterSite(rate=1.0, embargo=1)
    with serve_in_thread(site, HOST) as url, \
            throttled_sync_client(FAST, base_url=url, trust_env=False, timeout=5.0) as client:
        first = client.get("/page/1")
        second = client.get("/page/2")
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.extensions[ATTEMPTS_EXTENSION] == 2
    assert site.stats.statuses == {200: 2, 429: 1}
    assert not site.stats.violations


def test_httpx_client_keeps_concurrency_across_threads() -> None:
    site = OverloadSite(latency=0.05, per_inflight=0.0, limit=50)
    settings = {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 2}
    with serve_in_thread(site, HOST) as url, \
            throttled_sync_client(settings, base_url=url, trust_env=False, timeout=5.0) as client, \
            ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(lambda n: client.get(f"/page/{n}").status_code, range(1, 13)))
    assert statuses == [200] * 12
    assert site.stats.peak_inflight == 2


def test_httpx_client_explicit_scopes_and_public_throttler() -> None:
    app = Recorder()
    settings = {**FAST, "RANDOMIZE_DOWNLOAD_DELAY": False, "THROTTLING_SCOPES": {"api": {"delay": 0.2}}}
    with serve_in_thread(app, HOST) as url, \
            throttled_sync_client(settings, base_url=url, trust_env=False, timeout=5.0) as client:
        for _ in range(2):
            client.get("/x", extensions={SCOPES_EXTENSION: ["api"]})
        assert set(client.throttler.stats()) == {"api"}
    app.assert_paced(0.2)


def test_httpx_client_gives_a_dead_site_up() -> None:
    site = DeadSite(status=503)
    settings = {**FAST, "BACKOFF_MIN_DELAY": 0.01, "BACKOFF_MAX_DELAY": 0.02, "BREAKER_PAUSE": 0.05}
    with serve_in_thread(site, HOST) as url, \
            throttled_sync_client(settings, retries=100, base_url=url, trust_env=False,
                                  timeout=5.0) as client:
        with pytest.raises(ScopeGivenUp):
            client.get("/page/1")
        sent = site.stats.requests
        with pytest.raises(ScopeGivenUp):
            client.get("/page/2")
    assert 5 <= sent < 100
    assert site.stats.requests == sent


def test_httpx_transport_ownership() -> None:
    with SyncThrottler(FAST) as shared:
        with httpx.Client(transport=ThrottledSyncTransport(throttler=shared)):
            pass
        assert not shared.closed
    own = ThrottledSyncTransport(FAST)
    own.close()
    assert own.throttler.closed


# --- the async httpx client: store= and a public throttler ----------------------------------------


@pytest.mark.redis
async def test_throttled_client_takes_a_store_and_exposes_its_throttler(redis_server: RedisServer) -> None:
    store = f"{redis_server.url}?namespace=t{uuid.uuid4().hex[:12]}"
    site = Site()
    async with SimServer(site, HOST) as server, \
            throttled_client(FAST, store=store, base_url=server.url, trust_env=False) as client:
        assert (await client.get("/page/1")).status_code == 200
        stats = await client.throttler.scope_stats(HOST)
        assert client.throttler.store.shared
    assert stats is not None
    assert stats.sends == 1


def test_a_throttler_from_another_process_says_so() -> None:
    import multiprocessing
    import warnings

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    with SyncThrottler(FAST) as throttler:
        context = multiprocessing.get_context("fork")
        queue: Any = context.Queue()

        def child() -> None:
            try:
                throttler.acquire("http://127.0.0.2/", timeout=5)
                queue.put("no error")
            except RuntimeError as exc:
                queue.put(str(exc))

        process = context.Process(target=child)
        with warnings.catch_warnings():
            # Python 3.12+ warns that forking a threaded process is risky: that risk is the point.
            warnings.simplefilter("ignore", DeprecationWarning)
            process.start()
        message = queue.get(timeout=30)
        process.join(30)
    assert "create a SyncThrottler in each process" in message
