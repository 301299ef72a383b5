"""Settings, store URLs and URL lists that are wrong fail at once, naming the value and the fix."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from crawlpace import ConfigError, Settings, StoreUnreachable, Throttler
from crawlpace.cli import main
from crawlpace.crawl import CrawlOptions
from crawlpace.sim import Farm
from crawlpace.stores import reach

from .redis_server import RedisServer, free_port
from .test_crawl import crawl


@pytest.mark.parametrize("settings", [[("DOWNLOAD_DELAY", 1.0)], "DOWNLOAD_DELAY=1", 5])
def test_settings_that_are_not_a_mapping_say_so(settings: object) -> None:
    with pytest.raises(ConfigError, match=r"settings: expected a mapping of setting names to values, got "
                                          rf"{type(settings).__name__} .*give a dict such as"):
        Throttler(settings)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="expected a mapping"):
        Settings.from_dict(settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(("url", "message"), [
    ("redis://127.0.0.1:6379/0?namspace=x", "unknown option 'namspace'; did you mean 'namespace'?"),
    ("redis://127.0.0.1:6379/0?socket_timout=1", "did you mean 'socket_timeout'?"),
    ("redis:/127.0.0.1:6379", "a store URL starts with 'redis://' (two slashes)"),
    ("redis:127.0.0.1:6379", "two slashes"),
    ("redis://:6379/0", "name the server's host"),
    ("redis://127.0.0.1:63a9/0", "the port '63a9' is not a number"),
    ("redis://127.0.0.1:6379/zero", "the database 'zero' is not a number"),
    ("unix://", "name the socket file"),
])
def test_store_urls_are_checked_before_anything_opens(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"store '{url.replace('?', '[?]')}': .*{message[:20]}") as caught:
        Throttler(store=url)
    assert message in str(caught.value)


async def test_a_closed_port_or_a_wrong_password_is_an_error_at_start_up(redis_server: RedisServer) -> None:
    async with Throttler(store=f"redis://:pw@127.0.0.1:{free_port()}/0") as throttler:
        with pytest.raises(StoreUnreachable, match=r"store redis://:\*\*\*@127\.0\.0\.1:\d+/0: cannot be "
                                                   r"reached: .*check that the server runs"):
            await reach(throttler.store)
    async with Throttler(store=f"redis://nobody:pw@127.0.0.1:{redis_server.port}/0") as throttler:
        with pytest.raises(StoreUnreachable, match="check the user name and password"):
            await reach(throttler.store)
    async with Throttler(store=redis_server.url) as throttler:
        await reach(throttler.store)  # a server that answers: no error
    async with Throttler() as throttler:
        await reach(throttler.store)  # memory: nothing to reach


async def test_a_silent_server_is_an_error_after_the_time_limit() -> None:
    writers: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read(-1)  # accepts, reads, never answers

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with Throttler(store=f"redis://127.0.0.1:{port}/0") as throttler:
            started = time.monotonic()
            with pytest.raises(StoreUnreachable, match=r"no answer within 0\.3 s"):
                await reach(throttler.store, within=0.3)
            assert time.monotonic() - started < 5.0
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


def test_the_crawl_command_stops_at_once_on_a_store_it_cannot_reach(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listing = tmp_path / "urls.txt"
    listing.write_text("http://127.0.0.2:1/x\n", encoding="utf-8")
    # In this process, not a child: the time is the command's own, without an interpreter's start-up
    # and crawlpace's imports (33.6 s once, at load 28, in a child: the test failed on that alone).
    started = time.monotonic()
    code = main(["crawl", str(listing), "-o", str(tmp_path / "out.jsonl"),
                 "--store", f"redis://127.0.0.1:{free_port()}/0"])
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert code == 2, out
    assert "crawlpace crawl: store redis://127.0.0.1:" in out
    assert "Connect" in out
    assert time.monotonic() - started < 30.0
    assert not (tmp_path / "out.jsonl.state").exists()  # nothing left behind to --resume


def test_output_into_a_missing_folder_names_the_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    with pytest.raises(ConfigError, match=rf"output: the folder '{missing}' of '{missing}/x.jsonl' does not "
                                          rf"exist; create it first \(mkdir -p {missing}\)"):
        CrawlOptions(output=missing / "x.jsonl")
    with pytest.raises(ConfigError, match="state: the folder"):
        CrawlOptions(output=tmp_path / "x.jsonl", state=missing / "x.state")


async def test_urls_the_crawl_cannot_fetch_are_refused_up_front(tmp_path: Path) -> None:
    async with Farm({"site": [{"name": "site", "profile": "ratelimit", "rate": 100.0, "pages": 2}]}) as farm:
        good = f"{farm.sites[0].url}/page/1"
        summary, results = await crawl(tmp_path, ["ftp://127.0.0.2/file.txt", "mailto:a@example.com",
                                                  "127.0.0.2/page/1", "http:///nohost", good])
        report = farm.stats()
    outcomes = {result["url"]: (result["outcome"], result["error"]) for result in results}
    assert outcomes[good] == ("ok", None)
    assert outcomes["ftp://127.0.0.2/file.txt"] == (
        "failed", "URL 'ftp://127.0.0.2/file.txt': ftp:// is not crawled; only http:// and https:// URLs "
        "are fetched")
    assert "mailto:// is not crawled" in outcomes["mailto:a@example.com"][1]
    assert "has no scheme; write it with http:// or https://" in outcomes["127.0.0.2/page/1"][1]
    assert "has no host" in outcomes["http:///nohost"][1]
    assert report["site"]["requests"] == 2  # robots.txt and the good page; nothing for the others
    assert summary.complete


async def test_reads_of_a_store_that_cannot_be_reached_raise_the_documented_error() -> None:
    import redis.exceptions

    async with Throttler(store=f"redis://:hunter2@127.0.0.1:{free_port()}/0") as throttler:
        for read in (throttler.scope_stats("example.com"), throttler.stats()):
            shown = r"^store redis://:\*\*\*@127\.0\.0\.1:\d+/0: cannot be reached: .*reads fail while it is"
            with pytest.raises(StoreUnreachable, match=shown) as caught:
                await read
            assert "hunter2" not in str(caught.value)
            assert isinstance(caught.value.__cause__, redis.exceptions.ConnectionError)  # chained, not lost
