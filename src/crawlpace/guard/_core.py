"""What the guard does with one request, whatever the server: the ASGI and WSGI middlewares share it.

The core reads an ASGI-shaped scope (the WSGI middleware builds one from its
environ) and returns a :class:`Verdict`: pass the request on (with headers to
add), or answer it here (a 429, or robots.txt). In order:

1. ``/robots.txt`` is never braked; with a :class:`~crawlpace.guard.RobotsTxt`
   the guard serves it, and every request is shown to it (who keeps to the
   ``Crawl-delay``).
2. Paths that are not costly pass untouched, without rate-limit headers.
3. A confirmed allow-listed crawler passes, counted apart (on top of the quota).
4. Everything else is put to the brake of its group: one quota for the group,
   the client's key a share inside it.
"""

from __future__ import annotations

import logging
import math
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._redact import redact
from ._address import ClientAddress, ForwardedHeader
from ._brake import DEFAULT_STAGES, BrakeStats, Decision, Stage, StagedBrake, check_stages
from ._metrics import GuardMetrics, client_class
from ._robots_txt import RobotsTxt
from ._shared import ResilientBrake, SharedBrake
from ._store_url import check_store, is_local
from ._verify import BotVerifier, Resolver

__all__ = ["DEFAULT_ALLOW", "GuardCore", "KeyFunction", "Scope", "Verdict", "network_of", "user_agent_class"]

_log = logging.getLogger("crawlpace.guard")  # the public package's logger, named in docs/guard.md

Scope = MutableMapping[str, Any]
KeyFunction = Callable[[Scope], str]
CostlyTest = Callable[[Scope], bool]

#: The search crawlers seed 004's site owner chose to favour.
DEFAULT_ALLOW: tuple[str, ...] = ("Googlebot", "Bingbot", "Applebot")

# A version: digits, possibly joined by dots or underscores ("5.0", "10_15_7").
_VERSION = re.compile(r"[0-9]+(?:[._][0-9]+)*", re.ASCII)
# Keys come from the client; a cap keeps one absurd header from costing memory.
_MAX_KEY = 256
_POLICY_NAME = "guard"
_BODY = "Too Many Requests: this page is rationed to protect a daily quota. Retry after {} seconds.\n"
#: The one group of a guard whose ``costly`` is not a mapping.
DEFAULT_GROUP = "costly"


def user_agent_class(user_agent: str) -> str:
    """Reduce a user agent to its class: the same for every version of one client.

    The text is lower-cased, every run of digits (with the dots or underscores
    between them) is removed and whitespace is collapsed, so
    ``Mozilla/5.0 (compatible; ExampleBot/2.1)`` and ``.../ExampleBot/3.0)``
    give the same key. The result is cut to 256 characters.
    """
    return " ".join(_VERSION.sub("", user_agent.lower()).split())[:_MAX_KEY]


def header(scope: Scope, name: bytes) -> str:
    """The first value of a request header, decoded as Latin-1; empty when absent."""
    for raw_name, value in scope.get("headers") or ():
        if bytes(raw_name).lower() == name:
            return bytes(value).decode("latin-1")
    return ""


def network_of(address: str) -> str:
    """The network an address belongs to for ``key="network"``: its /24 (IPv4) or /48 (IPv6)."""
    import ipaddress

    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    bits = 24 if parsed.version == 4 else 48
    return str(ipaddress.ip_network(f"{parsed}/{bits}", strict=False))


def _costly_test(costly: CostlyTest | str | Iterable[str] | None) -> CostlyTest:
    if costly is None:
        return lambda scope: True
    if callable(costly):
        return costly
    prefixes = (costly,) if isinstance(costly, str) else tuple(costly)
    if not prefixes or not all(isinstance(prefix, str) for prefix in prefixes):
        raise ValueError(f"costly must be a callable, a path prefix, a non-empty list of them, or a mapping "
                         f"of group names to those, got {costly!r}")
    return lambda scope: str(scope.get("path", "")).startswith(prefixes)


