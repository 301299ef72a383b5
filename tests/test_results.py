"""The results file: one JSON line per URL, written so a kill keeps it, reconciled on resume."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from crawlpace.crawl import FINAL_OUTCOMES, OUTCOMES, Reconciled, Result, ResultWriter, reconcile


def make(url: str = "https://a.example/", outcome: str = "ok", **changes: Any) -> Result:
    fields: dict[str, Any] = {
        "url": url, "status": 200, "final_url": url, "bytes": 512, "latency": 0.25, "attempts": 1,
        "error": None, "scope": "a.example", "time": 1_700_000_000.5, "outcome": outcome,
    }
    fields.update(changes)
    return Result(**fields)


def write_lines(path: Path, *results: Result, tail: bytes = b"") -> None:
    with ResultWriter(path, append=False) as writer:
        for result in results:
            writer.write(result)
    if tail:
        with open(path, "ab") as file:
            file.write(tail)


def urls_in(path: Path) -> list[str]:
    return [json.loads(line)["url"] for line in path.read_text().splitlines()]


# -- Result -----------------------------------------------------------------


@pytest.mark.parametrize("result", [
    make(),
    make("https://b.example/ü?q=1", "failed", status=None, final_url=None, bytes=0, latency=None,
         attempts=0, error="invalid URL: no host"),
    make(outcome="exhausted", status=503, attempts=4, error="503 Service Unavailable"),
])
def test_result_round_trips(result: Result) -> None:
    line = result.to_json()
    assert "\n" not in line
    assert list(json.loads(line)) == sorted(json.loads(line))
    assert Result.from_json(line) == result
    assert Result.from_json(line.encode()) == result


def test_every_field_is_written() -> None:
    """to_json spells its keys out: a field added to Result must be added there too."""
    names = {item.name for item in dataclasses.fields(Result)}
    blocked = make(blocked=True, block_rule="challenge")
    assert set(json.loads(blocked.to_json())) == names
    assert set(json.loads(make().to_json())) == names - {"blocked", "block_rule"}
    assert Result.from_json(blocked.to_json()) == blocked


def test_final_outcomes() -> None:
    assert FINAL_OUTCOMES < OUTCOMES
    assert {o for o in OUTCOMES if make(outcome=o).final} == {"ok", "disallowed", "failed"}


@pytest.mark.parametrize(("changes", "message"), [
    ({"outcome": "maybe"}, "outcome must be one of"),
    ({"bytes": -1}, "bytes must be >= 0"),
    ({"attempts": -1}, "attempts must be >= 0"),
    ({"latency": float("nan")}, "latency must be"),
    ({"time": float("inf")}, "time must be"),
])
def test_result_rejects_bad_values(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(**changes)


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "not a JSON line"),
    ("[1, 2]", "JSON object"),
    ('{"url": "u"}', "lacks"),
    (make().to_json().replace('"status":200', '"status":true'), "'status' must be int"),
    (make().to_json().replace('"bytes":512', '"bytes":"512"'), "'bytes' must be int"),
])
def test_from_json_rejects_bad_lines(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Result.from_json(line)


def test_from_json_takes_whole_numbers_for_times_and_ignores_extra_keys() -> None:
    record = json.loads(make().to_json())
    record.update(latency=1, time=1_700_000_000, extra="later versions may add fields")
    result = Result.from_json(json.dumps(record))
    assert result.latency == 1.0
    assert isinstance(result.time, float)


# -- ResultWriter -----------------------------------------------------------


def test_writer_truncates_or_appends(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text("old line\n")
    with ResultWriter(path, append=False) as writer:
        writer.write(make("https://a.example/1"))
        assert writer.written == 1
    assert urls_in(path) == ["https://a.example/1"]
    with ResultWriter(path, append=True) as writer:
        writer.write(make("https://a.example/2"))
        writer.write(make("https://a.example/3"))
        writer.sync()
        assert writer.written == 2
    assert urls_in(path) == ["https://a.example/1", "https://a.example/2", "https://a.example/3"]
    assert path.read_bytes().endswith(b"}\n")


def test_writer_creates_a_missing_file_either_way(tmp_path: Path) -> None:
    for append in (False, True):
        path = tmp_path / f"out-{append}.jsonl"
        with ResultWriter(path, append=append) as writer:
            assert writer.path == path
        assert path.read_bytes() == b""


def test_writer_refuses_to_append_after_a_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"url": "cut sh')
    with pytest.raises(ValueError, match=r"partial line; run reconcile\(\)"):
        ResultWriter(path, append=True)


def test_writer_refuses_writes_after_close(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path / "out.jsonl", append=False)
    writer.close()
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(make())


def test_lines_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    code = textwrap.dedent(f"""
        import os, signal
        from crawlpace.crawl import Result, ResultWriter
        writer = ResultWriter({str(path)!r}, append=False)
        for i in range(500):
            outcome = "exhausted" if i % 100 == 99 else "ok"
            writer.write(Result(url=f"https://a.example/{{i}}", status=200, final_url=None, bytes=i,
                                latency=0.1, attempts=1, error=None, scope="a", time=1.0,
                                outcome=outcome))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    found = reconcile(path)
    assert found.kept == 495
    assert found.dropped_not_final == 5
    assert found.dropped_partial == 0
    assert len(found.final_urls) == 495
    assert "https://a.example/99" not in found.final_urls
    assert len(urls_in(path)) == 495


