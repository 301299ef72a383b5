"""The staged brake as plain ASGI 3 middleware, for the owners of costly pages.

Only HTTP requests on costly paths are braked. Everything else (other paths,
allow-listed crawlers, lifespan and websocket scopes) goes to the wrapped
application untouched, without rate-limit headers: those headers describe the
quota of the costly pages, and announcing it elsewhere would make careful
crawlers slow down on pages that cost nothing.

A request on a costly path is put to :meth:`StagedBrake.decide` (or, with
``store="redis://..."``, to a :class:`SharedBrake` whose counts every server
process shares). An allowed one reaches the application, and its response gets
``RateLimit-Policy`` and ``RateLimit`` headers. A refused one never reaches the
application: the middleware answers 429 itself, with ``Retry-After`` and the
same two headers.

An allow-listed crawler is let through only once its address is confirmed
(:class:`BotVerifier`); the address is the peer's, or, from proxies the owner
trusts, the one their forwarding header names (:class:`ClientAddress`).
"""

from __future__ import annotations

import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Literal

from ._address import ClientAddress, ForwardedHeader
from ._brake import DEFAULT_STAGES, BrakeStats, Decision, Stage, StagedBrake
from ._shared import SharedBrake, is_shared_url
from ._verify import BotVerifier, Resolver

__all__ = ["DEFAULT_ALLOW", "Guard", "user_agent_class"]

_log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
KeyFunction = Callable[[Scope], str]

#: The search crawlers seed 004's site owner chose to favour.
DEFAULT_ALLOW: tuple[str, ...] = ("Googlebot", "Bingbot", "Applebot")

# A version: digits, possibly joined by dots or underscores ("5.0", "10_15_7").
_VERSION = re.compile(r"[0-9]+(?:[._][0-9]+)*", re.ASCII)
# Keys come from the client; a cap keeps one absurd header from costing memory.
_MAX_KEY = 256
_POLICY_NAME = "guard"
_BODY = "Too Many Requests: this page is rationed to protect a daily quota. Retry after {} seconds.\n"
_RATE_NAMES = frozenset({b"ratelimit", b"ratelimit-policy"})


def user_agent_class(user_agent: str) -> str:
    """Reduce a user agent to its class: the same for every version of one client.

    The text is lower-cased, every run of digits (with the dots or underscores
    between them) is removed and whitespace is collapsed, so
    ``Mozilla/5.0 (compatible; ExampleBot/2.1)`` and ``.../ExampleBot/3.0)``
    give the same key. The result is cut to 256 characters.

    Args:
        user_agent: the ``User-Agent`` header value, empty when absent.

    Returns:
        The class key.
    """
    return " ".join(_VERSION.sub("", user_agent.lower()).split())[:_MAX_KEY]


def _header(scope: Scope, name: bytes) -> str:
    """The first value of a request header, decoded as Latin-1; empty when absent."""
    for raw_name, value in scope.get("headers") or ():
        if bytes(raw_name).lower() == name:
            return bytes(value).decode("latin-1")
    return ""


def _user_agent_key(scope: Scope) -> str:
    return user_agent_class(_header(scope, b"user-agent"))


def _site_key(scope: Scope) -> str:
    return "*"


_KEYS: dict[str, KeyFunction] = {"user-agent": _user_agent_key, "site": _site_key}
# How often, at most, a store that cannot be reached is logged.
_ERROR_LOG_EVERY = 30.0


def _costly_test(costly: Callable[[Scope], bool] | str | Iterable[str] | None) -> Callable[[Scope], bool]:
    if costly is None:
        return lambda scope: True
    if callable(costly):
        return costly
    prefixes = (costly,) if isinstance(costly, str) else tuple(costly)
    if not prefixes or not all(isinstance(prefix, str) for prefix in prefixes):
        raise ValueError(f"costly must be a callable, a path prefix or a non-empty list of them, "
                         f"got {costly!r}")
    return lambda scope: str(scope.get("path", "")).startswith(prefixes)


def _int(value: float) -> int:
    return int(min(value, 1e15))


