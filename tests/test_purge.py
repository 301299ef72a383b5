"""``crawlpace purge`` on a real Redis: one job's keys go, whatever characters its names and scopes hold."""

from __future__ import annotations

import asyncio
import json
import random
import re
from urllib.parse import quote

import pytest
import redis

from crawlpace import ConfigError, Settings
from crawlpace._throttle._learned import LearnedRedis, LearnedScope
from crawlpace.cli import main
from crawlpace.frontier._shared import SharedFrontier
from crawlpace.guard import SharedBrake
from crawlpace.policy.signals import ScopeFeedback
from crawlpace.stores import Lease, Outcome
from crawlpace.stores.redis import RedisStore
from crawlpace.stores.redis import _keys as keys
from crawlpace.testing import MockClock

pytestmark = pytest.mark.redis

SETTINGS = Settings.from_scrapy({"DOWNLOAD_DELAY": 0, "RANDOMIZE_DOWNLOAD_DELAY": False,
                                 "CONCURRENT_REQUESTS_PER_DOMAIN": 4, "BACKOFF_JITTER": 0})
SLOWED = Outcome(status=429, feedback=(ScopeFeedback(failed=False, status=429, backoff=True),))
# Scope names that mean something to SCAN's MATCH: as patterns, "a*" matches "ab" and "[x]" matches "x".
SCOPES = ["a*", "[x]", "ab", "x", "?", "back\\slash"]


def url_of(server: str, namespace: str) -> str:
    return f"{server}?namespace={quote(namespace, safe='')}"


async def fill(server: str, namespace: str) -> None:
    """Real keys of one job: admission hashes, learned policies, a lease in flight, a frontier."""
    store = RedisStore(url_of(server, namespace) + "&time=local", SETTINGS, MockClock(), random.Random(1))
    front = SharedFrontier(url_of(server, namespace), worker="w")
    try:
        assert isinstance(await store.acquire((("a*", 1.0),)), Lease)  # held: a lease set
        for name in SCOPES:
            lease = await store.acquire(((name, 1.0),))
            assert isinstance(lease, Lease)
            await store.release(lease, SLOWED)  # backs off: a policy key besides the hash
        await store.flush()
        await front.enqueue([f"https://{host}.example/{i}" for host in ("h1", "h2") for i in range(3)])
        claim = await front.claim(1, spacing=0.0)
        assert claim.urls
    finally:
        await front.aclose()
        await store.aclose()


def job_keys(client: redis.Redis, namespace: str) -> set[bytes]:
    start = keys.prefix(namespace).encode()
    return {key for key in client.scan_iter(count=1000) if key.startswith(start)}


@pytest.mark.parametrize(("mine", "lookalike"), [("job[1]", "job1"), ("j*", "jx"), ("j?b", "job")])
def test_purge_removes_one_job_and_spares_the_job_its_pattern_would_match(
        redis_url: str, mine: str, lookalike: str, capsys: pytest.CaptureFixture[str]) -> None:
    server = redis_url.split("?")[0]
    client = redis.Redis.from_url(server)
    try:
        for namespace in (mine, lookalike):
            asyncio.run(fill(server, namespace))
        ours, theirs = job_keys(client, mine), job_keys(client, lookalike)
        # Every scope has its hash, the backed-off ones a policy, "a*" a lease set; the frontier its own keys.
        for name in SCOPES:
            assert client.exists(*keys.scope_keys(keys.prefix(lookalike), name)[::3]) == 2, name
        assert len(ours) == len(theirs) > 2 * len(SCOPES) + 2
        capsys.readouterr()

        assert main(["purge", "--store", server, "--namespace", mine, "--dry-run"]) == 0
        assert f"would remove {len(ours)} keys of namespace {mine!r}" in capsys.readouterr().out
        assert job_keys(client, mine) == ours

        assert main(["purge", "--store", server, "--namespace", mine]) == 0
        assert f"removed {len(ours)} keys of namespace {mine!r}" in capsys.readouterr().out
        assert job_keys(client, mine) == set()
        assert job_keys(client, lookalike) == theirs  # not one key of the other job

        async def listed() -> list[str]:
            # On the clock the job was filled on: a snapshot is as of its store's now, and the
            # server's clock is decades past the fake one, when the backoff has long recovered.
            store = RedisStore(url_of(server, lookalike) + "&time=local", SETTINGS, MockClock(),
                               random.Random(1))
            try:
                snapshot = await store.snapshot("a*")
                assert snapshot is not None
                assert snapshot.backoff == 1  # what the other job learned is still there
                return sorted(await store.scopes())
            finally:
                await store.aclose()

        assert asyncio.run(listed()) == sorted(SCOPES)
    finally:
        for namespace in (mine, lookalike):
            for key in job_keys(client, namespace):
                client.delete(key)
        client.close()


