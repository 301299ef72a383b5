"""The settings file's [crawl] table: the crawl's own options (deadline, retries...) kept in a file.

Checked when the file is read, each problem naming the key, the value and the
fix; ``crawlpace crawl`` takes each value a flag does not give; a file with
only this table sets no throttling, so the crawl stays adaptive.
"""

from __future__ import annotations

import argparse
import json
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from crawlpace import ConfigError, Settings
from crawlpace._settings._config_crawl import CrawlConfig
from crawlpace.cli import _parser, main
from crawlpace.cli.crawl import ADAPTIVE_CONCURRENCY, build_settings, crawl_options
from crawlpace.crawl import CrawlOptions


def test_the_table_is_read_with_the_file() -> None:
    settings = Settings.from_dict({"crawl": {"deadline": 60, "retries": 1, "robots": False,
                                             "user_agent": "mybot/1.0", "wait_for_urls": 0}})
    assert settings.crawl == CrawlConfig(deadline=60, retries=1, robots=False, user_agent="mybot/1.0",
                                         wait_for_urls=0)
    assert settings.crawl.given() == {"deadline": 60, "retries": 1, "robots": False,
                                      "user_agent": "mybot/1.0", "wait_for_urls": 0}
    assert Settings().crawl.given() == {}


def test_each_bad_value_is_named_with_its_fix(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[crawl]\ndeadline = 0\nretries = -1\ntimeout = "5"\nrobots = "no"\nuser_agnt = "x"\n'
                    'user_agent = ""\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        Settings.from_toml(path)
    assert caught.value.problems == [
        f'{path}: crawl: unknown key "user_agnt"; did you mean "user_agent"? Valid keys: deadline, '
        "max_bytes, max_in_memory, max_redirects, retries, robots, timeout, user_agent, visibility, "
        "wait_for_urls",
        f"{path}: crawl.retries: -1 is not an integer >= 0; use a whole number >= 0",
        f"{path}: crawl.timeout: '5' is not a positive number of seconds; use e.g. 10",
        f"{path}: crawl.deadline: 0 is not a positive number of seconds; use e.g. 300",
        f"{path}: crawl.user_agent: '' is empty or spans lines; use one line of text",
        f"{path}: crawl.robots: expected true or false, got 'no' (str)",
    ]
    with pytest.raises(ConfigError, match=r"^crawl: expected a table"):
        Settings.from_dict({"crawl": 300})


def test_the_python_options_keep_the_same_rules() -> None:
    with pytest.raises(ConfigError) as caught:
        CrawlOptions(output=Path("out.jsonl"), deadline=0, retries=-1)
    assert caught.value.problems == ["retries: -1 is not an integer >= 0; use a whole number >= 0",
                                     "deadline: 0 is not a positive number of seconds; use e.g. 300"]


def _args(tmp_path: Path, text: str, *flags: str) -> tuple[argparse.Namespace, Settings]:
    config = tmp_path / "crawl.toml"
    config.write_text(text, encoding="utf-8")
    args = _parser().parse_args(["crawl", "urls.txt", "-o", str(tmp_path / "out.jsonl"), "--config",
                                 str(config), *flags])
    return args, build_settings(args)


def test_flags_win_over_the_file_and_the_file_over_the_defaults(tmp_path: Path) -> None:
    text = "[crawl]\ndeadline = 60\nretries = 1\nrobots = false\ntimeout = 5\n"
    args, settings = _args(tmp_path, text, "--deadline", "7.5", "--robots")
    assert crawl_options(args, settings) == {"deadline": 7.5, "retries": 1, "robots": True, "timeout": 5}
    args, settings = _args(tmp_path, text)
    options = CrawlOptions(output=tmp_path / "out.jsonl", **crawl_options(args, settings))
    assert (options.deadline, options.retries, options.robots, options.timeout) == (60, 1, False, 5)
    assert options.visibility == 30.0  # not in the file: the default
    args, settings = _args(tmp_path, "", "--no-robots")
    assert crawl_options(args, settings) == {"robots": False}


def test_a_bad_flag_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.2:9/\n", encoding="utf-8")
    assert main(["crawl", str(urls), "-o", str(tmp_path / "o.jsonl"), "--deadline", "0"]) == 3
    err = capsys.readouterr().err
    assert "--deadline: deadline: 0.0 is not a positive number of seconds; use e.g. 300" in err


def test_a_file_of_crawl_options_only_leaves_the_crawl_adaptive(tmp_path: Path) -> None:
    _args_only, settings = _args(tmp_path, "[crawl]\ndeadline = 60\n")
    assert settings.scope_defaults.rampup
    assert settings.concurrent_requests == ADAPTIVE_CONCURRENCY  # as without --config
    _args_fixed, settings = _args(tmp_path, "[crawl]\ndeadline = 60\n[scope_defaults]\ndelay = 0.5\n")
    assert not settings.scope_defaults.rampup
    assert settings.concurrent_requests == 16


class _Trickle(socketserver.BaseRequestHandler):
    """Headers at once, then the body a byte every 0.1 s, far within any --timeout; notes each path."""

    paths: ClassVar[list[str]] = []

    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            head += chunk
        self.paths.append(head.split(b" ")[1].decode())
        try:
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            for _ in range(1000):
                self.request.sendall(b"x")
                time.sleep(0.1)
        except OSError:
            pass  # the crawler gave up on it


@pytest.fixture
def trickling() -> Iterator[tuple[str, list[str]]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    paths: list[str] = []
    _Trickle.paths = paths
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", paths
    finally:
        server.shutdown()
        server.server_close()


def test_the_files_deadline_and_robots_reach_the_crawl(tmp_path: Path,
                                                       trickling: tuple[str, list[str]]) -> None:
    base, paths = trickling
    urls = tmp_path / "urls.txt"
    urls.write_text(f"{base}/slow\n", encoding="utf-8")
    config = tmp_path / "crawl.toml"
    config.write_text("[crawl]\ndeadline = 0.5\nretries = 0\nrobots = false\n", encoding="utf-8")
    output = tmp_path / "out.jsonl"
    started = time.monotonic()
    # Exit 1: the URL is left unanswered (exhausted), to be tried again on --resume.
    assert main(["crawl", str(urls), "-o", str(output), "--config", str(config), "--quiet"]) == 1
    assert time.monotonic() - started < 20  # the default deadline (300 s) would hold it for the 100 s body
    [result] = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert (result["outcome"], result["attempts"]) == ("exhausted", 1)
    assert "deadline" in result["error"]
    assert paths == ["/slow"]  # robots = false: no robots.txt asked for