class Guard:
    """ASGI middleware that brakes costly requests as a windowed quota runs out.

    Args:
        app: the ASGI application to protect.
        quota: requests allowed per key per window on costly paths.
        window: the window length in seconds; windows start at multiples of it
            on the ``clock`` (with ``time.time`` and 86400, at 00:00 UTC).
        stages: the brake steps; see :class:`Stage`.
        costly: which requests are braked: a callable taking the ASGI scope, a
            path prefix, or a list of path prefixes. ``None`` brakes every path.
        key: whom a request is counted against: ``"user-agent"`` (the user
            agent with version numbers removed), ``"ip"`` (the client address,
            see ``trusted_proxies``), ``"site"`` (one counter for everyone), or
            a callable taking the ASGI scope and returning a string.
        allow: user-agent substrings, matched case-insensitively, whose
            requests are never braked nor counted once the client's address
            is confirmed to be that crawler's (see ``bot_domains`` and
            ``bot_ranges``); unconfirmed, they are counted like any other.
        headers: add ``RateLimit-Policy`` and ``RateLimit`` to braked
            responses; ``Retry-After`` is sent on a 429 either way.
        clock: the time source the windows are laid on; ``time.time`` by
            default, or the Redis server's clock with a shared ``store``.
        rng: the source of chance for partial stages.
        max_keys: the most keys tracked per window; see :class:`StagedBrake`.
        store: ``None`` (or ``"memory://"``) counts in this process;
            ``"redis://host:port/db"`` (also ``rediss://``, ``valkey://``)
            counts in Redis, shared by every process and machine using the
            same server, namespace (``?namespace=``) and ``name``.
        name: the shared brake's name (with ``store``).
        on_store_error: with a shared store that cannot be reached,
            ``"open"`` lets costly requests through unbraked (logged),
            ``"closed"`` answers them 503 with ``Retry-After: 30``.
        bot_domains: reverse-DNS domains per allow-listed name (lower-case
            keys); :data:`BOT_DOMAINS` by default.
        bot_ranges: IP ranges per allow-listed name, a file path or a list
            of CIDR strings (key ``"*"`` for every name); an address inside
            is confirmed without DNS.
        resolver: the DNS lookups (:class:`SystemResolver` by default).
        verify_timeout: seconds a DNS confirmation may take.
        trusted_proxies: addresses or CIDR ranges of the owner's reverse
            proxies. Only requests from these have their client address taken
            from ``forwarded_header``.
        forwarded_header: ``"x-forwarded-for"`` or ``"forwarded"``.

    Raises:
        ValueError: naming the parameter that is out of range, or an allowed
            name that could never be confirmed.
    """

    def __init__(self, app: ASGIApp, *, quota: float, window: float = 86400.0,
                 stages: Iterable[Stage] = DEFAULT_STAGES,
                 costly: Callable[[Scope], bool] | str | Iterable[str] | None = None,
                 key: Literal["user-agent", "ip", "site"] | KeyFunction = "user-agent",
                 allow: str | Iterable[str] = DEFAULT_ALLOW, headers: bool = True,
                 clock: Callable[[], float] | None = None, rng: random.Random | None = None,
                 max_keys: int = 100_000, store: str | None = None, name: str = "guard",
                 on_store_error: Literal["open", "closed"] = "open",
                 bot_domains: Mapping[str, Iterable[str]] | None = None,
                 bot_ranges: Mapping[str, str | Path | Iterable[str]] | None = None,
                 resolver: Resolver | None = None, verify_timeout: float = 2.0,
                 trusted_proxies: Iterable[str] = (),
                 forwarded_header: ForwardedHeader = "x-forwarded-for") -> None:
        self.app = app
        self.shared: SharedBrake | None = None
        if store is not None and store != "memory://":
            if not is_shared_url(store):
                raise ValueError(f"store must be None, 'memory://' or a redis://, rediss:// or "
                                 f"valkey:// URL, got {store!r}")
            self.shared = SharedBrake(store, quota, window, stages, rng, max_keys=max_keys, name=name)
            self.brake = self.shared.rule
        else:
            self.brake = StagedBrake(quota, window, stages, rng, max_keys=max_keys)
        if on_store_error not in ("open", "closed"):
            raise ValueError(f"on_store_error must be 'open' or 'closed', got {on_store_error!r}")
        self._fail_open = on_store_error == "open"
        self._last_error_log = -_ERROR_LOG_EVERY
        self._costly = _costly_test(costly)
        self.address = ClientAddress(trusted_proxies, forwarded_header)
        if callable(key):
            self._key = key
        elif key == "ip":
            self._key = self.address.of
        elif key in _KEYS:
            self._key = _KEYS[key]
        else:
            raise ValueError(f"key must be 'user-agent', 'ip', 'site' or a callable, got {key!r}")
        names = (allow,) if isinstance(allow, str) else tuple(allow)
        if not all(isinstance(name, str) and name for name in names):
            raise ValueError(f"allow must hold non-empty user-agent substrings, got {allow!r}")
        self.verifier = BotVerifier(names, domains=bot_domains, ranges=bot_ranges, resolver=resolver,
                                    timeout=verify_timeout) if names else None
        self._headers = headers
        # With a shared store and no clock given, the windows follow the Redis server's clock.
        self._clock = clock if clock is not None or self.shared is not None else time.time
        quota_text, window_text = _int(math.floor(self.brake.quota)), _int(math.ceil(self.brake.window))
        self._policy = f'"{_POLICY_NAME}";q={quota_text};w={window_text}'.encode("ascii")

    def stats(self) -> BrakeStats:
        """Report each key's count in the current window, and their sums (this process's brake).

        Raises:
            TypeError: with a shared store, whose counts are read with :meth:`astats`.
        """
        if self.shared is not None:
            raise TypeError("this guard counts in Redis: use 'await guard.astats()'")
        assert self._clock is not None
        return self.brake.stats(self._clock())

    async def astats(self) -> BrakeStats:
        """Report each key's count in the current window, from Redis with a shared store."""
        if self.shared is None:
            return self.stats()
        return await self.shared.stats(None if self._clock is None else self._clock())

    async def aclose(self) -> None:
        """Close the shared store's connections (nothing to do without one)."""
        if self.shared is not None:
            await self.shared.aclose()

    async def _favoured(self, scope: Scope) -> bool:
        """Whether the request comes from an allow-listed crawler whose address is confirmed."""
        verifier = self.verifier
        if verifier is None:
            return False
        claimed = verifier.claimed(_header(scope, b"user-agent"))
        if claimed is None:
            return False
        return await verifier.verify(claimed, self.address.of(scope))

    def _rate_headers(self, decision: Decision) -> list[tuple[bytes, bytes]]:
        if not self._headers:
            return []
        remaining, reset = _int(math.floor(decision.remaining)), _int(math.ceil(decision.reset))
        rate = f'"{_POLICY_NAME}";r={remaining};t={reset}'.encode("ascii")
        return [(b"ratelimit-policy", self._policy), (b"ratelimit", rate)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection scope."""
        if scope.get("type") != "http" or not self._costly(scope) or await self._favoured(scope):
            await self.app(scope, receive, send)
            return
        key = str(self._key(scope))[:_MAX_KEY]
        decision = await self._decide(key)
        if decision is None:  # the shared store cannot be reached
            if self._fail_open:
                await self.app(scope, receive, send)
            else:
                await self._unavailable(send)
            return
        if decision.entered:
            before = decision.used - 1.0 if decision.allowed else decision.used
            _log.info("guard: %r entered stage %d: %g of %g requests used, %g s left in the window",
                      key, decision.stage, before, self.brake.quota, decision.reset)
        if decision.allowed:
            await self._pass(scope, receive, send, self._rate_headers(decision))
        else:
            await self._refuse(send, decision)

    async def _decide(self, key: str) -> Decision | None:
        """The brake's verdict; ``None`` when the shared store failed (logged)."""
        shared, clock = self.shared, self._clock
        if shared is None:
            assert clock is not None
            return self.brake.decide(key, clock())
        try:
            return await shared.decide(key, None if clock is None else clock())
        except Exception as exc:
            now = time.monotonic()
            if now - self._last_error_log >= _ERROR_LOG_EVERY:
                self._last_error_log = now
                _log.error("guard: the shared brake's store cannot be reached (%r); costly requests are "
                           "%s until it answers", exc,
                           "let through unbraked" if self._fail_open else "answered 503")
            return None

    async def _unavailable(self, send: Send) -> None:
        body = b"Service Unavailable: the request quota cannot be checked right now.\n"
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode("ascii")), (b"retry-after", b"30")]})
        await send({"type": "http.response.body", "body": body, "more_body": False})

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

    async def _refuse(self, send: Send, decision: Decision) -> None:
        """Answer 429 on the application's behalf."""
        wait = decision.reset if decision.retry_after is None else decision.retry_after
        seconds = max(_int(math.ceil(wait)), 1)
        body = _BODY.format(seconds).encode("ascii")
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"retry-after", str(seconds).encode("ascii")),
            *self._rate_headers(decision),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
