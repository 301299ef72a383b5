"""The shared frontier: one queue of URLs in Redis, worked through by any number of crawl processes.

``crawlpace enqueue`` puts URLs in; every ``crawlpace crawl --redis URL``
started without a URL file claims them a few at a time, fetches them through
the shared throttler, writes the answers to its own output file, and
acknowledges them. What the queue promises:

* **Ready-time order, fair across scopes.** URLs wait in one FIFO list per
  scope (host); a sorted set holds each scope's ready time. A claim takes at
  most one URL from each scope that is ready, earliest first, and moves that
  scope ``spacing`` seconds later, so the next claims serve the other scopes.
  A worker whose throttler must hold a site back (backoff, Retry-After,
  Crawl-Delay) moves the site's ready time to then (:meth:`defer`), so no one
  claims URLs that could not be sent anyway.
* **At least once.** A claim carries a visibility deadline in server time.
  The worker extends it while it holds the URL (:meth:`touch`); a worker that
  is killed stops extending, and its URLs go back to the front of their
  queues once the deadline passes. A worker that stops cleanly hands its
  unsent URLs back at once (:meth:`give_back`). A URL answered just before
  its worker died, but not yet acknowledged, is fetched again: the merged
  output then holds it twice, never zero times.
* **No clock agreement needed.** Every deadline and ready time is the
  server's ``TIME``, read inside the scripts.

Each operation is one Lua script (loaded once, called by SHA). All keys of a
namespace share one hash tag, so on a Redis Cluster (``cluster=1`` in the
URL) the whole frontier of a namespace lives in one slot.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._exceptions import ConfigError, ScopeError
from .._redact import redact
from .._scoping._fetchable import fetchable_scope
from ..stores import check_url
from ..stores.redis import _keys
from ..stores.redis.connection import (
    RedisConnection,
    cluster_flag,
    have_driver,
    load_scripts,
    parse_url,
    unreachable,
)

__all__ = ["Claim", "ClaimedUrl", "EnqueueReport", "EnqueueStopped", "FrontierCounts", "RobotsCopy",
           "SharedFrontier", "ack_counts",
           "frontier_unreachable"]

_log = logging.getLogger(__name__)

#: Seconds a claimed URL stays invisible to other workers without being touched.
DEFAULT_VISIBILITY = 30.0
# URLs sent to the server per enqueue call.
_BATCH = 500

_NAMES = ("enqueue", "claim", "ack", "touch", "give_back", "defer", "robots_get", "robots_put")
_SCRIPTS = load_scripts("crawlpace.frontier", _NAMES,
                        clocked=set(_NAMES) - {"ack", "robots_get", "robots_put"})
#: Scripts called in the connection's batches (:meth:`SharedFrontier.ack_later`): the claim, which the
#: acknowledgements queued just before it ride with. The others go alone, on the main client.
_BATCHED = frozenset({"claim"})
_KEEP = load_scripts("crawlpace.frontier", ("keep",), clocked=())["keep"]
#: Tokens of unanswered claims kept to name in the next claim (the server keeps one per worker).
_LOST_MAX = 8
#: Seconds a job's frontier keys live after the last enqueue, claim, touch or acknowledgement.
DEFAULT_IDLE = 7 * 24 * 3600.0

def frontier_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means the server could not be reached (worth retrying)."""
    return unreachable(exc)


def ack_counts(reply: Sequence[Any]) -> tuple[int, int]:
    """The ack script's reply read: (finished now, already finished by another worker)."""
    done, dups, _late = reply
    return int(done), int(dups)


