"""The crawls a bench script starts in a folder of their own import the crawlpace the script imported.

``bench/real_limiters.py``, ``crawl_efficiency.py``, ``broad.py`` and ``scrapy_fleet.py`` start
``python -m crawlpace`` with ``cwd`` set to a scratch folder. Run from a worktree with
``PYTHONPATH=src``, the relative entry resolved in that folder, and the child imported the
virtualenv's installed crawlpace: an A/B of a branch against main ran main's code on both sides.
The script tests stand a second crawlpace (an empty package) in for the imported one, so that they
tell the two apart wherever the virtualenv's copy is installed from.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import crawlpace

from .bench_scripts import load_bench

spawn_env = load_bench("_bench_spawn_env", "_spawn_env.py")
ROOT = Path(crawlpace.__file__).resolve().parent.parent


def child_crawlpace(cwd: Path) -> str:
    """Where a ``python`` started in ``cwd`` with this environment imports crawlpace from."""
    out = subprocess.run([sys.executable, "-c", "import crawlpace; print(crawlpace.__file__)"], cwd=cwd,
                         check=True, capture_output=True, text=True)
    return str(Path(out.stdout.strip()).resolve())


def test_a_relative_pythonpath_is_pinned_to_the_imported_crawlpace(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    here = tmp_path / "tree"
    (here / "extra").mkdir(parents=True)
    monkeypatch.chdir(here)
    value = spawn_env.pinned_pythonpath(os.pathsep.join(["extra", ""]))
    assert value.split(os.pathsep) == [str(ROOT), str((here / "extra").resolve())]
    assert spawn_env.pinned_pythonpath(str(ROOT)) == str(ROOT)  # (not listed twice)


@pytest.mark.parametrize("script", ["real_limiters.py", "crawl_efficiency.py", "broad.py"])
def test_a_bench_scripts_crawl_in_its_own_folder_imports_the_scripts_crawlpace(
        script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    package = tree / "src" / "crawlpace"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    scratch = tmp_path / "case-crawlpace"
    scratch.mkdir()
    monkeypatch.chdir(tree)
    monkeypatch.setenv("PYTHONPATH", "src")  # a worktree's relative entry: no src in the crawl's folder
    module = load_bench(f"_bench_spawn_{script[:-3]}", script)
    # The script runs as if imported from the worktree's copy (the installed one is the virtualenv's).
    monkeypatch.setattr(crawlpace, "__file__", str(package / "__init__.py"))
    with pytest.raises(SystemExit):
        module.main(["--no-such-option"])  # (its main pins the path before it reads its arguments)
    assert child_crawlpace(scratch) == str((package / "__init__.py").resolve())
