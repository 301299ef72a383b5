"""The one place that talks to a Redis (or Valkey) server: connecting, calling scripts, retrying, renewing.

The shared store (``stores/redis/__init__.py``), the shared frontier
(``frontier/_shared.py``) and the crawl's shared job all reach Redis through
this module, so that these rules are written once:

* **Connecting.** One server (``redis://``, ``rediss://``, ``unix://``) or a
  Redis Cluster (``cluster=1``), opened on first use; crawlpace's own options
  are split off the URL by :func:`parse_url`.
* **Scripts.** Lua scripts are registered once and called by SHA. Calls made
  in one turn of the loop are sent together as one batch (:meth:`RedisConnection.call`),
  so a process with many requests in flight pays about one script call per
  batch, not per call: acquires, and the releases that carry outcomes, ride
  together. The batch is packed here (cheaper per argument than redis-py's
  generic pipeline) and written on one connection kept for batches. While a
  batch with a call someone waits for (an acquire) is out, the calls made
  meanwhile are held and go out together when its reply is read (Nagle's rule,
  no timer); the calls named ``at_once`` (the store's releases) are not held:
  they are written at once, pipelined behind it. Replies are read in the order
  the batches were written.
* **Unreachable.** :data:`DOWN` lists the errors that mean "the server
  cannot be reached"; :class:`Retry` is the growing wait between two
  attempts while it stays away.
* **Leases.** :class:`LeaseRenewer` pushes the expiry of held leases forward
  while their requests run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..._redact import redact
from .._check import CRAWLPACE_OPTIONS, DEFAULT_SOCKET_TIMEOUT, with_timeouts
from . import _cluster
from ._batch import BATCH as _BATCH
from ._batch import FAILED as _FAILED
from ._batch import as_text as _text
from ._batch import batch_source as _batch_source
from ._batch import pack as _pack
from ._leases import LeaseRenewer
from ._lua import load_scripts

__all__ = ["DOWN", "RETRY_FIRST", "RETRY_MAX", "LeaseRenewer", "RedisConnection", "Retry", "cluster_flag",
           "have_driver", "load_scripts", "parse_url", "unreachable"]

logger = logging.getLogger(__name__)

#: The first and the longest wait between two attempts while the server cannot be reached.
RETRY_FIRST, RETRY_MAX = 0.1, 5.0
#: crawlpace's own options in a store URL (the rest go to redis-py).
OPTIONS = CRAWLPACE_OPTIONS
# Calls sent at most in one pipeline.
_BATCH_MAX = 256

try:  # the driver is optional: the ``redis`` extra
    import redis.asyncio as aioredis
    from redis.exceptions import ClusterError, NoScriptError, ResponseError, SlotNotCoveredError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    #: What "the server cannot be reached" looks like (a node down or slots moving, on a cluster).
    DOWN: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
    _CLUSTER_DOWN: tuple[type[Exception], ...] = (ClusterError, SlotNotCoveredError)
except ImportError:  # pragma: no cover - exercised only without the extra
    aioredis = None  # type: ignore[assignment]
    DOWN = (OSError,)
    _CLUSTER_DOWN = ()


#: Error replies that mean "this server cannot run writes for now" (a replica after a failover, a
#: failed disk write, too few replicas, another script still running, a cluster re-sharding): they
#: count as an unreachable server (fail closed, retry later), not as a bug in the call.
_UNAVAILABLE = ("READONLY", "MISCONF", "NOREPLICAS", "BUSY ", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
                "LOADING")


def _as_down(exc: Exception) -> Exception:
    """``exc`` as one of :data:`DOWN` when it is an error reply of :data:`_UNAVAILABLE`, else itself."""
    if aioredis is not None and isinstance(exc, ResponseError) and str(exc).startswith(_UNAVAILABLE):
        down = RedisConnectionError(f"the server cannot run scripts now: {exc}")
        down.__cause__ = exc
        return down
    return exc


def have_driver() -> bool:
    """True when redis-py (the ``redis`` extra) is installed."""
    return aioredis is not None


def unreachable(exc: BaseException, *, cluster: bool = False) -> bool:
    """Whether ``exc`` means the server could not be reached (worth trying again later)."""
    return isinstance(exc, DOWN + _CLUSTER_DOWN if cluster else DOWN)


def cluster_flag(text: str | None) -> bool | None:
    """The ``cluster`` option as a flag (``None``: not a flag)."""
    return _cluster.is_on(text)


def parse_url(url: str, ours: Collection[str] = OPTIONS) -> tuple[str, dict[str, str]]:
    """Split crawlpace's options (``ours``) off a store URL; ``valkey://`` becomes ``redis://``.

    Returns:
        The URL for redis-py, and crawlpace's options.
    """
    parts = urlsplit(url)
    options: dict[str, str] = {}
    theirs = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in ours:
            options[key] = value
        else:
            theirs.append((key, value))
    scheme = {"valkey": "redis", "valkeys": "rediss"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(theirs), parts.fragment)), options


class Retry:
    """The wait before the next attempt while a server stays away: doubling from ``first`` up to ``most``."""

    def __init__(self, first: float = RETRY_FIRST, most: float = RETRY_MAX) -> None:
        self.first, self.most = first, most
        self.wait = first

    def next(self) -> float:
        """The wait to use now; the one after it is longer."""
        wait = self.wait
        self.wait = min(wait * 2.0, self.most)
        return wait

    def reset(self) -> None:
        """The server answered: the next outage starts with a short wait again."""
        self.wait = self.first


@dataclass(slots=True)
class _Call:
    name: str
    keys: Sequence[str]
    args: Sequence[Any]
    done: asyncio.Future[Any]



def _open(gate: asyncio.Future[None], _reading: asyncio.Task[None]) -> None:
    if not gate.done():
        gate.set_result(None)


def _answer(batch: Sequence[_Call], replies: Sequence[Any]) -> None:
    """Give each call of ``batch`` its reply (an exception is raised to its caller)."""
    for item, reply in zip(batch, replies, strict=True):
        if item.done.done():  # its caller was cancelled meanwhile
            continue
        if isinstance(reply, BaseException):
            item.done.set_exception(reply)
        else:
            item.done.set_result(reply)


class RedisConnection:
    """A lazily opened client with registered scripts; script calls made meanwhile go out as one batch.

    Args:
        url: the server, without crawlpace's options (see :func:`parse_url`).
        scripts: script name -> Lua source.
        cluster: a Redis Cluster (calls are then sent one by one: each may
            go to another node).
        decode_responses: redis-py's option of the same name.
        at_once: scripts whose calls are written at once even while a batch
            waits for its reply (the others wait for it, then go out together).

    Attributes:
        batches: pipelines sent with more than one call (for tests and benches).
    """

    def __init__(self, url: str, scripts: Mapping[str, str], *, cluster: bool = False,
                 decode_responses: bool = False, at_once: Collection[str] = ()) -> None:
        self.url = url
        #: Scripts whose calls are written at the loop's next turn even while a batch is in flight
        #: (the store's releases: the slot they free is held in the store until they run).
        self.at_once = frozenset(at_once)
        self.cluster = cluster
        self.down = DOWN + _CLUSTER_DOWN if cluster else DOWN
        self._sources = dict(scripts)
        if scripts and not cluster:  # a batch's calls may name keys of any slot: one server only
            self._sources[_BATCH] = _batch_source(scripts)
        self._decode = decode_responses
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        # The client of call_eager (its commands written before the caller yields), and its scripts.
        self._eager: Any = None
        self._eager_scripts: dict[str, Any] = {}
        self._eager_timeout = 0.0
        self._connecting = asyncio.Lock()
        self._queue: list[_Call] = []
        self._pump: asyncio.Task[None] | None = None
        # The connection batches are written on (held, not pooled), and the task reading the
        # reply of the batch written last (each reading task first waits for the one before it).
        self._pipe: Any = None
        self._reading: asyncio.Task[None] | None = None
        # A queued call of :attr:`at_once`, and the future the pump waits on while a batch is out.
        self._hurry = False
        self._gate: asyncio.Future[None] | None = None
        # The reading task of the last batch written with a call not of :attr:`at_once`.
        self._awaited: asyncio.Task[None] | None = None
        self.batches = 0

    def __repr__(self) -> str:
        state = "open" if self._client is not None else "closed"
        return (f"<RedisConnection {redact(self.url)} {state} cluster={self.cluster} "
                f"queued={len(self._queue)}>")

    def add_scripts(self, scripts: Mapping[str, str]) -> None:
        """Register more scripts (another component sharing this connection: the guard's brake, say).

        Raises:
            ValueError: when a name is taken by a different script.
        """
        for name, source in scripts.items():
            if self._sources.get(name, source) != source:
                raise ValueError(f"a different script named {name!r} is registered on this connection")
        self._sources.update(scripts)
        if not self.cluster:  # the batch script knows every script by name: built again
            self._sources.pop(_BATCH, None)
            self._sources[_BATCH] = _batch_source(self._sources)
        client = self._client
        if client is not None:
            self._scripts = {name: client.register_script(src) for name, src in self._sources.items()}
        eager = self._eager
        if eager is not None:
            self._eager_scripts = {name: eager.register_script(src) for name, src in self._sources.items()}

    @property
    def connected(self) -> bool:
        """True once a client is open."""
        return self._client is not None

    async def client(self) -> Any:
        """The redis-py client, opened on first use."""
        if self._client is None:
            async with self._connecting:  # opening a cluster client awaits: one opener at a time
                if self._client is None:
                    client: Any
                    if self.cluster:
                        client = await _cluster.connect(self.url, decode_responses=self._decode)
                    else:
                        client = aioredis.from_url(with_timeouts(self.url), decode_responses=self._decode)
                    self._scripts = {name: client.register_script(src) for name, src in self._sources.items()}
                    self._client = client
        return self._client

    async def call_now(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Call a script on its own, now (a cluster routes it by its keys)."""
        await self.client()
        try:
            return await self._scripts[name](keys=list(keys), args=list(args))
        except ResponseError as exc:
            raise _as_down(exc) from exc

    async def call_eager(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """:meth:`call_now`, its command written before the calling task first yields (one server only).

        redis-py writes a command through ``asyncio.wait_for`` when its connection has a socket
        timeout, and on Python 3.11 that wraps the write in a task of its own: the command leaves
        only after every callback the loop had queued. A starved fleet worker's loop has many
        (answers read at once after a stall), and a refusal's hold waited behind them for tens of
        milliseconds, at worst seconds, while the other workers wrote into it. This call goes on a
        client of its own with no socket timeout, under a timeout of its own
        (:func:`asyncio.timeout`, which needs no task), so it is written at once when the client
        has a connection ready (the first call opens one). A timeout raises ``TimeoutError``, one
        of :data:`DOWN`.
        """
        if self.cluster:
            return await self.call_now(name, keys, args)
        await self._eager_client()
        try:
            async with asyncio.timeout(self._eager_timeout):
                return await self._eager_scripts[name](keys=list(keys), args=list(args))
        except ResponseError as exc:
            raise _as_down(exc) from exc

    async def _eager_client(self) -> Any:
        """The client without redis-py's socket timeout (:meth:`call_eager`, the batches' connection)."""
        if self._eager is None:
            await self.client()  # the scripts' sources are final once the main client is open
        if self._eager is None:  # (another first call may have opened it meanwhile)
            parts = urlsplit(with_timeouts(self.url))
            options = parse_qsl(parts.query, keep_blank_values=True)
            try:
                self._eager_timeout = float(dict(options)["socket_timeout"])
            except ValueError:  # not a number of seconds: redis-py's own reading does not apply here
                self._eager_timeout = DEFAULT_SOCKET_TIMEOUT
            query = urlencode([(key, value) for key, value in options if key != "socket_timeout"])
            eager = aioredis.from_url(urlunsplit(parts._replace(query=query)), decode_responses=self._decode,
                                      socket_timeout=None)  # (redis-py's default is not None)
            self._eager_scripts = {name: eager.register_script(src) for name, src in self._sources.items()}
            self._eager = eager
        return self._eager

    async def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Call a script; while another call is in flight, wait to go out with the next batch.

        Raises:
            Whatever the call raised (one of :data:`DOWN` while the server is away).
        """
        if self.cluster:
            return await self.call_now(name, keys, args)
        return await self.submit(name, keys, args)

    def submit(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> asyncio.Future[Any]:
        """Queue a script call without waiting for it: it goes out with the next batch (one server only).

        The batch leaves at the loop's next turn, so a call queued by a task
        that goes on to make another call rides with it; while a batch with a
        call not of :attr:`at_once` waits for its reply, the call waits for it
        too and goes out with the calls made meanwhile, unless it is of
        :attr:`at_once` (a release: it is written at once, pipelined, and
        frees its slot a round trip sooner).

        Returns:
            The reply's future (it raises what the call raised).
        """
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._enqueue(_Call(name, keys, args, done))
        return done

    async def drain(self) -> None:
        """Wait until every queued call has been answered."""
        while True:
            if self._pump is not None and not self._pump.done():
                await asyncio.shield(self._pump)
            elif self._reading is not None and not self._reading.done():
                await asyncio.shield(self._reading)
            else:
                return

    def _enqueue(self, item: _Call) -> None:
        self._queue.append(item)
        if item.name in self.at_once:
            self._hurry = True
            gate = self._gate
            if gate is not None and not gate.done():
                gate.set_result(None)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._send_all())

    async def _send_all(self) -> None:
        """Write what is queued, batch after batch; while a batch is out, only the calls of :attr:`at_once`.

        Nagle's rule without a timer: while a batch with a call someone waits for (an acquire)
        waits for its reply, the calls made meanwhile are held, then go out together when it
        is read. A busy worker's acquires so keep to a few large batches, and the tasks their
        replies wake run in one turn (written turn by turn, a broad crawl's batches held 1-3
        calls, and it spent about 30 % more CPU per page). The calls of :attr:`at_once` (the
        releases) are not held: they leave at once in a batch of their own, pipelined behind
        the one in flight, and do not hold the next ones (their reply wakes no task).
        """
        loop = asyncio.get_running_loop()
        while self._queue:
            awaited = self._awaited
            if awaited is not None and not awaited.done():
                if not self._hurry:
                    gate = self._gate = loop.create_future()
                    awaited.add_done_callback(functools.partial(_open, gate))
                    await gate
                    continue
                at_once = self.at_once
                batch = [item for item in self._queue if item.name in at_once]
                self._queue = [item for item in self._queue if item.name not in at_once]
            else:
                batch, self._queue = self._queue[:_BATCH_MAX], self._queue[_BATCH_MAX:]
            self._hurry = False
            # A caller cancelled before its call went out: it is not sent at all.
            batch = [item for item in batch if not item.done.done()]
            if not batch:
                continue
            if len(batch) > 1:
                self.batches += 1
            try:
                pipe = await self._write(batch)
            except Exception as exc:  # the batch could not be written (the server is away, say)
                _answer(batch, [exc] * len(batch))
                continue
            reading = self._reading = loop.create_task(self._read(pipe, batch, self._reading))
            if not self.at_once.issuperset([item.name for item in batch]):
                self._awaited = reading

    async def _write(self, batch: list[_Call]) -> Any:
        """Write ``batch`` on the batches' connection (opened if needed) and return that connection.

        The connection belongs to a client without redis-py's socket timeout, whose write would go
        through a task of its own on Python 3.11 and leave only after every callback the loop had
        queued (:meth:`call_eager`); this write is bounded by a timeout of its own instead.
        """
        await self._eager_client()
        pipe = self._pipe
        if pipe is None:
            pipe = self._pipe = await self._eager.connection_pool.get_connection()
        try:
            async with asyncio.timeout(self._eager_timeout):
                await pipe.send_packed_command(_pack((self._command(batch),)))
        except BaseException:
            await self._drop(pipe)
            raise
        return pipe

    async def _read(self, pipe: Any, batch: list[_Call], before: asyncio.Task[None] | None) -> None:
        """Read the reply of ``batch``, written on ``pipe`` after the batch ``before`` reads the reply of."""
        if before is not None and not before.done():
            await asyncio.wait((before,))  # replies come in the order the batches were written
        try:
            if pipe is not self._pipe:  # it broke under an earlier batch: this reply is lost
                raise RedisConnectionError("the connection to the Redis server was lost")
            try:
                async with asyncio.timeout(self._eager_timeout):
                    reply = await pipe.read_response()
            except ResponseError as exc:  # the batch itself failed (NOSCRIPT, say): every call
                replies: list[Any] = [_as_down(exc)] * len(batch)
            except BaseException:
                await self._drop(pipe)
                raise
            else:
                replies = self._replies(batch, reply)
            missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
            if missing:  # the server restarted or was flushed: load the scripts, then send those again
                client = await self.client()
                for script in self._scripts.values():
                    await client.script_load(script.script)
                again = await self._exchange(client, [batch[i] for i in missing])
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
        except Exception as exc:  # the whole batch failed (the server is away, say)
            replies = [exc] * len(batch)
        _answer(batch, replies)

    async def _drop(self, pipe: Any) -> None:
        """The batches' connection broke: close it (the next batch opens another).

        The server may have gone away (a restart, say), so the idle connections both clients keep
        in their pools are closed too: after a restart the scripts are loaded again on the main
        client, whose connections sat idle while the batches' one failed and would answer that
        load with "Connection closed by server".
        """
        if self._pipe is pipe:
            self._pipe = None
            with contextlib.suppress(Exception):
                await pipe.disconnect()
                await self._eager.connection_pool.release(pipe)
            for client in (self._client, self._eager):
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.connection_pool.disconnect(inuse_connections=False)

    def _command(self, batch: list[_Call]) -> Sequence[Any]:
        """``batch`` as one script call: the script itself for one call, else the batch script."""
        if len(batch) == 1:
            item = batch[0]
            return ("EVALSHA", self._scripts[item.name].sha, str(len(item.keys)), *item.keys, *item.args)
        keys = [key for item in batch for key in item.keys]
        head: list[Any] = [str(len(batch))]  # all text: packed in one pass
        for item in batch:
            head += [item.name, str(len(item.keys)), str(len(item.args))]
        return ("EVALSHA", self._scripts[_BATCH].sha, str(len(keys)), *keys, *head,
                *[arg for item in batch for arg in item.args])

    @staticmethod
    def _replies(batch: list[_Call], reply: Any) -> list[Any]:
        """Each call's reply in the reply of ``batch`` (a call that raised gets its error)."""
        if len(batch) == 1:
            return [reply]
        failed = (_FAILED.encode(), _FAILED)
        return [_as_down(ResponseError(_text(r[1]))) if isinstance(r, list) and len(r) == 2 and r[0] in failed
                else r for r in reply]

    async def _exchange(self, client: Any, batch: list[_Call]) -> list[Any]:
        """Send ``batch`` as one script call on a pooled connection and read the replies (calls sent again).

        A call's own error is its caller's reply; a broken connection fails the
        whole batch and is not reused.
        """
        pool = client.connection_pool
        connection = await pool.get_connection()
        try:
            await connection.send_packed_command(_pack((self._command(batch),)))
            try:
                reply = await connection.read_response()
            except ResponseError as exc:
                return [_as_down(exc)] * len(batch)  # the batch itself failed (NOSCRIPT, say): every call
        except BaseException:
            await connection.disconnect()
            raise
        finally:
            await pool.release(connection)
        return self._replies(batch, reply)

    async def aclose(self) -> None:
        """Answer what is queued (or fail it), then close the client."""
        with contextlib.suppress(Exception):
            await self.drain()
        pipe = self._pipe
        if pipe is not None:
            self._pipe = None
            with contextlib.suppress(Exception):
                await self._eager.connection_pool.release(pipe)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        eager, self._eager = self._eager, None
        if eager is not None:
            await eager.aclose()