# -- reconcile --------------------------------------------------------------


def test_reconcile_of_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    assert reconcile(path) == Reconciled()
    assert not path.exists()


def test_reconcile_of_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b"")
    found = reconcile(path)
    assert found == Reconciled()
    assert path.read_bytes() == b""


def test_reconcile_leaves_a_clean_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_lines(path, make("https://a.example/1"), make("https://a.example/2", "disallowed"))
    before = path.stat()
    found = reconcile(path)
    assert found.final_urls == {"https://a.example/1", "https://a.example/2"}
    assert (found.kept, found.dropped, found.rewritten) == (2, 0, False)
    assert path.stat().st_ino == before.st_ino


@pytest.mark.parametrize("tail", [b'{"url": "https://a.example/9", "outc', b'{"url": "x"', b"\0\0\0\0"])
def test_reconcile_drops_a_partial_last_line(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "out.jsonl"
    write_lines(path, make("https://a.example/1"), make("https://a.example/2"), tail=tail)
    found = reconcile(path)
    assert (found.kept, found.dropped_partial, found.rewritten) == (2, 1, True)
    assert urls_in(path) == ["https://a.example/1", "https://a.example/2"]
    assert path.read_bytes().endswith(b"}\n")
    ResultWriter(path, append=True).close()  # now fit to append to


def test_reconcile_drops_a_complete_line_missing_only_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_lines(path, make("https://a.example/1"), tail=make("https://a.example/2").to_json().encode())
    found = reconcile(path)
    assert found.final_urls == {"https://a.example/1"}
    assert found.dropped_partial == 1


def test_reconcile_drops_lines_that_are_not_final_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_lines(
        path,
        make("https://a.example/1"),
        make("https://a.example/2", "gave_up", status=None),
        make("https://a.example/3", "exhausted", status=503),
        make("https://a.example/3", "ok", status=404),  # answered on a later attempt
        make("https://a.example/1", "ok", bytes=7),  # answered twice: the first one stands
        make("https://a.example/4", "failed", status=None, error="bad URL"),
    )
    found = reconcile(path)
    assert found.final_urls == {"https://a.example/1", "https://a.example/3", "https://a.example/4"}
    assert (found.kept, found.dropped_not_final, found.dropped_duplicate) == (3, 2, 1)
    assert found.rewritten
    assert urls_in(path) == ["https://a.example/1", "https://a.example/3", "https://a.example/4"]
    assert Result.from_json(path.read_text().splitlines()[0]).bytes == 512


def test_reconcile_drops_damaged_lines_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_lines(path, make("https://a.example/1"))
    with open(path, "ab") as file:
        file.write(b"\0\0garbage\n[1]\n")
    with ResultWriter(path, append=True) as writer:
        writer.write(make("https://a.example/2"))
    found = reconcile(path)
    assert (found.kept, found.dropped_invalid, found.dropped_partial) == (2, 2, 0)
    assert urls_in(path) == ["https://a.example/1", "https://a.example/2"]


def test_reconcile_keeps_lines_byte_for_byte_and_the_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    kept = b'{"outcome": "ok", "url": "https://a.example/1", "note": "written by hand"}\n'
    path.write_bytes(kept + b'{"outcome": "gave_up", "url": "https://b.example/"}\n')
    os.chmod(path, 0o640)
    reconcile(path)
    assert path.read_bytes() == kept
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temporary file left


def test_reconcile_then_append_answers_each_url_once(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_lines(path, make("https://a.example/1"), make("https://a.example/2", "exhausted"),
                tail=b'{"url": "https://a.example/3"')
    found = reconcile(path)
    with ResultWriter(path, append=True) as writer:
        for url in ("https://a.example/1", "https://a.example/2", "https://a.example/3"):
            if url not in found.final_urls:
                writer.write(make(url))
    assert urls_in(path) == ["https://a.example/1", "https://a.example/2", "https://a.example/3"]
