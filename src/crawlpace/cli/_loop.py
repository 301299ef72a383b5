"""Which event loop a long command runs on: uvloop where it is installed, asyncio otherwise.

On ``bench/broad.py`` (2,000 loopback hosts, 64 requests in flight) uvloop cut
the wall time of the same crawl by about a third and its CPU time by about a
tenth, for the bare aiohttp client and for ``crawlpace crawl`` alike; see
docs/broad-crawls.md. It is optional: without it, or with ``--loop asyncio``,
the standard loop runs.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

from .._exceptions import ConfigError

__all__ = ["LOOPS", "LoopName", "run_on"]

_log = logging.getLogger(__name__)
T = TypeVar("T")

LoopName = Literal["auto", "asyncio", "uvloop"]
#: The accepted values of ``--loop``.
LOOPS: tuple[LoopName, ...] = ("auto", "asyncio", "uvloop")


def run_on(loop: LoopName, main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to its end on the chosen loop, as :func:`asyncio.run` does.

    Args:
        loop: ``"auto"`` (uvloop if installed), ``"asyncio"`` or ``"uvloop"``.
        main: the coroutine.

    Raises:
        ConfigError: for ``"uvloop"`` when uvloop is not installed.
    """
    use_uvloop = loop == "uvloop" or (loop == "auto" and importlib.util.find_spec("uvloop") is not None)
    if not use_uvloop:
        return asyncio.run(main)
    try:
        import uvloop
    except ImportError as exc:
        main.close()
        raise ConfigError([f"--loop: uvloop is not installed ({exc}); pip install uvloop, "
                           "or use --loop asyncio"]) from None
    _log.debug("running on uvloop")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
