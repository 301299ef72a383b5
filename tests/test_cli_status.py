"""``crawlpace status``: the fleet's per-scope state, read back from a shared store."""

from __future__ import annotations

import asyncio
import json
import math
import random
import socket
import uuid
from pathlib import Path

import pytest

from crawlpace import Settings
from crawlpace._clock import AsyncioClock
from crawlpace.cli import main, status
from crawlpace.policy.rampup import RampupStats
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Lease, Outcome, ScopeSnapshot, open_store

from .redis_server import free_port

# Two slots, no delay and no jitter: a test can take both slots at once.
CONFIG = "[scope_defaults]\nconcurrency = 2\ndelay = 0.0\ndelay_per_slot = 0.0\njitter = false\n"
# What the throttler would feed back for a 429 (a bare Outcome(status=429) is not a backoff trigger:
# the throttler decides that, from the scope's BACKOFF_HTTP_CODES, and says so in the feedback).
THROTTLED = Outcome(status=429, feedback=(ScopeFeedback(backoff=True, status=429),))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "crawlpace.toml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


async def _seed(url: str, settings: Settings) -> None:
    """Leave two scopes in the store, as two workers would.

    ``api.example``: two sends, one answered 200 and one still in flight (its
    lease stays held after this store closes, until it expires in 30 s).
    ``slow.example``: one send, answered 429 after 50 ms, so it backs off one level (to twice
    the 50 ms that one request in flight took: the pace it was refused at).
    """
    store = open_store(url, settings, AsyncioClock(), random.Random(1))
    try:
        done = await store.acquire((("api.example", 1.0),))
        held = await store.acquire((("api.example", 1.0),))
        throttled = await store.acquire((("slow.example", 1.0),))
        assert isinstance(done, Lease)
        assert isinstance(held, Lease)
        assert isinstance(throttled, Lease)
        await store.release(done, Outcome(status=200, latency=0.05))
        await asyncio.sleep(0.05)  # the refused request's round trip, not a wait for a throttle
        await store.release(throttled, THROTTLED)
    finally:
        await store.aclose()


def _rows(out: str) -> dict[str, list[str]]:
    """The table's rows by scope (no cell of a row holds a space)."""
    lines = out.splitlines()
    rule = next(number for number, line in enumerate(lines) if line.startswith("---"))
    rows = {}
    for line in lines[rule + 1:]:
        cells = line.split()
        if len(cells) != len(status.COLUMNS):
            break
        rows[cells[0]] = cells
    return rows


