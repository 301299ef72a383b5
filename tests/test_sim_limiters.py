"""The limiter kinds of the random farm: pure models on plain numbers, then their sites on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
from collections.abc import AsyncIterator

import httpx
import pytest

from crawlpace import parse_hints
from crawlpace.sim import (
    HEADER_STYLES,
    FlakySite,
    QueueSite,
    RequestRateSite,
    ShiftingSite,
    SimServer,
    Site,
    SlotCapSite,
    WindowSite,
)
from crawlpace.sim._limits import ClockWindow, LoopClock, RequestQueue, RequestRate, SlidingWindow, SlotCap
from crawlpace.sim._rates import budget_headers
from crawlpace.testing import MockClock

HOST = "127.0.0.2"


# --- pure models --------------------------------------------------------------------------------------


def test_clock_window_is_aligned_to_the_clock_not_to_the_first_request() -> None:
    window = ClockWindow(limit=3, window=10.0)
    assert [window.take(t) for t in (7.0, 8.0, 9.0, 9.9)] == [True, True, True, False]
    assert window.reset(9.9) == pytest.approx(0.1)  # the window began at 0, not at 7
    assert window.take(10.0)  # a new window at 10, three seconds after the first request
    assert window.remaining(10.0) == 2
    assert window.take(25.0)
    assert window.remaining(25.0) == 2


def test_clock_window_counting_refusals_changes_the_count_not_the_answers() -> None:
    counted = ClockWindow(limit=2, window=1.0, count_refused=True)
    plain = ClockWindow(limit=2, window=1.0)
    times = [0.1 * n for n in range(25)]
    assert [counted.take(t) for t in times] == [plain.take(t) for t in times]
    assert counted.used(2.45) == 5
    assert plain.used(2.45) == 2


def test_sliding_window_allows_the_limit_in_any_span() -> None:
    window = SlidingWindow(limit=2, window=1.0)
    assert [window.take(t) for t in (0.0, 0.5, 0.9)] == [True, True, False]
    assert window.reset(0.9) == pytest.approx(0.1)
    assert window.take(1.0)  # 0.0 has left the span (0.0, 1.0]
    assert not window.take(1.4)
    assert window.take(1.5)


def test_sliding_window_counting_refusals_keeps_a_knocker_out() -> None:
    strict = SlidingWindow(limit=2, window=1.0, count_refused=True)
    lenient = SlidingWindow(limit=2, window=1.0)
    knocks = [0.0, 0.1, *(0.2 + 0.25 * n for n in range(8))]
    assert [lenient.take(t) for t in knocks].count(True) > 2
    assert [strict.take(t) for t in knocks] == [True, True] + [False] * 8  # every knock restarts the wait
    assert strict.reset(1.95) == pytest.approx(0.75)
    assert strict.take(3.0)  # quiet for a whole window: open again


def test_request_rate_counts_refusals_like_haproxy() -> None:
    rate = RequestRate(limit=10, period=1.0)
    assert all(rate.take(0.05 * n) for n in range(10))  # 10 in the first period: allowed
    assert not rate.take(0.6)  # the 11th
    assert not rate.take(0.9)
    # Next period: the previous one's 12 count for the part of the period still ahead.
    assert rate.reading(1.5) == pytest.approx(6.0)
    assert rate.take(1.5)  # 1 + 12 * 0.5 = 7
    # Knocking at 20/s holds the reading above the limit: every knock is refused.
    answers = [rate.take(2.0 + 0.05 * n) for n in range(40)]
    assert answers[:9] == [True] * 9  # the 10th reads 10 + 1 * 0.55, the previous period's one success
    assert not any(answers[10:])


def test_request_rate_periods_follow_the_servers_clock() -> None:
    # HAProxy's periods are not started by the client: with 0.7 of the first one gone at the first
    # request, the 10 sent then roll into the previous period 0.3 s later and weigh 10 * 0.7 at 0.6.
    rate = RequestRate(limit=10, period=1.0, phase=0.7)
    assert all(rate.take(0.01 * n) for n in range(10))
    assert rate.reading(0.6) == pytest.approx(7.0)
    assert rate.take(0.6)  # 1 + 7: allowed; with periods from the first request it would read 11
    aligned = RequestRate(limit=10, period=1.0)
    assert all(aligned.take(0.01 * n) for n in range(10))
    assert not aligned.take(0.6)
    with pytest.raises(ValueError, match="phase"):
        RequestRate(limit=10, period=1.0, phase=1.5)


def test_request_rate_at_an_even_pace_under_the_limit_is_never_refused() -> None:
    rate = RequestRate(limit=10, period=10.0)
    assert all(rate.take(1.25 * n) for n in range(200))  # 8 per 10 s, read as 8 to 9


def test_slot_cap_frees_a_slot_late() -> None:
    slots = SlotCap(cap=2, lag=0.05)
    assert slots.acquire(0.0)
    assert slots.acquire(0.0)
    assert not slots.acquire(0.01)
    slots.release(0.1)
    assert not slots.acquire(0.12)  # the answer has left, the slot not yet
    assert slots.acquire(0.16)
    assert slots.busy(0.16) == 2
    with pytest.raises(ValueError, match="cap"):
        SlotCap(cap=0)
    with pytest.raises(RuntimeError):
        SlotCap(cap=1).release(0.0)


#: What nginx 1.22 answered bench/limiter_scripts.py's script (10 at once, 12 sent 50 ms apart, 3 at
#: once, 2 more 250 ms later) at rate=10r/s, load 14: (seconds since the first send, status, seconds
#: from the send to the whole answer).
NGINX_ANSWERS = {
    # burst=5 (no nodelay): the excess waits, 1/rate apart; past five waiting, 429 at once.
    (5, 0): [
        (0, 200, 0.0009), (0, 200, 0.103), (0, 200, 0.2012), (0.0001, 200, 0.3042), (0.0001, 200, 0.4009),
        (0.0001, 200, 0.5008), (0.0001, 429, 0.0009), (0.0001, 429, 0.0009), (0.0001, 429, 0.0009),
        (0.0001, 429, 0.0009), (1.4957, 200, 0.0002), (1.5412, 200, 0.055), (1.5958, 200, 0.1079),
        (1.6466, 200, 0.1571), (1.6904, 200, 0.2092), (1.7422, 200, 0.2616), (1.7965, 200, 0.3006),
        (1.842, 200, 0.3556), (1.8961, 200, 0.4018), (1.9442, 200, 0.4537), (1.9901, 429, 0.0003),
        (2.0419, 200, 0.4703), (3.997, 200, 0.0009), (3.997, 200, 0.1017), (3.997, 200, 0.2021),
        (4.2446, 200, 0.0592), (4.2446, 200, 0.156),
    ],
    # burst=5 delay=2: the first two of the excess go at once, the rest wait.
    (5, 2): [
        (0, 200, 0.0087), (0, 200, 0.0088), (0, 200, 0.0088), (0, 200, 0.1034), (0, 200, 0.2087),
        (0, 200, 0.3054), (0, 429, 0.0088), (0, 429, 0.0088), (0.0001, 429, 0.0088), (0.0001, 429, 0.0088),
        (1.5009, 200, 0.0009), (1.5535, 200, 0.0002), (1.6011, 200, 0.0033), (1.6485, 200, 0.0121),
        (1.6988, 200, 0.0056), (1.7517, 200, 0.0529), (1.8012, 200, 0.1031), (1.8571, 200, 0.148),
        (1.899, 200, 0.2097), (1.9517, 200, 0.2505), (2.0059, 200, 0.2962), (2.0494, 429, 0.0101),
        (4.0081, 200, 0.0005), (4.0081, 200, 0.0005), (4.0081, 200, 0.0005), (4.2513, 200, 0.003),
        (4.2513, 200, 0.003),
    ],
    # burst=3 nodelay (delay >= burst): nothing waits; the `bucket` kind's token bucket of burst + 1.
    (3, 3): [
        (0, 200, 0.0029), (0, 200, 0.0029), (0, 200, 0.0029), (0, 200, 0.0029), (0, 429, 0.003),
        (0, 429, 0.003), (0, 429, 0.003), (0.0001, 429, 0.003), (0.0001, 429, 0.003), (0.0001, 429, 0.003),
        (1.5032, 200, 0.0003), (1.5503, 200, 0.0004), (1.6018, 200, 0.001), (1.6459, 200, 0.0002),
        (1.6964, 200, 0.0004), (1.751, 200, 0.003), (1.796, 429, 0.0009), (1.8469, 200, 0.0033),
        (1.8964, 429, 0.0002), (1.9511, 200, 0.0002), (2.0034, 200, 0.0028), (2.0467, 429, 0.0001),
        (4.0111, 200, 0.0007), (4.0111, 200, 0.0007), (4.0111, 200, 0.0007), (4.2471, 200, 0.0122),
        (4.2471, 200, 0.0123),
    ],
}


@pytest.mark.parametrize(("burst", "delay"), sorted(NGINX_ANSWERS))
def test_request_queue_answers_as_nginx_limit_req_did(burst: int, delay: int) -> None:
    queue = RequestQueue(10.0, burst, delay)
    for sent, status, held in NGINX_ANSWERS[burst, delay]:
        wait = queue.take(sent)
        assert (wait is not None) == (status == 200), (sent, status)
        if wait is not None:  # nginx's hold, within the loaded machine's few milliseconds
            assert wait == pytest.approx(held, abs=0.02), (sent, held, wait)


def test_request_queue_refusals_cost_nothing_and_follow_a_new_rate() -> None:
    queue = RequestQueue(2.0, 1)
    assert queue.take(0.0) == 0.0
    assert queue.take(0.0) == 0.5  # one waits its turn
    assert queue.take(0.1) is None  # the line is full
    assert queue.take(0.5) == pytest.approx(0.5)  # the refusal took nothing: the line moved on
    queue.set_rate(1.0, 4.0)
    assert queue.take(1.0) == 0.0
    assert queue.take(1.0) == pytest.approx(0.25)  # served at the new rate
    with pytest.raises(ValueError, match="delay"):
        RequestQueue(1.0, 2, -1)


def test_a_slot_cap_freed_at_once_answers_as_haproxy_conn_cur_and_nginx_limit_conn() -> None:
    # bench/limiter_scripts.py on HAProxy 2.6 (conn_cur gt 2, option httpclose) and nginx 1.22
    # (limit_conn 2), a 100 ms backend: four at once, two taken and two refused, every round; a
    # request sent the moment an answer is read (0 to 20 ms after) taken every time, 0 of 48 refused.
    slots = SlotCap(cap=2, lag=0.0)
    assert [slots.acquire(0.0) for _ in range(4)] == [True, True, False, False]
    slots.release(0.1)
    assert slots.acquire(0.1)
    assert not slots.acquire(0.1)


@pytest.mark.parametrize("make", [lambda: ClockWindow(0, 1.0), lambda: SlidingWindow(1, 0.0),
                                  lambda: RequestRate(True, 1.0), lambda: SlotCap(1, -1.0)])
def test_models_refuse_bad_numbers(make: object) -> None:
    with pytest.raises(ValueError, match="must be"):
        make()  # type: ignore[operator]


@pytest.mark.parametrize("style", HEADER_STYLES)
def test_every_header_style_reads_back_as_the_budget(style: str) -> None:
    headers = budget_headers(style, limit=20, remaining=5, reset=4.0, window=10.0, wall=1_700_000_000.0)
    hint = parse_hints([(k.decode(), v.decode()) for k, v in headers], wall_now=1_700_000_000.0, cap=600.0)
    assert hint is not None, style
    if style == "policy":
        assert hint.pace == pytest.approx(0.5)
    else:
        assert hint.remaining == 5 or hint.pace is not None
        assert hint.reset == pytest.approx(4.0) or hint.pace == pytest.approx(0.8)


# --- the sites, over loopback HTTP on a fake clock -------------------------------------------------


@contextlib.asynccontextmanager
async def live(site: Site) -> AsyncIterator[httpx.AsyncClient]:
    async with (SimServer(site, HOST) as server,
                httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=5.0) as client):
        yield client


async def test_a_flask_limiter_like_window_sends_retry_after_on_every_answer() -> None:
    clock = MockClock(103.0)
    site = WindowSite(limit=2, window=10.0, retry_after="every", style="x-ratelimit", clock=clock.now,
                      tolerance=0.0, wall=lambda: 5000.5)
    async with live(site) as client:
        first = await client.get("/page/1")
        assert first.status_code == 200
        assert first.headers["retry-after"] == "7"
        assert first.headers["x-ratelimit-remaining"] == "1"
        assert (await client.get("/page/2")).status_code == 200
        refused = await client.get("/page/3")
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "7"
        clock.advance(7.0)  # the next clock window: allowed again
        assert (await client.get("/page/3")).status_code == 200
    stats = site.stats.as_dict()
    assert stats["violations"] == 0  # Retry-After on a 200 demands nothing
    assert stats["throttled"] == 1


async def test_a_sliding_window_that_counts_refusals_and_says_nothing() -> None:
    clock = MockClock(0.0)
    site = WindowSite(limit=1, window=2.0, kind="sliding", count_refused=True, retry_after="none",
                      clock=clock.now)
    async with live(site) as client:
        assert (await client.get("/page/1")).status_code == 200
        clock.advance(1.5)
        refused = await client.get("/page/1")
        assert refused.status_code == 429
        assert "retry-after" not in refused.headers
        clock.advance(1.0)  # 2.5 s after the success, but the refusal at 1.5 still counts
        assert (await client.get("/page/1")).status_code == 429
        clock.advance(2.0)
        assert (await client.get("/page/1")).status_code == 200


async def test_reqrate_site_refuses_without_a_hint_and_keeps_counting() -> None:
    clock = MockClock(0.0)
    site = RequestRateSite(limit=3, period=1.0, clock=clock.now)
    async with live(site) as client:
        answers = []
        for _ in range(6):
            answers.append(await client.get("/page/1"))
            clock.advance(0.1)
        assert [r.status_code for r in answers] == [200, 200, 200, 429, 429, 429]
        assert all("retry-after" not in r.headers for r in answers)
    assert site.capacity == 3.0


async def test_a_counters_busiest_window_without_its_first_lock_outs_refusals() -> None:
    # A counter of 3 per 10 s: 3 accepted, the overshoot and two probes refused (reading 6), then the
    # period turns, its weight drains (6 x 0.1 + 1 at 19 s) and the next sends pass. Left out of the
    # second figure: the lock-out's three refusals, which the counter counted; the rest reads 3.
    clock = MockClock(0.0)
    site = RequestRateSite(limit=3, period=10.0, clock=clock.now)
    async with live(site) as client:
        statuses = []
        for at in (0.0, 0.1, 0.2, 0.3, 1.0, 3.0):
            clock.advance(at - clock.now())
            statuses.append((await client.get("/page/1")).status_code)
        assert site.stats.as_dict()["peak_per_window_without_lockout"] is None  # (the lock-out has not ended)
        for at in (19.0, 19.1):
            clock.advance(at - clock.now())
            statuses.append((await client.get("/page/1")).status_code)
        assert statuses == [200, 200, 200, 429, 429, 429, 200, 200]
        clock.advance(0.1)
        await client.get("/robots.txt")  # no limited request: it counts in neither figure
    assert site.stats.as_dict()["peak_per_window"] == 6
    assert site.stats.as_dict()["peak_per_window_without_lockout"] == 3


async def test_a_burst_after_a_lock_out_into_a_moving_window_still_full_is_counted() -> None:
    # 3 per 10 s, moving, refusals not counted (sliding25 of stop 52, scaled down): the start's 3, two
    # refused probes, then at 10.05 s the crawl sends as if the window were empty. Two pass as the
    # first sends leave, two more are refused: with the lock-out's probes left out, (0.17, 10.17] still
    # holds the start's last send and four after the lock-out: 5, over 3 + 1. Counting only from the
    # lock-out's end (10.05) would read 4 and hide it.
    clock = MockClock(0.0)
    site = WindowSite(limit=3, window=10.0, kind="sliding", retry_after="none", clock=clock.now)
    async with live(site) as client:
        statuses = []
        for at in (0.0, 0.1, 0.2, 0.3, 1.0, 10.05, 10.15, 10.16, 10.17):
            clock.advance(at - clock.now())
            statuses.append((await client.get("/page/1")).status_code)
    assert statuses == [200, 200, 200, 429, 429, 200, 200, 429, 429]
    assert site.stats.as_dict()["peak_per_window"] == 7
    assert site.stats.as_dict()["peak_per_window_without_lockout"] == 5


async def test_a_site_that_never_refused_reports_no_figure_without_a_lock_out() -> None:
    clock = MockClock(0.0)
    site = WindowSite(limit=5, window=2.0, kind="sliding", clock=clock.now)
    async with live(site) as client:
        for _ in range(3):
            assert (await client.get("/page/1")).status_code == 200
    assert site.stats.as_dict()["peak_per_window"] == 3
    assert site.stats.as_dict()["peak_per_window_without_lockout"] is None


async def test_conncap_site_frees_its_slot_after_the_answer() -> None:
    clock = MockClock(0.0)

    async def no_wait(seconds: float) -> None:
        await asyncio.sleep(0)

    site = SlotCapSite(cap=1, latency=0.0, lag=0.5, clock=clock.now, sleep=no_wait)
    async with live(site) as client:
        assert (await client.get("/page/1")).status_code == 200
        assert (await client.get("/page/2")).status_code == 503  # the slot is freed 0.5 s late
        clock.advance(0.5)
        assert (await client.get("/page/2")).status_code == 200
    assert site.capacity == pytest.approx(2.0)


async def test_queue_site_holds_the_excess_and_refuses_a_full_line() -> None:
    clock = MockClock(0.0)
    waits: list[float] = []

    async def note(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    site = QueueSite(rate=4.0, burst=2, status=429, clock=clock.now, sleep=note)
    async with live(site) as client:
        # nginx's limit_req in ``location /`` takes robots.txt too: it is first in the line.
        answers = [await client.get(path) for path in ("/robots.txt", "/page/1", "/page/2", "/page/3")]
        clock.advance(0.25)
        answers.append(await client.get("/page/3"))
    assert [r.status_code for r in answers] == [200, 200, 200, 429, 200]
    assert "retry-after" not in answers[3].headers  # nginx sends none
    assert waits == pytest.approx([0.25, 0.5, 0.5])  # served 1/rate apart; the line moved on by one
    assert site.capacity == 4.0
    stats = site.stats.as_dict()
    assert stats["throttled"] == 1


async def test_flaky_site_errors_with_its_status_whatever_the_pace() -> None:
    async def no_wait(seconds: float) -> None:
        await asyncio.sleep(0)

    site = FlakySite(errors=0.3, hangs=0.0, status=503, rng=random.Random(4), sleep=no_wait)
    async with live(site) as client:
        codes = [(await client.get(f"/page/{n % 50 + 1}")).status_code for n in range(200)]
    assert set(codes) == {200, 503}
    assert 0.2 < codes.count(503) / len(codes) < 0.4


async def test_new_kinds_shift_their_limit() -> None:
    clock = MockClock(0.0)
    site = ShiftingSite(base="reqrate", limit=10, period=1.0, changes=[[5.0, 0.5]], clock=clock.now)
    async with live(site) as client:
        assert (await client.get("/page/1")).status_code == 200
        clock.advance(6.0)
        assert (await client.get("/page/1")).status_code == 200
    assert site.capacity == 5.0


# --- the flask kind against the real Flask-Limiter ----------------------------------------------------

#: A scripted sequence (seconds from the first request): bursts, refusals, a quiet gap past a window,
#: and requests late in a window; no two times a whole window apart (``limits`` counts an entry exactly
#: a window old as in the window when it admits, and as out of it when it announces).
_SCRIPT = (0.0, 0.45, 0.95, 1.2, 1.93, 2.1, 2.55, 3.05, 3.3, 3.98, 5.5, 6.05, 6.1, 6.2, 7.62, 8.4, 9.05)
_WALL = 1_700_000_000.3


def _flask_limiter_answers(strategy: str, limit: str,
                           monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The real Flask-Limiter (headers on, memory storage) answering ``_SCRIPT`` on a scripted Unix clock."""
    flask = pytest.importorskip("flask")
    flask_limiter = pytest.importorskip("flask_limiter")
    import types

    import flask_limiter._extension as extension
    import limits.storage.memory as memory

    now = [_WALL]
    fake = types.SimpleNamespace(time=lambda: now[0])
    monkeypatch.setattr(memory, "time", fake)
    monkeypatch.setattr(extension, "time", fake)
    app = flask.Flask("limited")
    flask_limiter.Limiter(lambda: "client", app=app, default_limits=[limit], strategy=strategy,
                          headers_enabled=True, storage_uri="memory://")
    app.add_url_rule("/page/<int:number>", "page", lambda number: "page")
    client = app.test_client()
    answers = []
    for at in _SCRIPT:
        now[0] = _WALL + at
        response = client.get("/page/1")
        answers.append((str(response.status_code), *(response.headers.get(name, "") for name in (
            "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"))))
    return answers


