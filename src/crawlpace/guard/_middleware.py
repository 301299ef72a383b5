"""The staged brake as plain ASGI 3 middleware, for the owners of costly pages.

Only HTTP requests on costly paths are braked. Everything else (other paths,
``/robots.txt``, allow-listed crawlers, websocket scopes) goes to the wrapped
application untouched, without rate-limit headers: those headers describe the
quota of the costly pages, and announcing it elsewhere would make careful
crawlers slow down on pages that cost nothing. The decisions themselves are
:class:`~crawlpace.guard._core.GuardCore`'s, shared with the WSGI middleware.

At the ASGI lifespan start-up the guard reaches its shared store, if it has
one: a wrong host, port or password stops the server with a clear message
instead of being found at the first request.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Literal

from .._redact import redact
from ._address import ForwardedHeader
from ._brake import DEFAULT_STAGES, BrakeStats, Stage
from ._core import DEFAULT_ALLOW, GuardCore, KeyFunction, user_agent_class
from ._robots_txt import RobotsTxt
from ._verify import Resolver

__all__ = ["DEFAULT_ALLOW", "Guard", "user_agent_class"]

_log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
_RATE_NAMES = frozenset({b"ratelimit", b"ratelimit-policy"})


class Guard:
    """ASGI middleware that brakes costly requests as a windowed quota runs out.

    Args:
        app: the ASGI application to protect.
        quota: requests allowed per window on costly paths, for every client
            together (the site's quota); with groups, a number each group
            gets, or a mapping of group name to quota.
        window: the window length in seconds; windows start at multiples of it
            on the ``clock`` (with ``time.time`` and 86400, at 00:00 UTC).
        stages: the brake steps; see :class:`Stage`.
        costly: which requests are braked: a callable taking the ASGI scope, a
            path prefix, or a list of path prefixes; ``None`` brakes every
            path but ``/robots.txt``. A mapping of group names to those gives
            each group its own quota, counted apart.
        key: how clients are told apart, for their ``share`` and for the
            per-client counts: ``"user-agent"`` (the user agent with version
            numbers removed), ``"ip"`` (the client address, see
            ``trusted_proxies``), ``"network"`` (its /24 or /48), ``"site"``
            (no distinction), or a callable taking the ASGI scope.
        share: the most of the quota one client (one key) may use per window,
            in ``(0, 1]``; 1 by default. Always a limit inside the quota.
        allow: user-agent substrings, matched case-insensitively, whose
            requests are never braked nor counted once the client's address
            is confirmed to be that crawler's.
        headers: add ``RateLimit-Policy`` and ``RateLimit`` to braked
            responses; ``Retry-After`` is sent on a 429 either way.
        clock: the time source the windows are laid on; ``time.time`` by
            default, or the Redis server's clock with a shared ``store``.
        rng: the source of chance for partial stages.
        max_keys: the most keys tracked per window.
        store: ``None`` (or ``"memory://"``) counts in this process;
            ``"redis://host:port/db"`` (also ``rediss://``, ``valkey://``)
            counts in Redis, shared by every process. Checked when the guard
            is built, reached at the lifespan start-up.
        name: the shared brake's name (with ``store``).
        on_store_error: while the shared store cannot be reached: ``"local"``
            (the default) counts in each process on its part of what is left;
            ``"open"`` lets costly requests through, ``"closed"`` answers 503.
        workers: the server processes sharing the quota (for the local count);
            ``WEB_CONCURRENCY`` when set, else 4.
        bot_domains: reverse-DNS domains per allow-listed name.
        bot_ranges: IP ranges per allow-listed name (key ``"*"`` for every
            name): a file path or a list of CIDR strings. A name with ranges is
            confirmed by them alone (no DNS).
        resolver: the DNS lookups (:class:`SystemResolver` by default).
        verify_timeout: seconds a DNS confirmation may take.
        trusted_proxies: addresses or CIDR ranges of the owner's reverse proxies.
        forwarded_header: ``"x-forwarded-for"`` or ``"forwarded"``.
        metrics: ``True`` for Prometheus metrics on prometheus-client's default
            registry, or a ``CollectorRegistry``; ``None`` for none.
        robots: a :class:`RobotsTxt` to serve ``/robots.txt`` and watch who
            keeps to its ``Crawl-delay``.

    Raises:
        ValueError: naming the parameter that is out of range (a
            :class:`~crawlpace.ConfigError` for the store URL).
    """

    def __init__(self, app: ASGIApp, *, quota: float | Mapping[str, float], window: float = 86400.0,
                 stages: Iterable[Stage] = DEFAULT_STAGES,
                 costly: Callable[[Scope], bool] | str | Iterable[str] | Mapping[str, Any] | None = None,
                 key: Literal["user-agent", "ip", "network", "site"] | KeyFunction = "user-agent",
                 share: float = 1.0, allow: str | Iterable[str] = DEFAULT_ALLOW, headers: bool = True,
                 clock: Callable[[], float] | None = None, rng: random.Random | None = None,
                 max_keys: int = 100_000, store: str | None = None, name: str = "guard",
                 on_store_error: Literal["local", "open", "closed"] = "local", workers: int | None = None,
                 bot_domains: Mapping[str, Iterable[str]] | None = None,
                 bot_ranges: Mapping[str, str | Path | Iterable[str]] | None = None,
                 resolver: Resolver | None = None, verify_timeout: float = 2.0,
                 trusted_proxies: Iterable[str] = (),
                 forwarded_header: ForwardedHeader = "x-forwarded-for", metrics: Any = None,
                 robots: RobotsTxt | None = None) -> None:
        self.app = app
        self.core = GuardCore(
            quota=quota, window=window, stages=stages, costly=costly, key=key, share=share, allow=allow,
            headers=headers, clock=clock, rng=rng, max_keys=max_keys, store=store, name=name,
            on_store_error=on_store_error, workers=workers, bot_domains=bot_domains, bot_ranges=bot_ranges,
            resolver=resolver, verify_timeout=verify_timeout, trusted_proxies=trusted_proxies,
            forwarded_header=forwarded_header, metrics=metrics, robots=robots)
        self.brake = self.core.brakes[next(iter(self.core.brakes))]
        self.verifier = self.core.verifier
        self.address = self.core.address

    @property
    def shared(self) -> Any:
        """The first group's :class:`SharedBrake`, or None when counting in memory."""
        resilient = next(iter(self.core.shared.values()), None)
        return None if resilient is None else resilient.shared

    def stats(self, group: str | None = None) -> BrakeStats:
        """The counts of the current window (a group's; the first one by default), counted in this process.

        Raises:
            TypeError: with a shared store, whose counts are read with :meth:`astats`.
        """
        if self.core.shared:
            raise TypeError("this guard counts in Redis: use 'await guard.astats()'")
        brake = self.core.brakes[group or next(iter(self.core.brakes))]
        return brake.stats(self.core.local_now())

    async def astats(self, group: str | None = None) -> BrakeStats:
        """The counts of the current window, from Redis with a shared store."""
        found = await self.core.group_stats()
        return found[group or next(iter(found))]

    async def status(self) -> dict[str, Any]:
        """The JSON-ready report that :meth:`status_app` serves."""
        return await self.core.status()

    async def status_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An ASGI app answering the guard's status as JSON; mount it where only you can reach it."""
        if scope.get("type") != "http":
            return
        body = json.dumps(await self.core.status(), sort_keys=True).encode("utf-8")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode("ascii")),
                                (b"cache-control", b"no-store")]})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def astart(self) -> None:
        """Reach the shared store now (the lifespan start-up does it for you)."""
        await self.core.start()

    async def aclose(self) -> None:
        """Close the shared store's connections (nothing to do without one)."""
        await self.core.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection scope."""
        kind = scope.get("type")
        if kind == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if kind != "http":
            await self.app(scope, receive, send)
            return
        verdict = await self.core.verdict(scope)
        if verdict.status == 0:
            await self._pass(scope, receive, send, verdict.headers)
            return
        await send({"type": "http.response.start", "status": verdict.status, "headers": verdict.headers})
        await send({"type": "http.response.body", "body": verdict.body, "more_body": False})

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Reach the store before the application starts; close it after the application stopped."""
        first = await receive()
        if first.get("type") == "lifespan.startup":
            try:
                await self.core.start()
            except Exception as exc:  # the store's failure, translated: the server stops here
                message = f"crawlpace guard: {redact(str(exc))}"
                _log.error("%s", message)
                await send({"type": "lifespan.startup.failed", "message": message})
                return
        handed = False

        async def again() -> Message:
            nonlocal handed
            if not handed:
                handed = True
                return first
            return await receive()

        async def closing(message: Message) -> None:
            if message.get("type") == "lifespan.shutdown.complete":
                await self.core.aclose()
            await send(message)

        await self.app(scope, again, closing)

    async def _pass(self, scope: Scope, receive: Receive, send: Send,
                    extra: list[tuple[bytes, bytes]]) -> None:
        """Run the application, adding ``extra`` to its response head."""
        if not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message.get("type") == "http.response.start":
                headers = list(message.get("headers") or ())
                # An application that reports a rate limit of its own keeps the last word.
                if not any(bytes(name).lower() in _RATE_NAMES for name, _ in headers):
                    headers.extend(extra)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)

