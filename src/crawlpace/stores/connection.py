"""The one place that talks to a Redis (or Valkey) server: connecting, calling scripts, retrying, renewing.

The shared store (``stores/redis.py``), the shared frontier
(``frontier/_shared.py``) and the crawl's shared job all reach Redis through
this module, so that these rules are written once:

* **Connecting.** One server (``redis://``, ``rediss://``, ``unix://``) or a
  Redis Cluster (``cluster=1``), opened on first use; crawlpace's own options
  are split off the URL by :func:`parse_url`.
* **Scripts.** Lua scripts are registered once and called by SHA. Calls made
  while another is in flight are queued and sent together as one pipeline
  when it returns (:meth:`RedisConnection.call`), so a process with many
  requests in flight pays about one round trip per batch, not per call:
  acquires, and the releases that carry outcomes, ride together. The batch is
  packed here and written on one pooled connection (cheaper per argument than
  redis-py's generic pipeline).
* **Unreachable.** :data:`DOWN` lists the errors that mean "the server
  cannot be reached"; :class:`Retry` is the growing wait between two
  attempts while it stays away.
* **Leases.** :class:`LeaseRenewer` pushes the expiry of held leases forward
  while their requests run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._redact import redact
from . import _cluster
from ._check import with_timeouts
from ._lua import CLOCK as _CLOCK
from ._lua import load_scripts

__all__ = ["DOWN", "RETRY_FIRST", "RETRY_MAX", "LeaseRenewer", "RedisConnection", "Retry", "cluster_flag",
           "have_driver", "load_scripts", "parse_url", "unreachable"]

logger = logging.getLogger(__name__)

#: The first and the longest wait between two attempts while the server cannot be reached.
RETRY_FIRST, RETRY_MAX = 0.1, 5.0
#: crawlpace's own options in a store URL (the rest go to redis-py).
OPTIONS = frozenset({"namespace", "lease", "time", "cluster", "fallback", "fallback_workers", "policy_cache"})
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


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _pack(commands: Iterable[Sequence[Any]]) -> bytes:
    """Commands in the Redis protocol (RESP2 arrays of bulk strings), ready to write.

    The usual batch is all text, numbers and ASCII: it is formatted as one
    string and encoded once (a length in characters is then one in bytes),
    about twice as fast as encoding argument by argument, which the rest
    (bytes, non-ASCII text) still takes.
    """
    out: list[bytes] = []
    for command in commands:
        texts = [arg if type(arg) is str else repr(arg) if type(arg) is float else str(arg)
                 if type(arg) is int else None for arg in command]
        if None not in texts:
            body = "".join([f"${len(text)}\r\n{text}\r\n" for text in texts])  # type: ignore[arg-type]
            if body.isascii():
                out.append(b"*%d\r\n" % len(texts) + body.encode())
                continue
        out.append(_pack_each(command))
    return b"".join(out)


def _pack_each(command: Sequence[Any]) -> bytes:
    """One command in the Redis protocol, encoded argument by argument."""
    out: list[bytes] = []
    add = out.append
    add(b"*%d\r\n" % len(command))
    for arg in command:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, float):
            data = repr(arg).encode()
        elif isinstance(arg, int):
            data = b"%d" % arg
        else:
            raise TypeError(f"a script argument is bytes, str, int or float, not {type(arg).__name__}")
        add(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


# The script that runs a batch of calls in one EVALSHA: each script's source becomes the body
# of a function of (KEYS, ARGV), so the one-script-per-call cost of Redis is paid once per
# batch. ARGV: the call count, then per call its script's name, key count and argument count,
# then every call's arguments in order; KEYS: every call's keys in order. Returns one reply
# per call; a call that raised gives {_FAILED, message} (the others still run).
_FAILED = "__crawlpace_failed__"
_BATCH = "__batch__"
_BATCH_TAIL = """
local n, out = tonumber(ARGV[1]), {}
local ki, ai = 1, 2 + 3 * n
local batch_now = nil
for c = 1, n do
  local head = 2 + 3 * (c - 1)
  local fn, nk, na = calls[ARGV[head]], tonumber(ARGV[head + 1]), tonumber(ARGV[head + 2])
  local keys, args = {}, {}
  for j = 1, nk do keys[j] = KEYS[ki + j - 1] end
  for j = 1, na do args[j] = ARGV[ai + j - 1] end
  if args[1] == "" and clocked[ARGV[head]] then
    -- The server's time, read once per batch: its calls run as one atomic step anyway.
    if not batch_now then
      local t = redis.call("TIME")
      batch_now = string.format("%.17g", tonumber(t[1]) + tonumber(t[2]) / 1e6)
    end
    args[1] = batch_now
  end
  ki, ai = ki + nk, ai + na
  local ok, res = pcall(fn, keys, args)
  if ok then
    out[c] = res
  else
    if type(res) == "table" then res = res.err or "error" end
    out[c] = {"FAILED_MARK", tostring(res)}
  end
