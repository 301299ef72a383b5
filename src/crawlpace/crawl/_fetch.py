"""The crawl's HTTP layer: one GET in, one :class:`Page` out, on aiohttp's per-host pools.

The crawl job does not talk to an HTTP library; it asks a :class:`Fetcher`
for a URL and gets back a :class:`Page` (status, headers, body up to a size
limit, latency), or the error that stopped it. Everything about the library
stays in this module: its session and connection pools, its timeouts, and the
translation of its exceptions into the builtin ones the throttler's
``BACKOFF_EXCEPTIONS`` name by default.

Why aiohttp. A broad crawl keeps connections to thousands of hosts. aiohttp's
``TCPConnector`` files idle connections under their (host, port, TLS) key, so
finding one for a request, and putting it back, costs the same with 10 hosts
as with 10,000. httpx 0.28 (over httpcore 1.0) walks its whole pool on every
request and every response close; measured on ``bench/broad.py`` that walk
was most of the crawl's CPU time and grew with the number of hosts (see
docs/broad-crawls.md). ``crawlpace.http`` keeps httpx for the library users
who bring their own httpx client.

The module never decides *when* a request goes: the throttler did that
before :meth:`Fetcher.get` is called. So the connector has no per-host cap
of its own; its total cap only guards against a leak. One exception, the
last look (:mod:`crawlpace._clients._last_look`): a scope paced by a
robots.txt ``Crawl-delay`` is spaced between the *writes* of its requests,
not only between their admissions, because on a busy event loop (or on a
new connection) an admitted request can reach the wire a good while after
its permit, and the next, punctual one would then land closer than the delay. In a fleet,
the next one may be another worker's: each write is noted at the shared store, the next
admission's reply carries the time, and the next write keeps the delay after it.
aiohttp's ``on_request_headers_sent`` trace runs just before the request's
bytes are written (the write follows in the same step of the loop), so the
fetcher waits there if need be and notes the write.

The same look stops a write that a hold forbids: if another request of the
scope came back with ``Retry-After`` after this one was admitted (and before
its bytes left: a new connection, a busy loop), the fetcher raises
:class:`~crawlpace._clients._last_look.NotSent` there and the job queues the
request again, unsent, for the throttler to admit after the hold. In a fleet,
a hold another worker heard is asked of the shared store as well.
"""

from __future__ import annotations

import asyncio
import logging
import os
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import aiohttp

from .._clients._last_look import WRITING
from ._stalls import STALL_FLOOR, LoopStalls

__all__ = ["DEFAULT_DEADLINE", "AiohttpFetcher", "FetchError", "Fetcher", "Page"]

_log = logging.getLogger(__name__)

#: Seconds a whole request may take by default, headers and body (``--deadline``). Generous: a
#: body at the 10 MiB cap still arrives at 35 KiB/s; what it stops is a server that trickles a
#: byte a second within the per-read timeout and would otherwise hold its slot for ever.
DEFAULT_DEADLINE = 300.0
#: A shared store's request written this soon after its grant goes without a look at the store's
#: holds (a round trip): a refusal's hold can hardly have landed in between.
LOOK_AFTER = 0.01
#: Turns of the loop a write gives the answers already received before its last look, when the
#: loop is just out of a stall: an answer's bytes read in one turn reach its release in the next.
CATCH_UP_TURNS = 3
#: Looks again at the store's holds after waiting one out, at most: a refusal drawn meanwhile by a
#: request already on its way may have held the scope longer (each look is a round trip). A write
#: waits for its siblings still out after RELOOKS + 1 looks at most; its RELOOKS looks after that
#: wait out holds only (a hold found then is a sibling's refusal that landed: each is waited out).
RELOOKS = 4

#: Seconds the request :meth:`AiohttpFetcher.get` is sending waited in its last look, and of them
#: the seconds spent asking a shared store: left out of its latency, which is the server's and the
#: network's, not the Crawl-delay's or the store's.
_HELD: ContextVar[list[float] | None] = ContextVar("crawlpace_crawl_held", default=None)

#: Bytes asked of the stream per read when a body has no usable Content-Length.
_CHUNK = 64 * 1024


