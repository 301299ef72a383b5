"""The claim loop every worker of the shared frontier runs: claim, pause, retry while Redis is away.

A crawl worker (:mod:`crawlpace.crawl._shared_job`) and a Scrapy process
(:mod:`crawlpace.scrapy._shared`) feed themselves from the frontier the same
way; only what they do with a claimed URL, and what they send before each
claim, differ. :class:`ClaimLoop` is the part they share:

* it remembers the URLs held (claimed and not yet acknowledged) and how many
  of each scope, so claims skip the scopes held enough of
  (:func:`~crawlpace.frontier._claims.claim_per_scope`) and never ask for
  more than the worker's room (twice ``CONCURRENT_REQUESTS``);
* a worker that says which of its URLs still wait to be sent (``waiting``:
  the crawl's scheduler, per host) keeps at most ``WAITING_PER_SCOPE`` of one
  scope waiting, and those do not count in its room: a URL waiting for its
  site's pace (a Crawl-delay, a slow bucket) holds no slot. Counted, the
  room of a worker on 30 sites filled with the URLs of the slow ones; it then
  claimed one URL per answer, round the 30 sites in turn, and every site, the
  fast ones and the Crawl-delay ones alike, got about 4 x its answers / 30 a
  second from a fleet of 4 (0.4 x what one process sends; see
  bench/results/fleetpace1.md). The room bounds what is sent soon; the
  ceiling (``HELD_ROOMS`` rooms) bounds what one worker holds at all;
* it extends the claims held every third of the visibility;
* between two claims it waits for news (a URL answered) or the time the
  frontier says its next scope is ready, at most ``poll`` seconds; a worker
  whose room is full, or whose claim skipped full scopes and got nothing,
  waits the whole ``poll`` (the frontier's next ready time then names a
  skipped scope, and claiming again at once would spin);
* while Redis is away it retries with backoff (``RETRY_FIRST`` doubling to
  ``RETRY_MAX``, the waits of every Redis client here), with one log line
  when it goes and one when it comes back.

It does not import the crawl or Scrapy: the ``scrapy`` extra has no aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .._settings._config import Settings
from ..stores.redis.connection import RETRY_FIRST, RETRY_MAX
from ._claims import claim_per_scope, claim_spacing
from ._shared import Claim, SharedFrontier, frontier_unreachable

__all__ = ["HELD_ROOMS", "WAITING_PER_SCOPE", "ClaimLoop", "Wording"]

#: URLs of one scope a worker keeps waiting to be sent, outside its room: one for the scope's next
#: turn and one behind it (claims come after answers, so the scope is not left without one while
#: the next claim is on its way). More would only wait here for the site's pace, when another
#: worker could send them at its turn.
WAITING_PER_SCOPE = 2
#: The most URLs one worker holds, in rooms (twice ``CONCURRENT_REQUESTS`` each): a bound on its
#: memory, on each touch and on what is handed back at its end, whatever the number of sites
#: (128 URLs by default: 2 waiting for each of 56 sites beside a full room).
HELD_ROOMS = 4


@dataclass(frozen=True, slots=True)
class Wording:
    """How the log lines name things for one kind of worker.

    Attributes:
        items: what is claimed ("URLs", "requests").
        holder: who holds them ("worker", "process").
        visibility: the name of the visibility setting, for the log line of lost claims.
        down: what the "unreachable" line adds after "waiting for it".
    """

    items: str
    holder: str
    visibility: str
    down: str


class ClaimLoop:
    """The held claims of one worker and the loop that claims more (see the module docstring).

    Args:
        frontier: the shared frontier.
        settings: the throttling settings (the room, the claim spacing, the per-scope cap).
        now: the worker's clock.
        poll: the longest wait between two claims.
        wording: the names its log lines use.
        logger: where its log lines go (the worker's own logger).
    """

    def __init__(self, frontier: SharedFrontier, settings: Settings, *, now: Callable[[], float],
                 poll: float, wording: Wording, logger: logging.Logger,
                 waiting: Callable[[str], int] | None = None) -> None:
        self.frontier = frontier
        self.held: dict[int, str] = {}  # claimed and not yet acknowledged: id -> its scope in the frontier
        self.per_scope: Counter[str] = Counter()  # held URLs per scope
        self.news = asyncio.Event()  # something changed: claim again now rather than after the pause
        self.target = 2 * settings.concurrent_requests
        self.ceiling = HELD_ROOMS * self.target
        self._waiting = waiting
        self.spacing = claim_spacing(settings)
        self.scope_cap = claim_per_scope(settings)
        self._now = now
        self._poll = poll
        self._words = wording
        self._log = logger
        self._down_since: float | None = None

    # -- what is held ----------------------------------------------------------------

    def hold(self, fid: int, scope: str) -> None:
        """``fid`` (of ``scope``) was claimed here."""
        self.held[fid] = scope
        self.per_scope[scope] += 1

    def release(self, fid: int) -> bool:
        """``fid`` is no longer held here (acknowledged, or about to be); False if it was not held."""
        scope = self.held.pop(fid, None)
        if scope is None:
            return False
        self.per_scope[scope] -= 1
        if self.per_scope[scope] <= 0:
            del self.per_scope[scope]
        return True

    def waiting(self, scope: str) -> int:
        """URLs of ``scope`` held here and not yet sent, as far as the worker says (0 when it cannot)."""
        if self._waiting is None:
            return 0
        return min(self._waiting(scope), self.per_scope.get(scope, 0))

    def full_scopes(self) -> list[str]:
        """The scopes held enough of (:func:`claim_per_scope`), or with ``WAITING_PER_SCOPE`` URLs
        waiting to be sent here: claims skip them."""
        return [scope for scope, held in self.per_scope.items()
                if held >= self.scope_cap or self.waiting(scope) >= WAITING_PER_SCOPE]

    def in_room(self) -> int:
        """URLs held that count in the room: all of them but those waiting for their scope's turn
        (at most ``WAITING_PER_SCOPE`` of each scope)."""
        if self._waiting is None:
            return len(self.held)
        aside = sum(min(self.waiting(scope), WAITING_PER_SCOPE) for scope in self.per_scope)
        return len(self.held) - aside

    def room(self) -> int:
        """How many URLs the next claim may ask for."""
        return max(min(self.target - self.in_room(), self.ceiling - len(self.held)), 0)

    # -- the loop ----------------------------------------------------------------------

    async def run(self, *, before: Callable[[], Awaitable[None]], take: Callable[[Claim], bool],
                  stopping: Callable[[], bool] = lambda: False) -> None:
        """Claim until ``take`` says the end came or ``stopping()`` is true.

        Each round: ``before()`` (send what waits: acknowledgements, new
        URLs), the touch when due, the claim, ``take(claim)``, the pause.
        Errors that mean Redis is away are retried; any other ends the loop.
        """
        touched = self._now()
        retry = RETRY_FIRST
        while not stopping():
            self.news.clear()
            try:
                await before()
                if self._now() - touched >= self.frontier.visibility / 3.0:
                    await self.touch()
                    touched = self._now()
                skip = self.full_scopes()
                claim = await self.frontier.claim(self.room(), spacing=self.spacing, skip=skip)
            except Exception as exc:
                if not frontier_unreachable(exc):
                    raise
                self._unreachable(exc)
                await self.pause(retry)
                retry = min(retry * 2.0, RETRY_MAX)
                continue
            retry = RETRY_FIRST
            self._reachable()
            if take(claim):
                return
            await self.pause(self._next_claim_in(claim, bool(skip)))

    def _next_claim_in(self, claim: Claim, skipped: bool) -> float:
        if self.room() <= 0:
            return self._poll  # full: wait for an answer (news) or touch/ack on time
        if claim.next_in is None or (skipped and not claim.urls):
            return self._poll  # nothing queued (look again for dead workers' claims), or only full scopes
        return min(max(claim.next_in, 0.01), self._poll)

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if news comes."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.news.wait(), seconds)

    async def touch(self) -> None:
        """Extend the claims held (those already claimed back are said)."""
        if not self.held:
            return
        lost = await self.frontier.touch(list(self.held))
        if lost:
            words = self._words
            self._log.warning("%d %s held here were claimed back (this %s was out of touch longer than %s, "
                              "%gs); they may be fetched twice", len(lost), words.items, words.holder,
                              words.visibility, self.frontier.visibility)

    def _unreachable(self, exc: BaseException) -> None:
        if self._down_since is None:
            self._down_since = self._now()
            self._log.warning("the shared frontier is unreachable (%s); waiting for it%s", exc,
                              self._words.down)

    def _reachable(self) -> None:
        if self._down_since is not None:
            self._log.warning("the shared frontier answers again after %.1fs", self._now() - self._down_since)
            self._down_since = None