def test_purge_spares_keys_of_a_namespace_that_extends_this_one_past_a_colon(redis_url: str) -> None:
    """``cp:job:`` also starts ``cp:job:2:...``: such keys (left by an older version) are not ``job``'s."""
    server = redis_url.split("?")[0]
    client = redis.Redis.from_url(server)
    others = [b"cp:job:2:{s}:a", b"cp:job:2:frontier:{job:2}:ready", b"cp:job:frontier:{other}:ready"]
    try:
        asyncio.run(fill(server, "job"))
        ours = job_keys(client, "job") - set(others)
        for key in others:
            client.hset(key, "sends", 1)
        assert main(["purge", "--store", server, "--namespace", "job"]) == 0
        assert job_keys(client, "job") == set(others)
        assert ours
    finally:
        for key in job_keys(client, "job"):
            client.delete(key)
        client.close()


@pytest.mark.parametrize("namespace", ["job:2", "a:{b}"])
def test_a_namespace_with_a_colon_is_refused_at_start_up(redis_url: str, namespace: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    server = redis_url.split("?")[0]
    message = re.escape(f"namespace {namespace!r}: a colon")
    with pytest.raises(ConfigError, match=message):
        RedisStore(url_of(server, namespace), SETTINGS, MockClock())
    with pytest.raises(ConfigError, match=message):
        SharedFrontier(url_of(server, namespace))
    with pytest.raises(ConfigError, match=message):
        SharedBrake(url_of(server, namespace), quota=10)
    assert main(["purge", "--store", server, "--namespace", namespace]) == 3
    assert f"--namespace {namespace!r}: a colon" in capsys.readouterr().err


def records(server: str, namespace: str) -> list[str]:
    """The scopes with a warm-start record in ``namespace``."""
    sink = LearnedRedis(url_of(server, namespace))
    try:
        return list(sink.load())
    finally:
        sink.close()


def test_warm_start_records_stay_unless_purge_is_told_learned(redis_url: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A job's warm-start records outlive ``purge``; ``--learned`` removes them, and only this namespace's."""
    server = redis_url.split("?")[0]
    client = redis.Redis.from_url(server)
    record = LearnedScope(rate=4.0, learned_at=1.0)
    namespaces = ("shop[1]", "shop1")  # the escaped pattern of the first must not match the second
    try:
        for namespace in namespaces:
            asyncio.run(fill(server, namespace))
            sink = LearnedRedis(url_of(server, namespace))
            sink.save({"a*": record, "example.com": record})
            sink.close()
        capsys.readouterr()

        assert main(["purge", "--store", server, "--namespace", "shop[1]", "--json"]) == 0
        out = capsys.readouterr().out
        assert "kept 2 warm-start records (shop[1]:learned:*); add --learned to remove them too" in out
        assert json.loads(out.splitlines()[-1])["learned_records"] == 2
        assert job_keys(client, "shop[1]") == set()
        assert sorted(records(server, "shop[1]")) == ["a*", "example.com"]

        assert main(["purge", "--store", server, "--namespace", "shop[1]", "--learned", "--dry-run"]) == 0
        assert "would remove 2 warm-start records" in capsys.readouterr().out
        assert main(["purge", "--store", server, "--namespace", "shop[1]", "--learned"]) == 0
        assert "removed 2 warm-start records (shop[1]:learned:*)" in capsys.readouterr().out
        assert records(server, "shop[1]") == []
        assert sorted(records(server, "shop1")) == ["a*", "example.com"]
        assert job_keys(client, "shop1")  # the other job keeps its keys too
    finally:
        for namespace in namespaces:
            for key in job_keys(client, namespace) | set(client.scan_iter(match=f"{namespace}:learned:*")):
                client.delete(key)
        client.close()