@pytest.mark.redis
def test_the_table_shows_every_scope_of_the_fleet(redis_url: str, config: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(_seed(redis_url, Settings.from_toml(config)))
    namespace = redis_url.partition("?namespace=")[2]
    assert main(["status", "--redis", redis_url]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (f"crawlpace status: {redis_url.partition('?')[0]}, "
                                   f"namespace {namespace!r}: 2 scopes")
    assert out.splitlines()[1].split()[:3] == ["scope", "in", "flight"]
    rows = _rows(out)
    assert list(rows) == ["api.example", "slow.example"]  # sorted by scope
    columns = {name: index for index, name in enumerate(status.COLUMNS)}

    def cell(scope: str, column: str) -> str:
        return rows[scope][columns[column]]

    assert cell("api.example", "in flight") == "1/2"
    assert (cell("api.example", "sends"), cell("api.example", "responses")) == ("2", "1")
    assert cell("api.example", "backoff") == "0"
    assert cell("slow.example", "in flight") == "0/2"
    assert (cell("slow.example", "sends"), cell("slow.example", "responses")) == ("1", "1")
    assert cell("slow.example", "backoff") == "1"
    assert float(cell("slow.example", "delay").removesuffix("s")) > 0.0  # backoff slowed it
    assert cell("slow.example", "breaker") == "closed"
    assert cell("slow.example", "rampup") == "-"


@pytest.mark.redis
def test_json_with_a_separate_namespace_and_config(redis_url: str, config: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(_seed(redis_url, Settings.from_toml(config)))
    base, _, namespace = redis_url.partition("?namespace=")
    assert main(["status", "--store", base, "--namespace", namespace, "--config", str(config),
                 "--json"]) == 0
    out = capsys.readouterr().out

    def no_constants(name: str) -> object:
        raise AssertionError(f"{name} is not JSON")

    data = json.loads(out.splitlines()[-1], parse_constant=no_constants)
    assert data["store"] == base
    assert data["namespace"] == namespace
    assert data["missing"] == []
    scopes = {entry["scope"]: entry for entry in data["scopes"]}
    assert [entry["scope"] for entry in data["scopes"]] == ["api.example", "slow.example"]
    assert (scopes["api.example"]["inflight"], scopes["api.example"]["sends"],
            scopes["api.example"]["backoff"]) == (1, 2, 0)
    assert (scopes["slow.example"]["inflight"], scopes["slow.example"]["sends"],
            scopes["slow.example"]["backoff"]) == (0, 1, 1)
    assert scopes["api.example"]["concurrency"] == 2
    assert set(scopes["api.example"]) == set(ScopeSnapshot.__dataclass_fields__)
    # The table comes first, as with the other commands' --json.
    assert "2 scopes" in out.splitlines()[0]


@pytest.mark.redis
def test_scope_filter_names_the_scopes_without_state(redis_url: str, config: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(_seed(redis_url, Settings.from_toml(config)))
    assert main(["status", "--redis", redis_url, "--scope", "slow.example", "--scope", "nope.example",
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert list(_rows(out)) == ["slow.example"]
    assert "scope 'nope.example': no state in this store" in out
    data = json.loads(out.splitlines()[-1])
    assert [entry["scope"] for entry in data["scopes"]] == ["slow.example"]
    assert data["missing"] == ["nope.example"]


@pytest.mark.redis
def test_an_empty_namespace_says_so(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--redis", redis_url, "--namespace", f"empty{uuid.uuid4().hex[:8]}"]) == 0
    out = capsys.readouterr().out
    assert ": 0 scopes" in out.splitlines()[0]
    assert "no scope has state here" in out


def test_an_unreachable_store_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    assert main(["status", "--store", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"crawlpace status: cannot read the store {url.replace('hunter2', '***')}: ")
    assert "hunter2" not in captured.err
    assert "Traceback" not in captured.err


def test_a_silent_server_times_out(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(status, "TIMEOUT", 0.2)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # connections complete in the backlog; nothing ever answers
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        assert main(["status", "--store", url]) == 2
    err = capsys.readouterr().err
    assert err == f"crawlpace status: cannot read the store {url}: no answer within 0.2s\n"


def test_a_memory_store_holds_no_fleet_state(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--store", "memory://"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("crawlpace status: memory:// is a memory store, which holds no fleet "
                                   "state: it lives inside one process")
    assert len(captured.err.strip().splitlines()) == 1


def test_an_unknown_scheme_is_invalid_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--store", "http://127.0.0.1:1/"]) == 3
    assert "unknown scheme 'http'" in capsys.readouterr().err


def test_the_store_option_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["status"])
    assert exited.value.code == 2
    assert "--store" in capsys.readouterr().err


def test_json_holds_no_infinity_or_nan() -> None:
    rampup = RampupStats(phase="start", rate=2.0, target=(1.0, 1.0), pushbacks=0, last_pushback_rate=None,
                         ceiling=math.inf, concurrency=1, baseline_latency=math.nan, latency=None,
                         decision="start")
    snapshot = ScopeSnapshot(scope="a", concurrency=1, delay=0.5, delay_per_slot=0.5, inflight=0, resting=0,
                             sends=3, responses=3, errors=0, ready_in=0.0, last_latency=None,
                             mean_latency=math.nan, crawl_delay=2.0, rampup=rampup)
    report = status.StatusReport("redis://h:1/0", "ns", (snapshot,))
    text = json.dumps(report.as_dict(), allow_nan=False)
    entry = json.loads(text)["scopes"][0]
    assert entry["mean_latency"] is None
    assert entry["rampup"]["ceiling"] is None
    assert entry["rampup"]["baseline_latency"] is None
    assert entry["rampup"]["target"] == [1.0, 1.0]
    rows = _rows(status.render(report))
    assert rows["a"][status.COLUMNS.index("rampup")] == "2/s"
    assert rows["a"][status.COLUMNS.index("crawl-delay")] == "2s"


@pytest.mark.parametrize(("url", "expected"), [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
    ("rediss://user:pw@host/0?namespace=x", "rediss://user:***@host/0?namespace=x"),
    ("unix:///run/redis.sock?password=pw&db=1", "unix:///run/redis.sock?password=***&db=1"),
    ("memory://", "memory://"),
])
def test_passwords_are_masked(url: str, expected: str) -> None:
    assert status.shown(url) == expected
