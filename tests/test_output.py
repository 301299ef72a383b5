"""Result lines written in batches: one write per batch, and no URL settled before its line is out."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from crawlpace.crawl._output import ResultBatch
from crawlpace.frontier import Result, ResultWriter, reconcile


def result(n: int) -> Result:
    return Result(url=f"http://127.0.0.2/page/{n}", status=200, final_url=f"http://127.0.0.2/page/{n}",
                  bytes=10, latency=0.01, attempts=1, error=None, scope="127.0.0.2", time=1.0, outcome="ok")


def no_error(exc: OSError) -> None:
    raise AssertionError(f"unexpected write error: {exc}")


def line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n")


async def test_lines_wait_for_their_batch_and_are_settled_only_once_written(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    settled: list[int] = []
    writes: list[int] = []
    with ResultWriter(out, append=False) as writer:
        def write(results: list[Result]) -> None:
            writes.append(len(results))
            writer.write_many(results)

        def settle(n: int) -> None:
            # Whatever settles a URL (a done mark, an acknowledgement) finds its line in the file.
            assert f"/page/{n}\"" in out.read_text(encoding="utf-8")
            settled.append(n)

        batch: ResultBatch[int] = ResultBatch(write, settle, on_error=no_error, max_lines=4, max_delay=60)
        for n in range(3):
            batch.add(result(n), n)
        assert (line_count(out), settled, len(batch)) == (0, [], 3)
        batch.add(result(3), 3)  # the fourth line fills the batch
        assert (line_count(out), settled, writes) == (4, [0, 1, 2, 3], [4])
        batch.add(result(4), 4)
        batch.flush()
        batch.flush()  # nothing left: no empty write
    assert writes == [4, 1]
    assert settled == [0, 1, 2, 3, 4]
    kept = reconcile(out)
    assert kept.final_urls == {f"http://127.0.0.2/page/{n}" for n in range(5)}


async def test_a_lone_line_goes_out_after_the_delay(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    settled: list[int] = []
    with ResultWriter(out, append=False) as writer:
        batch: ResultBatch[int] = ResultBatch(writer.write_many, settled.append, on_error=no_error,
                                              max_lines=100, max_delay=0.01)
        batch.add(result(1), 1)
        assert settled == []
        for _ in range(100):
            await asyncio.sleep(0.01)
            if settled:
                break
    assert settled == [1]
    assert line_count(out) == 1


async def test_a_failed_write_settles_nothing_and_reports_the_error(tmp_path: Path) -> None:
    settled: list[int] = []
    errors: list[OSError] = []
    full = True

    def write(results: list[Result]) -> None:
        if full:
            raise OSError(28, "No space left on device")

    batch: ResultBatch[int] = ResultBatch(write, settled.append, on_error=errors.append, max_lines=10,
                                          max_delay=0.01)
    batch.add(result(1), 1)
    for _ in range(100):
        await asyncio.sleep(0.01)
        if errors:
            break
    assert [error.errno for error in errors] == [28]
    assert settled == []
    assert len(batch) == 1
    with pytest.raises(OSError, match="No space"):
        batch.flush()
    full = False
    batch.flush()
    assert settled == [1]


def test_write_many_is_one_write_of_whole_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out.jsonl"
    calls: list[int] = []
    real_write = os.write

    def counting(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        return real_write(fd, data)

    with ResultWriter(out, append=False) as writer:
        monkeypatch.setattr(os, "write", counting)
        writer.write_many([result(n) for n in range(50)])
        writer.write_many([])
        monkeypatch.undo()
        assert writer.written == 50
    assert len(calls) == 1
    rows = out.read_text(encoding="utf-8").splitlines()
    assert [Result.from_json(row) for row in rows] == [result(n) for n in range(50)]


def test_write_many_after_close_is_refused(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path / "out.jsonl", append=False)
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write_many([result(1)])


def test_batch_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_lines"):
        ResultBatch(lambda results: None, lambda item: None, on_error=lambda exc: None, max_lines=0)