class FetchError(ConnectionError):
    """The connection failed or broke, as the HTTP library reported it with its own class.

    aiohttp raises timeouts as subclasses of the builtin ``TimeoutError``, but
    a refused connection as a plain ``OSError`` subclass, and a server that
    hangs up or sends a garbled answer as ``ServerDisconnectedError``,
    ``ClientPayloadError`` and the like, which are not ``ConnectionError`` classes.
    They are turned into this ``ConnectionError`` so that the default
    ``BACKOFF_EXCEPTIONS`` treat them as the transient failures they are; the
    original stays as ``__cause__``.
    """


@dataclass(slots=True)
class Page:
    """What one GET brought back.

    A page with an :attr:`error` may still carry a :attr:`status` and a
    :attr:`latency`: the headers came, then reading the body failed.

    Attributes:
        status: the HTTP status, None when no answer came.
        headers: the response headers, None when no answer came.
        body: the body, at most the ``limit`` given to :meth:`Fetcher.get`.
        latency: seconds from the request being handed to the library to the
            response headers, less the last look's wait before the write (see
            :attr:`asked`), None when no answer came.
        error: what stopped the fetch, None when nothing did.
        stalled: seconds of that latency during which this process's event loop was
            known to run late (``crawl/_stalls.py``): the crawler's own share, not the server's.
        asked: seconds the last look spent asking a shared store for its holds before the
            write (a fleet's write that lags its admission): not in :attr:`latency`, but part
            of the delay from the admission to the write (``ScopeFeedback.lag``).
    """

    status: int | None
    headers: Mapping[str, str] | None
    body: bytes
    latency: float | None
    error: BaseException | None = None
    stalled: float = 0.0
    asked: float = 0.0

    @property
    def status_code(self) -> int | None:
        """The status, under the name the throttler's feedback reads."""
        return self.status

    @property
    def location(self) -> str | None:
        """The ``Location`` header, for redirects."""
        return None if self.headers is None else self.headers.get("Location")


class Fetcher(Protocol):
    """What the crawl job needs of an HTTP layer."""

    async def get(self, url: str, limit: int) -> Page:
        """GET ``url`` without following redirects; read at most ``limit`` bytes of the body.

        Never raises for a network or protocol failure: the page carries it.
        """
        ...

    async def aclose(self) -> None:
        """Close every connection; the fetcher is not used afterwards."""
        ...