def _groups(costly: Any) -> list[tuple[str, CostlyTest]]:
    if isinstance(costly, Mapping):
        if not costly:
            raise ValueError("costly: an empty mapping brakes nothing; give {group name: path prefixes}")
        return [(str(name), _costly_test(test)) for name, test in costly.items()]
    return [(DEFAULT_GROUP, _costly_test(costly))]


def _quota_of(quota: float | Mapping[str, float], group: str) -> float:
    if isinstance(quota, Mapping):
        if group not in quota:
            raise ValueError(f"quota: no quota for the costly group {group!r}; give quota={{{group!r}: ...}}")
        return float(quota[group])
    return quota


def _int(value: float) -> int:
    return int(min(value, 1e15))


@dataclass(slots=True)
class Verdict:
    """What to do with a request.

    Attributes:
        status: 0 to pass the request on to the application; else the status
            of the answer the guard gives itself (429, or 200 for robots.txt).
        headers: the headers to add to the application's answer (when
            passing) or of the guard's own answer.
        body: the guard's own answer's body.
    """

    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""


PASS = Verdict()


def _answer(status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> Verdict:
    """The guard's own plain-text answer."""
    return Verdict(status, [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode("ascii")), *headers], body)


class GuardCore:
    """The guard's decisions, with no server attached; :class:`~crawlpace.guard.Guard` names the arguments."""

    def __init__(self, *, quota: float | Mapping[str, float], window: float = 86400.0,
                 stages: Iterable[Stage] = DEFAULT_STAGES,
                 costly: CostlyTest | str | Iterable[str] | Mapping[str, Any] | None = None,
                 key: Literal["user-agent", "ip", "network", "site"] | KeyFunction = "user-agent",
                 share: float = 1.0, allow: str | Iterable[str] = DEFAULT_ALLOW, headers: bool = True,
                 clock: Callable[[], float] | None = None, rng: random.Random | None = None,
                 max_keys: int = 100_000, store: str | None = None, name: str = "guard",
                 on_store_error: Literal["local", "open", "closed"] = "local", workers: int | None = None,
                 bot_domains: Mapping[str, Iterable[str]] | None = None,
                 bot_ranges: Mapping[str, str | Path | Iterable[str]] | None = None,
                 resolver: Resolver | None = None, verify_timeout: float = 2.0,
                 trusted_proxies: Iterable[str] = (), forwarded_header: ForwardedHeader = "x-forwarded-for",
                 metrics: Any = None, robots: RobotsTxt | None = None) -> None:
        steps = check_stages(stages)
        if on_store_error not in ("local", "open", "closed"):
            raise ValueError(f"on_store_error must be 'local', 'open' or 'closed', got {on_store_error!r}")
        if workers is None:
            from ..stores.redis._fallback import DEFAULT_WORKERS

            workers = _web_concurrency() or DEFAULT_WORKERS
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a whole number >= 1 (the server processes sharing the quota), "
                             f"got {workers!r}")
        self.workers = workers
        self._on_error = on_store_error
        self.groups = _groups(costly)
        shared = not is_local(store)
        if shared:
            assert store is not None
            check_store(store)
        self.store = store
        self.brakes: dict[str, StagedBrake] = {}
        self.shared: dict[str, ResilientBrake] = {}
        for group, _test in self.groups:
            group_quota = _quota_of(quota, group)
            if shared:
                assert store is not None
                brake_name = name if group == DEFAULT_GROUP else f"{name}.{group}"
                remote = SharedBrake(store, group_quota, window, steps, rng, max_keys=max_keys,
                                     name=brake_name, share=share)
                self.shared[group] = ResilientBrake(remote, workers=workers,
                                                    clock=clock if clock is not None else time.time)
                self.brakes[group] = remote.rule
            else:
                self.brakes[group] = StagedBrake(group_quota, window, steps, rng, max_keys=max_keys,
                                                 share=share)
        self.address = ClientAddress(trusted_proxies, forwarded_header)
        self._key = self._key_function(key)
        names = (allow,) if isinstance(allow, str) else tuple(allow)
        if not all(isinstance(item, str) and item for item in names):
            raise ValueError(f"allow must hold non-empty user-agent substrings, got {allow!r}")
        self.verifier = BotVerifier(names, domains=bot_domains, ranges=bot_ranges, resolver=resolver,
                                    timeout=verify_timeout) if names else None
        self._headers = headers
        # With a shared store and no clock given, the windows follow the Redis server's clock.
        self._clock = clock if clock is not None or shared else time.time
        self._policies = {
            group: f'"{_POLICY_NAME}";q={_int(math.floor(brake.quota))};w={_int(math.ceil(brake.window))}'
            .encode("ascii") for group, brake in self.brakes.items()}
        self.metrics = GuardMetrics.for_registry(metrics) if metrics not in (None, False) else None
        self.robots = robots
        self.started = not shared

    def _key_function(self, key: Any) -> KeyFunction:
        if callable(key):
            return key  # type: ignore[no-any-return]
        if key == "ip":
            return self.address.of
        if key == "network":
            return lambda scope: network_of(self.address.of(scope))
        if key == "user-agent":
            return lambda scope: user_agent_class(header(scope, b"user-agent"))
        if key == "site":
            return lambda scope: "*"
        raise ValueError(f"key must be 'user-agent', 'ip', 'network', 'site' or a callable, got {key!r}")

    def now(self) -> float | None:
        """The time on the windows' clock; None when it is the Redis server's."""
        return None if self._clock is None else self._clock()

    def local_now(self) -> float:
        """A reading of this process's clock on the windows' scale (for robots.txt and the fallback)."""
        return self._clock() if self._clock is not None else time.time()

    async def start(self) -> None:
        """Reach the shared store (at start-up); a no-op when counting in memory.

        Raises:
            StoreUnreachable: naming the URL (password hidden) and what to check.
        """
        for resilient in self.shared.values():
            await resilient.shared.start()
        self.started = True

    async def aclose(self) -> None:
        """Close the shared store's connections."""
        for resilient in self.shared.values():
            await resilient.shared.aclose()

    def _group(self, scope: Scope) -> str | None:
        for group, test in self.groups:
            if test(scope):
                return group
        return None

    async def verdict(self, scope: Scope) -> Verdict:
        """Decide what happens to one HTTP request."""
        path = str(scope.get("path", ""))
        robots = self.robots
        if robots is not None:
            agent = user_agent_class(header(scope, b"user-agent"))
            robots.observe(agent, self.local_now(), path == "/robots.txt")
            if path == "/robots.txt":
                return _answer(200, robots.body, [])
        if path == "/robots.txt":
            return PASS
        group = self._group(scope)
        if group is None:
            return PASS
        crawler = await self._favoured(scope)
        if crawler is not None:
            await self._note_crawler(group, crawler)
            return PASS
        key = str(self._key(scope))[:_MAX_KEY]
        decision = await self._decide(group, key)
        if decision is None:  # the owner chose "open" or "closed" over the local count
            if self._on_error == "open":
                return PASS
            body = b"Service Unavailable: the request quota cannot be checked right now.\n"
            return _answer(503, body, [(b"retry-after", b"30")])
        self._report(group, key, scope, decision)
        if decision.allowed:
            return Verdict(0, self._rate_headers(group, decision))
        return self._refusal(group, decision)

    async def _favoured(self, scope: Scope) -> str | None:
        """The allow-listed name of a request whose address is confirmed to be that crawler's."""
        verifier = self.verifier
        if verifier is None:
            return None
        claimed = verifier.claimed(header(scope, b"user-agent"))
        if claimed is None:
            return None
        return claimed if await verifier.verify(claimed, self.address.of(scope)) else None

    async def _note_crawler(self, group: str, crawler: str) -> None:
        if self.metrics is not None:
            self.metrics.crawler(group, crawler)
        resilient = self.shared.get(group)
        if resilient is not None:
            await resilient.note_crawler(crawler, self.now())
        else:
            self.brakes[group].note_crawler(crawler, self.local_now())

    async def _decide(self, group: str, key: str) -> Decision | None:
        resilient = self.shared.get(group)
        if resilient is None:
            return self.brakes[group].decide(key, self.local_now())
        if not self.started:  # no lifespan start-up ran: reach the store now, once
            self.started = True
            try:
                await resilient.shared.start(within=1.0)
            except Exception as exc:
                _log.error("guard: %s", redact(str(exc)))
        if self._on_error != "local" and resilient.down:
            return None
        decision = await resilient.decide(key, self.now())
        if self._on_error != "local" and resilient.down:
            return None
        if self.metrics is not None:
            self.metrics.store_down(resilient.down)
        return decision

    def _report(self, group: str, key: str, scope: Scope, decision: Decision) -> None:
        if decision.entered:
            brake = self.brakes[group]
            before = decision.used - 1.0 if decision.allowed else decision.used
            reject = brake.stages[decision.stage - 1].reject if decision.stage else 0.0
            _log.warning("guard: %s entered stage %d (refusing %g %% of the costly requests that are not "
                         "paced): %g of %g used, %g s left in the window", group, decision.stage,
                         reject * 100.0, before, brake.quota, decision.reset)
        if self.metrics is not None:
            self.metrics.decision(group, decision, client_class(header(scope, b"user-agent")),
                                  self.brakes[group].quota)

    def _rate_headers(self, group: str, decision: Decision) -> list[tuple[bytes, bytes]]:
        if not self._headers:
            return []
        rate = f'"{_POLICY_NAME}";r={_int(decision.allowance)};t={decision.horizon}'.encode("ascii")
        return [(b"ratelimit-policy", self._policies[group]), (b"ratelimit", rate)]

    def _refusal(self, group: str, decision: Decision) -> Verdict:
        wait = decision.reset if decision.retry_after is None else decision.retry_after
        seconds = max(_int(math.ceil(wait)), 1)
        body = _BODY.format(seconds).encode("ascii")
        return _answer(429, body, [(b"retry-after", str(seconds).encode("ascii")),
                                   *self._rate_headers(group, decision)])

    # -- what the owner sees ----------------------------------------------------------------

    async def group_stats(self) -> dict[str, BrakeStats]:
        """Each group's counts (from Redis with a shared store)."""
        found: dict[str, BrakeStats] = {}
        for group, brake in self.brakes.items():
            resilient = self.shared.get(group)
            if resilient is None:
                found[group] = brake.stats(self.local_now())
            elif resilient.down and resilient.local is not None:
                found[group] = resilient.local.stats(self.local_now())
            else:
                found[group] = await resilient.shared.stats(self.now())
        return found

    async def status(self, top: int = 20) -> dict[str, Any]:
        """A JSON-ready report: per group the stage, counts, busiest keys, crawlers, yesterday's totals."""
        groups: dict[str, Any] = {}
        for group, stats in (await self.group_stats()).items():
            brake = self.brakes[group]
            busiest = sorted(stats["keys"].items(), key=lambda item: (-item[1]["used"], -item[1]["rejected"]))
            used = stats["totals"]["used"]
            groups[group] = {
                "quota": brake.quota, "window": brake.window, "window_start": stats["window_start"],
                "stage": stats["stage"], "used": used, "remaining": max(brake.quota - used, 0.0),
                "braked": stats["totals"]["rejected"], "keys": stats["totals"]["keys"],
                "busiest": [{"key": key, **entry} for key, entry in busiest[:top]],
                "crawlers": stats["crawlers"], "previous": stats["previous"],
            }
        report: dict[str, Any] = {"groups": groups,
                                  "store": "memory" if self.store is None or is_local(self.store)
                                  else redact(self.store),
                                  "store_down": any(r.down for r in self.shared.values())}
        if self.robots is not None:
            report["robots"] = self.robots.report()
        return report


def _web_concurrency() -> int | None:
    """The worker count uvicorn and gunicorn read from ``WEB_CONCURRENCY``, when it is set."""
    import os

    text = os.environ.get("WEB_CONCURRENCY", "").strip()
    return int(text) if text.isdigit() and int(text) >= 1 else None

