"""Ctrl-C and SIGTERM as a request to stop, for the commands that run until told to."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

__all__ = ["stop_on_signals"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGINT or SIGTERM while the block runs, in the running event loop.

    Where the loop cannot handle signals (not the main thread, or Windows), the
    block runs without, and the default handling applies.
    """
    loop = asyncio.get_running_loop()
    installed = []
    for signum in _SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop)
            installed.append(signum)
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