@pytest.mark.parametrize(("kind", "strategy"), [("started", "fixed-window"), ("sliding", "moving-window")])
async def test_the_flask_kind_answers_as_flask_limiter_does(kind: str, strategy: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The sim's flask kind stands for Flask-Limiter with its headers on. Found against the real one:
    # its fixed window is opened by a request (not aligned to the clock), a moving window announces
    # its oldest request's end while requests are left (the sim said "now"), the reset is
    # int(end + 1) and Retry-After that less now, truncated: 0 on a refusal less than a second
    # before it (the sim said at least 1).
    real = _flask_limiter_answers(strategy, "3 per 2 second", monkeypatch)
    clock = MockClock(0.0)
    site = WindowSite(limit=3, window=2.0, kind=kind, retry_after="every", style="x-ratelimit",
                      clock=clock.now, tolerance=0.0, wall=lambda: _WALL + clock.now())
    sim = []
    async with live(site) as client:
        for at in _SCRIPT:
            clock.advance(at - clock.now())
            response = await client.get("/page/1")
            sim.append((str(response.status_code), *(response.headers.get(name, "") for name in (
                "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"))))
    assert sim == real
    assert any(answer[0] == "429" and answer[4] == "0" for answer in real)  # the script meets the "0"


def test_request_queue_with_no_burst_refuses_a_stamp_gap_under_the_rate_and_a_loop_clock_reads_late() -> None:
    # nginx's limit_req with no burst= (its default): at 10 r/s a request 99 ms after the last one
    # counted is refused (excess 0.010), one 100 ms after it let in, in whole milliseconds.
    queue = RequestQueue(10.0, 0)
    assert queue.take(1.0) == 0.0
    assert queue.take(1.0999) is None  # read as 99 ms
    assert queue.take(1.1) == 0.0
    # The loop's clock: the stamp is its turn's wake, which an arrival before that wake shares.
    clock = LoopClock(0.004, seed=1)
    wake = clock.wake(2.0)
    assert 2.0 <= wake <= 2.004
    assert clock.wake(wake) == wake
    assert clock.wake(wake + 0.001) >= wake + 0.001
    assert LoopClock().wake(3.0) == 3.0
    tails = LoopClock(0.002, seed=1, tail=True)
    delays = [tails.wake(t) - t for t in range(1, 2001)]
    assert statistics.mean(delays) == pytest.approx(0.002, rel=0.1)
    assert max(delays) > 0.008  # now and then several times the mean
    with pytest.raises(ValueError, match="burst"):
        RequestQueue(1.0, -1)
    with pytest.raises(ValueError, match="stale"):
        LoopClock(-0.001)
