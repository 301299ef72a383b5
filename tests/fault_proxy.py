"""A loopback TCP proxy that puts network faults between workers and Redis.

It listens on 127.0.0.1 and forwards every connection to one target port,
also on 127.0.0.1. Faults, switched on and off while it runs:

- ``latency``: seconds added before each chunk is passed on, both ways;
- :meth:`drop`: every open connection is closed at once (both sides);
- :meth:`freeze`: nothing is passed on any more, but nothing is closed
  either; ``new=True`` freezes new connections too (a partition), otherwise
  new ones flow (connections left half-open by a NAT or a failover);
- :meth:`thaw`: frozen connections are closed (as their peers would find
  after a timeout) and traffic flows again;
- :meth:`hold_replies`: the server's bytes wait in the proxy (requests still
  pass) until :meth:`pass_replies` (a reply slow on its way back).
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["FaultProxy"]


class _Link:
    def __init__(self, client: asyncio.StreamWriter, server: asyncio.StreamWriter) -> None:
        self.writers = (client, server)
        self.flow = asyncio.Event()  # cleared while the link is frozen
        self.flow.set()

    @property
    def frozen(self) -> bool:
        return not self.flow.is_set()

    def close(self) -> None:
        for writer in self.writers:
            with contextlib.suppress(Exception):
                writer.transport.abort()


class FaultProxy:
    """Forward 127.0.0.1:``port`` to 127.0.0.1:``target``, with faults on demand."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.latency = 0.0
        self.freeze_new = False
        self.connections = 0  # accepted so far
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._replies = asyncio.Event()  # cleared while the server's replies are held back
        self._replies.set()

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def close(self) -> None:
        self._closed = True
        if self._server is not None:
            self._server.close()
        self.drop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def drop(self) -> None:
        """Close every open connection now."""
        for link in list(self._links):
            link.close()
        self._links.clear()

    def freeze(self, *, new: bool) -> None:
        """Stop passing anything on the open connections (and on new ones, with ``new``)."""
        for link in self._links:
            link.flow.clear()
        self.freeze_new = new

    def thaw(self) -> None:
        """Close the frozen connections and let traffic flow again."""
        for link in [link for link in self._links if link.frozen]:
            link.close()
            self._links.discard(link)
        self.freeze_new = False

    def hold_replies(self) -> None:
        """Keep what the server sends in the proxy; what the clients send still passes."""
        self._replies.clear()

    def pass_replies(self) -> None:
        """Pass on the replies held back, and those that come after."""
        self._replies.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        # Tracked like the pumps: a connection accepted while close() runs is cancelled with them (the
        # server does not track its handlers; one that connected upstream after close() left that
        # socket open, an unclosed-transport warning failing whichever test ran then).
        accepting = asyncio.current_task()
        if accepting is not None:
            self._tasks.add(accepting)
            accepting.add_done_callback(self._tasks.discard)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except (OSError, asyncio.CancelledError) as exc:
            writer.transport.abort()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        if self._closed:
            up_writer.transport.abort()
            writer.transport.abort()
            return
        link = _Link(writer, up_writer)
        if self.freeze_new:
            link.flow.clear()
        self._links.add(link)
        for source, sink, reply in ((reader, up_writer, False), (up_reader, writer, True)):
            task = asyncio.ensure_future(self._pump(link, source, sink, reply))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, link: _Link, source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                    reply: bool) -> None:
        try:
            while True:
                chunk = await source.read(65536)
                if not chunk:
                    break
                if self.latency:
                    await asyncio.sleep(self.latency)
                await link.flow.wait()  # frozen: a half-open connection, the bytes go nowhere
                if reply:
                    await self._replies.wait()
                sink.write(chunk)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            link.close()
            self._links.discard(link)
