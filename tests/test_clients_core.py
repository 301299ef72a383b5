"""The one client core (``crawlpace._clients``) as each of the four clients uses it.

Real parts only: an HTTP server in a thread on 127.0.0.1, a real redis-server
with a password, a loopback port nothing listens on. The clocks are real
(the blocking clients run on a :class:`~crawlpace.SyncThrottler`, which keeps
real time), so the one hold here is ``Retry-After: 1``.

The last look: every client is given one connection to the site, so requests
whose permits were granted together queue for it. The first to reach the site
is answered 429 with ``Retry-After: 1``; the next one gets the connection a
moment later, its permit granted before the hold was heard. Without a last
look it would reach the site inside the hold.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import aiohttp
import httpx
import pytest
import requests

from crawlpace import ConfigError, Permit, Settings, StoreUnreachable, SyncThrottler, Throttler
from crawlpace.aiohttp import ThrottleMiddleware
from crawlpace.aiohttp import attempts as aiohttp_attempts
from crawlpace.aiohttp import throttled_session as aiohttp_session
from crawlpace.http import attempts as httpx_attempts
from crawlpace.http import throttled_client, throttled_sync_client
from crawlpace.requests import ThrottledAdapter
from crawlpace.requests import attempts as requests_attempts
from crawlpace.requests import throttled_session as requests_session
from crawlpace.sim import CHALLENGE_PAGE

from .redis_server import RedisServer, free_port, redis_binary

OPEN: dict[str, Any] = {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, "DOWNLOAD_DELAY": 0.0,
                        "DOWNLOAD_DELAY_PER_SLOT": 0.0, "RANDOMIZE_DOWNLOAD_DELAY": False,
                        "BACKOFF_MIN_DELAY": 0.01}
REQUESTS = 4
HOLD = 1.0


class Site:
    """Answers the first request 429 with ``Retry-After: 1``, every other one 200; notes arrivals."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, int]] = []
        self.lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                with site.lock:
                    status = 429 if not site.arrivals else 200
                    site.arrivals.append((time.monotonic(), status))
                body = b"no" if status == 429 else b"ok"
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", str(int(HOLD)))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def inside_hold(self) -> list[float]:
        """Seconds after the 429 at which a request reached the site inside the hold."""
        refused = [at for at, status in self.arrivals if status == 429]
        assert len(refused) == 1, self.arrivals
        return [round(at - refused[0], 3) for at, status in self.arrivals
                if status == 200 and refused[0] < at < refused[0] + HOLD - 0.05]


@pytest.fixture
def site() -> Iterator[Site]:
    served = Site()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()


def check(site: Site, statuses: list[int], counts: list[int]) -> None:
    assert sorted(statuses) == [200] * (REQUESTS - 1) + [429]
    assert len(site.arrivals) == REQUESTS, site.arrivals  # held requests were not written, then sent once
    assert counts == [1] * REQUESTS  # a request the last look stopped used up no attempt
    assert site.inside_hold() == []


async def test_async_httpx_writes_nothing_inside_a_hold(site: Site) -> None:
    async with throttled_client(OPEN, retries=0, limits=httpx.Limits(max_connections=1),
                                trust_env=False) as client:
        responses = await asyncio.gather(*(client.get(f"{site.url}/{n}") for n in range(REQUESTS)))
    check(site, [r.status_code for r in responses], [httpx_attempts(r) for r in responses])


async def test_aiohttp_writes_nothing_inside_a_hold(site: Site) -> None:
    async def get(session: aiohttp.ClientSession, n: int) -> tuple[int, int]:
        async with session.get(f"{site.url}/{n}") as response:
            await response.read()
            return response.status, aiohttp_attempts(response)

    async with aiohttp_session(OPEN, retries=0, connector=aiohttp.TCPConnector(limit=1)) as session:
        answers = await asyncio.gather(*(get(session, n) for n in range(REQUESTS)))
    check(site, [status for status, _ in answers], [count for _, count in answers])


