"""The leak guard (tests/leak_guard.py) puts a leaked socket's warning on the test that leaked it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEAKY = '''
import socket


class Client:
    """A socket held in a reference cycle: only the garbage collector frees it."""

    def __init__(self) -> None:
        self.me = self
        self.sock = socket.socket()


def test_leaks() -> None:
    Client()


def test_allocates_after_it() -> None:
    import gc
    gc.collect()  # what an allocation-heavy later test does by itself, at some point
'''


def test_a_leaked_socket_fails_the_test_that_leaked_it(tmp_path: Path) -> None:
    guard = "from tests.leak_guard import leaked_descriptors_fail_their_own_test  # noqa: F401\n"
    (tmp_path / "conftest.py").write_text(guard, encoding="utf-8")
    (tmp_path / "test_leaky.py").write_text(LEAKY, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:asyncio",
         "-p", "no:xdist", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    out = done.stdout + done.stderr
    lines = out.splitlines()
    # The leak fails the test that leaked it, at its teardown...
    assert any(line.startswith("ERROR") and line.endswith("test_leaky.py::test_leaks") for line in lines), out
    assert "unclosed <socket.socket" in out, out
    # ...and not the next one, whose collection would otherwise have met it.
    assert any(line.startswith("PASSED") and line.endswith("::test_allocates_after_it")
               for line in lines), out
    assert "2 passed, 1 error" in out, out
