"""A Scrapy fleet on one queue: the requests of every process in crawlpace's shared Redis frontier.

``SCHEDULER = "crawlpace.scrapy.SharedScheduler"`` (with the add-on) puts
every request a spider yields into the shared frontier that ``crawlpace
crawl --redis`` works from (:class:`crawlpace.frontier.SharedFrontier`), and
feeds each process's :class:`~crawlpace.scrapy.ThrottlingScheduler` from it:

* **One queue, throttling-aware claims.** Requests wait in the frontier in
  one queue per throttling scope; a claim takes at most one request of each
  scope that is ready and moves that scope a little later (its fastest pace),
  and skips the scopes this process already holds enough of. A process's
  room therefore never fills with the requests of a slow site while a fast
  one's wait in Redis: no head-of-line blocking, unlike a first-in,
  first-out shared queue. Locally, the requests wait in the throttling
  scheduler's per-scope queues as usual.
* **A shared duplicate filter.** Request fingerprints (Scrapy's
  ``REQUEST_FINGERPRINTER``) go into one Redis set per spider: a request
  any process has seen is dropped by all. Start requests are checked too,
  whatever their ``dont_filter`` (every process runs the spider's start, the
  fleet fetches each start URL once); other ``dont_filter`` requests are
  queued as they are.
* **At least once.** A claimed request stays this process's while it is
  queued here, downloaded, retried, redirected or handled by its callback;
  then it is acknowledged. The process extends its claims while it holds
  them; a killed process stops, and after ``CRAWLPACE_FRONTIER_VISIBILITY``
  seconds (30) its requests go back to the queue for the others. A process
  that stops cleanly hands its unfinished requests back at once.
* **The end.** A process ends when the frontier is drained: nothing queued
  and nothing claimed by anyone (so a killed process's requests are still
  redone by those left).

Requests cross processes serialised with Scrapy's ``Request.to_dict`` and
``request_from_dict`` against the spider (callbacks travel by name), pickled:
their ``meta`` must be picklable, and anyone who can write to the Redis can
make the crawl run code, as with scrapy-redis. A request that cannot be
serialised stays in the process that made it (logged once).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import pickle
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..frontier._claim_loop import ClaimLoop, Wording
from ..frontier._shared import Claim, SharedFrontier
from ..stores.redis._keys import frontier_prefix
from ..stores.redis.connection import RedisConnection
from ._compat import requests_in_progress
from ._runtime import Runtime, runtime_of
from ._scheduler import ThrottlingScheduler
from ._tickets import TICKET_KEY

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from twisted.internet.defer import Deferred

__all__ = ["FRONTIER_ID_KEY", "SharedScheduler", "frontier_url_for"]

logger = logging.getLogger("crawlpace.scrapy")

#: Private meta key: the frontier id of the claimed request a request belongs to.
FRONTIER_ID_KEY = "_crawlpace_frontier_id"
# Seconds between two rounds of the feeder while nothing wakes it.
_POLL = 0.25
# Seconds allowed, when closing, to push, acknowledge and hand back.
_GOODBYE = 5.0
_WORDING = Wording(items="requests", holder="process", visibility="CRAWLPACE_FRONTIER_VISIBILITY",
                   down=", nothing is lost")
# Adds fingerprints to the spider's set; returns 1 for each one that was new.
_SEEN = """
local out = {}
for i = 2, #ARGV do out[#out + 1] = redis.call("SADD", KEYS[1], ARGV[i]) end
redis.call("EXPIRE", KEYS[1], tonumber(ARGV[1]))
return out
"""


def frontier_url_for(url: str, spider_name: str) -> str:
    """One spider's frontier URL: the URL's namespace (default ``crawlpace``), a dot, the spider's name.

    Each spider gets a queue of its own, so two spiders on one Redis never
    take each other's requests.
    """
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = [(key, value) for key, value in pairs if key != "namespace"]
    namespace = dict(parse_qsl(parts.query)).get("namespace") or "crawlpace"
    spider = "".join(char if char.isalnum() or char in "-_." else "-" for char in spider_name)
    query.append(("namespace", f"{namespace}.{spider}"))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


def dump_request(request: Request, spider: Spider | None) -> str:
    """``request`` as text for the frontier (Scrapy's ``to_dict``, pickled, base64)."""
    data = request.to_dict(spider=spider)
    meta = data.get("meta")
    if meta:
        data["meta"] = {key: value for key, value in meta.items() if key not in (FRONTIER_ID_KEY, TICKET_KEY)}
    return base64.b64encode(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def load_request(text: str, spider: Spider | None) -> Request:
    """The request :func:`dump_request` wrote."""
    from scrapy.utils.request import request_from_dict

    return request_from_dict(pickle.loads(base64.b64decode(text)), spider=spider)


class SharedScheduler(ThrottlingScheduler):
    """The throttling scheduler, fed by crawlpace's shared Redis frontier (see the module docstring).

    Args:
        runtime: the crawl's throttling runtime.
        frontier: the spider's shared frontier.
        crawler: the crawler.
        fingerprint: a request's fingerprint (Scrapy's request fingerprinter).
    """

    def __init__(self, runtime: Runtime, frontier: SharedFrontier, *, crawler: Any = None,
                 fingerprint: Callable[[Request], bytes] | None = None) -> None:
        super().__init__(runtime, None, crawler=crawler)
        self.frontier = frontier
        self._fingerprint = fingerprint
        self._seen = RedisConnection(frontier.url, {"seen": _SEEN}, cluster=frontier.cluster,
                                     decode_responses=True)
        self._seen_key = frontier_prefix(frontier.namespace) + "scrapy-fingerprints"
        # The requests claimed here and not yet acknowledged, and the loop that claims more.
        self._claims = ClaimLoop(frontier, runtime.config.settings, now=lambda: self.runtime.clock_now,
                                 poll=_POLL, wording=_WORDING, logger=logger)
        self._held = self._claims.held
        # Requests made here, waiting to be checked against the shared fingerprints and pushed:
        # (request, the held id it belongs to, its fingerprint when it is to be checked).
        self._outbox: list[tuple[Request, int | None, str | None]] = []
        self._local: Counter[int] = Counter()  # id -> requests of it queued here, not yet handed out
        self._drained = False
        self._feeder: asyncio.Task[None] | None = None
        self._unserialisable = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SharedScheduler:
        """Build the scheduler on the frontier the settings name (``CRAWLPACE_FRONTIER``)."""
        runtime = runtime_of(crawler)
        url = runtime.config.frontier_url
        if url is None:
            raise RuntimeError("crawlpace.scrapy.SharedScheduler needs the add-on and a Redis frontier: "
                               "set CRAWLPACE_FRONTIER or a redis:// CRAWLPACE_STORE")
        name = getattr(crawler.spidercls, "name", None) or "spider"
        frontier = SharedFrontier(frontier_url_for(url, str(name)),
                                  visibility=runtime.config.frontier_visibility)
        fingerprinter = getattr(crawler, "request_fingerprinter", None)
        return cls(runtime, frontier, crawler=crawler,
                   fingerprint=fingerprinter.fingerprint if fingerprinter is not None else None)

    # -- Scrapy's scheduler interface -----------------------------------------------

    def open(self, spider: Spider | None = None) -> Deferred[None] | None:
        """Start the throttler and the feeder."""
        opened = super().open(spider)
        self._feeder = self.runtime.spawn(self._feed())
        self._feeder.add_done_callback(self._feeder_ended)
        logger.info("shared frontier %r: this process takes its requests from it", self.frontier)
        return opened

    def close(self, reason: str) -> Deferred[None] | None:
        """Stop the feeder; push what is left, acknowledge what is done, hand back the rest."""
        from scrapy.utils.defer import deferred_from_coro

        feeder, self._feeder = self._feeder, None
        if feeder is not None:
            feeder.cancel()
        super().close(reason)
        done: Deferred[None] = deferred_from_coro(self._goodbye())
        return done

    def has_pending_requests(self) -> bool:
        """True until the frontier is drained and nothing is left here."""
        return super().has_pending_requests() or bool(self._outbox or self._held) or not self._drained

    def enqueue_request(self, request: Request) -> bool:
        """Push ``request`` to the frontier (after the shared duplicate check), or keep it here.

        A retry of a request this process holds stays here, under the same
        claim. The duplicate check is a round trip: it runs in the feeder,
        so the answer is always True (duplicates are counted in
        ``dupefilter/filtered``).
        """
        self.runtime.forget(request)
        fid = request.meta.get(FRONTIER_ID_KEY)
        held = isinstance(fid, int) and fid in self._held
        if not held:
            request.meta.pop(FRONTIER_ID_KEY, None)
            fid = None
        if held and request.dont_filter:
            self._keep(request, fid)
            return True
        fingerprint = None
        check = not request.dont_filter or request.meta.get("is_start_request")
        if self._fingerprint is not None and check:
            fingerprint = self._fingerprint(request).hex()
        if fid is not None:
            self._local[fid] += 1  # the claim stays this process's while the check runs
        self._outbox.append((request, fid, fingerprint))
        self._poke()
        return True

    def _dequeued(self, request: Request) -> Request:
        fid = request.meta.get(FRONTIER_ID_KEY)
        if fid is not None and self._local[fid] > 0:
            self._local[fid] -= 1
            if self._local[fid] == 0:
                self._poke()
        return super()._dequeued(request)

    # -- the feeder -------------------------------------------------------------------

    def _poke(self) -> None:
        self._claims.news.set()

    def _keep(self, request: Request, fid: int | None) -> None:
        if fid is not None:
            request.meta[FRONTIER_ID_KEY] = fid
            self._local[fid] += 1
        self._queue(request)

    def _feeder_ended(self, feeder: asyncio.Task[None]) -> None:
        error = None if feeder.cancelled() else feeder.exception()
        if error is not None:
            logger.error("the shared frontier's feeder failed (%s: %s); this process stops taking requests",
                         type(error).__name__, error)
            self._drained = True
            self.runtime.wake()

    async def _feed(self) -> None:
        await self._claims.run(before=self._before_claim, take=self._take)

    async def _before_claim(self) -> None:
        await self._push()
        await self._acknowledge()

    async def _push(self) -> None:
        """Check the new requests' fingerprints, then push the fresh ones (or keep them, for a held claim)."""
        if not self._outbox:
            return
        items, self._outbox = self._outbox, []
        try:
            fingerprints = [fingerprint for _, _, fingerprint in items if fingerprint is not None]
            fresh = iter(await self._first_seen(fingerprints))
        except BaseException:
            self._outbox[:0] = items
            raise
        stats = self.runtime.stats
        entries: list[tuple[str, str]] = []
        for request, fid, fingerprint in items:
            if fingerprint is not None and not next(fresh):
                stats.inc_value("dupefilter/filtered")
                if fid is not None:
                    self._local[fid] -= 1
                logger.debug("Filtered duplicate request (shared frontier): %s", request)
                continue
            if fid is not None and fid in self._held:
                self._local[fid] -= 1
                self._keep(request, fid)
                continue
            try:
                entries.append((dump_request(request, self.spider), self._scope_of(request)))
            except Exception as exc:  # a callback that is not the spider's, unpicklable meta
                if not self._unserialisable:
                    self._unserialisable = True
                    logger.warning("a request cannot go to the shared frontier (%s: %s); such requests "
                                   "stay in the process that made them (%s)", type(exc).__name__, exc,
                                   request)
                stats.inc_value("frontier/kept_local")
                self._keep(request, None)
        if entries:
            try:
                added = await self.frontier.enqueue_entries(entries)
            except BaseException:
                self._outbox[:0] = [(load_request(text, self.spider), None, None) for text, _ in entries]
                raise
            stats.inc_value("frontier/pushed", added)
        if self._local:
            self.runtime.wake()

    async def _first_seen(self, fingerprints: list[str]) -> list[int]:
        if not fingerprints:
            return []
        reply = await self._seen.call_now("seen", [self._seen_key], [self.frontier.idle, *fingerprints])
        return [int(item) for item in reply]

    def _scope_of(self, request: Request) -> str:
        try:
            demands = self.runtime.scopes_nowait(request)
        except Exception:  # the scheduler refuses it where it is taken; any queue will do
            demands = None
        if demands:
            return demands[0][0]
        return urlsplit(request.url).hostname or "-"

    def _take(self, claim: Claim) -> bool:
        stats = self.runtime.stats
        if claim.requeued:
            logger.info("%d claimed requests had expired (a process died or lost Redis) and went back to "
                        "the shared queue", claim.requeued)
            stats.inc_value("frontier/requeued", claim.requeued)
        broken: list[int] = []
        for item in claim.urls:
            try:
                request = load_request(item.url, self.spider)
            except Exception as exc:
                logger.error("a request in the shared frontier cannot be read back (%s: %s); it is dropped "
                             "(is every process running the same spider code?)", type(exc).__name__, exc)
                broken.append(item.id)
                continue
            self._claims.hold(item.id, item.scope)
            self._keep(request, item.id)
        if broken:
            self.runtime.spawn(self.frontier.ack(broken, "unreadable"))
        if claim.urls:
            stats.inc_value("frontier/claimed", len(claim.urls))
            self.runtime.wake()
        drained = claim.drained and not self._held and not self._outbox
        if drained and not self._drained:
            self._drained = True
            self.runtime.wake()  # the engine sees the spider idle and closes it
        elif not drained:
            self._drained = False
        return False  # the engine ends the crawl, when the spider is idle

    def _finished(self) -> list[int]:
        """Held ids with nothing left here: none queued, none in the engine's hands."""
        if not self._held:
            return []
        busy = {request.meta.get(FRONTIER_ID_KEY) for request in requests_in_progress(self.crawler)}
        return [fid for fid in self._held if self._local[fid] <= 0 and fid not in busy]

    async def _acknowledge(self) -> None:
        done = self._finished()
        if not done:
            return
        finished, _ = await self.frontier.ack(done, "done")
        for fid in done:
            self._forget(fid)
        self.runtime.stats.inc_value("frontier/acknowledged", len(done))
        if finished < len(done):
            logger.info("%d requests had been finished by another process too (their claims had expired)",
                        len(done) - finished)

    def _forget(self, fid: int) -> None:
        self._claims.release(fid)
        self._local.pop(fid, None)

    async def _goodbye(self) -> None:
        try:
            async with asyncio.timeout(_GOODBYE):
                with contextlib.suppress(Exception):
                    await self._push()
                await self._acknowledge()
                left = list(self._held)
                if left:
                    back = await self.frontier.give_back(left)
                    logger.info("handed %d unfinished requests back to the shared frontier", back)
        except Exception as exc:
            logger.warning("could not reach the shared frontier while closing (%s); the requests held here "
                           "come back to the other processes after %gs", exc, self.frontier.visibility)
        finally:
            await self._seen.aclose()
            await self.frontier.aclose()

    def __repr__(self) -> str:
        return (f"<SharedScheduler {self.frontier!r} held={len(self._held)} outbox={len(self._outbox)} "
                f"queued={self._queues.queued} drained={self._drained}>")

