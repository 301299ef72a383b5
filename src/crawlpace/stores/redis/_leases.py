"""Leases kept alive: the renewer that pushes the expiry of held leases forward while their requests run.

A lease is a member of one sorted set per scope, scored by its expiry, so a
worker that dies stops renewing and its leases lapse by themselves.
:class:`LeaseRenewer` is importable from ``crawlpace.stores.redis.connection`` as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..._redact import redact

__all__ = ["LeaseRenewer"]

logger = logging.getLogger(__name__)


class _Server(Protocol):
    """What the renewer uses of a :class:`~crawlpace.stores.redis.connection.RedisConnection`."""

    url: str
    down: tuple[type[Exception], ...]

    async def client(self) -> Any: ...


class LeaseRenewer:
    """Keeps leases alive: every ``period`` seconds, pushes the expiry of each held one forward.

    A lease is a member of one sorted set per scope, scored by its expiry; the
    renewer rewrites the score of members that are still there (``ZADD XX``),
    in one pipeline per round. A worker that dies stops renewing, and its
    leases lapse by themselves.

    Args:
        connection: the server.
        sleep: this worker's sleep.
        expiry: the expiry to write now (in the server's time).
        period: seconds between two rounds.
        key_of: the sorted set of a scope's leases.

    Attributes:
        held: lease id -> the scopes it holds; add with :meth:`hold`.
    """

    def __init__(self, connection: _Server, sleep: Callable[[float], Awaitable[None]],
                 expiry: Callable[[], float], period: float, key_of: Callable[[str], str]) -> None:
        self._connection = connection
        self._sleep = sleep
        self._expiry = expiry
        self._key_of = key_of
        self.period = period
        self.held: dict[str, tuple[str, ...]] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self.held)

    def hold(self, lease_id: str, scopes: tuple[str, ...]) -> None:
        """Renew ``lease_id`` in ``scopes`` from now on, until :meth:`drop`."""
        self.held[lease_id] = scopes
        self.start()

    def start(self) -> None:
        """Run the renewal task if it is not running (it stops when nothing is held)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._renew_forever())

    def drop(self, lease_id: str) -> None:
        """Stop renewing ``lease_id``."""
        self.held.pop(lease_id, None)

    async def renew(self) -> None:
        """One round: every held lease's expiry pushed forward."""
        expiry = self._expiry()
        client = await self._connection.client()
        async with client.pipeline(transaction=False) as pipe:
            for lease_id, scopes in list(self.held.items()):
                for scope in scopes:
                    pipe.zadd(self._key_of(scope), {lease_id: expiry}, xx=True)
            await pipe.execute()

    async def _renew_forever(self) -> None:
        while self.held:
            await self._sleep(self.period)
            if not self.held:
                return
            try:
                await self.renew()
            except self._connection.down as exc:
                logger.warning("could not renew leases in %s: %s", redact(self._connection.url), exc)

    async def aclose(self) -> None:
        """Stop renewing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