class AiohttpFetcher:
    """A :class:`Fetcher` on one ``aiohttp.ClientSession``.

    Create it inside a running event loop.

    Args:
        user_agent: the ``User-Agent`` header of every request.
        timeout: seconds allowed to connect, and then for each read.
        max_connections: connections in use at once, at most; a safety cap
            (the throttler admits fewer).
        trust_env: take proxies and certificates from the environment.
        clock: the time source of :attr:`Page.latency`.
        deadline: seconds the whole request may take, headers and body: a
            server that trickles a byte at a time within ``timeout`` cannot
            hold a slot past it. The page then carries a ``TimeoutError``,
            which the throttler's backoff counts as any timeout.
        sleep: how to wait, on the same clock, before a write a Crawl-delay
            holds back (the last look; the throttler's ``clock.sleep``).
    """

    def __init__(self, *, user_agent: str, timeout: float, max_connections: int, trust_env: bool,
                 clock: Callable[[], float], deadline: float = DEFAULT_DEADLINE,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._clock = clock
        self._sleep = sleep
        self._deadline = deadline
        loop = asyncio.get_running_loop()
        self._loop_time = loop.time
        self._stalls = LoopStalls(loop.time)
        self._stalls.start()
        #: Requests of each scope between get() and their answer (this one included), for the last look.
        self._flying: dict[str, int] = {}
        # With trust_env, aiohttp looks up proxies and ~/.netrc again in a worker thread
        # for every request; when the environment holds neither, that is pure cost.
        trust_env = trust_env and _environment_matters()
        # No per-host cap: the throttler enforces each scope's concurrency.
        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, ttl_dns_cache=300)
        last_look = aiohttp.TraceConfig()
        last_look.on_request_headers_sent.append(self._last_look)
        self._session = aiohttp.ClientSession(
            connector=connector, headers={"User-Agent": user_agent}, trust_env=trust_env,
            trace_configs=[last_look],
            timeout=aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout),
            auto_decompress=True)

    async def _last_look(self, session: aiohttp.ClientSession, context: object,
                         params: aiohttp.TraceRequestHeadersSentParams) -> None:
        """Just before the headers are written: stop a write a hold heard since its admission
        forbids, and wait out the scope's Crawl-delay since its last write.

        The crawl job puts the request's permit in ``WRITING`` around :meth:`get`;
        a robots.txt fetch, or a fetcher used alone, has none and is not held.
        """
        writing = WRITING.get()
        if writing is None:
            return
        look, permit = writing.look, writing.permit
        entered = writing.now()
        # A hold this crawl heard after the permit was granted (another request's Retry-After):
        # raises NotSent, and the job queues the request again (a dict lookup when none is noted).
        look.check(permit, entered)
        flying = self._flying
        if (self._stalls.late(self._loop_time()) >= STALL_FLOOR
                and any(flying.get(scope, 0) > 1 for scope in permit.scopes)):
            # The loop is just out of a stall (a process starved of CPU) and another request of the
            # scope is out: answers that came in meanwhile may still wait to be read, a sibling's
            # 429 among them, while this write,
            # admitted on waking, would go first (traced: writes 70-850 ms after a refusal the
            # crawl had received but not yet read). A few turns let them be read, then look again.
            for _ in range(CATCH_UP_TURNS):
                await asyncio.sleep(0)
            look.check(permit, writing.now())
        wait = look.wait(permit, entered)
        if writing.write_after is not None:
            # A fleet: another worker's write of the scope may have lagged its admission more than
            # this one; its time came with this admission (no round trip). The store knows which
            # scopes a Crawl-delay paces (this worker's look may not know yet: it hears of a delay
            # only once the store has it; a page admitted before went unpaced and unnoted, and the
            # next worker's write came 0.3-0.7 s after it on a 1.27 s delay).
            wait = max(wait, writing.write_after(permit.scopes) - entered)
        if wait > 0.0:
            _log.debug("%s: %.3f s more before writing it, for the Crawl-delay", params.url, wait)
        held_for = writing.held_for
        lagged = writing.now() - permit.granted_at >= LOOK_AFTER
        if (held_for is not None and not look.paced(permit)
                and (lagged or (writing.holding is not None and writing.holding(permit.scopes)))):
            # A fleet: another worker's Retry-After may have reached the store since this was
            # admitted (writes lagging their grants by 0.1-0.25 s on a loaded machine broke them).
            # Not for a Crawl-delay scope: its one slot leaves nothing in flight to hold, and
            # the round trip would lag this write behind its grant more than the next one's.
            # A scope that has held asks at every write: a sibling's refusal may be on its way to
            # another worker's loop, and the store holds this write until that sibling is answered
            # (the look notes the write as it lets it go; the reply says when to look again).
            hold = await self._ask(held_for, permit.scopes, writing.lease_id, True, writing.now, entered)
            # The look's round trip (and each wait below) leaves time for this worker's own answers
            # to be read: a sibling's refusal heard meanwhile stops the write here, whatever the
            # store says (its hold may still be on its way there).
            look.check(permit, writing.now())
            looks = 1
            while hold > wait:
                _log.debug("%s: %.3f s more before writing it, held by another worker's refusal",
                           params.url, hold)
                await self._wait(writing.now, hold)
                look.check(permit, writing.now())
                wait = 0.0
                if looks > 2 * RELOOKS:
                    break
                # While this one waited, a request already on its way may have drawn a refusal whose
                # hold ends later (a site's quiet time grows with every refusal it gives): look again.
                # Past RELOOKS + 1 looks the write no longer waits for siblings still out, but it still
                # looks before it goes: the sibling it waited for may be the refusal whose hold
                # landed while it waited (traced: writes that went on their fifth wait without a look,
                # 20-50 ms after that hold reached the store; bench/results/retry4.md).
                looks += 1
                hold = await self._ask(held_for, permit.scopes, writing.lease_id, looks <= RELOOKS + 1,
                                       writing.now, writing.now())
                look.check(permit, writing.now())
        if wait > 0.0:
            await self._wait(writing.now, wait)
            look.check(permit, writing.now())
        look.wrote(permit, writing.now())
        if writing.wrote is not None:
            # A fleet: the next write of the scope, by any worker, keeps the delay after this one
            # (the store notes the writes of the scopes it knows a Crawl-delay of, and no other).
            writing.wrote(permit.scopes)

    @staticmethod
    async def _ask(held_for: Callable[[tuple[str, ...], str, bool], Awaitable[float]],
                   scopes: tuple[str, ...], lease_id: str, siblings: bool, now: Callable[[], float],
                   entered: float) -> float:
        """The store's hold on ``scopes``, in seconds (and, with ``siblings``, a wait for a sibling
        still out); the round trip is noted as the crawler's."""
        hold = await held_for(scopes, lease_id, siblings)
        # The round trip is the crawler's (a loaded machine's store and loop: 50-150 ms against
        # sites answering in 2 ms), not the site's: out of the latency, into the lag.
        asked = now() - entered
        held = _HELD.get()
        if held is not None:
            held[0] += asked
            held[1] += asked
        return hold

    async def _wait(self, now: Callable[[], float], seconds: float) -> None:
        """Hold the write back ``seconds``, out of the request's latency."""
        before = now()
        await self._sleep(seconds)
        held = _HELD.get()
        if held is not None:
            held[0] += now() - before

    async def get(self, url: str, limit: int) -> Page:
        started, loop_started = self._clock(), self._loop_time()
        got: list[tuple[int, Mapping[str, str], float]] = []  # the status line, once it came
        held = [0.0, 0.0]  # seconds the last look held the write back; of them, asking the store
        token = _HELD.set(held)
        writing = WRITING.get()
        scopes = () if writing is None else writing.permit.scopes
        flying = self._flying
        for scope in scopes:
            flying[scope] = flying.get(scope, 0) + 1
        try:
            async with asyncio.timeout(self._deadline):
                page = await self._get(url, limit, started, got, held)
        except TimeoutError:  # ours: aiohttp's own timeouts come back as pages
            error = _past_deadline(url, self._deadline)
            if not got:
                return Page(None, None, b"", None, error)
            status, headers, latency = got[0]
            page = Page(status, headers, b"", latency, error)
        finally:
            _HELD.reset(token)
            for scope in scopes:
                left = flying[scope] - 1
                if left:
                    flying[scope] = left
                else:
                    del flying[scope]
        page.asked = held[1]
        if page.latency is not None:
            sent = loop_started + held[0]
            page.stalled = self._stalls.within(sent, sent + page.latency)
        return page

    async def _get(self, url: str, limit: int, started: float,
                   got: list[tuple[int, Mapping[str, str], float]], held: list[float]) -> Page:
        try:
            response = await self._session.get(url, allow_redirects=False)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return Page(None, None, b"", None, _translate(exc))
        latency = self._clock() - started - held[0]
        got.append((response.status, response.headers, latency))
        try:
            body = await _read(response, limit)
        except (aiohttp.ClientError, OSError) as exc:
            return Page(response.status, response.headers, b"", latency, _translate(exc))
        finally:
            response.release()
        if _log.isEnabledFor(logging.INFO):  # -v: one line per request, as httpx logged them
            _log.info("GET %s -> %d (%d bytes, %.3f s)", url, response.status, len(body), latency)
        return Page(response.status, response.headers, body, latency)

    async def aclose(self) -> None:
        await self._stalls.stop()
        await self._session.close()


