"""Every form of a password a user can type is masked, by every command and on every failure path (issue 31).

The password holds the characters that once got through: ``<`` and ``>``
(the old rule stopped there), quotes (``?password=a"b`` showed ``b``) and an
``@``. It is given as the URL's user info, as ``?password=``, and in a
one-slash typo; each command's output and every file it wrote is searched.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from crawlpace._redact import MASK, redact

from .deadlines import CHILD, REACH
from .leak_guard import end_child
from .redis_server import RedisServer, free_port, redis_binary

pytestmark = pytest.mark.redis

SRC = str(Path(__file__).resolve().parents[1] / "src")
PASSWORD = "p<w>\"q'@x-" + uuid.uuid4().hex[:12]
SECRETS = (PASSWORD, PASSWORD.split("@")[1])  # the whole, and the part after its "@"


@pytest.fixture(scope="module")
def locked() -> Iterator[RedisServer]:
    binary = redis_binary()
    if binary is None:
        pytest.skip("no redis-server on PATH")
    server = RedisServer(binary)
    try:
        server.start()
        # Set over the wire: redis-server reads its command line as a config file, quotes and all.
        redis.Redis.from_url(server.url).config_set("requirepass", PASSWORD)
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("text", [
    f"redis://:{PASSWORD}@h:1/0", f"redis://user:{PASSWORD}@h", f"redis:/:{PASSWORD}@h/0",
    f"redis:///:{PASSWORD}@h", f"<Store 'redis://:{PASSWORD}@h' ns='x'>", f"redis://h/0?password={PASSWORD}",
    f"redis://h/0?namespace=j&password={PASSWORD}&db=1", f"'redis://h?password={PASSWORD}'",
    f"Redis(password={PASSWORD!r})", f"password={PASSWORD} next",
], ids=lambda text: text.replace(repr(PASSWORD)[1:-1], "PW").replace(PASSWORD, "PW"))  # same ids every run
def test_the_rule_masks_every_form(text: str) -> None:
    shown = redact(text)
    assert not any(secret in shown for secret in SECRETS), shown
    assert MASK in shown


def test_a_unicode_space_does_not_end_a_query_password() -> None:
    # URL parsers keep U+0085 and U+2028 inside a query value (found by bench/fuzz.py).
    for secret in ("ab\x85cd", "ab\u2028cd"):
        assert redact(f"redis://h/0?password={secret}") == "redis://h/0?password=***"
        assert redact(f"password={secret} next") == "password=*** next"


def test_an_at_sign_in_the_user_name_does_not_hide_the_password() -> None:
    # urlsplit reads 'A://@:0000@' as user "@", password "0000" (found by bench/fuzz.py).
    assert redact("A://@:0000@") == "A://@:***@"
    assert redact("redis://u@x:s3cret@h/0") == "redis://u@x:***@h/0"


def test_the_rule_keeps_what_is_not_a_secret() -> None:
    for plain in ("redis://127.0.0.1:6379/0?namespace=a&db=1", "http://a.example/x:y@z", "see /a:b@c",
                  "http://medium.com/@someone", "Error 111 connecting to 127.0.0.1:6379."):
        assert redact(plain) == plain
    assert redact("'redis://h?password=abc' and more") == "'redis://h?password=***' and more"


async def cli(*args: str, serves: bool = False) -> tuple[int, str]:
    """Run a command; one that ``serves`` is stopped with SIGINT once it says it serves."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawlpace", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": SRC})
    assert process.stdout is not None
    head = b""
    try:
        if serves:
            while b"Ctrl-C" not in head:
                line = await asyncio.wait_for(process.stdout.readline(), REACH)
                if not line:
                    break
                head += line
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
        out, _ = await asyncio.wait_for(process.communicate(), CHILD)
    except BaseException:
        await end_child(process)
        raise
    assert process.returncode is not None
    return process.returncode, (head + out).decode(errors="replace")


def written_secrets(folder: Path) -> list[str]:
    """The files under ``folder`` that hold a secret."""
    return [str(path) for path in folder.rglob("*")
            if path.is_file() and any(secret.encode() in path.read_bytes() for secret in SECRETS)]


async def test_no_command_shows_an_awkward_password(tmp_path: Path, locked: RedisServer) -> None:
    port, closed = locked.port, free_port()
    info = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    query = f"redis://127.0.0.1:{port}/0?password={PASSWORD}"
    typo = f"redis:/:{PASSWORD}@127.0.0.1:{port}/0"
    wrong = f"redis://127.0.0.1:{port}/0?password={PASSWORD[::-1]}"
    shut = f"redis://127.0.0.1:{closed}/0?password={PASSWORD}"
    listing = tmp_path / "urls.txt"
    listing.write_text("ftp://127.0.0.1/a\nftp://127.0.0.1/b\n", encoding="utf-8")
    queued = tmp_path / "queued.txt"  # enqueue talks to Redis only for URLs it can queue
    queued.write_text(f"http://127.0.0.1:{closed}/a\n", encoding="utf-8")
    out = str(tmp_path / "out")
    runs: list[tuple[tuple[str, ...], bool, set[int]]] = [
        (("crawl", str(listing), "-o", out + "1.jsonl", "--store", query, "-vv"), False, {0}),
        (("crawl", str(listing), "-o", out + "2.jsonl", "--store", info, "--learned", query + "&namespace=l",
          "-vv"), False, {0}),
        (("enqueue", str(queued), "--redis", query, "--namespace", "q", "-vv"), False, {0}),
        (("crawl", "-o", out + "3.jsonl", "--redis", query, "--namespace", "q", "-vv", "--retries", "0"),
         False, {0, 1}),
        (("status", "--store", query, "--namespace", "q", "-vv"), False, {0}),
        (("purge", "--store", query, "--namespace", "q", "--dry-run", "-vv"), False, {0}),
        (("dashboard", "--store", query, "--port", str(free_port()), "-vv"), True, {0, 130, -2}),
        # failure paths: a wrong password, a closed port, a typo, an option misspelled
        *[((command, *rest, "--store", store, "-vv"), False, {1, 2, 3})
          for store in (wrong, shut, typo, query + "&namspace=x")
          for command, rest in (("crawl", (str(listing), "-o", out + "x.jsonl")), ("status", ()),
                                ("enqueue", (str(queued), "--namespace", "e")),
                                ("purge", ("--namespace", "e")),
                                ("dashboard", ("--port", str(free_port()))))],
        (("crawl", str(listing), "-o", out + "4.jsonl", "--learned", shut), False, {0, 1, 2, 3}),
    ]
    done = await asyncio.gather(*(cli(*args, serves=serves) for args, serves, _ in runs))
    for (args, _, codes), (code, text) in zip(runs, done, strict=True):
        assert code in codes, (args[-3:], code, text)
        assert not any(secret in text for secret in SECRETS), (args, text)
        assert "Traceback" not in text, (args, text)
    assert not written_secrets(tmp_path)
    assert MASK in done[5][1] or MASK in done[-1][1]  # the URLs were shown, masked
