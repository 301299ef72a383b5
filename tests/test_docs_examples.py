"""Every runnable example of docs/ and the README runs, and prints what its page shows."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .doc_examples import ROOT, Example, examples, not_run, quiet_examples, same_output

EXAMPLES = examples()
QUIET = quiet_examples()


def test_the_docs_have_examples_to_run() -> None:
    assert len(EXAMPLES) >= 40
    for name, why in not_run():
        assert len(why) > 10, f"{name}: say why the example is not run"


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.name for example in EXAMPLES])
def test_example_prints_what_its_page_shows(example: object, tmp_path: Path) -> None:
    from .doc_examples import Example

    assert isinstance(example, Example)
    for name, text in example.files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", example.code], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "100",
                               "PYTHONHASHSEED": "0"})
    diff = "\n".join(difflib.unified_diff(example.shown.strip("\n").splitlines(),
                                          done.stdout.strip("\n").splitlines(), "page", "run", lineterm=""))
    assert done.returncode == 0, f"{example.name} failed:\n{done.stdout[-3000:]}"
    if not same_output(example.shown, done.stdout):
        # A page may show standard output alone, leaving out warnings on standard error.
        alone = subprocess.run([sys.executable, "-c", example.code], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, timeout=120, cwd=tmp_path,
                               env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "100",
                               "PYTHONHASHSEED": "0"})
        assert same_output(example.shown, alone.stdout), f"{example.name} prints something else:\n{diff}"


@pytest.mark.parametrize("example", QUIET, ids=[example.name for example in QUIET])
def test_example_without_output_runs_silently(example: Example, tmp_path: Path) -> None:
    # A block the page shows no output for must run as written and print nothing, no warning either:
    # a reader who copies it sees exactly what the page shows.
    for name, text in example.files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONHASHSEED": "0"}
    done = subprocess.run([sys.executable, "-c", example.code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, f"{example.name} failed (mark it <!-- not run: why --> if it cannot run " \
                                 f"here):\n{done.stderr[-3000:]}"
    if example.shown != "...":
        assert done.stdout == "", (f"{example.name} printed output its page does not show:\n"
                                   f"{done.stdout[-2000:]}")
    assert done.stderr == "", f"{example.name} printed warnings:\n{done.stderr[-2000:]}"
