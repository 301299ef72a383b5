"""No password reaches any output: every command path runs with one in its store URL, and all it
printed, logged and wrote is searched for it."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlpace import ConfigError
from crawlpace._redact import RedactingFormatter, redact
from crawlpace.sim import Farm

from .deadlines import CHILD
from .leak_guard import end_child
from .redis_server import RedisServer, free_port, redis_binary
from .test_scrapy_crawl import FAST as SCRAPY_FAST
from .test_scrapy_crawl import crawl as scrapy_crawl

pytestmark = pytest.mark.redis

SRC = str(Path(__file__).resolve().parents[1] / "src")
PASSWORD = "Pw-" + uuid.uuid4().hex  # the default user's password
USER_PASSWORD = "Acl-" + uuid.uuid4().hex  # the ACL user's
SECRETS = (PASSWORD, USER_PASSWORD)


@pytest.fixture(scope="module")
def locked_server() -> Iterator[RedisServer]:
    """A redis-server that wants a password, and has an ACL user ``crawler`` with a password of its own."""
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH (scripts/test installs one)")
    server = RedisServer(binary, extra=("--requirepass", PASSWORD,
                                        "--user", "crawler", "on", f">{USER_PASSWORD}", "~*", "&*", "+@all"))
    try:
        server.start()
        yield server
    finally:
        server.close()


def test_redact_hides_passwords_and_tokens_but_keeps_the_rest() -> None:
    assert redact("rediss://default:s3cret@cache:6380/1?namespace=x&password=p2&token=t") == \
        "rediss://default:***@cache:6380/1?namespace=x&password=***&token=***"
    assert redact("redis://:a@b@host:1/0") == "redis://:***@host:1/0"  # the last @ ends the userinfo
    assert redact("Redis(password='pw', db=0) {'token': 'x'} api_key=abc") == \
        "Redis(password='***', db=0) {'token': '***'} api_key=***"
    for plain in ("redis://127.0.0.1:6379/0", "rediss://user@host/0", "http://a.example/x:y?page=2", 42):
        assert redact(plain) == str(plain)


def test_a_line_break_inside_the_user_info_does_not_let_the_password_through() -> None:
    # URL parsers drop line breaks, so these are still passwords (found by the fuzz test).
    assert redact("A://:0000\n@") == "A://:***@"
    assert redact("redis://u\nx:pw@host/0") == "redis://u\nx:***@host/0"
    assert redact("redis://u:p@ss@host/0") == "redis://u:***@host/0"  # up to the last "@"


def test_settings_errors_and_cli_log_lines_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    error = ConfigError([f"CRAWLPACE_STORE: 'redis://:{PASSWORD}@h/0?x' is bad"])
    assert PASSWORD not in str(error)
    assert "redis://:***@h/0" in str(error)
    record = logging.LogRecord("crawlpace.x", logging.WARNING, __file__, 1, "store %s down", (
        f"redis://u:{PASSWORD}@h",), None)
    assert RedactingFormatter("%(message)s").format(record) == "store redis://u:***@h down"


async def cli(*args: str, stdin: bytes | None = None) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawlpace", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        env={**os.environ, "PYTHONPATH": SRC})
    try:
        out, _ = await asyncio.wait_for(process.communicate(stdin), CHILD)
    except BaseException:
        await end_child(process)
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


def leaks(texts: list[str], folder: Path) -> list[str]:
    """Where a secret shows: in one of ``texts`` (by index) or in a file under ``folder``."""
    found = [f"output {n}" for n, text in enumerate(texts) if any(secret in text for secret in SECRETS)]
    for path in folder.rglob("*"):
        if path.is_file() and not path.name.endswith(".config.json"):  # the test's own input to Scrapy
            data = path.read_bytes()
            found += [str(path) for secret in SECRETS if secret.encode() in data]
    return found


async def test_no_command_path_shows_a_password(tmp_path: Path, locked_server: RedisServer) -> None:
    port, closed = locked_server.port, free_port()
    default = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    acl = f"redis://crawler:{USER_PASSWORD}@127.0.0.1:{port}/0"
    wrong = f"redis://crawler:{PASSWORD}@127.0.0.1:{port}/0"  # a real secret, for the wrong user
    texts: list[str] = []
    async with Farm({"site": [{"name": "site", "profile": "ratelimit", "rate": 50.0, "pages": 6}]}) as farm:
        urls = [f"{farm.sites[0].url}/page/{n}" for n in range(1, 7)]
        listing = tmp_path / "urls.txt"
        listing.write_text("\n".join(urls) + "\n", encoding="utf-8")
        runs = [
            # a crawl of a URL file, with the default user's and the ACL user's password
            ("crawl", str(listing), "-o", str(tmp_path / "a.jsonl"), "--store", default, "-vv", "--json"),
            ("crawl", str(listing), "-o", str(tmp_path / "b.jsonl"), "--store", acl, "--namespace", "b",
             "-vv", "--json"),
            # the shared frontier: enqueue, one worker, status
            ("enqueue", str(listing), "--redis", acl, "--namespace", "c", "-vv", "--json"),
            ("crawl", "-o", str(tmp_path / "c.jsonl"), "--redis", acl, "--namespace", "c", "-vv", "--json"),
            ("status", "--store", acl, "--namespace", "b", "-vv", "--json"),
            # error paths: a wrong password, a closed port, a misspelled option
            ("status", "--store", wrong, "-vv"),
            ("crawl", str(listing), "-o", str(tmp_path / "d.jsonl"), "--store", wrong, "-vv"),
            ("enqueue", str(listing), "--redis", wrong),
            ("status", "--store", f"redis://:{PASSWORD}@127.0.0.1:{closed}/0"),
            ("crawl", str(listing), "-o", str(tmp_path / "e.jsonl"), "--store", default + "?namspace=x"),
            ("status", "--store", default + "?lease=soon"),
            ("crawl", str(listing), "-o", str(tmp_path / "f.jsonl"), "--store", "reds" + default[5:]),
        ]
        # Side by side, in waves: a wave's runs need nothing of each other, and at most one crawl in
        # a wave fetches the site (the failing runs stop at start-up). Each command is its own process.
        # At most four at a time, not to starve a test beside this one (the suite runs in two processes).
        results: dict[int, tuple[int, str]] = {}
        gate = asyncio.Semaphore(4)

        async def gated(n: int) -> tuple[int, str]:
            async with gate:
                return await cli(*runs[n])

        for wave in ((0, 2, *range(5, len(runs))), (1,), (3, 4)):
            done = await asyncio.gather(*(gated(n) for n in wave))
            results.update(zip(wave, done, strict=True))
        codes = [results[n][0] for n in range(len(runs))]
        texts += [results[n][1] for n in range(len(runs))]
        scrapy_runs = await asyncio.gather(*(
            scrapy_crawl(tmp_path / name, urls, {**SCRAPY_FAST, "CRAWLPACE_STORE": store})
            for name, store in (("s1", acl), ("s2", wrong), ("s3", default + "?namspace=1"))))
    texts += [run.log + repr(run.stats) for run in scrapy_runs]
    assert codes[:5] == [0, 0, 0, 0, 0], texts[:5]
    assert all(code != 0 for code in codes[5:]), list(zip(codes, texts, strict=True))[5:]
    assert leaks(texts, tmp_path) == []
    # The URLs were shown, with the password masked: the paths above did print them.
    assert f"redis://crawler:***@127.0.0.1:{port}/0" in texts[4]
    assert f"redis://crawler:***@127.0.0.1:{port}/0" in scrapy_runs[0].log
    assert "***" in texts[9]


@pytest.fixture(autouse=True)
def _folders(tmp_path: Path) -> None:
    for name in ("s1", "s2", "s3"):
        (tmp_path / name).mkdir()
