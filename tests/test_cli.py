"""The command line: the demo's figures and the settings checker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawlpace.cli import main


def test_demo_json_shows_the_seed_spacing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    figures = json.loads(out[-1])
    scopes = figures["scopes"]
    assert scopes["toscrape.com"]["send_times"] == [0.0, 0.3, 1.0, 1.3, 2.0, 2.3, 3.0, 3.3]
    assert scopes["example.org"]["min_gap"] == 1.0
    assert scopes["shop.example"]["peak_inflight"] == 4  # the parent caps its children
    assert scopes["books.shop.example"]["peak_inflight"] <= 3
    assert figures["requests"] == 32
    assert "toscrape.com follows seed 001's timeline" in "\n".join(out)


def test_demo_quick_is_smaller(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--quick", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["requests"] == 16


def test_check_reports_a_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[scopes."api.example"]\nconcurrency = 4\nrampup = true\n', encoding="utf-8")
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "scope 'api.example': concurrency=4 delay=1s delay_per_slot=1s jitter=+/-50%" in out
    assert "note: scope 'api.example': rampup is accepted but has no effect in this version" in out
    assert main(["check", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["scopes"]["api.example"]["concurrency"] == 4


def test_check_rejects_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[scope_defaults]\ndelay = -1\n", encoding="utf-8")
    assert main(["check", str(path)]) == 3
    err = capsys.readouterr().err
    assert f"{path}: scope_defaults.delay: -1 is negative; use 0 or more" in err


def test_demo_is_repeatable_whatever_the_hash_seed() -> None:
    import os
    import subprocess
    import sys

    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-m", "crawlpace", "demo", "--json"], env=env,
                              capture_output=True, text=True, check=True, timeout=60)
        outputs.append(done.stdout.strip().splitlines()[-1])
    assert outputs[0] == outputs[1]


def test_verbose_flag_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text("concurrent_requests = 2\n[scope_defaults]\nconcurrency = 8\n", encoding="utf-8")
    assert main(["check", str(path), "-v"]) == 0
    assert "every scope: concurrency=8 (capped at 2 by concurrent_requests)" in capsys.readouterr().out
