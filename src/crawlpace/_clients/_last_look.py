"""The last look before the wire: a request admitted before its site said "wait" is not written.

A permit is granted when the throttler admits a request, but the request's
bytes leave later: the client may first have to open a connection, and on a
busy machine that takes tens or hundreds of milliseconds. If, in that gap,
another request of the same scope comes back with ``Retry-After`` (or a
RateLimit reset that holds the scope), the site has asked for quiet, and
writing the admitted request all the same would break that request while
the client already knows it: the site sees a request arrive well after it
sent the refusal.

:class:`LastLook` notes every hold the client's own answers announced, per
scope, and the client adapter asks it, at the last moment before the
request's headers are written (httpx's ``trace`` extension), whether a hold
noted after the permit was granted is still running. If one is, the adapter
raises :class:`NotSent`: the permit is given back with no outcome (it frees
its slot and teaches the scopes nothing), and the request asks the
throttler again, which makes it wait for the hold. The attempt is not
counted against the retries: nothing was sent.

A request already written when the refusal came is left alone: it is in
flight, and the site may count it; no client can call it back.

The same gap can break a ``Crawl-delay``: the throttler spaces its
admissions, but if one request's write lagged (a new connection) and the
next one's did not, the two reach the site closer than the delay. So for a
scope paced by robots.txt (:meth:`LastLook.pace`, told by the robots.txt
guard), the last look also waits, if need be, until the delay has passed
since the scope's previous write. Such a scope has one slot, so the wait
holds back nothing else.

Timeline (one scope, ``Retry-After: 5`` on the first answer)::

    t=0.00  A and B admitted; A is written on a warm connection
    t=0.02  A's answer: 429, Retry-After 5 (noted: held until 5.02)
    t=0.20  B's new connection is up; last look: held, not written
    t=5.02  B admitted again and written
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from ..stores.base import Outcome

__all__ = ["WRITING", "Granted", "LastLook", "NotSent", "Writing", "look_before_writing", "written"]

logger = logging.getLogger(__name__)


class Granted(Protocol):
    """What the last look reads of a permit (a :class:`~crawlpace.Permit` or a ``SyncPermit``)."""

    @property
    def scopes(self) -> tuple[str, ...]: ...

    @property
    def granted_at(self) -> float: ...

    @property
    def outcome(self) -> Outcome | None: ...


class NotSent(Exception):
    """Raised by a client adapter's hook to stop a write: a hold began after the permit was granted.

    Attributes:
        scope: the scope whose hold stopped the request.
        until: the clock reading at which that hold ends.
    """

    def __init__(self, scope: str, until: float) -> None:
        super().__init__(f"scope {scope} is held until {until:.3f}: the request was not written")
        self.scope = scope
        self.until = until


class LastLook:
    """The holds a client's answers announced, per scope, for a check just before each write.

    The blocking clients look from their callers' threads while answers are
    noted from others, so every change is made under a lock (uncontended, it
    costs well under a microsecond).
    """

    __slots__ = ("_held", "_lock", "_spacing", "_written")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # scope -> (when the hold was heard, when it ends)
        self._held: dict[str, tuple[float, float]] = {}
        # scope -> the robots.txt Crawl-delay, and the time of its last write
        self._spacing: dict[str, float] = {}
        self._written: dict[str, float] = {}

    def pace(self, scope: str, delay: float | None) -> None:
        """Keep ``delay`` seconds between the writes of ``scope`` (a Crawl-delay); ``None`` stops it."""
        if delay is None or not delay > 0.0:
            self._spacing.pop(scope, None)
            self._written.pop(scope, None)
        else:
            self._spacing[scope] = delay

    def wait(self, permit: Granted, now: float) -> float:
        """Seconds to wait before writing the permit's request so that its Crawl-delays hold (0.0: none)."""
        wait = 0.0
        for scope in permit.scopes:
            spacing = self._spacing.get(scope)
            last = self._written.get(scope)
            if spacing is not None and last is not None:
                wait = max(wait, last + spacing - now)
        return wait

    def paced(self, permit: Granted) -> bool:
        """Whether a scope of the permit is paced by a Crawl-delay (one slot: no other request of it
        can be in flight when a refusal comes, so its hold needs no look at a shared store)."""
        return any(scope in self._spacing for scope in permit.scopes)

    def wrote(self, permit: Granted, now: float) -> None:
        """Record that the permit's request is being written at ``now``."""
        with self._lock:
            for scope in permit.scopes:
                if scope in self._spacing:
                    self._written[scope] = max(now, self._written.get(scope, now))

    def note(self, permit: Granted, now: float) -> None:
        """Remember the holds of a released permit's outcome (``Retry-After``, a spent budget)."""
        outcome = permit.outcome
        if outcome is None:
            return
        with self._lock:
            for scope, signal in zip(permit.scopes, outcome.feedback, strict=False):
                hold = signal.hold
                if hold is not None and hold > 0.0:
                    _, until = self._held.get(scope, (now, now))
                    self._held[scope] = (now, max(until, now + hold))

    def hearing(self, now: Callable[[], float]) -> Callable[[Granted], None]:
        """What a permit's release calls once its outcome is known (``Permit.release(heard=)``): note
        the answer's hold at once, on the clock ``now``, before a shared store is told.

        A shared store's release takes a round trip or more (the hold's own call, the counts', the
        worker's earlier releases: 30-300 ms in a loaded fleet); noted only after it, the caller's
        other requests of the scope, admitted before the hold reached the store, were written on the
        store's word alone (traced, bench/results/retry4.md). The note after the release stays: a
        request the store admitted before the hold landed there is stopped by it too.
        """
        def heard(permit: Granted) -> None:
            self.note(permit, now())
        return heard

    def check(self, permit: Granted, now: float) -> None:
        """Raise :class:`NotSent` when one of the permit's scopes was held after it was granted.

        Raises:
            NotSent: naming the scope and the end of its hold.
        """
        if not self._held:
            return
        for scope in permit.scopes:
            entry = self._held.get(scope)
            if entry is None:
                continue
            heard, until = entry
            if until <= now:
                with self._lock:  # over: nothing more to look at (unless a new hold came meanwhile)
                    if self._held.get(scope) == entry:
                        del self._held[scope]
            elif heard >= permit.granted_at:
                logger.debug("scope %s: held until %.3f since after this request was admitted; "
                             "not writing it", scope, until)
                raise NotSent(scope, until)

    def __len__(self) -> int:
        return len(self._held)

    def __repr__(self) -> str:
        return f"<LastLook held={sorted(self._held)} paced={sorted(self._spacing)}>"


