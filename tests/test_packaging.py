"""The wheel built from the tree is a working package: its data files are in it and the demo runs from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "crawlpace"
#: Files of the source package that are data, not code: they must ship in the wheel.
DATA_SUFFIXES = {".lua", ".toml", ".html", ".js", ".css", ".typed"}


def test_the_wheel_ships_its_data_and_runs_the_demo(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("crawlpace-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(name).decode() for name in names
                            if name.endswith("entry_points.txt"))
    data = {f"crawlpace/{path.relative_to(PACKAGE).as_posix()}" for path in PACKAGE.rglob("*")
            if path.suffix in DATA_SUFFIXES and "__pycache__" not in path.parts}
    assert data, "the source tree has data files"
    assert data <= names, f"missing from the wheel: {sorted(data - names)}"
    assert "crawlpace = crawlpace.cli:main" in entry_points

    # Install the wheel alone into a folder and run the demo from it. The test venv's
    # site-packages provides the dependencies; without `site` its editable install of this
    # checkout is not on the path, so the code that runs is the wheel's.
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target),
                    str(wheel)], check=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"],
                                                         sysconfig.get_paths()["platlib"]])}
    probe = subprocess.run([sys.executable, "-S", "-c", "import crawlpace; print(crawlpace.__file__)"],
                           capture_output=True, text=True, env=env, check=True, timeout=60)
    assert Path(probe.stdout.strip()).is_relative_to(target)
    done = subprocess.run([sys.executable, "-S", "-m", "crawlpace", "demo", "--quick", "--json", "--no-plot",
                           "--out-dir", str(tmp_path / "demo")],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["as_expected"] is True
    assert figures["site_totals"]["violations"] == 0
