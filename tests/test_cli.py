"""The command line: the demo's figures and the settings checker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawlpace.cli import main


def test_check_reports_a_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[scopes."api.example"]\nconcurrency = 4\nrampup = true\n', encoding="utf-8")
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "scope 'api.example': concurrency=4 delay=1s delay_per_slot=1s jitter=+/-50%" in out
    assert ("scope 'api.example': concurrency=4 delay=1s delay_per_slot=1s jitter=+/-50% rampup=on "
            "(from that rate up to 16 slots and 0.001s between sends, aiming at 1 backoff answers per 60s)"
            in out)
    assert "note:" not in out
    assert main(["check", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scopes"]["api.example"]["concurrency"] == 4


def test_check_rejects_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[scope_defaults]\ndelay = -1\n", encoding="utf-8")
    assert main(["check", str(path)]) == 3
    err = capsys.readouterr().err
    assert f"{path}: scope_defaults.delay: -1 is negative; use 0 or more" in err


def test_verbose_flag_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text("concurrent_requests = 2\n[scope_defaults]\nconcurrency = 8\n", encoding="utf-8")
    assert main(["check", str(path), "-v"]) == 0
    assert "every scope: concurrency=8 (capped at 2 by concurrent_requests)" in capsys.readouterr().out


def test_a_missing_optional_dependency_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "aiohttp", None)
    for name in [name for name in sys.modules if name.startswith("crawlpace.crawl")]:
        monkeypatch.delitem(sys.modules, name)
    urls = tmp_path / "urls.txt"
    urls.write_text("http://127.0.0.2:9/\n", encoding="utf-8")
    assert main(["crawl", str(urls), "-o", str(tmp_path / "out.jsonl")]) == 4
    assert "needs aiohttp, which is not installed; install it with: pip install 'crawlpace[cli]'" in (
        capsys.readouterr().err)