@dataclass(frozen=True, slots=True)
class ClaimedUrl:
    """One URL handed to this worker.

    Attributes:
        id: its id in the frontier (what :meth:`SharedFrontier.ack` takes).
        url: the URL as enqueued.
        scope: the scope it was queued under (its host).
        tries: how many times it was handed out, this time included.
        left: the URLs of its scope the frontier still queued once it was handed out
            (those no worker has claimed yet).
    """

    id: int
    url: str
    scope: str
    tries: int
    left: int = 0


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to one claim.

    Attributes:
        urls: the URLs handed out.
        queued: URLs still waiting in the frontier (all workers).
        claimed: URLs claimed and not yet acknowledged (all workers, these included).
        next_in: seconds until some scope is ready; None when nothing is queued.
        requeued: claims that had expired and went back to their queues just now.
        last_id: the id of the last URL ever enqueued (ids only grow); 0 when
            none was, or when the frontier's keys are gone. Lower than a worker
            saw before, it says the frontier lost its data: a Redis restarted
            without persistence, or from an older snapshot, or purged.
    """

    urls: tuple[ClaimedUrl, ...]
    queued: int
    claimed: int
    next_in: float | None
    requeued: int
    last_id: int = 0

    @property
    def drained(self) -> bool:
        """Whether nothing is queued and nothing is claimed: the frontier's work is done."""
        return self.queued <= 0 and self.claimed == 0


class EnqueueStopped(Exception):
    """:meth:`SharedFrontier.enqueue` stopped part-way: the server refused a batch, or went away.

    Attributes:
        report: what was done before (``added`` URLs are in the frontier).
        error: what stopped it.
    """

    def __init__(self, report: EnqueueReport, error: BaseException) -> None:
        super().__init__(f"{report.added} URLs queued, then {type(error).__name__}: {error}")
        self.report = report
        self.error = error


@dataclass(frozen=True, slots=True)
class RobotsCopy:
    """A site's robots.txt answer as the worker that fetched it stored it for the fleet.

    Attributes:
        status: the final HTTP status, None when no answer came.
        body: the body (at most the bytes robots.txt rules are read from).
        why: what went wrong when there was no answer.
    """

    status: int | None
    body: bytes
    why: str = ""


@dataclass(frozen=True, slots=True)
class EnqueueReport:
    """What :meth:`SharedFrontier.enqueue` did.

    Attributes:
        read: URL lines read (blank lines and comments not counted).
        added: URLs put in the queue.
        duplicates: URLs already queued or claimed, skipped.
        invalid: URLs without a usable host, skipped (each logged).
    """

    read: int = 0
    added: int = 0
    duplicates: int = 0
    invalid: int = 0


