"""The staged brake with its counts in Redis, so many server processes share one quota.

Behind ``uvicorn --workers 4`` (or several machines) each process has its own
memory: a per-process brake would let every process spend the whole daily
quota. :class:`SharedBrake` keeps the counts in Redis or Valkey. The rule
itself (which stage is in force, which stages refuse, how long a refused
client should wait, the pace it is told) stays in
:class:`~crawlpace.guard.StagedBrake`; a Lua script (``guard/lua/brake.lua``)
only counts atomically, so two processes can never both take the last unit of
a quota.

Windows are laid on the Redis server's clock (``TIME``) unless a clock is
given, so machines whose clocks disagree still agree on when the day ends.

While Redis cannot be reached, :class:`ResilientBrake` counts in the process:
each of ``workers`` processes takes its part of what was left of the quota
(and of its stages), so together they spend no more than the shared count
allowed; what they let through is added to the shared count once Redis
answers again. Redis is asked again after a growing pause (1 s, doubling up to
30 s), and each call has a short time limit, so a frozen server costs a
request at most that limit, not the socket's timeout.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._redact import redact
from ..stores._check import reach
from ..stores.base import Store
from ..stores.redis import _keys
from ..stores.redis.connection import RedisConnection, Retry, cluster_flag, load_scripts, parse_url
from ._brake import (
    DEFAULT_STAGES,
    OVERFLOW_KEY,
    TOLERANCE,
    BrakeStats,
    Decision,
    KeyStats,
    Stage,
    StagedBrake,
)
from ._store_url import check_store

__all__ = ["DECIDE_TIMEOUT", "SOCKET_TIMEOUT", "ResilientBrake", "SharedBrake", "is_shared_url"]

_log = logging.getLogger(__name__)

_SCRIPTS = load_scripts("crawlpace.guard", ("brake", "pace", "crawler"), clocked={"brake", "crawler"})
_SCHEMES = frozenset({"redis", "rediss", "valkey", "valkeys", "unix"})
#: Seconds a connection to Redis may stay silent before the guard calls it broken (unless the URL
#: sets socket_timeout / socket_connect_timeout): a web request must not wait the crawler's 5 s.
SOCKET_TIMEOUT = 1.0
#: Seconds one decision may wait for Redis before the process counts on its own for a while.
DECIDE_TIMEOUT = 0.25
#: Seconds Redis is given at start-up (the ASGI lifespan, or the first request without one).
START_TIMEOUT = 5.0


def is_shared_url(url: str) -> bool:
    """Whether ``url`` names a Redis or Valkey server (``redis://``, ``rediss://``, ``valkey://``...)."""
    return urlsplit(url).scheme in _SCHEMES


def _split(url: str) -> tuple[str, str]:
    """The URL for redis-py (short socket timeouts added) and the namespace (``crawlpace`` by default)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    namespace = next((value for name, value in query if name == "namespace"), "") or "crawlpace"
    theirs = [(name, value) for name, value in query if name != "namespace"]
    have = {name for name, _ in theirs}
    theirs += [(name, f"{SOCKET_TIMEOUT:g}") for name in ("socket_timeout", "socket_connect_timeout")
               if name not in have]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(theirs), parts.fragment)), namespace


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _float(value: Any) -> float | None:
    text = _text(value)
    return float(text) if text else None


class SharedBrake:
    """A staged brake on a windowed quota, counted in Redis.

    Args:
        url: the server, e.g. ``"redis://127.0.0.1:6379/0"``; ``?namespace=``
            keeps several sites apart on one server. Checked at once by the
            crawler's rules (see :func:`~crawlpace.guard._store_url.check_store`).
        quota: requests allowed per window, across every process.
        window: the window length in seconds.
        stages: the brake steps; see :class:`~crawlpace.guard.Stage`.
        rng: the source of chance for partial stages.
        max_keys: the most keys counted per window; later new keys share
            one counter (see :class:`~crawlpace.guard.StagedBrake`).
        name: the brake's name: brakes with the same URL, namespace and
            name share their counts.
        connection: a connection to share (a shared store's, say: see
            :class:`~crawlpace.stores.redis.connection.RedisConnection`); its
            owner closes it. ``None``: the brake opens one of its own from
            ``url`` and closes it in :meth:`aclose`.
        share: the most of the quota one key may use.

    Raises:
        ConfigError: (a ValueError) for a URL the crawler's rules refuse, or
            an option the guard does not read.
        ValueError: naming the parameter that is out of range.
        ImportError: when redis-py is not installed (``pip install crawlpace[redis]``).
    """

    def __init__(self, url: str, quota: float, window: float = 86400.0,
                 stages: Iterable[Stage] = DEFAULT_STAGES, rng: random.Random | None = None, *,
                 max_keys: int = 100_000, name: str = "guard",
                 connection: RedisConnection | None = None, share: float = 1.0) -> None:
        try:
            import redis.asyncio  # noqa: F401  # the connection owner imports it lazily: fail here, clearly
        except ImportError as exc:  # pragma: no cover - redis is a dev dependency
            raise ImportError("a shared guard needs redis-py: pip install 'crawlpace[redis]'") from exc
        check_store(url)
        self.url = url
        self.rule = StagedBrake(quota, window, stages, rng, max_keys=max_keys, share=share)
        self._rng = random.Random() if rng is None else rng
        self._max_keys = max_keys
        self._warned: object = None  # the window whose overflow was logged
        target, namespace = _split(url)
        self._prefix = _keys.guard_prefix(namespace, name)
        # The previous window's hash is kept one window longer: yesterday's totals.
        self._keep = self.rule.window + 60.0
        self._own = connection is None
        if connection is None:
            plain, options = parse_url(target, ("cluster",))
            connection = RedisConnection(plain, _SCRIPTS, cluster=bool(cluster_flag(options.get("cluster"))))
        else:
            connection.add_scripts(_SCRIPTS)
        self.connection = connection
        #: The start of the window of the last answer, on the windows' clock.
        self.last_start: float | None = None

    @property
    def quota(self) -> float:
        """Requests allowed per window."""
        return self.rule.quota

    @property
    def window(self) -> float:
        """The window length in seconds."""
        return self.rule.window

    def _modes(self, chance: float) -> list[str]:
        refusing = self.rule.refusing(chance)
        return ["F" if step.reject >= 1.0 else "1" if refuses else "0"
                for step, refuses in zip(self.rule.stages, refusing, strict=True)]

    async def decide(self, key: str, now: float | None = None, *, carry: float = 0.0,
                     carry_start: float | None = None) -> Decision:
        """Decide on one request of ``key`` and count it if allowed, atomically for every process.

        Args:
            key: the client the request is counted against.
            now: the time on the clock windows are laid on; ``None`` for the
                Redis server's clock.
            carry: requests let through elsewhere (by a process's local count
                while Redis was away) to add to the quota's count first, if
                they were let through in this window (``carry_start``).
            carry_start: the start of the window ``carry`` belongs to.

        Returns:
            The verdict, as :meth:`StagedBrake.decide` gives it.

        Raises:
            redis.RedisError: when the server cannot be reached.
        """
        rule = self.rule
        args: list[str] = ["" if now is None else repr(float(now)), repr(rule.window), repr(rule.quota),
                           key, str(self._max_keys), OVERFLOW_KEY, repr(rule.cap), repr(float(carry)),
                           "" if carry_start is None else repr(float(carry_start)), repr(TOLERANCE),
                           repr(self._keep)]
        for threshold, mode in zip(rule.thresholds, self._modes(self._rng.random()), strict=True):
            args += [repr(threshold), mode]
        reply = await self.connection.call("brake", [self._prefix], args)
        allowed, used, key_used = int(reply[0]) == 1, float(reply[1]), float(reply[2])
        stage, entered = int(reply[3]), int(reply[4]) == 1
        server_now, start = float(reply[5]), float(reply[6])
        counted = _text(reply[7])
        self.last_start = start
        due, spacing, paced = _float(reply[8]), _float(reply[9]) or 0.0, int(reply[10]) == 1
        if key != OVERFLOW_KEY and counted == OVERFLOW_KEY and self._warned != start:
            self._warned = start
            _log.warning("shared brake counts %d keys this window: new keys share the %r counter until "
                         "it ends", self._max_keys, OVERFLOW_KEY)
        decision, new_due, new_spacing = rule.answer(allowed, paced, stage, used, key_used, due, spacing,
                                                     start, server_now, entered, counted)
        if new_due is not None and (new_due, new_spacing) != (due, spacing):
            hash_key = f"{self._prefix}:{start:.17g}"
            written = self.connection.submit("pace", [hash_key], [counted, repr(new_due), repr(new_spacing)])
            written.add_done_callback(_forget)
        return decision

    async def note_crawler(self, name: str, now: float | None = None) -> None:
        """Count one request of a confirmed crawler in the current window."""
        args = ["" if now is None else repr(float(now)), repr(self.rule.window), name, repr(self._keep)]
        await self.connection.call("crawler", [self._prefix], args)

    async def start(self, within: float = START_TIMEOUT) -> None:
        """Make sure Redis answers now (the guard calls this at start-up).

        Raises:
            StoreUnreachable: naming the URL (password hidden), what went
                wrong (refused, wrong password, silence) and what to check.
        """
        await reach(cast(Store, _Ping(self)), self.url, within=within)

    async def _read(self, start: float) -> tuple[dict[str, KeyStats], dict[str, int], dict[str, float]]:
        client = await self.connection.client()
        fields = await client.hgetall(f"{self._prefix}:{start:.17g}")
        keys: dict[str, KeyStats] = {}
        crawlers: dict[str, int] = {}
        site: dict[str, float] = {}
        for raw_field, raw_value in fields.items():
            field, value = _text(raw_field), _text(raw_value)
            kind, _, key = field.partition(":")
            if field.startswith("#"):
                site[field] = float(value)
            elif kind == "c":
                crawlers[key] = int(value)
            elif kind in ("u", "r"):
                entry = keys.setdefault(key, {"used": 0.0, "rejected": 0})
                if kind == "u":
                    entry["used"] = float(value)
                else:
                    entry["rejected"] = int(value)
        return keys, crawlers, site

    async def stats(self, now: float | None = None) -> BrakeStats:
        """The quota's count in the current window, each key's, confirmed crawlers', and the last window's.

        Args:
            now: the time on the windows' clock; ``None`` for the server's.
        """
        if now is None:
            client = await self.connection.client()
            seconds, micros = await client.time()
            now = float(seconds) + float(micros) / 1e6
        start = self.rule.window_start(now)
        keys, crawlers, site = await self._read(start)
        _before, old_crawlers, old_site = await self._read(start - self.rule.window)
        previous = None
        if old_site or old_crawlers:
            previous = {"window_start": start - self.rule.window, "used": old_site.get("#u", 0.0),
                        "rejected": int(old_site.get("#r", 0.0)), "keys": int(old_site.get("#keys", 0.0)),
                        "stage": int(old_site.get("#s", 0.0)), "crawlers": old_crawlers}
        return {"window_start": start if (keys or crawlers) else None, "quota": self.rule.quota,
                "stage": int(site.get("#s", 0.0)), "keys": keys, "crawlers": crawlers,
                "totals": {"keys": len(keys), "used": site.get("#u", 0.0),
                           "rejected": int(site.get("#r", 0.0))},
                "previous": previous}  # type: ignore[typeddict-item]

    async def aclose(self) -> None:
        """Close the connections to the server (unless the connection was given: its owner closes it)."""
        if self._own:
            await self.connection.aclose()

    def __repr__(self) -> str:
        return (f"<SharedBrake {self._prefix} quota={self.rule.quota:g} window={self.rule.window:g}s "
                f"stages={len(self.rule.stages)}>")


def _forget(future: asyncio.Future[Any]) -> None:
    """Retrieve a fire-and-forget call's outcome (a lost pace write only means a stricter next answer)."""
    if not future.cancelled() and future.exception() is not None:
        _log.debug("guard: a pace write failed: %r", future.exception())


class _Ping:
    """Just enough of a store for :func:`crawlpace.stores._check.reach`: one cheap question."""

    shared = True

    def __init__(self, brake: SharedBrake) -> None:
        self._brake = brake
        self.url = brake.url

    async def snapshot(self, scope: str) -> None:
        client = await self._brake.connection.client()
        await client.ping()


# How often, at most, an outage is logged.
_ERROR_LOG_EVERY = 30.0


class ResilientBrake:
    """A :class:`SharedBrake` that counts in the process while Redis cannot be reached.

    Args:
        shared: the shared brake.
        workers: the server processes that share the quota; each takes
            ``1 / workers`` of what was left while Redis is away.
        timeout: seconds one decision may wait for Redis.
        clock: the local clock the fallback counts on (when the guard has
            no clock of its own: the windows then follow this machine's).
        monotonic: the time source of the pause before Redis is tried again.
    """

    def __init__(self, shared: SharedBrake, *, workers: int, timeout: float = DECIDE_TIMEOUT,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.shared = shared
        self.workers = workers
        self._timeout = timeout
        self._clock = clock
        self._monotonic = monotonic
        self._retry = Retry(1.0, 30.0)
        self._down_until: float | None = None
        self._last_log = -math.inf
        self.local: StagedBrake | None = None
        self._known: tuple[float, float] | None = None  # (window start, quota used) at the last answer
        self._carry = 0.0  # let through by the local count, not yet in Redis
        self._carry_start: float | None = None

    @property
    def down(self) -> bool:
        """True while the process counts on its own."""
        return self._down_until is not None

    def _local_brake(self, now: float) -> StagedBrake:
        if self.local is None:
            rule = self.shared.rule
            part = 1.0 / self.workers
            self.local = StagedBrake(rule.quota * part, rule.window, rule.stages, random.Random(),
                                     share=rule.share)
            known = self._known
            if known is not None and self.local.window_start(now) == known[0]:
                self.local.preload(now, known[1] * part)
        return self.local

    async def decide(self, key: str, now: float | None = None) -> Decision:
        """The shared brake's verdict, or the local count's while Redis is away."""
        mono = self._monotonic()
        if self._down_until is None or mono >= self._down_until:
            carry, carry_start = self._carry, self._carry_start
            try:
                async with asyncio.timeout(self._timeout):
                    decision = await self.shared.decide(key, now, carry=carry, carry_start=carry_start)
            except Exception as exc:  # down, silent, or an error reply (OOM, say): counted locally, logged
                self._fail(exc, mono)
            else:
                self._recovered(decision, now)
                return decision
        return self._decide_locally(key, now)

    def _fail(self, exc: BaseException, mono: float) -> None:
        first = self._down_until is None
        self._down_until = mono + self._retry.next()
        if first or mono - self._last_log >= _ERROR_LOG_EVERY:
            self._last_log = mono
            reason = redact(f"{type(exc).__name__}: {exc}".rstrip(": "))
            _log.error("guard: the shared brake's store %s cannot be reached or used (%s); each process now "
                       "counts on its own, on 1/%d of what was left of the quota, until it answers",
                       redact(self.shared.url), reason, self.workers)

    def _recovered(self, decision: Decision, now: float | None) -> None:
        if self._down_until is not None:
            _log.warning("guard: the shared brake's store answers again; %g requests let through meanwhile "
                         "were added to its count", self._carry)
        self._down_until = None
        self._retry.reset()
        self.local = None
        self._carry, self._carry_start = 0.0, None
        if self.shared.last_start is not None:
            self._known = (self.shared.last_start, decision.used)

    def _decide_locally(self, key: str, now: float | None) -> Decision:
        clock_now = self._clock() if now is None else now
        local = self._local_brake(clock_now)
        decision = local.decide(key, clock_now)
        if decision.allowed:
            start = local.window_start(clock_now)
            if self._carry_start != start:
                self._carry, self._carry_start = 0.0, start
            self._carry += 1.0
        return decision

    async def note_crawler(self, name: str, now: float | None = None) -> None:
        """Count a confirmed crawler's request (in the local count while Redis is away)."""
        if self.down:
            self._local_brake(self._clock() if now is None else now).note_crawler(
                name, self._clock() if now is None else now)
            return
        try:
            async with asyncio.timeout(self._timeout):
                await self.shared.note_crawler(name, now)
        except Exception as exc:  # as in decide: the local count takes over
            self._fail(exc, self._monotonic())
