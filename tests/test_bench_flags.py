"""Every bench script takes ``--quick`` (a run under a minute) and ``--json`` (one JSON object of its
figures on its last line), so that scripts can check any of them the same way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .bench_scripts import BENCH

SCRIPTS = sorted(path for path in BENCH.glob("*.py") if not path.name.startswith("_"))


def _options(source: str) -> set[str]:
    """The option strings a script's ``add_argument`` calls declare."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            found.update(arg.value for arg in node.args
                         if isinstance(arg, ast.Constant) and isinstance(arg.value, str))
    return found


def test_the_bench_folder_has_scripts() -> None:
    assert len(SCRIPTS) > 20


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_a_bench_script_takes_quick_and_json(script: Path) -> None:
    options = _options(script.read_text())
    assert {"--quick", "--json"} <= options, f"{script}: declares {sorted(options)}"
