"""The crawl journal: creating and reopening it, paging pending URLs, and what survives a crash."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawlpace import CrawlpaceError
from crawlpace.frontier import Entry, Journal, JournalError


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal.create(tmp_path / "crawl.journal", fingerprint="fp-1") as made:
        yield made


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60, check=False)


# -- creating and opening ---------------------------------------------------


def test_create_then_open_keeps_meta(tmp_path: Path) -> None:
    path = tmp_path / "crawl.journal"
    with Journal.create(path, fingerprint="abc") as journal:
        assert journal.fingerprint == "abc"
        assert journal.path == path
        assert journal.created > 0
        assert not journal.input_complete
        journal.mark_input_complete()
    with Journal.open(path) as journal:
        assert journal.fingerprint == "abc"
        assert journal.input_complete
        assert journal.total() == 0


def test_create_refuses_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "crawl.journal"
    path.write_text("precious")
    with pytest.raises(FileExistsError, match=r"already exists; pass --resume .* or delete the file"):
        Journal.create(path, fingerprint="x")
    assert path.read_text() == "precious"


def test_open_of_a_missing_file_says_so(tmp_path: Path) -> None:
    path = tmp_path / "nothing.journal"
    with pytest.raises(FileNotFoundError, match="no crawl journal to resume; run without --resume"):
        Journal.open(path)
    assert not path.exists()


@pytest.mark.parametrize("content", [b"", b"hello, not a database\n" * 100])
def test_open_refuses_a_file_that_is_not_sqlite(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "crawl.journal"
    path.write_bytes(content)
    with pytest.raises(JournalError, match="not a crawlpace journal"):
        Journal.open(path)
    assert path.read_bytes() == content


def test_open_refuses_another_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(JournalError, match="not a crawlpace journal"):
        Journal.open(path)


def test_open_refuses_another_format_version(tmp_path: Path) -> None:
    path = tmp_path / "crawl.journal"
    Journal.create(path, fingerprint="x").close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'format'")
    conn.commit()
    conn.close()
    with pytest.raises(JournalError, match="format version 99, but this crawlpace reads version 1"):
        Journal.open(path)


def test_journal_error_is_a_crawlpace_error() -> None:
    assert issubclass(JournalError, CrawlpaceError)


def test_a_journal_in_use_cannot_be_opened_twice(journal: Journal) -> None:
    with pytest.raises(JournalError, match="in use by another crawl"):
        Journal.open(journal.path)
    journal.add([("https://a.example/", "a")])  # the first one still works
    assert journal.total() == 1


def test_create_removes_stale_wal_files(tmp_path: Path) -> None:
    path = tmp_path / "crawl.journal"
    Path(f"{path}-wal").write_bytes(b"left over")
    with Journal.create(path, fingerprint="x") as journal:
        journal.add([("https://a.example/", "a")])
    with Journal.open(path) as journal:
        assert journal.total() == 1


def test_close_is_idempotent(tmp_path: Path) -> None:
    journal = Journal.create(tmp_path / "j", fingerprint="x")
    journal.close()
    journal.close()


# -- adding and loading -----------------------------------------------------


def test_add_ignores_duplicates_and_keeps_the_first_scope(journal: Journal) -> None:
    assert journal.add([("https://a.example/1", "a"), ("https://a.example/2", "a"),
                        ("https://a.example/1", "a")]) == 2
    assert journal.add([("https://a.example/2", "other"), ("https://b.example/1", "b")]) == 1
    assert journal.total() == 3
    assert [e.scope for e in journal.load("a", 0, 10)] == ["a", "a"]
    assert journal.load("other", 0, 10) == []


def test_load_pages_through_one_scope_in_order(journal: Journal) -> None:
    items = [(f"https://{host}.example/{i}", host) for i in range(10) for host in ("a", "b")]
    journal.add(items)
    first = journal.load("a", 0, 4)
    assert [e.url for e in first] == [f"https://a.example/{i}" for i in range(4)]
    assert all(isinstance(e, Entry) and e.scope == "a" for e in first)
    assert [e.id for e in first] == sorted(e.id for e in first)
    second = journal.load("a", first[-1].id, 4)
    assert [e.url for e in second] == [f"https://a.example/{i}" for i in range(4, 8)]
    last = journal.load("a", second[-1].id, 4)
    assert [e.url for e in last] == ["https://a.example/8", "https://a.example/9"]
    assert journal.load("a", last[-1].id, 4) == []
    assert journal.load("missing", 0, 4) == []


def test_load_rejects_a_limit_below_one(journal: Journal) -> None:
    with pytest.raises(ValueError, match="limit"):
        journal.load("a", 0, 0)


def test_scopes_count_pending_urls(journal: Journal) -> None:
    journal.add([("https://a.example/1", "a"), ("https://a.example/2", "a"), ("https://b.example/1", "b")])
    assert journal.scopes() == {"a": 2, "b": 1}
    journal.mark_done(e.id for e in journal.load("b", 0, 10))
    assert journal.scopes() == {"a": 2}  # reads see buffered marks


def test_entries_are_frozen() -> None:
    entry = Entry(1, "https://a.example/", "a")
    with pytest.raises(AttributeError):
        entry.url = "x"  # type: ignore[misc]


# -- marking done -----------------------------------------------------------


def test_mark_done_flush_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "crawl.journal"
    with Journal.create(path, fingerprint="x", flush_every=1000) as journal:
        journal.add((f"https://a.example/{i}", "a") for i in range(10))
        entries = journal.load("a", 0, 10)
        journal.mark_done(e.id for e in entries[:3])
        assert journal.flush() == 3
        assert journal.flush() == 0
        journal.mark_done([entries[0].id, entries[3].id])  # a repeat changes nothing
        assert journal.flush() == 1
        assert (journal.pending(), journal.done(), journal.total()) == (6, 4, 10)
        journal.mark_done([entries[4].id])  # written by close()
    with Journal.open(path) as journal:
        assert (journal.pending(), journal.done(), journal.total()) == (5, 5, 10)
        assert [e.url for e in journal.load("a", 0, 10)] == [f"https://a.example/{i}" for i in range(5, 10)]


def test_mark_done_flushes_on_its_own_past_the_threshold(tmp_path: Path) -> None:
    with Journal.create(tmp_path / "crawl.journal", fingerprint="x", flush_every=5) as journal:
        journal.add((f"https://a.example/{i}", "a") for i in range(10))
        ids = [e.id for e in journal.load("a", 0, 10)]
        journal.mark_done(ids[:4])
        journal.mark_done(ids[4:7])  # the buffer reaches 5: written at once
        assert journal.flush() == 0  # nothing was left to write
        journal.mark_done(ids[7:9])
        assert journal.flush() == 2


def test_mark_done_urls(journal: Journal) -> None:
    journal.add([("https://a.example/1", "a"), ("https://a.example/2", "a")])
    assert journal.mark_done_urls(["https://a.example/1", "https://unknown.example/"]) == 1
    assert journal.mark_done_urls(["https://a.example/1"]) == 0
    assert journal.pending() == 1


def test_replace_done_makes_the_flags_match_exactly(journal: Journal) -> None:
    journal.add((f"https://a.example/{i}", "a") for i in range(6))
    journal.mark_done_urls(["https://a.example/0", "https://a.example/1"])
    journal.mark_done([journal.load("a", 0, 10)[-1].id])  # buffered, then discarded
    answered = ["https://a.example/1", "https://a.example/2", "https://gone.example/"]
    assert journal.replace_done(iter(answered)) == 2
    assert [e.url for e in journal.load("a", 0, 10)] == [
        "https://a.example/0", "https://a.example/3", "https://a.example/4", "https://a.example/5"]
    assert journal.done() == 2


def test_unflushed_marks_are_lost_when_the_process_dies(tmp_path: Path) -> None:
    path = tmp_path / "crawl.journal"
    done = run_child(f"""
        import os
        from crawlpace.frontier import Journal
        journal = Journal.create({str(path)!r}, fingerprint="x", flush_every=1000)
        journal.add((f"https://a.example/{{i}}", "a") for i in range(100))
        ids = [e.id for e in journal.load("a", 0, 100)]
        journal.mark_done(ids[:10])
        journal.flush()
        journal.mark_done(ids[10:20])  # never flushed
        os._exit(0)
    """)
    assert done.returncode == 0, done.stderr
    with Journal.open(path) as journal:
        assert journal.total() == 100
        assert journal.done() == 10
        assert journal.load("a", 0, 1)[0].url == "https://a.example/10"


# -- scale ------------------------------------------------------------------


def test_a_large_import_streams_from_an_iterator(journal: Journal) -> None:
    n = 200_000

    def urls() -> Iterator[tuple[str, str]]:
        for i in range(n):
            yield f"https://h{i % 50}.example/page/{i}", f"h{i % 50}"
        for i in range(0, n, 10):  # some repeats, ignored
            yield f"https://h{i % 50}.example/page/{i}", f"h{i % 50}"

    assert journal.add(urls()) == n
    assert journal.total() == n
    scopes = journal.scopes()
    assert len(scopes) == 50
    assert sum(scopes.values()) == n
    page = journal.load("h7", 0, 3)
    assert [e.url for e in page] == [f"https://h7.example/page/{i}" for i in (7, 57, 107)]
