"""What the site owner sees and the rest of seed 004 (issue 36, items 5 to 7).

Prometheus metrics, the JSON status, yesterday's totals, costly groups,
``/robots.txt`` never braked, the robots.txt helper that serves a
``Crawl-delay`` and reports who keeps to it, the WSGI middleware (behind a
real wsgiref server on 127.0.0.1), and start-up messages for stages.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx
import pytest
from prometheus_client import CollectorRegistry

from crawlpace.guard import Guard, GuardWSGI, RobotsTxt, Stage

from .redis_server import RedisServer
from .test_guard import BOT, BOT_CLASS, Backend, FakeClock, call, http_scope
from .test_guard_verify import GOOGLE, REAL_GOOGLE_IP

DAY = 86400.0


async def test_metrics_count_calls_by_stage_braked_crawlers_and_class() -> None:
    registry = CollectorRegistry()
    guard = Guard(Backend(), quota=4, clock=FakeClock(0.0), rng=__import__("random").Random(1),
                  metrics=registry, bot_ranges={"googlebot": ["66.249.64.0/19"]})
    for _ in range(8):
        await call(guard, http_scope())
    await call(guard, http_scope(agent="Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0"))
    await call(guard, http_scope(agent=GOOGLE, client=(REAL_GOOGLE_IP, 1)))

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    calls = "crawlpace_guard_requests_total"
    allowed = sum(sample(calls, group="costly", stage=str(stage), outcome="allowed", client="bot")
                  for stage in range(4))
    braked = sum(sample(calls, group="costly", stage=str(stage), outcome="braked", client=client)
                 for stage in range(4) for client in ("bot", "browser"))
    assert sample("crawlpace_guard_requests_total", group="costly", stage="0", outcome="allowed",
                  client="bot") == 2.0
    assert (allowed, braked) == (4.0, 5.0)
    assert sample("crawlpace_guard_crawler_requests_total", group="costly", crawler="googlebot") == 1.0
    assert sample("crawlpace_guard_used", group="costly") == 4.0
    assert sample("crawlpace_guard_quota", group="costly") == 4.0
    assert sample("crawlpace_guard_stage", group="costly") == 3.0


async def status_of(guard: Guard) -> dict[str, Any]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def send(message: Any) -> None:
        sent.append(message)

    await guard.status_app({"type": "http", "path": "/", "headers": []}, receive, send)
    assert sent[0]["status"] == 200
    assert dict(sent[0]["headers"])[b"content-type"] == b"application/json"
    report: dict[str, Any] = json.loads(sent[1]["body"])
    return report


async def test_the_status_endpoint_reports_the_window_the_busiest_clients_and_yesterday() -> None:
    clock = FakeClock(DAY + 3600.0)
    guard = Guard(Backend(), quota=3, stages=(), clock=clock, bot_ranges={"googlebot": ["66.249.64.0/19"]})
    for agent in (BOT, BOT, "OtherBot/1", BOT):
        await call(guard, http_scope(agent=agent))
    await call(guard, http_scope(agent=GOOGLE, client=(REAL_GOOGLE_IP, 1)))
    today = (await status_of(guard))["groups"]["costly"]
    assert (today["used"], today["remaining"], today["braked"], today["keys"]) == (3.0, 0.0, 1, 2)
    assert today["busiest"][0] == {"key": BOT_CLASS, "used": 2.0, "rejected": 1}
    assert today["crawlers"] == {"googlebot": 1}
    clock.now += DAY  # midnight: yesterday's totals are kept
    report = await status_of(guard)
    assert report["store"] == "memory"
    assert report["groups"]["costly"]["used"] == 0.0
    assert report["groups"]["costly"]["previous"] == {"window_start": DAY, "used": 3.0, "rejected": 1,
                                                      "keys": 2, "stage": 0, "crawlers": {"googlebot": 1}}


async def test_costly_groups_count_their_own_quotas() -> None:
    backend = Backend()
    guard = Guard(backend, quota={"search": 2, "item": 1}, stages=(), clock=FakeClock(0.0),
                  costly={"search": "/search", "item": ["/item/"]})
    codes = [(await call(guard, http_scope(path=path))).status
             for path in ("/search", "/item/1", "/search", "/item/2", "/search", "/about")]
    assert codes == [200, 200, 200, 429, 429, 200]
    last = await call(guard, http_scope(path="/search"))
    assert last.headers[-1] == (b"ratelimit", b'"guard";r=0;t=86400')
    with pytest.raises(ValueError, match="no quota for the costly group 'item'"):
        Guard(backend, quota={"search": 2}, costly={"search": "/search", "item": "/item/"})


async def test_robots_txt_is_never_braked_even_when_every_path_is_costly() -> None:
    backend = Backend()
    guard = Guard(backend, quota=1, clock=FakeClock(0.0))  # costly left at its default: every path
    assert [(await call(guard, http_scope(path="/page"))).status for _ in range(2)] == [200, 429]
    robots = [await call(guard, http_scope(path="/robots.txt")) for _ in range(3)]
    assert [answer.status for answer in robots] == [200] * 3
    assert all(not any(name == b"ratelimit" for name, _ in answer.headers) for answer in robots)


async def test_the_robots_helper_serves_a_crawl_delay_and_reports_who_keeps_to_it() -> None:
    clock = FakeClock(0.0)
    backend = Backend()
    robots = RobotsTxt(30, text="User-agent: *\nDisallow: /private/\n")
    guard = Guard(backend, quota=1000, clock=clock, robots=robots, costly="/search")
    served = await call(guard, http_scope(path="/robots.txt", agent="Mozilla/5.0 (compatible; bingbot/2.0)"))
    assert served.status == 200
    assert served.body == b"User-agent: *\nDisallow: /private/\n\nUser-agent: *\nCrawl-delay: 30\n\n"
    assert backend.calls == 0
    for second in range(0, 300, 30):  # Bingbot keeps to the delay...
        clock.now = float(second)
        await call(guard, http_scope(path="/page", agent="Mozilla/5.0 (compatible; bingbot/2.0)"))
    for second in range(0, 300, 5):  # ...ExampleBot does not, and never read the file
        clock.now = float(second)
        await call(guard, http_scope(path="/search"))
    agents = (await guard.status())["robots"]["agents"]
    assert agents["mozilla/ (compatible; bingbot/)"] == {
        "requests": 10, "too_soon": 0, "read_robots_txt": True, "keeps_delay": True}
    assert agents[BOT_CLASS]["keeps_delay"] is False
    assert agents[BOT_CLASS]["read_robots_txt"] is False
    with pytest.raises(ValueError, match="crawl_delay"):
        RobotsTxt(0)


@pytest.mark.parametrize(("stages", "expected"), [
    ([Stage(0.5, 0.5)], None),
    ("Stage(50, 50)", "write Stage(0.5, 0.5)"),
    ([(0.5, 0.5), (0.75, 0.75)], "write stages=[Stage(0.5, 0.5), Stage(0.75, 0.75)]"),
    ([Stage(0.5, 0.75), Stage(0.75, 0.5)], "the refused fraction goes down from 0.75"),
    ([Stage(0.75, 0.5), Stage(0.5, 0.75)], "stages=[Stage(0.5, 0.75), Stage(0.75, 0.5)]"),
])
def test_stage_mistakes_are_named_with_their_fix(stages: Any, expected: str | None) -> None:
    if expected is None:
        Guard(Backend(), quota=10, stages=stages)
        return
    with pytest.raises(ValueError, match=r"[Ss]tage") as caught:
        Guard(Backend(), quota=10, stages=[Stage(50, 50)] if stages == "Stage(50, 50)" else stages)
    assert expected in str(caught.value)


# -- WSGI ----------------------------------------------------------------------------------------


def wsgi_site(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"results for " + environ["PATH_INFO"].encode("latin-1")]


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def wsgi_server() -> Iterator[tuple[list[Any], str]]:
    """A wsgiref server on 127.0.0.1 in a thread; the test puts the app in the list."""
    slot: list[Any] = []

    def front(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        app: Any = slot[0]
        result: Iterable[bytes] = app(environ, start_response)
        return result

    server: WSGIServer = make_server("127.0.0.1", 0, front, handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield slot, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_wsgi_middleware_brakes_like_the_asgi_one(wsgi_server: tuple[list[Any], str]) -> None:
    slot, base = wsgi_server
    guard = GuardWSGI(wsgi_site, quota=2, stages=(), costly="/search", clock=FakeClock(3600.0),
                      bot_ranges={"googlebot": ["127.0.0.0/8"]})
    slot.append(guard)
    try:
        with httpx.Client(base_url=base, trust_env=False, timeout=5.0) as client:
            answers = [client.get("/search", headers={"User-Agent": BOT}) for _ in range(3)]
            cheap = client.get("/about", headers={"User-Agent": BOT})
            robots = client.get("/robots.txt", headers={"User-Agent": BOT})
            google = [client.get("/search", headers={"User-Agent": GOOGLE}).status_code for _ in range(3)]
        report = guard.status()["groups"]["costly"]
    finally:
        guard.close()
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[0].text == "results for /search"
    assert answers[1].headers["ratelimit"] == '"guard";r=0;t=82800'
    assert answers[2].headers["retry-after"] == "82800"
    assert answers[2].text.startswith("Too Many Requests")
    assert (cheap.status_code, "ratelimit" in cheap.headers) == (200, False)
    assert robots.status_code == 200
    assert google == [200] * 3  # 127.0.0.1 is inside the owner's ranges here
    assert (report["used"], report["braked"], report["crawlers"]) == (2.0, 1, {"googlebot": 3})


@pytest.mark.redis
def test_two_wsgi_workers_share_one_quota_through_redis(redis_server: RedisServer) -> None:
    store = f"{redis_server.url}?namespace=w{threading.get_ident()}"
    first = GuardWSGI(wsgi_site, quota=3, stages=(), store=store, key="site")
    second = GuardWSGI(wsgi_site, quota=3, stages=(), store=store, key="site")
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        statuses.append(status)

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/search", "REMOTE_ADDR": "192.0.2.1",
               "HTTP_USER_AGENT": BOT}
    try:
        for app in (first, second, first, second, first):
            list(app(dict(environ), start_response))
        assert first.status()["groups"]["costly"]["used"] == 3.0
    finally:
        first.close()
        second.close()
    assert statuses == ["200 OK"] * 3 + ["429 Too Many Requests"] * 2
