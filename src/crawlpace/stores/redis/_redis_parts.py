"""What the Redis store's components ask of the store, in one object.

The policy writer (``_writeback.py``), the release sender (``_redis_release.py``)
and the allotments (``_allot.py``) each need a handful of the store's
abilities: call a script, read the clocks, sleep, name a scope's keys. They
take them as one :class:`RedisParts`, built once by the store, instead of a
row of positional callables whose order only the constructor knew.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._shared_policy import SharedPolicies

__all__ = ["RedisParts"]


@dataclass(frozen=True, slots=True)
class RedisParts:
    """The store's parts its components use.

    Attributes:
        url: the store's URL (shown redacted in log lines).
        keys_of: a scope's four keys: admission hash, lease set, resting set, policy blob.
        policies: the store's current policies (the store may replace them).
        run: calls a script the store's awaited way, retrying as the store does (``name, keys, args``).
        submit: queues a script call on the wire without waiting; its reply is a future.
        down: the exceptions that mean the server is unreachable.
        fetch_blob: reads a scope's stored policy blob (None: none stored).
        connect: connects again after the server was away.
        now: this worker's clock.
        server_now: the server's time as this worker reckons it.
        now_arg: the time argument of a script call ("" for the server's own).
        now_text: the same when it is known without an await.
        sleep: sleeps on this worker's clock.
        stop_renewing: stops renewing a lease (its member was given back or lost).
        idle: seconds after which an idle scope's keys expire.
        idle_arg: ``idle`` as the scripts take it.
        lease_arg: the lease's seconds as the scripts take them.
    """

    url: str
    keys_of: Callable[[str], tuple[str, str, str, str]]
    policies: Callable[[], SharedPolicies]
    run: Callable[[str, list[str], list[Any]], Awaitable[Any]]
    submit: Callable[[str, list[str], list[Any]], asyncio.Future[Any]]
    down: tuple[type[Exception], ...]
    fetch_blob: Callable[[str], Awaitable[bytes | None]]
    connect: Callable[[], Awaitable[None]]
    now: Callable[[], float]
    server_now: Callable[[], float]
    now_arg: Callable[[], Awaitable[str]]
    now_text: Callable[[], str]
    sleep: Callable[[float], Awaitable[None]]
    stop_renewing: Callable[[str], None]
    idle: int
    idle_arg: str
    lease_arg: str
