"""What differs between the Scrapy versions the add-on supports (2.13 to 2.19).

Everything version-dependent lives here, so that the other modules can be
read against one Scrapy: where the engine's wake-up call is, whether the
``robots_parsed`` signal exists, which download exceptions there are, and
whether asyncio code can run at all.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterable
from typing import Any

import scrapy
from scrapy import signals

__all__ = [
    "ASYNCIO_REACTOR",
    "HAS_ROBOTS_PARSED",
    "MAX_SCRAPY",
    "MIN_SCRAPY",
    "SCRAPY_VERSION",
    "default_backoff_exceptions",
    "in_asyncio_loop",
    "version_tuple",
    "wake_engine",
]

logger = logging.getLogger(__name__)

ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
#: The oldest and newest Scrapy versions the add-on is tested with.
MIN_SCRAPY = (2, 13)
MAX_SCRAPY = (2, 19)


def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.13.4"`` -> ``(2, 13, 4)``; a suffix such as ``rc1`` ends the reading."""
    parts: list[int] = []
    for piece in text.split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


SCRAPY_VERSION = version_tuple(scrapy.__version__)
#: Scrapy 2.18 announces each parsed robots.txt with this signal.
HAS_ROBOTS_PARSED = hasattr(signals, "robots_parsed")

# Download failures that mean "the server is struggling": timeouts and
# connections that broke. Seed 001 lists Twisted's; Scrapy 2.19 wraps them in
# its own classes; asyncio handlers raise the builtins. Only the importable
# ones of the running Scrapy are used.
_BACKOFF_EXCEPTION_PATHS = (
    "twisted.internet.defer.TimeoutError",
    "twisted.internet.error.TimeoutError",
    "twisted.internet.error.TCPTimedOutError",
    "twisted.web.client.ResponseFailed",
    "twisted.web._newclient.ResponseNeverReceived",
    "twisted.internet.error.ConnectionLost",
    "twisted.internet.error.ConnectError",
    "scrapy.exceptions.DownloadTimeoutError",
    "scrapy.exceptions.DownloadFailedError",
    "scrapy.exceptions.ResponseDataLossError",
    "scrapy.exceptions.DownloadConnectionRefusedError",
    "builtins.TimeoutError",
    "builtins.ConnectionError",
)


def default_backoff_exceptions() -> list[str]:
    """The ``BACKOFF_EXCEPTIONS`` default under Scrapy: the paths this Scrapy can import."""
    found: list[str] = []
    for path in _BACKOFF_EXCEPTION_PATHS:
        module_name, _, name = path.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        target = getattr(module, name, None)
        if isinstance(target, type) and issubclass(target, BaseException):
            found.append(path)
    return found


def in_asyncio_loop() -> bool:
    """True when called from inside a running asyncio event loop.

    Under Twisted's asyncio reactor (and in Scrapy 2.19's reactorless mode)
    every callback runs inside the asyncio loop, which is what the throttler
    needs; any other reactor gives False.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def wake_engine(crawler: Any) -> bool:
    """Ask the engine to call the scheduler again soon.

    The engine asks for requests when a download ends, when a request is
    scheduled and on a five-second heartbeat; a scheduler that turned it away
    because no scope was ready calls this once one is. It reaches the
    engine's private wake-up call (present from 2.13 to 2.19); without it the
    heartbeat still works, only slower.

    Returns:
        True when the engine was reached.
    """
    engine = getattr(crawler, "engine", None)
    slot = getattr(engine, "_slot", None)
    nextcall = getattr(slot, "nextcall", None)
    schedule = getattr(nextcall, "schedule", None)
    if schedule is None:
        return False
    schedule()
    return True


def requests_in_progress(crawler: Any) -> Iterable[Any]:
    """The requests the engine is downloading or whose callbacks run (from 2.13 to 2.19: its slot's set).

    Falls back to the downloader's active requests when the engine's private
    set is not there.
    """
    engine = getattr(crawler, "engine", None)
    slot = getattr(engine, "_slot", None)
    inprogress: Iterable[Any] | None = getattr(slot, "inprogress", None)
    if inprogress is None:
        inprogress = getattr(getattr(engine, "downloader", None), "active", None) or ()
    return tuple(inprogress)
