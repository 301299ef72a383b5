"""Guard in front of a real Starlette site, served by uvicorn on 127.0.0.1 and reached over HTTP.

The unit tests in ``test_guard.py`` call the middleware with hand-made ASGI
messages. These check the same promises end to end, as a site owner meets
them: the middleware wraps a real Starlette application, uvicorn speaks
HTTP/1.1 on a loopback socket in the test's event loop, and an ``httpx``
client reads status codes and headers off the wire. Time is a
:class:`~crawlpace.testing.MockClock` that the test moves by hand, so reaching
a new window costs no waiting, and partial stages get scripted chance.

Stopping uvicorn takes about 0.2 s whatever it served (its main loop ticks
every 0.1 s and its shutdown pauses 0.1 s more), so most tests share one
server and swap the application behind it. The test of the two ways to mount
Guard starts a server for each, with the ASGI lifespan going through Guard.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx
import pytest
import pytest_asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from crawlpace.guard import DEFAULT_STAGES, Guard, Stage
from crawlpace.testing import MockClock

pytestmark = pytest.mark.asyncio(loop_scope="module")

HOST = "127.0.0.1"
WINDOW = 60.0
# 30 s into a 60 s window: every answer in the first window announces 30 s left.
START = 10 * WINDOW + 30.0
LEFT = 30
BOT = "Mozilla/5.0 (compatible; ExampleBot/2.1; +http://www.example.com/bot.html)"
BOT_NEXT = "Mozilla/5.0 (compatible; ExampleBot/3.0; +http://www.example.com/bot.html)"
BOT_CLASS = "mozilla/ (compatible; examplebot/; +http://www.example.com/bot.html)"
OTHER = "OtherCrawler/1.4 (+http://crawler.example.org/)"
OTHER_CLASS = "othercrawler/ (+http://crawler.example.org/)"
GOOGLE = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"

App = Callable[..., Any]
Mounting = Literal["outer", "middleware"]


class Site:
    """A Starlette site with one costly page and one cheap page; counts what reached each."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.startups = 0
        self.routes = [Route("/search", self.search), Route("/about", self.about)]

    async def search(self, request: Request) -> PlainTextResponse:
        self.hits["search"] += 1
        return PlainTextResponse(f"results for {request.query_params.get('q', '')}")

    async def about(self, request: Request) -> PlainTextResponse:
        self.hits["about"] += 1
        return PlainTextResponse("about this site")

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.startups += 1
        yield

    def starlette(self, middleware: list[Middleware] | None = None) -> Starlette:
        return Starlette(routes=self.routes, middleware=middleware, lifespan=self.lifespan)


class AlwaysUnlucky(random.Random):
    """Chance that always falls below a partial stage's fraction, so such stages refuse."""

    def random(self) -> float:
        return 0.0


def mount(site: Site, mounting: Mounting, **options: Any) -> Starlette | Guard:
    """Put Guard in front of ``site`` in one of the two ways an owner would."""
    if mounting == "outer":
        return Guard(site.starlette(), **options)
    return site.starlette(middleware=[Middleware(Guard, **options)])


def guard_in(app: Starlette | Guard) -> Guard:
    """The Guard instance inside ``app``, however it was mounted."""
    layer: Any = app if isinstance(app, Guard) else app.middleware_stack
    while layer is not None and not isinstance(layer, Guard):
        layer = getattr(layer, "app", None)
    assert isinstance(layer, Guard), "Guard is not in the Starlette middleware stack"
    return layer


def loopback_listener() -> socket.socket:
    """A TCP socket bound to a free port on 127.0.0.1, for uvicorn to listen on."""
    # Name the protocol: asyncio turns Nagle's algorithm off only on sockets
    # that say IPPROTO_TCP. Left on, every answer stalls about 40 ms on a
    # delayed ACK, since uvicorn writes the head and the body separately.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind((HOST, 0))
    return listener


@asynccontextmanager
async def uvicorn_on_loopback(app: App, lifespan: Literal["on", "off"]) -> AsyncIterator[str]:
    """Run ``app`` under uvicorn in the running event loop; yield its base URL, then stop it."""
    listener = loopback_listener()
    port = int(listener.getsockname()[1])
    # log_config=None: leave the logging set-up of the test session alone.
    config = uvicorn.Config(app, host=HOST, port=port, http="h11", ws="none", loop="asyncio",
                            lifespan=lifespan, log_level="warning", log_config=None, access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        async with asyncio.timeout(5.0):
            while not server.started:
                if task.done():
                    await task  # raises what stopped the startup, if anything did
                    raise RuntimeError("uvicorn stopped before it started")
                await asyncio.sleep(0.005)
        yield f"http://{HOST}:{port}"
    finally:
        server.should_exit = True
        await task
        listener.close()


def client_for(base_url: str) -> httpx.AsyncClient:
    # trust_env=False: no proxy named in the environment may see these requests.
    return httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=5.0)


