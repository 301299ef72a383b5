"""The staged brake and its ASGI middleware, on a fake clock and scripted chance."""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlpace import parse_hints
from crawlpace.guard import DEFAULT_STAGES, Decision, Guard, Stage, StagedBrake

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DAY = 86400.0
BOT = "Mozilla/5.0 (compatible; ExampleBot/2.1; +http://www.example.com/bot.html)"
BOT_CLASS = "mozilla/ (compatible; examplebot/; +http://www.example.com/bot.html)"


class FakeClock:
    """A time source that only moves when a test sets it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class ScriptedRandom(random.Random):
    """A generator whose ``random()`` cycles through fixed values."""

    def __init__(self, values: Sequence[float]) -> None:
        super().__init__(0)
        self.values = list(values)
        self.draws = 0

    def random(self) -> float:
        value = self.values[self.draws % len(self.values)]
        self.draws += 1
        return value


ALWAYS_LUCKY = (0.999,)  # never below a partial stage's fraction: only full stops refuse
NEVER_LUCKY = (0.0,)  # always below it: every partial stage refuses everything


@dataclass
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class Backend:
    """An ASGI app standing for the costly page: counts calls, answers 200."""

    def __init__(self, headers: Sequence[tuple[bytes, bytes]] = ((b"content-type", b"text/html"),)) -> None:
        self.calls = 0
        self.headers = list(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        await send({"type": "http.response.start", "status": 200, "headers": list(self.headers)})
        await send({"type": "http.response.body", "body": b"page", "more_body": False})


def http_scope(path: str = "/api/item/1", agent: str | None = BOT,
               client: tuple[str, int] | None = ("198.51.100.7", 50123)) -> Scope:
    headers = [(b"host", b"example.com")]
    if agent is not None:
        headers.append((b"user-agent", agent.encode("latin-1")))
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "https", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": headers, "client": client, "server": ("example.com", 443)}


async def call(app: Guard, scope: Scope) -> Response:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert sent[0]["type"] == "http.response.start"
    body = b"".join(message.get("body", b"") for message in sent[1:])
    return Response(sent[0]["status"], list(sent[0]["headers"]), body)


def header(response: Response, name: bytes) -> bytes | None:
    values = [value for key, value in response.headers if key == name]
    assert len(values) <= 1
    return values[0] if values else None


def spend(brake: StagedBrake, key: str, now: float, attempts: int) -> list[Decision]:
    return [brake.decide(key, now) for _ in range(attempts)]


# -- the brake: stages ----------------------------------------------------------


def test_default_stages_are_the_seed_owners_brake() -> None:
    assert (Stage(0.5, 0.5), Stage(0.75, 0.75), Stage(1.0, 1.0)) == DEFAULT_STAGES


def test_staged_shares_exactly_with_scripted_chance() -> None:
    # Draws below the stage's fraction refuse: at 50 % the cycle refuses 2 of 4,
    # at 75 % it refuses 3 of 4.
    rng = ScriptedRandom([0.1, 0.6, 0.9, 0.3])
    brake = StagedBrake(100, 1000.0, rng=rng)
    first = spend(brake, "bot", 10.0, 50)
    assert all(d.allowed and d.stage == 0 for d in first)
    assert [d.used for d in first] == [float(n) for n in range(1, 51)]
    assert rng.draws == 0  # no chance is spent while no brake applies

    by_stage: dict[int, list[Decision]] = {1: [], 2: [], 3: []}
    while brake.stats()["keys"]["bot"]["used"] < 100:
        decision = brake.decide("bot", 10.0)
        by_stage[decision.stage].append(decision)
    stage1, stage2 = by_stage[1], by_stage[2]
    assert (len(stage1), sum(not d.allowed for d in stage1)) == (50, 25)
    assert [d.allowed for d in stage1[:4]] == [False, True, True, False]
    assert (len(stage2), sum(not d.allowed for d in stage2)) == (97, 72)
    assert stage2[-1].used == 100.0
    assert stage2[-1].remaining == 0.0

    after = spend(brake, "bot", 500.0, 20)
    assert all(not d.allowed and d.stage == 3 for d in after)
    assert {d.retry_after for d in after} == {500.0}
    assert {d.used for d in after} == {100.0}


def test_staged_shares_statistically_with_a_seeded_generator() -> None:
    brake = StagedBrake(10_000, 1000.0, rng=random.Random(2024))
    refused: Counter[int] = Counter()
    tried: Counter[int] = Counter()
    decision = brake.decide("bot", 0.0)
    while decision.stage < 3:
        tried[decision.stage] += 1
        refused[decision.stage] += not decision.allowed
        decision = brake.decide("bot", 0.0)
    assert (tried[0], refused[0]) == (5000, 0)
    assert refused[1] / tried[1] == pytest.approx(0.5, abs=0.03)
    assert refused[2] / tried[2] == pytest.approx(0.75, abs=0.03)
    assert tried[1] - refused[1] == 2500
    assert tried[2] - refused[2] == 2500


def test_spent_quota_refuses_everything_until_the_window_ends_then_resets() -> None:
    brake = StagedBrake(100, 1000.0, rng=ScriptedRandom(ALWAYS_LUCKY))
    assert all(d.allowed for d in spend(brake, "bot", 100.0, 100))
    late = brake.decide("bot", 999.5)
    assert (late.allowed, late.used, late.remaining, late.reset, late.retry_after) == (
        False, 100.0, 0.0, 0.5, 0.5)
    fresh = brake.decide("bot", 1000.0)
    assert (fresh.allowed, fresh.used, fresh.remaining, fresh.reset, fresh.stage) == (
        True, 1.0, 99.0, 1000.0, 0)


def test_allowed_requests_stay_within_the_quota_in_every_window() -> None:
    brake = StagedBrake(100, 1000.0, rng=random.Random(7))
    for window in range(3):
        decisions = spend(brake, "bot", window * 1000.0 + 1.0, 1000)
        assert sum(d.allowed for d in decisions) == 100
        assert max(d.used for d in decisions) == 100.0


def test_refused_requests_are_not_counted() -> None:
    brake = StagedBrake(10, 1000.0, stages=(Stage(0.5, 1.0),))
    decisions = spend(brake, "bot", 0.0, 40)
    assert sum(d.allowed for d in decisions) == 5
    assert brake.stats()["keys"]["bot"] == {"used": 5.0, "rejected": 35}
    assert brake.stats()["stage"] == 1
    assert {d.remaining for d in decisions if not d.allowed} == {5.0}


def test_keys_share_one_quota() -> None:
    # Issue 36: a key is a share inside the quota, never a quota beside it. A bot adding a
    # random suffix to its user agent got 1500 of 1500 costly requests at a quota of 200.
    brake = StagedBrake(3, 1000.0, stages=())
    assert [d.allowed for d in spend(brake, "a", 0.0, 4)] == [True, True, True, False]
    other = brake.decide("b", 0.0)
    assert (other.allowed, other.used, other.remaining, other.retry_after) == (False, 3.0, 0.0, 1000.0)
    rotating = StagedBrake(200, DAY, rng=random.Random(5))
    passed = sum(rotating.decide(f"examplebot/{n:x}", 60.0 + n / 100).allowed for n in range(1500))
    assert passed <= 200


def test_a_share_limits_one_key_inside_the_quota() -> None:
    brake = StagedBrake(4, 1000.0, stages=(), share=0.5)
    assert [d.allowed for d in spend(brake, "a", 0.0, 3)] == [True, True, False]
    refused = brake.decide("a", 1.0)
    assert (refused.allowed, refused.allowance, refused.retry_after) == (False, 0.0, 999.0)
    assert [d.allowed for d in spend(brake, "b", 0.0, 3)] == [True, True, False]
    assert not brake.decide("c", 0.0).allowed  # the quota itself is spent
    assert brake.stats()["totals"] == {"keys": 3, "used": 4.0, "rejected": 4}


def test_hard_stop_holds_when_the_stages_end_below_the_quota() -> None:
    brake = StagedBrake(10, 1000.0, stages=(Stage(0.5, 0.0),))
    decisions = spend(brake, "bot", 0.0, 12)
    assert [d.allowed for d in decisions] == [True] * 10 + [False] * 2
    assert (decisions[-1].stage, decisions[-1].retry_after) == (1, 1000.0)
    bare = StagedBrake(2, 1000.0, stages=())
    assert [(d.allowed, d.stage) for d in spend(bare, "bot", 0.0, 3)] == [(True, 0), (True, 0), (False, 0)]


def test_partial_refusal_asks_for_the_spacing_that_lasts_the_window() -> None:
    brake = StagedBrake(100, 1000.0, rng=ScriptedRandom(NEVER_LUCKY))
    spend(brake, "bot", 10.0, 50)
    refused = brake.decide("bot", 10.0)
    # 50 requests left for 990 s: one every 19.8 s spends them evenly.
    assert (refused.allowed, refused.stage, refused.remaining) == (False, 1, 50.0)
    assert refused.retry_after == pytest.approx(19.8)


def test_entered_marks_the_first_request_at_each_stage() -> None:
    brake = StagedBrake(4, 1000.0, stages=(Stage(0.5, 0.0), Stage(1.0, 1.0)))
    decisions = spend(brake, "bot", 0.0, 6)
    assert [(d.stage, d.entered) for d in decisions] == [
        (0, False), (0, False), (1, True), (1, False), (2, True), (2, False)]


def test_thresholds_tolerate_float_rounding() -> None:
    # 0.1 * 30 is 3.0000000000000004 in binary floating point; 3 used must still pass it.
    brake = StagedBrake(30, 1000.0, stages=(Stage(0.1, 1.0),))
    assert [d.allowed for d in spend(brake, "bot", 0.0, 4)] == [True, True, True, False]


def test_windows_are_aligned_on_multiples_of_the_window() -> None:
    brake = StagedBrake(10, DAY)
    decision = brake.decide("bot", 3 * DAY + 3600.0)
    assert decision.reset == DAY - 3600.0
    assert brake.stats()["window_start"] == 3 * DAY


def test_a_clock_stepping_back_keeps_the_current_window() -> None:
    brake = StagedBrake(10, 1000.0, stages=())
    brake.decide("bot", 1500.0)
    back = brake.decide("bot", 900.0)
    assert (back.used, back.reset) == (2.0, 1000.0)


def test_keys_of_ended_windows_are_forgotten() -> None:
    brake = StagedBrake(10, 1000.0)
    for n in range(5000):
        brake.decide(f"key-{n}", float(n % 1000) / 10)
    assert len(brake) == 5000
    brake.decide("late", 1000.0)
    assert len(brake) == 1
    assert list(brake.stats()["keys"]) == ["late"]
    assert brake.stats(now=2000.0)["keys"] == {}
    assert len(brake) == 0


def test_new_keys_share_one_counter_past_max_keys(caplog: pytest.LogCaptureFixture) -> None:
    brake = StagedBrake(10, 1000.0, stages=(), max_keys=3, share=0.2)
    for key in ("a", "b", "c"):
        brake.decide(key, 0.0)
    with caplog.at_level(logging.WARNING, logger="crawlpace.guard._brake"):
        assert [brake.decide(key, 0.0).allowed for key in ("d", "e", "f")] == [True, True, False]
    assert len(brake) == 4
    assert brake.stats()["keys"]["<overflow>"] == {"used": 2.0, "rejected": 1}
    assert len(caplog.records) == 1
    assert "<overflow>" in caplog.records[0].getMessage()
    brake.decide("g", 1000.0)  # a new window gives every key its own counter again
    assert list(brake.stats()["keys"]) == ["g"]


def test_stats_totals() -> None:
    brake = StagedBrake(2, 1000.0, stages=())
    spend(brake, "a", 0.0, 3)
    spend(brake, "b", 0.0, 1)
    stats = brake.stats()
    assert stats["totals"] == {"keys": 2, "used": 2.0, "rejected": 2}
    assert stats["keys"]["a"] == {"used": 2.0, "rejected": 1}
    assert stats["keys"]["b"] == {"used": 0.0, "rejected": 1}
    assert (stats["quota"], stats["stage"], stats["previous"]) == (2.0, 0, None)


def test_the_last_windows_totals_are_kept() -> None:
    brake = StagedBrake(3, 1000.0, stages=())
    spend(brake, "a", 10.0, 4)
    brake.note_crawler("googlebot", 20.0)
    brake.decide("b", 1500.0)
    previous = brake.stats()["previous"]
    assert previous == {"window_start": 0.0, "used": 3.0, "rejected": 1, "keys": 1, "stage": 0,
                        "crawlers": {"googlebot": 1}}
    brake.decide("b", 3500.0)  # an idle window in between: nothing to report for the one before
    assert brake.stats()["previous"] is None


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"quota": 0}, "quota"),
    ({"quota": -5}, "quota"),
    ({"quota": math.nan}, "quota"),
    ({"quota": math.inf}, "quota"),
    ({"quota": True}, "quota"),
    ({"window": 0.0}, "window"),
    ({"window": -1.0}, "window"),
    ({"stages": (Stage(0.5, 0.5), Stage(0.5, 1.0))}, "stages"),
    ({"stages": (Stage(0.75, 0.5), Stage(0.5, 1.0))}, "stages"),
    ({"stages": ((0.5, 0.5),)}, "stages"),
    ({"max_keys": 0}, "max_keys"),
])
def test_brake_validation_names_the_parameter(kwargs: dict[str, Any], name: str) -> None:
    arguments: dict[str, Any] = {"quota": 100, "window": 60.0, **kwargs}
    with pytest.raises(ValueError, match=name):
        StagedBrake(**arguments)


@pytest.mark.parametrize(("share", "reject", "name"), [
    (0.0, 0.5, "share"), (1.5, 0.5, "share"), (math.nan, 0.5, "share"),
    (0.5, -0.1, "reject"), (0.5, 1.1, "reject"),
])
def test_stage_validation_names_the_field(share: float, reject: float, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Stage(share, reject)


def test_a_non_finite_time_is_refused() -> None:
    with pytest.raises(ValueError, match="now"):
        StagedBrake(10, 60.0).decide("bot", math.nan)


@settings(max_examples=200, deadline=None)
@given(
    quota=st.floats(min_value=1.0, max_value=8.0),
    shares=st.lists(st.integers(min_value=1, max_value=10), max_size=4, unique=True),
    rejects=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=4, max_size=4),
    steps=st.lists(st.tuples(st.integers(min_value=0, max_value=3), st.integers(min_value=0, max_value=4)),
                   max_size=200),
    rng=st.randoms(use_true_random=False),
)
def test_allowed_requests_per_window_never_exceed_the_quota_nor_a_key_its_share(
        quota: float, shares: list[int], rejects: list[float], steps: list[tuple[int, int]],
        rng: random.Random) -> None:
    stages = tuple(Stage(share / 10, reject)
                   for share, reject in zip(sorted(shares), sorted(rejects), strict=False))
    brake = StagedBrake(quota, 10.0, stages, rng, share=0.5)
    allowed: Counter[tuple[int, int]] = Counter()
    total: Counter[int] = Counter()
    now = 0
    for key, gap in steps:
        now += gap
        decision = brake.decide(str(key), float(now))
        if decision.allowed:
            allowed[key, now // 10] += 1
            total[now // 10] += 1
            assert decision.used == total[now // 10]
        assert 0.0 < decision.reset <= 10.0
    assert all(count <= quota for count in total.values())
    assert all(count <= quota / 2 for count in allowed.values())


# -- the middleware ---------------------------------------------------------------


def guard(app: Backend, clock: FakeClock, **kwargs: Any) -> Guard:
    kwargs.setdefault("rng", ScriptedRandom(ALWAYS_LUCKY))
    return Guard(app, clock=clock, **kwargs)


async def test_allowed_response_carries_exact_ratelimit_headers() -> None:
    backend, clock = Backend(), FakeClock(1000.0)
    app = guard(backend, clock, quota=100)
    response = await call(app, http_scope())
    assert (response.status, response.body, backend.calls) == (200, b"page", 1)
    assert response.headers == [
        (b"content-type", b"text/html"),
        (b"ratelimit-policy", b'"guard";q=100;w=86400'),
        (b"ratelimit", b'"guard";r=99;t=85400'),
    ]
    hint = parse_hints(response.headers, wall_now=clock.now, cap=math.inf)
    assert hint is not None
    assert (hint.remaining, hint.reset, hint.limit, hint.window, hint.retry_after) == (
        99.0, 85400.0, 100.0, 86400.0, None)


async def test_spent_quota_is_answered_with_an_exact_429() -> None:
    backend, clock = Backend(), FakeClock(1000.0)
    app = guard(backend, clock, quota=100)
    for _ in range(100):
        assert (await call(app, http_scope())).status == 200
    response = await call(app, http_scope())
    body = b"Too Many Requests: this page is rationed to protect a daily quota. Retry after 85400 seconds.\n"
    assert (response.status, response.body, backend.calls) == (429, body, 100)
    assert response.headers == [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"85400"),
        (b"ratelimit-policy", b'"guard";q=100;w=86400'),
        (b"ratelimit", b'"guard";r=0;t=85400'),
    ]
    hint = parse_hints(response.headers, wall_now=clock.now, cap=math.inf)
    assert hint is not None
    assert (hint.retry_after, hint.remaining, hint.reset) == (85400.0, 0.0, 85400.0)


async def test_partial_stage_429_asks_for_a_short_wait() -> None:
    backend, clock = Backend(), FakeClock(1000.0)
    app = guard(backend, clock, quota=100, rng=ScriptedRandom(NEVER_LUCKY))
    for _ in range(50):
        await call(app, http_scope())
    response = await call(app, http_scope())
    # 50 left for 85400 s: 1708 s apart.
    assert response.status == 429
    assert header(response, b"retry-after") == b"1708"
    assert header(response, b"ratelimit") == b'"guard";r=50;t=85400'
    hint = parse_hints(response.headers, wall_now=clock.now, cap=math.inf)
    assert hint is not None
    assert (hint.retry_after, hint.remaining) == (1708.0, 50.0)


async def test_retry_after_rounds_up_to_whole_seconds() -> None:
    backend, clock = Backend(), FakeClock(59.25)
    app = guard(backend, clock, quota=1, window=60.0)
    await call(app, http_scope())
    response = await call(app, http_scope())
    assert header(response, b"retry-after") == b"1"
    assert header(response, b"ratelimit") == b'"guard";r=0;t=1'


async def test_window_end_lets_requests_through_again() -> None:
    backend, clock = Backend(), FakeClock(10.0)
    app = guard(backend, clock, quota=1, window=60.0)
    assert [(await call(app, http_scope())).status for _ in range(2)] == [200, 429]
    clock.now = 60.0
    response = await call(app, http_scope())
    assert response.status == 200
    assert header(response, b"ratelimit") == b'"guard";r=0;t=60'


async def test_headers_off_keeps_only_retry_after() -> None:
    backend, clock = Backend(), FakeClock(0.0)
    app = guard(backend, clock, quota=1, window=60.0, headers=False)
    allowed = await call(app, http_scope())
    refused = await call(app, http_scope())
    assert allowed.headers == [(b"content-type", b"text/html")]
    assert [name for name, _ in refused.headers] == [b"content-type", b"content-length", b"retry-after"]
    assert header(refused, b"retry-after") == b"60"


async def test_an_applications_own_ratelimit_header_is_left_alone() -> None:
    own = [(b"content-type", b"text/html"), (b"RateLimit", b'"app";r=3;t=9')]
    backend, clock = Backend(own), FakeClock(0.0)
    response = await call(guard(backend, clock, quota=10), http_scope())
    assert response.headers == own


async def test_confirmed_allow_listed_crawlers_pass_untouched_and_uncounted() -> None:
    backend, clock = Backend(), FakeClock(0.0)
    # The client address is inside ranges the owner vouches for, so the names are believed.
    app = guard(backend, clock, quota=1, bot_ranges={"*": ["198.51.100.0/24"]})
    google = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
    for agent in (google, google, "Mozilla/5.0 (compatible; bingbot/2.0)", "APPLEBOT/0.1"):
        response = await call(app, http_scope(agent=agent))
        assert response.status == 200
        assert response.headers == [(b"content-type", b"text/html")]
    assert app.stats()["keys"] == {}
    assert [(await call(app, http_scope())).status for _ in range(2)] == [200, 429]


async def test_an_empty_allow_list_brakes_everyone() -> None:
    backend, clock = Backend(), FakeClock(0.0)
    app = guard(backend, clock, quota=1, allow=())
    googlebot = http_scope(agent="Googlebot/2.1")
    assert [(await call(app, googlebot)).status for _ in range(2)] == [200, 429]


async def test_only_costly_paths_are_braked() -> None:
    backend, clock = Backend(), FakeClock(0.0)
    app = guard(backend, clock, quota=1, costly=["/api-backed/", "/search"])
    for _ in range(3):
        response = await call(app, http_scope(path="/static/style.css"))
        assert (response.status, response.headers) == (200, [(b"content-type", b"text/html")])
    assert (await call(app, http_scope(path="/api-backed/42"))).status == 200
    assert (await call(app, http_scope(path="/search?q=x"))).status == 429
    assert backend.calls == 4


async def test_costly_as_one_prefix_or_a_callable() -> None:
    backend, clock = Backend(), FakeClock(0.0)
    single = guard(backend, clock, quota=1, costly="/api")
    assert [(await call(single, http_scope(path=p))).status for p in ("/a", "/api/1", "/api/2")] == [
        200, 200, 429]

    def only_get(scope: Scope) -> bool:
        return bool(scope["method"] == "GET")

    by_method = guard(backend, clock, quota=1, costly=only_get)
    post = {**http_scope(), "method": "POST"}
    assert [(await call(by_method, s)).status for s in (post, post, http_scope(), http_scope())] == [
        200, 200, 200, 429]


async def test_user_agent_key_ignores_versions() -> None:
    backend, clock = Backend(), FakeClock(0.0)
    app = guard(backend, clock, quota=4, share=0.25)
    newer = BOT.replace("2.1", "3.0.17")
    assert (await call(app, http_scope(agent=BOT))).status == 200
    assert (await call(app, http_scope(agent=newer))).status == 429
    assert (await call(app, http_scope(agent="OtherBot/1.0"))).status == 200
    assert (await call(app, http_scope(agent=None))).status == 200
    assert set(app.stats()["keys"]) == {BOT_CLASS, "otherbot/", ""}


async def test_ip_key_counts_client_addresses() -> None:
    backend, clock = Backend(), FakeClock(0.0)
    app = guard(backend, clock, quota=4, key="ip", share=0.25)
    assert (await call(app, http_scope(client=("203.0.113.9", 1)))).status == 200
    assert (await call(app, http_scope(agent="Other/1", client=("203.0.113.9", 2)))).status == 429
    assert (await call(app, http_scope(client=("203.0.113.10", 1)))).status == 200
    assert (await call(app, http_scope(client=None))).status == 200
    assert set(app.stats()["keys"]) == {"203.0.113.9", "203.0.113.10", ""}


async def test_site_key_and_callable_key() -> None:
    backend, clock = Backend(), FakeClock(0.0)
    site = guard(backend, clock, quota=2, key="site")
    statuses = [(await call(site, http_scope(agent=f"Bot{n}/1", client=(f"192.0.2.{n}", 1)))).status
                for n in range(3)]
    assert statuses == [200, 200, 429]
    assert list(site.stats()["keys"]) == ["*"]

    def by_host(scope: Scope) -> str:
        host: bytes = dict(scope["headers"])[b"host"]
        return host.decode()

    custom = guard(backend, clock, quota=1, key=by_host)
    await call(custom, http_scope())
    assert list(custom.stats()["keys"]) == ["example.com"]


@pytest.mark.parametrize("kind", ["websocket"])
async def test_other_scopes_pass_through(kind: str) -> None:
    seen: list[tuple[Scope, Receive, Send]] = []

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope, receive, send))

    async def receive() -> Message:
        return {"type": f"{kind}.startup" if kind == "lifespan" else "websocket.connect"}

    async def send(message: Message) -> None:
        raise AssertionError("the middleware must not answer by itself")

    app = Guard(inner, quota=1, clock=FakeClock(0.0))
    scope: Scope = {"type": kind, "asgi": {"version": "3.0"}, "path": "/", "headers": []}
    for _ in range(3):
        await app(scope, receive, send)
    assert seen == [(scope, receive, send)] * 3
    assert len(app.brake) == 0


async def test_stage_entries_are_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    backend, clock = Backend(), FakeClock(0.0)
    app = guard(backend, clock, quota=4)
    with caplog.at_level(logging.WARNING, logger="crawlpace.guard"):
        for _ in range(8):
            await call(app, http_scope())
    records = [record for record in caplog.records if record.name == "crawlpace.guard"]
    messages = [record.getMessage() for record in records]
    assert len(messages) == 3
    assert {record.levelno for record in records} == {logging.WARNING}  # plain uvicorn shows them
    assert [f"entered stage {n}" in message for n, message in enumerate(messages, 1)] == [True] * 3
    assert "refusing 50 %" in messages[0]
    assert "2 of 4 used, 86400 s left" in messages[0]


async def test_refused_requests_never_reach_the_application() -> None:
    backend, clock = Backend(), FakeClock(0.0)
    app = guard(backend, clock, quota=10, rng=random.Random(3))
    statuses = Counter([(await call(app, http_scope())).status for _ in range(200)])
    assert statuses[200] == backend.calls == 10
    assert statuses[429] == 190
    assert app.stats()["totals"] == {"keys": 1, "used": 10.0, "rejected": 190}


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"key": "cookie"}, "key"),
    ({"costly": []}, "costly"),
    ({"costly": [b"/api"]}, "costly"),
    ({"allow": [""]}, "allow"),
    ({"quota": 0}, "quota"),
    ({"window": math.inf}, "window"),
])
def test_guard_validation_names_the_parameter(kwargs: dict[str, Any], name: str) -> None:
    arguments: dict[str, Any] = {"quota": 10, **kwargs}
    with pytest.raises(ValueError, match=name):
        Guard(Backend(), **arguments)
