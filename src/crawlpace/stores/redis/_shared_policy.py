"""This worker's copies of the shared scope policies: a bounded cache, and the values written back with them.

The shared store keeps each scope's learned state in the server
(``policy/state.py``'s layout) under a version that every write-back raises.
A worker keeps the policies it used lately here, with the version each was
read at; it computes an outcome's effect on its copy and writes the result
back guarded by that version (``release.lua`` refuses a stale one).

The cache is bounded (``limit`` scopes, least recently used first out): a
broad crawl over millions of hosts keeps only the scopes it is busy with. A
scope evicted and used again is read back from the server when its version
says the copy is gone, or starts fresh if the server holds nothing.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ..._exceptions import QuotaError
from ...policy._shared_rules import GAP_WEIGHT
from ...policy.scope import ScopePolicy
from .._policies import PolicyFactory, PolicyFormatError, dump_policy, load_policy

__all__ = ["DEFAULT_LIMIT", "SEEN_HORIZON", "Cached", "SharedPolicies", "pause_arg", "quota_args"]

logger = logging.getLogger(__name__)

#: Scopes whose policy a worker keeps at most (``policy_cache`` in the store URL).
DEFAULT_LIMIT = 10_000
#: A scope seen sending within this many of this worker's own spacings between its sends
#: of the scope is taken to be sending still (see :meth:`SharedPolicies.sends_at`).
SEEN_HORIZON = 2.0
#: This worker's own sends still out that it remembers per scope at most (see ``Cached.out``).
OUT_KEPT = 256


@dataclass(slots=True)
class Cached:
    """What this worker last knew of a scope's shared policy, and of the scope's sends."""

    version: int
    blob: bytes | None  # None: the scope has no stored policy yet
    policy: ScopePolicy | None = None  # read from ``blob`` when first needed, then kept
    #: The latest send of the scope this worker knows of (its own, read from the acquire
    #: script's reply; server time), the scope's mean gap between sends (every worker's)
    #: as of that send, and the mean spacing of this worker's own sends of the scope.
    seen: float = -math.inf
    seen_gap: float | None = None
    every: float | None = None
    #: When this worker sent through the scope's start-phase door (server time; -inf: never).
    door_sent: float = -math.inf
    #: This worker's own sends of the scope still out (server time, oldest first): their
    #: answers have not been released. A fleet's shared rampup state learns of them from
    #: each release (:meth:`SharedPolicies.out`), as one process's scope tells rampup of
    #: each send; the requests still out are how rampup sees its stragglers.
    out: list[float] = field(default_factory=list)
    #: The sends of :attr:`out` this worker put among the fleet's hangs (rampup's ``_hung_sends``),
    #: whether still out or not: the entries of the shared record that are its own to take out.
    hung: list[float] = field(default_factory=list)
    #: This worker's smoothed lease time per answer of the scope, the same with a refusal on arrival's
    #: counted as 0, and when it noted the latest (``Rampup.note_lease``): its own, not shared, so kept
    #: here across the versions it reads (in the shared policy, each newer version read lost the
    #: refusals noted).
    leases: tuple[float, float, float] = (0.0, 0.0, -math.inf)


def pause_arg(policy: ScopePolicy, now: float) -> str:
    """The breaker's pause as the release script stores it (call after ``policy.gate(now, ...)``).

    The end of the pause while open, then after a comma how long its probe may be out before
    another may go (:attr:`Breaker.probe_wait`, the pause's length: acquire.lua's probe gate keeps
    the same rule as :meth:`Breaker.blocked_until`); ``"h"`` while half-open (the stored end stays,
    and so does a recorded probe), ``""`` when closed, given up or off.
    """
    breaker = policy.breaker
    if breaker is None:
        return ""
    if breaker.state == "open":
        until = breaker.snapshot(now).open_until
        return "" if until is None else f"{until!r},{breaker.probe_wait!r}"
    return "h" if breaker.state == "half_open" else ""


def quota_args(policy: ScopePolicy, name: str, use: float) -> list[str]:
    """The acquire script's quota values for one scope: the use, the bucket's capacity and rate.

    Raises:
        QuotaError: when ``use`` exceeds the whole quota (it could never be sent).
    """
    quota = policy.quota
    if quota is None or use <= 0.0:
        return [repr(use), "", ""]
    if not quota.fits(use):
        raise QuotaError(f"a request expects to use {use:g} quota units of scope {name!r}, whose whole "
                         f"quota is {quota.quota:g} per {quota.window:g}s, so it can never be sent; lower "
                         "its expected use or raise the scope's quota")
    return [repr(use), repr(quota.capacity), repr(quota.rate)]


class SharedPolicies:
    """The bounded cache of scope policies, by scope name.

    Args:
        factory: builds a new policy of any scope from the settings.
        limit: scopes kept at most.
    """

    def __init__(self, factory: PolicyFactory, limit: int = DEFAULT_LIMIT) -> None:
        self.factory = factory
        self.limit = max(1, limit)
        self._cache: OrderedDict[str, Cached] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, scope: str) -> bool:
        return scope in self._cache

    def __repr__(self) -> str:
        return f"<SharedPolicies {len(self._cache)}/{self.limit} scopes evicted={self.evicted}>"

    def entry(self, scope: str) -> Cached:
        """The cache entry of ``scope`` (a fresh one, version 0, if none)."""
        cache = self._cache
        cached = cache.get(scope)
        if cached is None:
            cached = cache[scope] = Cached(0, None)
            if len(cache) > self.limit:
                cache.popitem(last=False)
                self.evicted += 1
        else:
            cache.move_to_end(scope)
        return cached

    def peek(self, scope: str) -> Cached | None:
        """The entry of ``scope`` if cached (its place in the eviction order unchanged)."""
        return self._cache.get(scope)

    def know(self, scope: str, version: int, blob: bytes | None) -> None:
        """Record the stored policy of ``scope`` as of ``version`` (the copy is read when needed)."""
        old = self._cache.get(scope)
        self._cache[scope] = new = Cached(version, blob)
        if old is not None:  # what this worker saw of the scope's sends stays
            new.seen, new.seen_gap, new.every = old.seen, old.seen_gap, old.every
            new.door_sent, new.out, new.hung, new.leases = old.door_sent, old.out, old.hung, old.leases
        self._cache.move_to_end(scope)
        if len(self._cache) > self.limit:
            self._cache.popitem(last=False)
            self.evicted += 1

    def written(self, scope: str, version: int, blob: bytes) -> None:
        """A write-back of ``scope`` computed from ``version`` landed: the copy is the stored one."""
        cached = self.entry(scope)
        cached.version, cached.blob = version + 1, blob

    def sent(self, scope: str, at: float) -> None:
        """This worker sent a request of ``scope`` at ``at`` (server time), out until :meth:`answered`."""
        cached = self.entry(scope)
        out = cached.out
        out.append(at)
        if len(out) > OUT_KEPT:
            del out[0]  # a request never released (abandoned) must not be remembered for ever
        policy = cached.policy
        if policy is not None and policy.rampup is not None:
            # When this send may hang (one process's ``ScopePolicy.on_admit``): this worker writes its
            # slots back then (``PolicyWriter.refresh_due``), or no other worker knows of the hang.
            policy.wake_at = min(policy.wake_at, policy.rampup.hung_out(at)[1])

    def answered(self, scope: str, at: float) -> None:
        """This worker's request of ``scope`` sent at ``at`` is over (released, whatever came of it)."""
        cached = self._cache.get(scope)
        if cached is not None and at in cached.out:
            cached.out.remove(at)

    def out(self, scope: str) -> list[float]:
        """This worker's requests of ``scope`` still out: when each was sent (server time)."""
        cached = self._cache.get(scope)
        return [] if cached is None else cached.out

    def saw_send(self, scope: str, gap: float | None, at: float) -> None:
        """Record a send of ``scope`` admitted to this worker at ``at`` (server time), after which the
        scope's mean gap between sends (every worker's) was ``gap``."""
        cached = self.entry(scope)
        if at <= cached.seen:
            return
        if cached.seen != -math.inf:
            spacing, mean = at - cached.seen, cached.every
            cached.every = spacing if mean is None else mean + GAP_WEIGHT * (spacing - mean)
        cached.seen, cached.seen_gap = at, gap

    def sends_at(self, scope: str, now: float, gap: float | None, last: float) -> tuple[float | None, float]:
        """The scope's mean gap between sends and its last send, as rampup should take them at ``now``.

        ``gap`` and ``last`` come from the lease being released (its own send);
        a later send this worker made of the scope replaces them. Other
        workers' sends since are unknown here, so a scope this worker saw
        sending within :data:`SEEN_HORIZON` of its own spacings between sends
        (at least the scope's gap) is taken to be sending still: its last
        send is ``now``, and rampup measures the scope's rate by its gap. Past
        that, the last send seen stands, and the measured rate falls off as
        it does for a scope that stopped sending. (Taking the lease's own send
        as the scope's last would measure at most one send per latency: a
        fleet, or one worker with several slots, would be capped at twice
        that.)
        """
        cached = self.entry(scope)
        if cached.seen > last:
            gap, last = cached.seen_gap, cached.seen
        if gap is None:
            return gap, last
        horizon = SEEN_HORIZON * max(cached.every or 0.0, gap)
        return gap, now if now - last <= horizon else last

    def policy(self, scope: str) -> ScopePolicy:
        """This worker's copy of the scope's policy as last known (a fresh one if none)."""
        cached = self.entry(scope)
        if cached.policy is None:
            if cached.blob is None:
                cached.policy = self.factory.new(scope)
            else:
                try:
                    cached.policy = load_policy(cached.blob, self.factory, scope)
                except PolicyFormatError as exc:
                    logger.warning("scope %s: %s; starting from a fresh policy", scope, exc)
                    cached.policy = self.factory.new(scope)
            if cached.policy.rampup is not None:
                # Rampup counts this worker's own requests out far too long as hung, and shares them:
                # the shared record of sends out keeps sends long answered (``Rampup.hung_out``).
                cached.policy.rampup.own_sends(cached.out, cached.hung)
        return cached.policy

    def stored(self, scope: str) -> bool:
        """True when the server holds a policy for ``scope`` (as far as this worker knows)."""
        cached = self._cache.get(scope)
        return cached is not None and cached.blob is not None

    def gated(self, scope: str) -> bool:
        """True when the scope's stored policy has a breaker (a release must report even without feedback)."""
        return self.stored(scope) and self.policy(scope).breaker is not None

    def writeback(self, policy: ScopePolicy, now: float) -> tuple[bytes, list[Any]]:
        """The stored form of ``policy``, and the release script's write-back values for it."""
        limits = policy.limits
        hold = policy.gate(now, 0.0)
        # A breaker waiting for its probe's answer, or a window log's budget all in flight: look
        # again shortly (the next answer's write-back names the time).
        hold = now + 1.0 if hold is None else hold
        if hold <= now:
            # No hold in force: the end of the scope's latest silence that was not its own (a
            # server's hold, or hung requests holding every slot), if any. It holds nothing, but
            # acquire.lua spaces the next send from it, as rampup's own record leaves the silence
            # out: read as a gap, a 10 s hang capped the fleet's rate near 1/s.
            rampup = policy.rampup
            resumed = rampup.resumed_at if rampup is not None else -1.0
            hold = resumed if -1.0 < resumed <= now else -1.0
        blob = dump_policy(policy, self.factory)
        return blob, [blob, str(limits.concurrency), repr(limits.delay), repr(limits.delay_per_slot),
                      repr(limits.floor), repr(hold), str(policy.generation),
                      "1" if policy.given_up else "0", pause_arg(policy, now), repr(limits.rest)]