class FrontDoor:
    """The application of the shared server: it passes every request to the app under test."""

    def __init__(self) -> None:
        self.base_url = ""
        self.app: App | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert self.app is not None, "no application behind the front door"
        await self.app(scope, receive, send)

    @asynccontextmanager
    async def serving(self, app: App) -> AsyncIterator[httpx.AsyncClient]:
        """Put ``app`` behind the shared server and yield a fresh client for it."""
        self.app = app
        try:
            async with client_for(self.base_url) as client:
                yield client
        finally:
            self.app = None


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def door() -> AsyncIterator[FrontDoor]:
    front = FrontDoor()
    async with uvicorn_on_loopback(front, "off") as base_url:
        front.base_url = base_url
        yield front


@pytest.fixture
def clock() -> MockClock:
    return MockClock(START)


def rate_headers(response: httpx.Response) -> tuple[str | None, str | None]:
    return response.headers.get("ratelimit-policy"), response.headers.get("ratelimit")


async def get_many(client: httpx.AsyncClient, path: str, agent: str, times: int) -> list[httpx.Response]:
    """Send ``times`` GETs one after the other (never at once, so the order is known)."""
    return [await client.get(path, headers={"User-Agent": agent}) for _ in range(times)]


def statuses(answers: list[httpx.Response]) -> list[int]:
    return [answer.status_code for answer in answers]


@pytest.mark.parametrize("mounting", ["outer", "middleware"])
async def test_costly_route_is_refused_with_429_once_the_quota_is_spent(
        clock: MockClock, mounting: Mounting) -> None:
    site = Site()
    app = mount(site, mounting, quota=3, window=WINDOW, stages=(), costly=["/search"], clock=clock.now)
    async with uvicorn_on_loopback(app, "on") as base_url, client_for(base_url) as client:
        answers = [await client.get("/search", params={"q": "x"}, headers={"User-Agent": BOT})
                   for _ in range(4)]
    assert site.startups == 1, "the lifespan startup did not get through to Starlette"
    assert statuses(answers) == [200, 200, 200, 429]
    for remaining, answer in zip((2, 1, 0), answers[:3], strict=True):
        assert answer.text == "results for x"
        assert rate_headers(answer) == ('"guard";q=3;w=60', f'"guard";r={remaining};t={LEFT}')
        assert "retry-after" not in answer.headers
    refused = answers[3]
    assert refused.headers["retry-after"] == str(LEFT)
    assert rate_headers(refused) == ('"guard";q=3;w=60', f'"guard";r=0;t={LEFT}')
    assert refused.headers["content-type"] == "text/plain; charset=utf-8"
    assert refused.text.startswith("Too Many Requests")
    assert f"Retry after {LEFT} seconds" in refused.text
    assert site.hits["search"] == 3, "a refused request must never reach the application"
    assert guard_in(app).stats()["totals"] == {"keys": 1, "used": 3.0, "rejected": 1}


async def test_cheap_route_is_never_counted_refused_or_labelled(clock: MockClock, door: FrontDoor) -> None:
    site = Site()
    guard = Guard(site.starlette(), quota=2, window=WINDOW, stages=(), costly="/search", clock=clock.now)
    async with door.serving(guard) as client:
        before = await get_many(client, "/about", BOT, 5)
        costly = await get_many(client, "/search", BOT, 3)
        after = await get_many(client, "/about", BOT, 5)
    # The cheap page used none of the quota: the first costly request sees all of it.
    assert statuses(costly) == [200, 200, 429]
    assert costly[0].headers["ratelimit"] == f'"guard";r=1;t={LEFT}'
    for answer in before + after:
        assert answer.status_code == 200
        assert answer.text == "about this site"
        assert rate_headers(answer) == (None, None)
        assert "retry-after" not in answer.headers
    assert site.hits == {"about": 10, "search": 2}
    assert guard.stats()["totals"]["used"] == 2.0