@dataclass(slots=True)
class Writing:
    """A request being sent under ``permit``, looked at by ``look`` on the clock ``now``."""

    permit: Granted
    look: LastLook
    now: Callable[[], float]
    #: A shared store's holds (:meth:`~crawlpace.stores.base.HeldStore.held_for`), for the crawl's
    #: last look: another worker's refusal reaches this one only through the store.
    #: Called with the scopes, the lease id and whether to wait for siblings still out.
    held_for: Callable[[tuple[str, ...], str, bool], Awaitable[float]] | None = None
    #: A shared store's time before which the request may not be written (a Crawl-delay after
    #: another worker's latest write: ``HeldStore.write_after``), and the note that it is being
    #: written (``HeldStore.wrote``).
    write_after: Callable[[tuple[str, ...]], float] | None = None
    wrote: Callable[[tuple[str, ...]], None] | None = None
    #: Whether every write of the scopes must look at the shared store, even one that follows its
    #: admission at once (``HeldStore.holding``: a scope that has held notes each write), and the
    #: store's name for the request's admission, under which its write is noted.
    holding: Callable[[tuple[str, ...]], bool] | None = None
    lease_id: str = ""


#: The request this task (or thread) is sending now; set by the retry loop around each send
#: (:mod:`crawlpace._clients._retry`), read by the adapter's hook just before the headers are written.
WRITING: ContextVar[Writing | None] = ContextVar("crawlpace_writing", default=None)


def look_before_writing() -> float:
    """The last look for the request this task is sending: seconds to wait for a Crawl-delay (often 0.0).

    Raises:
        NotSent: a hold heard after the permit was granted is still running.
    """
    writing = WRITING.get()
    if writing is None:  # not sent through a client's retry loop (a robots.txt GET, say)
        return 0.0
    now = writing.now()
    writing.look.check(writing.permit, now)
    return writing.look.wait(writing.permit, now)


def written() -> None:
    """Record that the request this task is sending is being written now (after any wait)."""
    writing = WRITING.get()
    if writing is not None:
        writing.look.wrote(writing.permit, writing.now())
