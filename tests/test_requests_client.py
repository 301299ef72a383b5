"""crawlpace.requests and the SyncThrottler under it, against simulated sites on loopback.

The sites run in a thread of their own (a blocking client cannot share its
thread with an asyncio server) on the real clock; the settings keep every
wait a fraction of a second. Spacing is measured where it matters, at the
server, and the multi-process test shares one budget through a real
redis-server.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from crawlpace import ScopeGivenUp, ThrottlerClosed
from crawlpace.requests import ATTEMPTS_ATTRIBUTE, ThrottledAdapter, throttled_session
from crawlpace.sim import DeadSite, OverloadSite, RetryAfterSite

from .redis_server import RedisServer
from .sim_thread import Recorder, serve_in_thread

HOST = "127.0.0.2"
OTHER_HOST = "127.0.0.3"
FAST: dict[str, Any] = {"DOWNLOAD_DELAY": 0.0, "DOWNLOAD_DELAY_PER_SLOT": 0.0}
# Arrival times are read in another thread than send times: allow for the scheduling between them.
SLACK = 0.02


def paced(delay: float) -> dict[str, Any]:
    return {"DOWNLOAD_DELAY": delay, "DOWNLOAD_DELAY_PER_SLOT": 0.0, "RANDOMIZE_DOWNLOAD_DELAY": False}


def test_requests_are_spaced_by_the_delay() -> None:
    app = Recorder()
    with serve_in_thread(app, HOST) as url, throttled_session(paced(0.15)) as session:
        statuses = [session.get(f"{url}/page/{n}", timeout=5).status_code for n in range(4)]
    assert statuses == [200] * 4
    assert len(app.gaps()) == 3
    app.assert_paced(0.15)


def test_a_429_with_retry_after_is_retried_after_the_wait() -> None:
    site = RetryAfterSite(rate=1.0, embargo=1)
    with serve_in_thread(site, HOST) as url, throttled_session(FAST) as session:
        first = session.get(f"{url}/page/1", timeout=5)
        started = time.monotonic()
        second = session.get(f"{url}/page/2", timeout=5)  # over the rate: 429, Retry-After: 1, then 200
        waited = time.monotonic() - started
    assert (first.status_code, second.status_code) == (200, 200)
    assert getattr(second, ATTEMPTS_ATTRIBUTE) == 2
    assert site.stats.statuses == {200: 2, 429: 1}
    assert not site.stats.violations  # the retry waited as long as it was asked
    assert waited >= 1.0 - SLACK


def test_retries_zero_returns_the_429() -> None:
    app = Recorder([(429, [(b"retry-after", b"7")])])
    with serve_in_thread(app, HOST) as url, throttled_session(FAST, retries=0) as session:
        response = session.get(f"{url}/x", timeout=5)
        stats = session.throttler.scope_stats(HOST)
    assert response.status_code == 429
    assert getattr(response, ATTEMPTS_ATTRIBUTE) == 1
    assert stats is not None
    assert stats.backoff >= 1


def test_concurrency_per_host_holds_across_threads() -> None:
    site = OverloadSite(latency=0.05, per_inflight=0.0, limit=50)
    settings = {**FAST, "CONCURRENT_REQUESTS_PER_DOMAIN": 2}
    with serve_in_thread(site, HOST) as url, throttled_session(settings) as session, \
            ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda n: session.get(f"{url}/page/{n}", timeout=5).status_code,
                                 range(1, 17)))
    assert statuses == [200] * 16
    assert site.stats.peak_inflight == 2


def test_threads_share_one_delay() -> None:
    app = Recorder()
    with serve_in_thread(app, HOST) as url, throttled_session(paced(0.1)) as session, \
            ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: session.get(f"{url}/page/{n}", timeout=5), range(8)))
    assert len(app.arrivals) == 8
    app.assert_paced(0.1)


def test_a_dead_site_is_given_up() -> None:
    site = DeadSite(status=503)
    settings = {**FAST, "BACKOFF_MIN_DELAY": 0.01, "BACKOFF_MAX_DELAY": 0.02, "BREAKER_PAUSE": 0.05}
    with serve_in_thread(site, HOST) as url, throttled_session(settings, retries=100) as session:
        with pytest.raises(ScopeGivenUp) as caught:
            session.get(f"{url}/page/1", timeout=5)
        # Later requests to the scope fail at once, without reaching the site.
        sent = site.stats.requests
        with pytest.raises(ScopeGivenUp):
            session.get(f"{url}/page/2", timeout=5)
    assert caught.value.scope == HOST
    assert 5 <= sent < 100
    assert site.stats.requests == sent


def test_redirect_hops_wait_each_for_its_own_host() -> None:
    target = Recorder()
    with serve_in_thread(target, HOST) as target_url:
        redirector = Recorder([(302, [(b"location", f"{target_url}/landing".encode())])] * 2)
        settings = {**FAST, "RANDOMIZE_DOWNLOAD_DELAY": False, "THROTTLING_SCOPES": {HOST: {"delay": 0.3}}}
        with serve_in_thread(redirector, OTHER_HOST) as url, throttled_session(settings) as session:
            responses = [session.get(f"{url}/go", timeout=5) for _ in range(2)]
            stats = session.throttler.stats()
    assert [r.status_code for r in responses] == [200, 200]
    assert [len(r.history) for r in responses] == [1, 1]
    assert target.paths == ["/landing", "/landing"]
    target.assert_paced(0.3)
    assert {name: snap.sends for name, snap in stats.items()} == {HOST: 2, OTHER_HOST: 2}


def test_explicit_scopes_ride_on_a_prepared_request() -> None:
    app = Recorder()
    settings = {**FAST, "RANDOMIZE_DOWNLOAD_DELAY": False, "THROTTLING_SCOPES": {"api": {"delay": 0.2}}}
    with serve_in_thread(app, HOST) as url, throttled_session(settings) as session:
        for _ in range(2):
            prepared = session.prepare_request(requests.Request("GET", f"{url}/x"))
            prepared.crawlpace_scopes = ["api"]  # type: ignore[attr-defined]
            assert session.send(prepared, timeout=5).status_code == 200
        assert set(session.throttler.stats()) == {"api"}
    app.assert_paced(0.2)


def test_only_bodies_held_in_memory_are_replayed() -> None:
    from crawlpace.requests import _replayable

    def prepared(**kwargs: Any) -> requests.PreparedRequest:
        return requests.Request("POST", "http://127.0.0.2/upload", **kwargs).prepare()

    assert _replayable(prepared())
    assert _replayable(prepared(data=b"bytes"))
    assert _replayable(prepared(json={"a": 1}))
    assert _replayable(prepared(data={"form": "field"}))
    assert not _replayable(prepared(data=iter([b"part"])))


def test_an_owned_throttler_is_closed_with_the_session() -> None:
    session = throttled_session(FAST)
    adapter = session.get_adapter("https://example.org/")
    assert isinstance(adapter, ThrottledAdapter)
    assert adapter.throttler is session.throttler
    session.close()
    assert session.throttler.closed
    with pytest.raises(ThrottlerClosed):
        session.throttler.acquire("http://127.0.0.2/")


def test_a_shared_throttler_stays_open() -> None:
    from crawlpace import SyncThrottler

    with SyncThrottler(FAST) as throttler:
        with throttled_session(throttler=throttler):
            pass
        assert not throttler.closed
        with throttler.slot("http://127.0.0.2/") as permit:
            assert permit.scopes == (HOST,)


def test_arguments_are_checked() -> None:
    from crawlpace import SyncThrottler

    with pytest.raises(ValueError, match="retries must be an integer >= 0"):
        throttled_session(retries=-1)
    with SyncThrottler() as throttler:
        with pytest.raises(TypeError, match="not both: got throttler and settings"):
            throttled_session(FAST, throttler=throttler)
        with pytest.raises(TypeError, match="got throttler and store"):
            throttled_session(throttler=throttler, store="memory://")


# --- processes sharing one Redis budget -----------------------------------------------------------


def _worker(url: str, store: str, delay: float, count: int, tag: str) -> list[int]:
    # Two threads in each process, on one session: threads and processes share the budget.
    with throttled_session(paced(delay), store=store) as session, ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda n: session.get(f"{url}/{tag}/{n}", timeout=10).status_code,
                             range(count)))


@pytest.mark.redis
def test_threads_and_processes_share_one_budget_through_redis(redis_server: RedisServer) -> None:
    store = f"{redis_server.url}?namespace=t{uuid.uuid4().hex[:12]}"
    app = Recorder()
    delay = 0.12
    context = multiprocessing.get_context("spawn")
    with serve_in_thread(app, HOST) as url, context.Pool(3) as pool:
        results = pool.starmap(_worker, [(url, store, delay, 4, f"p{n}") for n in range(3)])
    assert results == [[200] * 4] * 3
    assert len(app.arrivals) == 12
    assert {path.split("/")[1] for path in app.paths} == {"p0", "p1", "p2"}
    # One delay for the whole fleet: three unshared budgets would send three times as fast.
    app.assert_paced(delay)
