"""Redis Cluster for the shared store: reaching the cluster, and admitting requests whose scopes span slots.

Every key of a scope carries the scope as its hash tag, so one scope lives in
one hash slot and one script call can admit a request to all the scopes of
that slot at once. A request whose scopes fall in several slots cannot be
admitted by one script, so it is admitted in two phases (see
``docs/redis.md``, "Redis Cluster"):

1. The scopes are grouped by slot and the groups are reserved one after the
   other, lowest slot first (scopes within a group by name). Each reservation
   is an ordinary admission, lease and all, so the renewal task keeps it and a
   worker that dies lets it expire.
2. If every group admits, the request is admitted: the reservations are its
   leases. If a group refuses, the groups reserved before it are rolled back
   (``rollback.lua``) and the groups after it are only probed, so the answer
   says when every scope will be ready, as one script would have.

One global order means two workers never each hold a slot group the other
needs next; and since nobody waits while holding a reservation (a refusal
rolls back at once), there is nothing to deadlock on.
"""

from __future__ import annotations

import asyncio
import logging
from binascii import crc_hqx
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from .._check import with_timeouts
from ._script_args import ACQUIRE, RELEASE

if TYPE_CHECKING:
    from redis.asyncio.cluster import RedisCluster

__all__ = ["SlotAdmission", "check_url", "connect", "is_on", "slot_of"]

logger = logging.getLogger(__name__)

_ON = frozenset({"1", "yes", "true", "on"})
_OFF = frozenset({"", "0", "no", "false", "off"})

# Where the per-scope values start in each script's ARGV (0-based), and how many there are per scope.
ACQUIRE_HEAD, ACQUIRE_EACH, ACQUIRE_KEYS = len(ACQUIRE.head), len(ACQUIRE.each), len(ACQUIRE.keys)
RELEASE_HEAD, RELEASE_EACH, RELEASE_KEYS = len(RELEASE.head), len(RELEASE.each), len(RELEASE.keys)
_ACQUIRE_HEAD, _ACQUIRE_EACH, _ACQUIRE_KEYS = ACQUIRE_HEAD, ACQUIRE_EACH, ACQUIRE_KEYS
_RELEASE_HEAD, _RELEASE_EACH, _RELEASE_KEYS = RELEASE_HEAD, RELEASE_EACH, RELEASE_KEYS
# Values per scope at the end of an acquire reply in "undo" mode.
_UNDO_EACH = 6
_HASH_SLOTS = 16384

Run = Callable[[str, list[str], list[Any]], Awaitable[Any]]


def is_on(text: str | None) -> bool | None:
    """The ``cluster`` option's value as a flag (``None``: not a flag)."""
    value = (text or "").strip().lower()
    return True if value in _ON else False if value in _OFF else None


def _nodes(netloc: str) -> tuple[str, list[str]]:
    """Split ``user:pw@h1:p1,h2:p2`` into the user part (with its ``@``) and the host list."""
    userinfo, at, hosts = netloc.rpartition("@")
    return userinfo + at, [host.strip() for host in hosts.split(",") if host.strip()]