async def test_allow_listed_crawler_is_never_refused_nor_counted(clock: MockClock, door: FrontDoor) -> None:
    site = Site()
    # The test client's loopback address is one the owner lists as Googlebot's.
    guard = Guard(site.starlette(), quota=2, window=WINDOW, stages=(), costly=["/search"], clock=clock.now,
                  bot_ranges={"googlebot": [f"{HOST}/32"]})
    async with door.serving(guard) as client:
        google_first = await get_many(client, "/search", GOOGLE, 3)
        # Another client spends its quota; the favoured crawler is still not held to any.
        spent = await get_many(client, "/search", BOT, 3)
        google_after = await get_many(client, "/search", GOOGLE, 3)
    assert statuses(spent) == [200, 200, 429]
    # Googlebot's requests before took nothing from the others' quota.
    assert spent[0].headers["ratelimit"] == f'"guard";r=1;t={LEFT}'
    for answer in google_first + google_after:
        assert answer.status_code == 200
        assert rate_headers(answer) == (None, None)
    assert site.hits["search"] == 2 + 6
    assert set(guard.stats()["keys"]) == {BOT_CLASS}


async def test_an_empty_allow_list_brakes_the_big_crawlers_too(clock: MockClock, door: FrontDoor) -> None:
    site = Site()
    guard = Guard(site.starlette(), quota=1, window=WINDOW, stages=(), costly=["/search"], allow=(),
                  clock=clock.now)
    async with door.serving(guard) as client:
        google = await get_many(client, "/search", GOOGLE, 2)
    assert statuses(google) == [200, 429]
    assert google[1].headers["retry-after"] == str(LEFT)


async def test_user_agent_classes_are_counted_apart_and_versions_together(
        clock: MockClock, door: FrontDoor) -> None:
    site = Site()
    guard = Guard(site.starlette(), quota=4, window=WINDOW, stages=(), costly=["/search"], clock=clock.now,
                  share=0.5)
    async with door.serving(guard) as client:
        old = await get_many(client, "/search", BOT, 2)
        # A new release of the same bot falls in the same class, so its share is spent too.
        new = await get_many(client, "/search", BOT_NEXT, 1)
        other = await get_many(client, "/search", OTHER, 3)
    assert statuses(old) == [200, 200]
    assert statuses(new) == [429]
    assert statuses(other) == [200, 200, 429]
    assert other[0].headers["ratelimit"] == f'"guard";r=1;t={LEFT}'
    keys = guard.stats()["keys"]
    assert {key: (entry["used"], entry["rejected"]) for key, entry in keys.items()} == {
        BOT_CLASS: (2.0, 1), OTHER_CLASS: (2.0, 1)}


async def test_a_new_window_resets_the_count(clock: MockClock, door: FrontDoor) -> None:
    site = Site()
    guard = Guard(site.starlette(), quota=2, window=WINDOW, stages=(), costly=["/search"], clock=clock.now)
    async with door.serving(guard) as client:
        first = await get_many(client, "/search", BOT, 3)
        clock.advance(LEFT - 1)  # one second before the window ends: still refused
        late = await get_many(client, "/search", BOT, 1)
        clock.advance(1)
        fresh = await get_many(client, "/search", BOT, 3)
    assert statuses(first) == [200, 200, 429]
    assert statuses(late) == [429]
    assert late[0].headers["retry-after"] == "1"
    assert statuses(fresh) == [200, 200, 429]
    assert fresh[0].headers["ratelimit"] == f'"guard";r=1;t={WINDOW:.0f}'
    assert fresh[2].headers["retry-after"] == f"{WINDOW:.0f}"
    assert site.hits["search"] == 4


async def test_a_partial_stage_refuses_with_a_spacing_retry_after(clock: MockClock, door: FrontDoor) -> None:
    site = Site()
    # The default stages on a quota of 4: from 2 used, half the requests are
    # refused; with chance that always refuses, the third request is turned away.
    guard = Guard(site.starlette(), quota=4, window=WINDOW, stages=DEFAULT_STAGES, costly=["/search"],
                  clock=clock.now, rng=AlwaysUnlucky())
    async with door.serving(guard) as client:
        answers = await get_many(client, "/search", BOT, 3)
    assert statuses(answers) == [200, 200, 429]
    # 30 s left for 2 requests left: one every 15 s lasts until the window ends.
    assert answers[2].headers["retry-after"] == "15"
    assert answers[2].headers["ratelimit"] == f'"guard";r=2;t={LEFT}'
    assert guard.stats()["stage"] == 1


async def test_the_quota_stops_requests_that_the_stages_let_through(
        clock: MockClock, door: FrontDoor) -> None:
    site = Site()
    guard = Guard(site.starlette(), quota=3, window=WINDOW, stages=(Stage(0.5, 0.0),), costly=["/search"],
                  clock=clock.now, rng=AlwaysUnlucky())
    async with door.serving(guard) as client:
        answers = await get_many(client, "/search", BOT, 4)
    assert statuses(answers) == [200, 200, 200, 429]
    assert answers[3].headers["retry-after"] == str(LEFT)
    assert site.hits["search"] == 3