async def _read(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """At most ``limit`` bytes of the body; the rest is left unread (the connection is then dropped)."""
    length = response.content_length
    # The fast path only when the length is the body's: a compressed body may unpack to far more.
    if length is not None and length <= limit and "Content-Encoding" not in response.headers:
        return (await response.read())[:limit]
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await response.content.read(min(_CHUNK, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _environment_matters() -> bool:
    """Whether the environment configures a proxy or a netrc file that aiohttp would use."""
    if urllib.request.getproxies():
        return True
    netrc = os.environ.get("NETRC")
    if netrc:
        return Path(netrc).is_file()
    return (Path.home() / ".netrc").is_file()


def _translate(exc: BaseException) -> BaseException:
    """The exception the throttler should see: a timeout, a ``ConnectionError``, or a ``ValueError``.

    Timeouts stay as they are (aiohttp's derive from ``TimeoutError``), and so
    do unusable URLs (``ValueError``: the fault is the URL's, not the site's).
    Everything else that broke the exchange (a refused connection, which
    aiohttp reports as a plain ``OSError``; a hang-up; a garbled answer)
    becomes a :class:`FetchError`.
    """
    if isinstance(exc, TimeoutError | ConnectionError | ValueError):
        return exc
    wrapped = FetchError(f"{type(exc).__name__}: {exc}")
    wrapped.__cause__ = exc
    return wrapped


def _past_deadline(url: str, deadline: float) -> TimeoutError:
    """The error of a request that outlived its deadline: a timeout, for the backoff."""
    _log.info("GET %s: no whole answer within the %gs deadline; counted as a timeout", url, deadline)
    return TimeoutError(f"the whole request took more than the {deadline:g}s deadline (--deadline)")