def check_url(url: str, cluster: bool, namespace: str) -> list[str]:
    """What is wrong with ``url`` (already stripped of crawlpace's options) in this mode."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # 'unix:////[' reads once, and not again once rebuilt (found by the fuzz run)
        return [f"store {url!r}: cannot be read as a URL ({exc}); write it as redis://host:port/db"]
    _userinfo, hosts = _nodes(parts.netloc)
    if not cluster:
        if len(hosts) > 1:
            return [f"store {url!r}: several hosts name a Redis Cluster; add cluster=1 to the URL"]
        return []
    problems = []
    if parts.scheme not in ("redis", "rediss"):
        problems.append(f"store {url!r}: cluster=1 needs redis:// or rediss:// (a cluster is reached "
                        "over TCP)")
    if parts.path not in ("", "/", "/0"):
        problems.append(f"store {url!r}: a Redis Cluster has only database 0; drop {parts.path!r}")
    if not hosts:
        problems.append(f"store {url!r}: name at least one node of the cluster, e.g. redis://10.0.0.5:7000")
    for host in hosts:
        try:
            port = urlsplit(f"//{host}").port
        except ValueError:
            port = -1
        if port is not None and not 0 < port < 65536:
            problems.append(f"store {url!r}: {host!r} is not host:port")
    if "{" in namespace or "}" in namespace:
        # A brace in the prefix would change the hash tag, and a scope's keys could land in several slots.
        problems.append(f"namespace {namespace!r}: braces are not allowed with cluster=1 (they would "
                        "change the hash tag that keeps a scope's keys in one slot)")
    return problems


async def connect(url: str, *, decode_responses: bool = False) -> RedisCluster:
    """A cluster client seeded with every node ``url`` names, after it has read the slot map.

    Args:
        url: the store URL without crawlpace's options (``redis://h1:p1,h2:p2/0?...``).
        decode_responses: passed to redis-py.

    Raises:
        redis.exceptions.ConnectionError: when no node answers.
    """
    from redis.asyncio.cluster import ClusterNode, RedisCluster  # the driver is optional
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import RedisClusterException

    parts = urlsplit(url)
    userinfo, hosts = _nodes(parts.netloc)
    first = urlunsplit((parts.scheme, userinfo + hosts[0], parts.path, parts.query, ""))
    seeds = []
    for host in hosts[1:]:
        place = urlsplit(f"//{host}")
        seeds.append(ClusterNode(place.hostname or "127.0.0.1", place.port or 6379))
    client = RedisCluster.from_url(with_timeouts(first), decode_responses=decode_responses,
                                   startup_nodes=seeds or None)
    try:
        await client.initialize()
    except RedisClusterException as exc:
        await client.aclose()
        raise RedisConnectionError(f"no node of the cluster answers: {exc}") from exc
    return client


def slot_of(key: str) -> int:
    """The hash slot of ``key``: CRC16 of its hash tag (its first non-empty ``{...}``) mod 16384."""
    data = key.encode()
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1:end]
    return crc_hqx(data, 0) % _HASH_SLOTS


@dataclass(frozen=True, slots=True)
class _Group:
    """The scopes of a request that share one hash slot.

    Attributes:
        slot: the hash slot.
        indexes: their positions in the request, in the order of their names.
    """

    slot: int
    indexes: tuple[int, ...]


def groups(names: Sequence[str], keys: Sequence[str], per_scope: int) -> list[_Group]:
    """The request's scopes grouped by slot, in the global order: by slot, then name."""
    by_slot: dict[int, list[int]] = {}
    for index in range(len(names)):
        by_slot.setdefault(slot_of(keys[index * per_scope]), []).append(index)
    return [_Group(slot, tuple(sorted(indexes, key=lambda i: (names[i], i))))
            for slot, indexes in sorted(by_slot.items())]


def _part(keys: Sequence[str], args: Sequence[Any], group: _Group, *, per_key: int, head: int,
          each: int) -> tuple[list[str], list[Any]]:
    """One group's keys and ARGV out of a whole request's."""
    sub_keys = [keys[i * per_key + k] for i in group.indexes for k in range(per_key)]
    sub_args = [*args[:head - 1], len(group.indexes)]
    for i in group.indexes:
        sub_args += args[head + i * each:head + (i + 1) * each]
    return sub_keys, sub_args