def sync_gather(get: Any) -> list[tuple[int, int]]:
    answers: list[tuple[int, int]] = []
    threads = [threading.Thread(target=lambda n=n: answers.append(get(n))) for n in range(REQUESTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10.0)
    return answers


def test_sync_httpx_writes_nothing_inside_a_hold(site: Site) -> None:
    with throttled_sync_client(OPEN, retries=0, limits=httpx.Limits(max_connections=1),
                               trust_env=False) as client:

        def get(n: int) -> tuple[int, int]:
            response = client.get(f"{site.url}/{n}")
            return response.status_code, httpx_attempts(response)

        answers = sync_gather(get)
    check(site, [status for status, _ in answers], [count for _, count in answers])


def test_requests_writes_nothing_inside_a_hold(site: Site) -> None:
    with SyncThrottler(OPEN) as throttler, requests.Session() as session:
        session.mount("http://", ThrottledAdapter(throttler, retries=0, pool_maxsize=1, pool_block=True))

        def get(n: int) -> tuple[int, int]:
            response = session.get(f"{site.url}/{n}")
            return response.status_code, requests_attempts(response)

        answers = sync_gather(get)
    check(site, [status for status, _ in answers], [count for _, count in answers])


def test_attempts_counts_the_sends_of_a_retried_request(site: Site) -> None:
    with requests_session(OPEN, retries=2) as session:
        first = session.get(f"{site.url}/a")  # 429, then 200 after the hold
    assert (first.status_code, requests_attempts(first)) == (200, 2)
    with pytest.raises(ValueError, match="did not come through a crawlpace client"):
        requests_attempts(requests.Response())


# -- a store that cannot be reached fails at first use ------------------------------------------

def closed_port_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=1"


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH")
    server = RedisServer(binary, extra=("--requirepass", "right-pass"))
    try:
        server.start()
        yield server
    finally:
        server.close()


def wrong_password(server: RedisServer) -> str:
    return f"redis://:wrong-pass@127.0.0.1:{server.port}/0"


async def test_async_clients_raise_store_unreachable_at_first_use(locked_redis: RedisServer) -> None:
    for url, reason in ((closed_port_url(), "cannot be reached"), (wrong_password(locked_redis), "password")):
        started = time.monotonic()
        async with throttled_client(store=url) as client:
            with pytest.raises(StoreUnreachable, match=reason) as caught:
                await asyncio.wait_for(client.get("http://127.0.0.1:9/"), 10.0)
        assert time.monotonic() - started < 5.0
        assert "wrong-pass" not in str(caught.value)
        async with aiohttp_session(store=url) as session:
            with pytest.raises(StoreUnreachable, match=reason):
                await asyncio.wait_for(session.get("http://127.0.0.1:9/"), 10.0)
        async with Throttler(store=url) as throttler, \
                aiohttp.ClientSession(middlewares=(ThrottleMiddleware(throttler),)) as hand_built:
            with pytest.raises(StoreUnreachable, match=reason):  # a middleware on a session built by hand
                await asyncio.wait_for(hand_built.get("http://127.0.0.1:9/"), 10.0)


def test_blocking_clients_raise_store_unreachable_at_first_use(locked_redis: RedisServer) -> None:
    for url, reason in ((closed_port_url(), "cannot be reached"), (wrong_password(locked_redis), "password")):
        started = time.monotonic()
        with throttled_sync_client(store=url) as client, pytest.raises(StoreUnreachable, match=reason):
            client.get("http://127.0.0.1:9/")
        assert time.monotonic() - started < 5.0
        with requests_session(store=url) as session, pytest.raises(StoreUnreachable, match=reason):
            session.get("http://127.0.0.1:9/")


async def test_the_store_url_is_masked_and_the_right_password_connects(locked_redis: RedisServer) -> None:
    url = f"redis://:right-pass@127.0.0.1:{locked_redis.port}/0"
    async with Throttler(store=url) as throttler:
        assert "right-pass" not in throttler.store.url  # type: ignore[attr-defined]
        assert throttler.store.url == f"redis://:***@127.0.0.1:{locked_redis.port}/0"  # type: ignore[attr-defined]
        async with throttler.slot("http://127.0.0.1:9/") as permit:  # it connects with the real one
            permit.feedback(status=200)


# -- settings: CONCURRENT_REQUESTS_PER_IP, and what the start-up line says about robots.txt ---------

async def test_concurrent_requests_per_ip_scopes_by_server_address(tmp_path: Any) -> None:
    async with Throttler({"CONCURRENT_REQUESTS_PER_IP": 2, "CONCURRENT_REQUESTS_PER_DOMAIN": 8}) as throttler:
        # Two host names of one address share one scope of two slots, as in Scrapy.
        same = await throttler.scopes("http://127.0.0.1:1/b")
        assert await throttler.scopes("http://localhost:1/a") == same
        assert throttler.settings.scope_defaults.concurrency == 2
        first = await throttler.acquire("http://localhost:1/a")
        second = await throttler.acquire("http://localhost:1/a")
        assert not isinstance(await throttler.try_acquire("http://127.0.0.1:1/b"), Permit)
        for permit in (first, second):
            await permit.release()
    path = tmp_path / "s.toml"
    path.write_text("concurrent_requests_per_ip = 3\n")
    toml = Settings.from_toml(path)
    assert (toml.concurrent_requests_per_ip, toml.manager, toml.scope_defaults.concurrency) == (
        3, "crawlpace.IpScopes", 3)
    assert Settings.from_scrapy({"CONCURRENT_REQUESTS_PER_IP": 0}).manager is None
    with pytest.raises(ConfigError, match="PER_IP: 2 has no effect beside THROTTLING_MANAGER"):
        Settings.from_scrapy({"CONCURRENT_REQUESTS_PER_IP": 2, "THROTTLING_MANAGER": "crawlpace.IpScopes"})


def test_the_start_up_line_says_robots_txt_is_ignored_when_the_client_ignores_it(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="crawlpace"), requests_session({"DOWNLOAD_DELAY": 0.5,
                                                                        "DOWNLOAD_DELAY_PER_SLOT": 0}):
        pass
    lines = [record.getMessage() for record in caplog.records]
    assert any("robots.txt ignored" in line for line in lines), lines
    assert not any("obeyed" in line or "does not work as written" in line for line in lines), lines


# -- soft blocks and warm start through every client ---------------------------------------------

class ChallengeSite(Site):
    """The first answer is a 200 challenge page, every later one the real page."""

    def __init__(self) -> None:
        super().__init__()
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                with site.lock:
                    first = not site.arrivals
                    site.arrivals.append((time.monotonic(), 200))
                body = b"<p>please solve this captcha</p>" if first else b"the page"
                if self.path.startswith("/shield") and first:  # a bare challenge: the default rules know it
                    body = CHALLENGE_PAGE
                elif self.path.startswith("/form"):  # content with a captcha widget, every time
                    body = FORM_PAGE
                self.send_response(200)
                if first and self.path.startswith("/cf"):  # Cloudflare's own mark: no rule needed
                    self.send_header("cf-mitigated", "challenge")
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server.RequestHandlerClass = Handler


@pytest.fixture
def challenge() -> Iterator[ChallengeSite]:
    served = ChallengeSite()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()


RULES = ["captcha:200"]
#: A page of content with a reCAPTCHA widget on its form: no block by the default rules.
FORM_PAGE = (b'<html><title>Contact</title><script src="https://www.google.com/recaptcha/api.js"></script>'
             b'<form><div class="g-recaptcha"></div><p>Verify you are human</p></form></html>')


async def test_async_clients_resend_a_soft_block(challenge: ChallengeSite) -> None:
    async with throttled_client(OPEN, block_rules=RULES, trust_env=False) as client:
        response = await client.get(f"{challenge.url}/a")
        assert (response.text, httpx_attempts(response)) == ("the page", 2)
    async with aiohttp_session(OPEN, block_rules=RULES) as session, \
            session.get(f"{challenge.url}/b") as answer:
        assert (await answer.text(), aiohttp_attempts(answer)) == ("the page", 1)  # the site blocks once only
    with pytest.raises(TypeError, match="not both: got throttler and block_rules"):
        throttled_client(throttler=Throttler(), block_rules=RULES)


def test_a_challenge_header_is_a_soft_block_without_any_rule(challenge: ChallengeSite) -> None:
    with requests_session(OPEN) as session:
        response = session.get(f"{challenge.url}/cf")
        assert (response.text, requests_attempts(response)) == ("the page", 2)


def test_blocking_clients_resend_a_soft_block(challenge: ChallengeSite) -> None:
    with requests_session(OPEN, block_rules=RULES) as session:
        response = session.get(f"{challenge.url}/a")
        assert (response.text, requests_attempts(response)) == ("the page", 2)
    with throttled_sync_client({**OPEN, "THROTTLING_BLOCK_RULES": ["page:200"]}, trust_env=False) as client:
        again = client.get(f"{challenge.url}/b")
        assert again.text == "the page"
        assert httpx_attempts(again) == 4  # matched every time: sent 1 + 3 retries, then returned


async def test_a_soft_block_through_aiohttp_is_resent(challenge: ChallengeSite) -> None:
    async with aiohttp_session(OPEN, block_rules=RULES) as session, \
            session.get(f"{challenge.url}/a") as answer:
        assert (await answer.text(), aiohttp_attempts(answer)) == ("the page", 2)
    async with throttled_client(OPEN, trust_env=False) as client:  # no rule: a 200 is a 200
        response = await client.get(f"{challenge.url}/b")
        assert (response.status_code, httpx_attempts(response)) == (200, 1)


async def test_clients_know_a_bare_challenge_page_by_the_default_rules(challenge: ChallengeSite) -> None:
    async with throttled_client(OPEN, trust_env=False) as client:
        response = await client.get(f"{challenge.url}/shield")  # a challenge, then the page
        assert (response.text, httpx_attempts(response)) == ("the page", 2)
        form = await client.get(f"{challenge.url}/form")  # content with a widget
        assert (form.content, httpx_attempts(form)) == (FORM_PAGE, 1)
    with requests_session(OPEN) as session:
        assert requests_attempts(session.get(f"{challenge.url}/shield")) == 1  # the site blocks once only
    challenge.arrivals.clear()
    with requests_session({**OPEN, "THROTTLING_BLOCK_DEFAULTS": False}) as session:
        answer = session.get(f"{challenge.url}/shield")  # the defaults off: the challenge is a page
        assert (answer.content, requests_attempts(answer)) == (CHALLENGE_PAGE, 1)


async def test_warm_start_is_kept_by_a_client_and_read_by_the_next(site: Site, tmp_path: Any) -> None:
    learned = str(tmp_path / "learned.sqlite")
    async with throttled_client(OPEN, learned=learned, retries=0, trust_env=False) as client:
        assert client.throttler.learner is not None
        for n in range(3):
            await client.get(f"{site.url}/{n}")
    async with Throttler(OPEN, learned=learned) as throttler:  # the next run starts from the record
        warm = throttler.settings.warm_start
        assert warm is not None
        assert "127.0.0.1" in warm.records
    with pytest.raises(ConfigError, match="learned: cannot open"):
        Throttler(learned=str(tmp_path / "no-such-dir" / "x.sqlite"))


async def test_every_client_takes_learned_and_block_rules(tmp_path: Any) -> None:
    # Issue 37 item 5: both are public options of every client, not only of the async httpx one.
    learned = str(tmp_path / "learned.sqlite")
    throttlers: list[Throttler] = []
    async with throttled_client(OPEN, learned=learned, block_rules=RULES) as client:
        throttlers.append(client.throttler)
    async with aiohttp_session(OPEN, learned=learned, block_rules=RULES) as session:
        throttlers.append(session.throttler)
    with throttled_sync_client(OPEN, learned=learned, block_rules=RULES) as sync_client:
        throttlers.append(sync_client.throttler.throttler)
    with requests_session(OPEN, learned=learned, block_rules=RULES) as requests_client:
        throttlers.append(requests_client.throttler.throttler)
    for throttler in throttlers:
        assert throttler.learner is not None
        assert throttler.settings.block_rules == tuple(RULES)
