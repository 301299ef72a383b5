"""The event loop of long commands: uvloop when installed, asyncio on request, a clear error otherwise."""

from __future__ import annotations

import asyncio
import inspect
import sys

import pytest

from crawlpace._exceptions import ConfigError
from crawlpace.cli._loop import run_on


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_runs_on_the_standard_loop() -> None:
    assert run_on("asyncio", loop_module()).startswith("asyncio")


def test_auto_and_uvloop_run_on_uvloop_when_installed() -> None:
    pytest.importorskip("uvloop")
    assert run_on("auto", loop_module()).startswith("uvloop")
    assert run_on("uvloop", loop_module()).startswith("uvloop")


def test_without_uvloop_auto_falls_back_and_uvloop_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now fails
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *args: None)
    assert run_on("auto", loop_module()).startswith("asyncio")
    coro = loop_module()
    with pytest.raises(ConfigError, match=r"--loop: uvloop is not installed .*pip install uvloop"):
        run_on("uvloop", coro)
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # not left to warn "never awaited"