class SlotAdmission:
    """Admission and release for requests whose scopes live in several hash slots.

    Args:
        run: runs one of the store's scripts (``name``, keys, ARGV).
        now_arg: the ``now`` argument the scripts want (``""``: the server's ``TIME``).
        now: this worker's clock.
        held: the store's leases to renew (lease id -> scopes); phase one adds
            its reservations here, so they are renewed like any lease.
        renew: starts the store's renewal task if it is not running.
    """

    def __init__(self, run: Run, now_arg: Callable[[], Awaitable[str]], now: Callable[[], float],
                 held: dict[str, tuple[str, ...]], renew: Callable[[], None]) -> None:
        self._run = run
        self._now_arg = now_arg
        self._now = now
        self._held = held
        self._renew = renew
        self.rollbacks = 0  # reservations taken back, for tests and logs

    @staticmethod
    def spans(keys: Sequence[str], per_scope: int) -> bool:
        """True when the scopes of these keys live in more than one slot."""
        first = slot_of(keys[0]) if keys else 0
        return any(slot_of(keys[i]) != first for i in range(per_scope, len(keys), per_scope))

    async def acquire(self, names: Sequence[str], keys: list[str], args: list[Any]) -> tuple[Any, float]:
        """Admit a request to every slot group in order, or to none.

        Args:
            names: the request's scopes.
            keys, args: the acquire script's KEYS and ARGV for the whole request.

        Returns:
            A reply shaped like the acquire script's for the whole request, and
            this worker's clock when the call that decided it was sent.
        """
        lease_id: str = args[1]
        order = groups(names, keys, _ACQUIRE_KEYS)
        taken: list[tuple[_Group, Any]] = []
        try:
            for position, group in enumerate(order):
                sub_keys, sub_args = _part(keys, args, group, per_key=_ACQUIRE_KEYS, head=_ACQUIRE_HEAD,
                                           each=_ACQUIRE_EACH)
                sub_args[0] = await self._now_arg()
                if position < len(order) - 1:
                    sub_args.append("undo")  # a later group may refuse: keep what undoes this one
                sent = self._now()
                reply = await self._run("acquire", sub_keys, sub_args)
                status = int(reply[0])
                if status != 1:
                    later = order[position + 1:] if status == 0 else []
                    return await self._refused(names, keys, args, lease_id, taken, group, reply, later), sent
                taken.append((group, reply))
                # Renewed from now on: a worker that stalls between two groups keeps what it holds,
                # one that dies lets it expire.
                self._held[lease_id] = tuple(names[i] for g, _ in taken for i in g.indexes)
                self._renew()
        except asyncio.CancelledError:
            self._held.pop(lease_id, None)  # no time to roll back: the leases expire on their own
            raise
        except Exception:
            self._held.pop(lease_id, None)
            await self._rollback(keys, lease_id, taken)
            raise
        return self._admitted(len(names), taken), sent

    async def release(self, keys: list[str], args: list[Any]) -> Any:
        """Run the release script once per slot group (concurrently) and merge the replies."""
        n = int(args[_RELEASE_HEAD - 1])
        names = [str(i) for i in range(n)]  # the release order does not matter: any stable grouping
        order = groups(names, keys, _RELEASE_KEYS)
        if len(order) == 1:
            return await self._run("release", keys, args)
        calls = [self._run("release", *_part(keys, args, group, per_key=_RELEASE_KEYS, head=_RELEASE_HEAD,
                                              each=_RELEASE_EACH))
                 for group in order]
        replies = []
        for reply in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(reply, BaseException):
                raise reply
            replies.append(reply)
        merged: list[Any] = [replies[0][0], *([b"ok"] * n)]
        for group, reply in zip(order, replies, strict=True):
            for position, index in enumerate(group.indexes):
                merged[1 + index] = reply[1 + position]
        return merged

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _admitted(n: int, taken: list[tuple[_Group, Any]]) -> list[Any]:
        """One acquire reply for the whole request out of each group's."""
        sections = 5  # slot ready, generation, version, gap, now
        merged: list[Any] = [1, taken[-1][1][1], *([b""] * (sections * n))]
        for group, reply in taken:
            m = len(group.indexes)
            for position, index in enumerate(group.indexes):
                for section in range(sections):
                    merged[2 + section * n + index] = reply[2 + section * m + position]
        return merged

    async def _refused(self, names: Sequence[str], keys: list[str], args: list[Any], lease_id: str,
                       taken: list[tuple[_Group, Any]], group: _Group, reply: Any,
                       later: list[_Group]) -> list[Any]:
        """Undo the reservations, probe the groups not tried, and answer for the whole request."""
        self._held.pop(lease_id, None)
        now_arg = await self._now_arg()
        probes = []
        for other in later:
            sub_keys, sub_args = _part(keys, args, other, per_key=_ACQUIRE_KEYS, head=_ACQUIRE_HEAD,
                                       each=_ACQUIRE_EACH)
            probes.append(self._run("acquire", sub_keys, [now_arg, *sub_args[1:], "probe"]))
        answers = await asyncio.gather(self._rollback(keys, lease_id, taken), *probes, return_exceptions=True)
        if int(reply[0]) == 2:
            return [2, reply[1], group.indexes[int(reply[2]) - 1] + 1]
        merged: list[Any] = [0, reply[1], *([b"0"] * len(names))]
        for position, index in enumerate(group.indexes):
            merged[2 + index] = reply[2 + position]
        for other, answer in zip(later, answers[1:], strict=True):
            if isinstance(answer, BaseException):
                logger.debug("probe of slot %d failed: %s", other.slot, answer)
                continue
            if int(answer[0]) == 2:
                return [2, reply[1], other.indexes[int(answer[2]) - 1] + 1]
            for position, index in enumerate(other.indexes):
                merged[2 + index] = answer[2 + position]
        return merged

    async def _rollback(self, keys: list[str], lease_id: str, taken: list[tuple[_Group, Any]]) -> None:
        """Take back the reservations of ``taken``, once (best effort: what fails expires with its lease).

        ``taken`` is emptied first: a second rollback of the same reservation
        would find the state moved (by the first) and count a phantom send.
        """
        batch = list(taken)
        taken.clear()
        if not batch:
            return
        calls = []
        for group, reply in batch:
            m = len(group.indexes)
            rollback_keys: list[str] = []
            rollback_args: list[Any] = [lease_id, m]
            for position, index in enumerate(group.indexes):
                rollback_keys += [keys[index * _ACQUIRE_KEYS], keys[index * _ACQUIRE_KEYS + 1]]
                undo = reply[2 + 5 * m + _UNDO_EACH * position:2 + 5 * m + _UNDO_EACH * (position + 1)]
                prev_next, prev_last, prev_gap, next_written, sends, fresh = undo
                version, last_written = reply[2 + 2 * m + position], reply[2 + 4 * m + position]
                rollback_args += [version, sends, last_written, next_written, prev_next, prev_last, prev_gap,
                                  fresh]
            calls.append(self._run("rollback", rollback_keys, rollback_args))
        results = await asyncio.gather(*calls, return_exceptions=True)
        for (group, _reply), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                logger.warning("could not roll back a reservation in slot %d (%s): it is freed when its "
                               "lease expires", group.slot, result)
                continue
            self.rollbacks += len(group.indexes)
            logger.debug("rolled back lease %s in slot %d: %s", lease_id, group.slot,
                         [r.decode() if isinstance(r, bytes) else r for r in result])
