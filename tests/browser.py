"""A real headless Chromium (Debian's ``chromium`` package) for the dashboard's tests."""

from __future__ import annotations

import shutil
import subprocess

import pytest

__all__ = ["chromium", "dump_dom", "screenshot"]

_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
          "--disable-extensions", "--hide-scrollbars")


def chromium() -> str:
    """The Chromium binary; skips the test, saying why, when there is none."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path is not None:
            return path
    pytest.skip("no chromium on PATH: scripts/test installs Debian's chromium package when it runs as root "
                "(apt-get install chromium)")


def dump_dom(url: str, *, budget_ms: int = 3000) -> str:
    """The page's DOM after its scripts ran for ``budget_ms`` of virtual time."""
    done = subprocess.run([chromium(), *_FLAGS, f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(url: str, path: str, *, size: str = "1400,520", budget_ms: int = 3000) -> None:
    """Save a PNG of the page after its scripts ran."""
    done = subprocess.run([chromium(), *_FLAGS, f"--virtual-time-budget={budget_ms}", f"--window-size={size}",
                           f"--screenshot={path}", url], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
