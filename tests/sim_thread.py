"""Simulated sites served from a thread of their own, for clients that block.

A blocking client (requests, httpx.Client) cannot share its thread with an
asyncio server, so these helpers run :class:`~crawlpace.sim.SimServer` on an
event loop in a daemon thread, on a loopback address only.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from crawlpace.sim import SimServer
from crawlpace.sim._asgi import ASGIApp, Receive, Scope, Send, respond

__all__ = ["LAG", "Recorder", "serve_in_thread"]

#: The most one arrival may lag its send on a loaded machine, in seconds.
LAG = 0.1


class Recorder:
    """An ASGI app that notes when each request arrives and answers from a script.

    Args:
        script: statuses (with optional headers) for the first requests; later
            requests get 200.
    """

    def __init__(self, script: list[tuple[int, list[tuple[bytes, bytes]]]] | None = None) -> None:
        self.script = list(script or [])
        self.arrivals: list[float] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        with self._lock:
            self.arrivals.append(time.monotonic())
            self.paths.append(str(scope.get("path")))
            status, headers = self.script.pop(0) if self.script else (200, [])
        await respond(send, status, b"ok\n", headers=headers)

    def gaps(self) -> list[float]:
        """Seconds between consecutive arrivals."""
        times = sorted(self.arrivals)
        return [later - earlier for earlier, later in itertools.pairwise(times)]

    def assert_paced(self, delay: float) -> None:
        """Check that arrivals kept ``delay`` apart, allowing for a loaded machine.

        Each arrival lags its send by a little (thread wake-ups, the network
        stack), and the lag varies, so one gap may come out far shorter than
        the delay even though the sends kept it: one arrival late, the next on
        time. The lags do not add up, though: between any two arrivals there
        must be every delay between them, less one lag. Unthrottled sends fail
        that over any stretch longer than a lag; sends that go out in pairs
        fail the second check, that few gaps are under half the delay.
        """
        arrivals = sorted(self.arrivals)
        assert len(arrivals) >= 2, "fewer than two arrivals"
        for first in range(len(arrivals)):
            for later in range(first + 1, len(arrivals)):
                span, needed = arrivals[later] - arrivals[first], (later - first) * delay - LAG
                assert span >= needed, (first, later, span, needed)
        short = [gap for gap in self.gaps() if gap < delay / 2]
        assert len(short) <= len(arrivals) // 4, (short, delay)


@contextmanager
def serve_in_thread(app: ASGIApp, host: str) -> Iterator[str]:
    """Serve ``app`` on ``host`` (in 127.0.0.0/8) from a daemon thread; yield its base URL."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None
    url = ""
    failure: list[BaseException] = []

    async def run() -> None:
        nonlocal stop, url
        stop = asyncio.Event()
        try:
            async with SimServer(app, host) as server:
                url = server.url
                ready.set()
                await stop.wait()
        except BaseException as exc:
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    ready.wait(10.0)
    if failure:
        raise failure[0]
    try:
        yield url
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(10.0)
        loop.close()
