"""The staged brake with its counts in Redis, so many server processes share one quota.

Behind ``uvicorn --workers 4`` (or several machines) each process has its own
memory: a per-process brake would let every process spend the whole daily
quota. :class:`SharedBrake` keeps the counts in Redis or Valkey. The rule
itself (which stage is in force, which stages refuse, how long a refused
client should wait) stays in :class:`~crawlpace.guard.StagedBrake`; one Lua
script (``guard/lua/brake.lua``) only counts atomically, so two processes can
never both take the last unit of a quota.

Windows are laid on the Redis server's clock (``TIME``) unless a clock is
given, so machines whose clocks disagree still agree on when the day ends.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._exceptions import ConfigError
from ..stores import _keys
from ..stores.connection import RedisConnection, cluster_flag, load_scripts, parse_url
from ._brake import DEFAULT_STAGES, OVERFLOW_KEY, BrakeStats, Decision, KeyStats, Stage, StagedBrake

__all__ = ["SharedBrake", "is_shared_url"]

_log = logging.getLogger(__name__)

_SCRIPTS = load_scripts("crawlpace.guard", ("brake",), clocked={"brake"})
_SCHEMES = frozenset({"redis", "rediss", "valkey", "valkeys", "unix"})


def is_shared_url(url: str) -> bool:
    """Whether ``url`` names a Redis or Valkey server (``redis://``, ``rediss://``, ``valkey://``...)."""
    return urlsplit(url).scheme in _SCHEMES


def _split(url: str) -> tuple[str, str]:
    """The URL for redis-py and the namespace (``?namespace=``, ``crawlpace`` by default)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    namespace = next((value for name, value in query if name == "namespace"), "") or "crawlpace"
    theirs = [(name, value) for name, value in query if name != "namespace"]
    scheme = {"valkey": "redis", "valkeys": "rediss"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(theirs), parts.fragment)), namespace


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class SharedBrake:
    """A staged brake on a windowed quota, counted in Redis.

    Args:
        url: the server, e.g. ``"redis://127.0.0.1:6379/0"``; ``?namespace=``
            keeps several sites apart on one server.
        quota: requests allowed per key per window, across every process.
        window: the window length in seconds.
        stages: the brake steps; see :class:`~crawlpace.guard.Stage`.
        rng: the source of chance for partial stages.
        max_keys: the most keys counted per window; later new keys share
            one counter (see :class:`~crawlpace.guard.StagedBrake`).
        name: the brake's name: brakes with the same URL, namespace and
            name share their counts.
        connection: a connection to share (a shared store's, say: see
            :class:`~crawlpace.stores.connection.RedisConnection`); its
            owner closes it. ``None``: the brake opens one of its own from
            ``url``, through the same connection owner as the stores
            (timeouts, ``cluster=1``, retries of a flushed script cache),
            and closes it in :meth:`aclose`.

    Decisions made while another is in flight go to the server together, in
    one script call.

    Raises:
        ValueError: naming the parameter that is out of range.
        ImportError: when redis-py is not installed (``pip install crawlpace[redis]``).
    """

    def __init__(self, url: str, quota: float, window: float = 86400.0,
                 stages: Iterable[Stage] = DEFAULT_STAGES, rng: random.Random | None = None, *,
                 max_keys: int = 100_000, name: str = "guard",
                 connection: RedisConnection | None = None) -> None:
        try:
            import redis.asyncio  # noqa: F401  # the connection owner imports it lazily: fail here, clearly
        except ImportError as exc:  # pragma: no cover - redis is a dev dependency
            raise ImportError("a shared guard needs redis-py: pip install 'crawlpace[redis]'") from exc
        if not is_shared_url(url):
            raise ValueError(f"store must be a redis://, rediss:// or valkey:// URL, got {url!r}")
        self.rule = StagedBrake(quota, window, stages, rng, max_keys=max_keys)
        self._rng = random.Random() if rng is None else rng
        self._max_keys = max_keys
        self._warned: object = None  # the window whose overflow was logged
        target, namespace = _split(url)
        # One hash tag: on a cluster every window of this brake lives on one node.
        problems = _keys.check_namespace(namespace)
        if problems:
            raise ConfigError(problems)
        self._prefix = _keys.guard_prefix(namespace, name)
        self._own = connection is None
        if connection is None:
            plain, options = parse_url(target, ("cluster",))
            connection = RedisConnection(plain, _SCRIPTS, cluster=bool(cluster_flag(options.get("cluster"))))
        else:
            connection.add_scripts(_SCRIPTS)
        self.connection = connection

    @property
    def quota(self) -> float:
        """Requests allowed per key per window."""
        return self.rule.quota

    @property
    def window(self) -> float:
        """The window length in seconds."""
        return self.rule.window

    async def decide(self, key: str, now: float | None = None) -> Decision:
        """Decide on one request of ``key`` and count it if allowed, atomically for every process.

        Args:
            key: the client the request is counted against.
            now: the time on the clock windows are laid on; ``None`` for the
                Redis server's clock.

        Returns:
            The verdict, as :meth:`StagedBrake.decide` gives it.

        Raises:
            redis.RedisError: when the server cannot be reached.
        """
        rule = self.rule
        refusing = rule.refusing(self._rng.random())
        args: list[str] = ["" if now is None else repr(float(now)), repr(rule.window), repr(rule.quota),
                           key, str(self._max_keys), OVERFLOW_KEY]
        for threshold, refuses in zip(rule.thresholds, refusing, strict=True):
            args += [repr(threshold), "1" if refuses else "0"]
        reply = await self.connection.call("brake", [self._prefix], args)
        allowed, used, stage, entered = int(reply[0]) == 1, float(reply[1]), int(reply[2]), int(reply[3]) == 1
        if key != OVERFLOW_KEY and _text(reply[6]) == OVERFLOW_KEY and self._warned != reply[5]:
            self._warned = reply[5]
            _log.warning("shared brake counts %d keys this window: new keys share the %r counter until "
                         "it ends", self._max_keys, OVERFLOW_KEY)
        return rule.verdict(allowed, used, stage, float(reply[5]), float(reply[4]), entered)

    async def stats(self, now: float | None = None) -> BrakeStats:
        """Each key's count in the current window, and their sums.

        Args:
            now: the time on the windows' clock; ``None`` for the server's.
        """
        client = await self.connection.client()
        if now is None:
            seconds, micros = await client.time()
            now = float(seconds) + float(micros) / 1e6
        start = self.rule.window_start(now)
        fields = await client.hgetall(f"{self._prefix}:{start:.17g}")
        keys: dict[str, KeyStats] = {}
        for raw_field, raw_value in fields.items():
            kind, _, key = _text(raw_field).partition(":")
            if kind not in ("u", "r", "s"):
                continue
            entry = keys.setdefault(key, {"used": 0.0, "rejected": 0, "stage": 0})
            value = _text(raw_value)
            if kind == "u":
                entry["used"] = float(value)
            elif kind == "r":
                entry["rejected"] = int(value)
            elif kind == "s":
                entry["stage"] = int(value)
        return {"window_start": start if keys else None, "keys": keys,
                "totals": {"keys": len(keys), "used": sum(entry["used"] for entry in keys.values()),
                           "rejected": sum(entry["rejected"] for entry in keys.values())}}

    async def aclose(self) -> None:
        """Close the connections to the server (unless the connection was given: its owner closes it)."""
        if self._own:
            await self.connection.aclose()

    def __repr__(self) -> str:
        return (f"<SharedBrake {self._prefix} quota={self.rule.quota:g} window={self.rule.window:g}s "
                f"stages={len(self.rule.stages)}>")