end
return out
""".replace("FAILED_MARK", _FAILED)


def _batch_source(scripts: Mapping[str, str]) -> str:
    parts = ["local calls, clocked = {}, {}\n"]
    for name, source in scripts.items():
        parts.append(f"calls[{name!r}] = function(KEYS, ARGV)\n{source}\nend\n")
        if source.startswith(_CLOCK):  # its ARGV[1] is the time, "" for the server's
            parts.append(f"clocked[{name!r}] = true\n")
    return "".join(parts) + _BATCH_TAIL


class RedisConnection:
    """A lazily opened client with registered scripts; script calls made meanwhile go out as one batch.

    Args:
        url: the server, without crawlpace's options (see :func:`parse_url`).
        scripts: script name -> Lua source.
        cluster: a Redis Cluster (calls are then sent one by one: each may
            go to another node).
        decode_responses: redis-py's option of the same name.

    Attributes:
        batches: pipelines sent with more than one call (for tests and benches).
    """

    def __init__(self, url: str, scripts: Mapping[str, str], *, cluster: bool = False,
                 decode_responses: bool = False) -> None:
        self.url = url
        self.cluster = cluster
        self.down = DOWN + _CLUSTER_DOWN if cluster else DOWN
        self._sources = dict(scripts)
        if scripts and not cluster:  # a batch's calls may name keys of any slot: one server only
            self._sources[_BATCH] = _batch_source(scripts)
        self._decode = decode_responses
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._connecting = asyncio.Lock()
        self._queue: list[_Call] = []
        self._pump: asyncio.Task[None] | None = None
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

        The batch leaves at the loop's next turn at the latest, so a call
        queued by a task that goes on to make another call rides with it.

        Returns:
            The reply's future (it raises what the call raised).
        """
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._enqueue(_Call(name, keys, args, done))
        return done

    async def drain(self) -> None:
        """Wait until every queued call has been answered."""
        while self._pump is not None and not self._pump.done():
            await asyncio.shield(self._pump)

    def _enqueue(self, item: _Call) -> None:
        self._queue.append(item)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._send_all())

    async def _send_all(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:_BATCH_MAX], self._queue[_BATCH_MAX:]
            # A caller cancelled before its call went out: it is not sent at all.
            batch = [item for item in batch if not item.done.done()]
            if not batch:
                continue
            try:
                replies = await self._send(batch)
            except Exception as exc:  # the whole batch failed (the server is away, say)
                replies = [exc] * len(batch)
            for item, reply in zip(batch, replies, strict=True):
                if item.done.done():  # its caller was cancelled meanwhile
                    continue
                if isinstance(reply, BaseException):
                    item.done.set_exception(reply)
                else:
                    item.done.set_result(reply)

    async def _send(self, batch: list[_Call]) -> list[Any]:
        client = await self.client()
        if len(batch) > 1:
            self.batches += 1
        replies = await self._exchange(client, batch)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:  # the server restarted or was flushed: load the scripts, then send those again
            for script in self._scripts.values():
                await client.script_load(script.script)
            again = await self._exchange(client, [batch[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _exchange(self, client: Any, batch: list[_Call]) -> list[Any]:
        """Send ``batch`` as one script call (the batch script, for more than one call) and read the replies.

        The command is packed here (``_pack``) rather than by redis-py, which
        costs several times as much per argument; the reply is read by
        redis-py's parser on a pooled connection. A call's own error is its
        caller's reply; a broken connection fails the whole batch and is not
        reused.
        """
        if len(batch) == 1:
            item = batch[0]
            command: Sequence[Any] = ("EVALSHA", self._scripts[item.name].sha, len(item.keys), *item.keys,
                                      *item.args)
        else:
            keys = [key for item in batch for key in item.keys]
            head: list[Any] = [len(batch)]
            for item in batch:
                head += [item.name, len(item.keys), len(item.args)]
            command = ("EVALSHA", self._scripts[_BATCH].sha, len(keys), *keys, *head,
                       *(arg for item in batch for arg in item.args))
        pool = client.connection_pool
        connection = await pool.get_connection()
        try:
            await connection.send_packed_command(_pack((command,)))
            try:
                reply = await connection.read_response()
            except ResponseError as exc:
                return [_as_down(exc)] * len(batch)  # the batch itself failed (NOSCRIPT, say): every call
        except BaseException:
            await connection.disconnect()
            raise
        finally:
            await pool.release(connection)
        if len(batch) == 1:
            return [reply]
        failed = (_FAILED.encode(), _FAILED)
        return [_as_down(ResponseError(_text(r[1]))) if isinstance(r, list) and len(r) == 2 and r[0] in failed
                else r for r in reply]

    async def aclose(self) -> None:
        """Answer what is queued (or fail it), then close the client."""
        with contextlib.suppress(Exception):
            await self.drain()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


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

    def __init__(self, connection: RedisConnection, sleep: Callable[[float], Awaitable[None]],
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