@dataclass(frozen=True, slots=True)
class FrontierCounts:
    """The frontier's figures, for ``crawlpace status``.

    Attributes:
        queued: URLs waiting.
        claimed: URLs held by workers.
        scopes: scopes with URLs waiting.
        enqueued: URLs ever added.
        done: URLs acknowledged.
        requeued: claims that expired (a worker died or lost the server).
        returned: URLs handed back by stopping workers.
        duplicates: acknowledgements of URLs already finished by another worker.
        late: acknowledgements that came after another worker had claimed the URL
            (this one was paused or cut off past the visibility); the other finishes it.
        outcomes: acknowledged URLs by outcome.
        workers: each worker's name and seconds since it was last heard from.
    """

    queued: int = 0
    claimed: int = 0
    scopes: int = 0
    enqueued: int = 0
    done: int = 0
    requeued: int = 0
    returned: int = 0
    duplicates: int = 0
    late: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    workers: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict."""
        return {"queued": self.queued, "claimed": self.claimed, "scopes": self.scopes,
                "enqueued": self.enqueued, "done": self.done, "requeued": self.requeued,
                "returned": self.returned, "duplicates": self.duplicates, "late": self.late,
                "outcomes": dict(sorted(self.outcomes.items())),
                "workers": {name: round(age, 3) for name, age in sorted(self.workers.items())}}


class SharedFrontier:
    """The client side of the shared frontier of one namespace.

    Args:
        url: the Redis URL (the same as the store's; ``namespace`` in its
            query string picks the crawl job, default ``crawlpace``).
        worker: this worker's name, shown by ``crawlpace status`` (default:
            host name, process id and a random suffix).
        visibility: seconds a claim stays invisible to others without a
            :meth:`touch`; a killed worker's URLs come back after this long.
        idle: seconds the frontier's keys live after the last enqueue,
            claim, touch or acknowledgement (default a week): an abandoned
            job's queue does not stay in Redis forever.

    Raises:
        ConfigError: without the ``redis`` extra, or for a bad visibility or idle time.
    """

    def __init__(self, url: str, *, worker: str | None = None,
                 visibility: float = DEFAULT_VISIBILITY, idle: float = DEFAULT_IDLE) -> None:
        if not have_driver():  # pragma: no cover - exercised only without the extra
            raise ConfigError([f"frontier {url!r}: the shared frontier needs redis-py; "
                               "install crawlpace[redis]"])
        if not (isinstance(visibility, int | float) and 0.0 < visibility < float("inf")):
            raise ConfigError([f"visibility: {visibility!r} is not a positive number of seconds; "
                               f"use e.g. {DEFAULT_VISIBILITY:g}"])
        self.url, options = parse_url(url)
        self.namespace = options.get("namespace") or "crawlpace"
        problems = check_url(url) + _keys.check_namespace(self.namespace)
        if problems:
            raise ConfigError(problems)
        self.cluster = bool(cluster_flag(options.get("cluster")))
        self.worker = worker or f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.visibility = float(visibility)
        # One hash tag for the whole namespace: on a cluster every script stays in one slot.
        self._prefix = _keys.frontier_prefix(self.namespace)
        self._ready = self._prefix + "ready"
        # On a cluster every key of the namespace is in one slot (one hash tag), on one node.
        if not (isinstance(idle, int | float) and visibility < idle < float("inf")):
            raise ConfigError([f"idle: {idle!r} is not a number of seconds above the visibility "
                               f"({self.visibility:g}); use e.g. {DEFAULT_IDLE:g}"])
        self.idle = int(idle)
        self._claims = itertools.count(1)
        self._lost: list[str] = []  # tokens of claims whose replies never came (claim.lua)
        prelude = f"local IDLE = {self.idle}\n{_KEEP}"
        self._conn = RedisConnection(self.url, {name: prelude + src for name, src in _SCRIPTS.items()},
                                     cluster=self.cluster, decode_responses=True)

    def __repr__(self) -> str:
        return f"<SharedFrontier {redact(self.url)} namespace={self.namespace!r} worker={self.worker!r}>"

    async def _connect(self) -> Any:
        return await self._conn.client()

    async def _run(self, name: str, args: Sequence[Any]) -> Any:
        if name in _BATCHED:
            # In the connection's next batch (one server; a cluster's call goes alone): the calls
            # queued in the same turn of the loop (ack_later) ride with it.
            return await self._conn.call(name, [self._ready], args)
        return await self._conn.call_now(name, [self._ready], args)

    # -- filling ----------------------------------------------------------------

    async def enqueue(self, urls: Iterable[str]) -> EnqueueReport:
        """Add URLs (one per item; blank lines and ``#`` comments skipped), each under its host's scope."""
        read = added = invalid = 0
        batch: list[str] = []
        for line in urls:
            url = line.strip()
            if not url or url.startswith("#"):
                continue
            read += 1
            try:
                scope = fetchable_scope(url)
            except ScopeError as exc:
                invalid += 1
                _log.warning("not queued: %s", exc)
                continue
            batch += (url, scope)
            if len(batch) >= 2 * _BATCH:
                added += await self._enqueue_batch(batch, read, added, invalid)
                batch = []
        if batch:
            added += await self._enqueue_batch(batch, read, added, invalid)
        return EnqueueReport(read=read, added=added, duplicates=read - invalid - added, invalid=invalid)

    async def enqueue_entries(self, entries: Iterable[tuple[str, str]]) -> int:
        """Add ``(entry, scope)`` pairs as given; returns how many were added.

        The entry need not be a URL and the scope is the caller's (the Scrapy
        add-on's shared scheduler queues serialised requests under their
        throttling scope). An entry already queued or claimed is skipped, as
        in :meth:`enqueue`.
        """
        added = 0
        batch: list[str] = []
        for entry, scope in entries:
            batch += (entry, scope)
            if len(batch) >= 2 * _BATCH:
                added += int(await self._run("enqueue", ["", self._prefix, *batch]))
                batch = []
        if batch:
            added += int(await self._run("enqueue", ["", self._prefix, *batch]))
        return added

    async def _enqueue_batch(self, batch: list[str], read: int, added: int, invalid: int) -> int:
        """Send one batch (each batch is one script: all of it goes in, or none); its URLs added."""
        try:
            return int(await self._run("enqueue", ["", self._prefix, *batch]))
        except Exception as exc:
            # A server at maxmemory refuses the batch (OOM), or the server went away: the batches
            # before it are in. Say how many, so the caller can tell the user.
            queued = read - len(batch) // 2
            raise EnqueueStopped(EnqueueReport(read=queued, added=added, duplicates=queued - invalid - added,
                                               invalid=invalid), exc) from exc

    # -- working ------------------------------------------------------------------

    async def claim(self, count: int, *, spacing: float, skip: Sequence[str] = ()) -> Claim:
        """Claim up to ``count`` URLs, at most one per ready scope.

        Args:
            count: URLs wanted (0 only reads the counts and requeues expired claims).
            spacing: seconds before a scope that gave a URL may give another.
            skip: scopes to take nothing from (this worker holds enough of them);
                they stay ready for the other workers.

        A claim that fails because the server went away may still have run
        there; the next claim hands this worker those URLs first, so they do
        not wait out their visibility claimed by nobody.
        """
        token = str(next(self._claims))
        try:
            reply = await self._run("claim", ["", self._prefix, self.worker, max(count, 0), self.visibility,
                                              max(spacing, 0.0), token, " ".join(self._lost), *skip])
        except Exception as exc:
            if frontier_unreachable(exc):
                # The server may have run it and gone before answering: the next claim asks for its URLs.
                self._lost = [*self._lost[-(_LOST_MAX - 1):], token]
            raise
        self._lost = []
        urls = tuple(ClaimedUrl(int(reply[i]), reply[i + 1], reply[i + 2], int(reply[i + 3]),
                                int(reply[i + 4])) for i in range(5, len(reply), 5))
        next_in = float(reply[2]) if reply[2] != "" else None
        return Claim(urls=urls, queued=int(reply[0]), claimed=int(reply[1]), next_in=next_in,
                     requeued=int(reply[3]), last_id=int(reply[4]))

    async def ack(self, ids: Sequence[int], outcome: str) -> tuple[int, int]:
        """Mark URLs finished with ``outcome``; returns (finished now, already finished by another).

        A URL another worker has claimed since this worker's claim expired is
        neither: its claim stands, and that worker's ack finishes it (the
        frontier counts it as ``late``).
        """
        if not ids:
            return 0, 0
        return ack_counts(await self._run("ack", ["", self._prefix, self.worker, outcome, *ids]))

    def ack_later(self, ids: Sequence[int], outcome: str) -> asyncio.Future[Any] | None:
        """:meth:`ack`, queued for the connection's next batch and not awaited (one server only).

        The acknowledgement leaves at the loop's next turn with the calls made in this one: a
        worker that acknowledges its answers just before it claims (``crawl/_shared_job.py``) pays
        one round trip and one script call for both, not two, and the server runs the
        acknowledgement first, so the claim's counts see it, as when it was awaited before.
        Returns the reply's future (:func:`ack_counts` reads it), or None on a cluster, where
        calls go one by one and their order is not kept: call :meth:`ack` there.
        """
        if self.cluster or not ids:
            return None
        return self._conn.submit("ack", [self._ready], ["", self._prefix, self.worker, outcome, *ids])

    async def touch(self, ids: Sequence[int]) -> list[int]:
        """Extend the visibility of held URLs; returns those this worker no longer owns."""
        lost = await self._run("touch", ["", self._prefix, self.worker, self.visibility, *ids])
        return [int(item) for item in lost]

    async def give_back(self, ids: Sequence[int]) -> int:
        """Put unsent URLs back at the front of their queues, ready now; returns how many."""
        if not ids:
            return 0
        return int(await self._run("give_back", ["", self._prefix, self.worker, *ids]))

    async def defer(self, scope: str, seconds: float) -> bool:
        """Keep ``scope``'s queued URLs unclaimed for ``seconds`` (never earlier than already set)."""
        return bool(await self._run("defer", ["", scope, max(seconds, 0.0)]))

    # -- robots.txt, once for the fleet ------------------------------------------------

    async def robots(self, origin: str, *, hold: float) -> RobotsCopy | bool:
        """The fleet's copy of ``origin``'s robots.txt, or whether this worker should fetch it.

        Args:
            origin: ``scheme://host:port``.
            hold: seconds the right to fetch stays this worker's (another worker
                takes it after that, should this one never store an answer).

        Returns:
            The stored copy; True when this worker now holds the right to fetch
            it (and should :meth:`store_robots` the answer); False while another
            worker fetches it.
        """
        reply = await self._run("robots_get", ["", self._prefix, self.worker, origin,
                                               max(int(hold * 1000), 1)])
        if reply[0] == "copy":
            status = int(reply[1]) if reply[1] != "" else None
            return RobotsCopy(status, reply[2].encode("latin-1"), reply[3])
        return bool(reply[0] == "fetch")

    async def store_robots(self, origin: str, copy: RobotsCopy, *, keep: float) -> None:
        """Store ``origin``'s robots.txt answer for the other workers for ``keep`` seconds."""
        status = "" if copy.status is None else str(copy.status)
        await self._run("robots_put", ["", self._prefix, self.worker, origin, max(keep, 1.0), status,
                                       copy.body.decode("latin-1"), copy.why])

    async def robots_copies(self, limit: int = 2000) -> dict[str, RobotsCopy]:
        """The fleet's stored robots.txt answers by origin, at most ``limit`` (SCAN; bodies left out).

        For a dashboard: an answer with no status, a 429 or a 5xx forbids its
        whole site while it is kept (RFC 9309).
        """
        client, prefix = await self._connect(), self._prefix
        start = len(prefix) + len("robots:")
        origins: list[str] = []
        async for key in client.scan_iter(match=_keys.glob_escape(prefix) + "robots:*", count=1000):
            text = key.decode("latin-1") if isinstance(key, bytes) else str(key)
            if text.startswith(prefix + "robots:"):
                origins.append(text[start:])
            if len(origins) >= limit:
                break
        copies: dict[str, RobotsCopy] = {}
        for origin in origins:
            status, why = await client.hmget(prefix + "robots:" + origin, "status", "why")
            if status is None and why is None:  # expired since the scan
                continue
            text = status.decode() if isinstance(status, bytes) else (status or "")
            reason = why.decode("latin-1") if isinstance(why, bytes) else (why or "")
            copies[origin] = RobotsCopy(int(text) if text else None, b"", reason)
        return copies

    # -- reading ------------------------------------------------------------------

    async def counts(self) -> FrontierCounts:
        """Read the frontier's figures (no URL is claimed or moved)."""
        client, prefix = await self._connect(), self._prefix
        async with client.pipeline(transaction=False) as pipe:
            pipe.hgetall(prefix + "stats")
            pipe.zcard(prefix + "claimed")
            pipe.zcard(self._ready)
            pipe.zrange(prefix + "workers", 0, -1, withscores=True)
            stats, claimed, scopes, workers = await pipe.execute()
        seconds, micros = await client.time()
        now = seconds + micros / 1e6
        number = {key: int(value) for key, value in stats.items()}
        return FrontierCounts(
            queued=max(number.get("queued", 0), 0), claimed=int(claimed), scopes=int(scopes),
            enqueued=number.get("enqueued", 0), done=number.get("done", 0),
            requeued=number.get("requeued", 0), returned=number.get("returned", 0),
            duplicates=number.get("duplicates", 0), late=number.get("late", 0),
            outcomes={key.removeprefix("outcome:"): value for key, value in number.items()
                      if key.startswith("outcome:")},
            workers={name: max(now - float(seen), 0.0) for name, seen in workers})

    async def aclose(self) -> None:
        """Close the connections."""
        await self._conn.aclose()
