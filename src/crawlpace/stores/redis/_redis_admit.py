"""The shared store's admissions on the wire: the acquire script's arguments, and what its reply means.

:class:`~crawlpace.stores.redis.RedisStore` decides when to call the acquire
script and what to do when the server is away; this module is the call itself:
the keys and arguments one admission sends (:func:`acquire_call`), and the
reading of the reply (:func:`granted`, :func:`blocked`). Each scope sends the
limits a worker would start it with (used only by a scope the server has not
seen), this send's jitter factor and its quota use; the script answers with
the server's ``now`` and, per scope, the slot's ready time, the generation, the
policy version and the scope's sends (``lua/acquire.lua`` documents the layout).
Each scope also sends the policy version this worker's copy has, and an admitting
reply carries the stored policy of each scope whose version is another, read by the
script with the version beside it (:func:`learn_versions` needs no read of its own).
A send that went through the start phase's open door is written back at once
(:func:`pass_doors`), so that the fleet paces the next one as one process would.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...policy.admission import Demand
from ..base import Blocked
from ._script_args import ACQUIRE
from ._shared_policy import SharedPolicies, quota_args
from ._writeback import PolicyWriter

__all__ = ["START_RECHECK", "START_RECHECK_PAST", "Granted", "acquire_call", "blocked", "door_open",
           "granted", "known_versions", "learn_versions", "pass_doors", "quota_known", "sooner", "uncharged"]

logger = logging.getLogger(__name__)


def acquire_call(policies: SharedPolicies, keys_of: Callable[[str], tuple[str, str, str, str]],
                 rng: random.Random, demands: tuple[Demand, ...], now_arg: str, lease_id: str,
                 lease: str, idle: str, *, full: bool) -> tuple[list[str], list[Any]]:
    """The keys and arguments of one acquire script call for ``demands``.

    Every argument is text (``lease`` and ``idle`` come formatted): the batch
    is then packed in one pass. Unless ``full`` (a cluster, which splits the
    arguments by scope), a lone scope without a quota leaves its two empty
    quota values out: each argument costs the server about a field read.
    Each scope sends its four keys (the policy blob's last: the script reads it when
    the stored version is not the copy's) and the version of this worker's copy.

    Raises:
        QuotaError: a request expects more quota units than the scope's whole quota.
    """
    args: list[Any] = [now_arg, lease_id, lease, idle, str(len(demands))]
    keys: list[str] = []
    for name, use in demands:
        keys += keys_of(name)
        policy = policies.policy(name)  # (the copy exists from here on: version 0 when none was known)
        cached = policies.peek(name)
        limits = policy.limits
        jitter = policy.jitter
        factor = jitter.factor(rng) if jitter.enabled else 1.0
        args += [str(limits.concurrency), repr(limits.delay), repr(limits.delay_per_slot),
                 repr(limits.floor), repr(factor), str(cached.version) if cached is not None else "",
                 *quota_args(policy, name, use)]
    if not full and len(demands) == 1 and args[-1] == "":
        del args[-2:]
    return keys, args


@dataclass(frozen=True, slots=True)
class Granted:
    """An admission's reply, read: per scope (in server time) what the lease needs.

    Attributes:
        slot_ready: when each scope's slot may send again.
        generations: each scope's policy generation at admission.
        versions: each scope's stored policy version (0: none stored).
        sends: each scope's mean gap between sends (``None`` after one) and this send's time.
        inflight: each scope's leases in flight with this one, as every worker holds them;
            empty when the reply does not say (a cluster's request that spans slots).
        spacings: each scope's seconds since its previous send by any worker (``None``
            for its first); empty when the reply does not say.
        written: each scope's latest write noted by a worker (server time, ``None`` for none:
            only a scope paced by a Crawl-delay notes them); empty when the reply does not say.
        blobs: each scope's stored policy blob, read with :attr:`versions` in the script's step;
            it means something only for a scope whose version is not the one the call sent
            (``None``: none stored), and is empty when the reply does not say (a cluster's
            request that spans slots: :func:`learn_versions` reads the blob then).
    """

    slot_ready: tuple[float, ...]
    generations: tuple[int, ...]
    versions: tuple[int, ...]
    sends: tuple[tuple[float | None, float], ...]
    inflight: tuple[int, ...] = ()
    spacings: tuple[float | None, ...] = ()
    written: tuple[float | None, ...] = ()
    blobs: tuple[bytes | None, ...] = ()


def known_versions(args: Sequence[Any], n: int) -> tuple[int | None, ...]:
    """Per scope, the policy version an acquire call of ``n`` scopes sent as this worker's
    (``None``: no copy), read from its arguments by the layout (``_script_args.ACQUIRE``)."""
    sent = [args[ACQUIRE.at(i, "known_version")] for i in range(n)]
    return tuple(None if value == "" else int(value) for value in sent)


def granted(reply: Sequence[Any], n: int) -> Granted:
    """Read an admitting reply (status 1) of a call for ``n`` scopes."""
    if n == 1:  # the usual admission: read without the loops
        gap = reply[5]
        return Granted((float(reply[2]),), (int(reply[3]),), (int(reply[4]),),
                       ((None if gap in (b"", "") else float(gap), float(reply[6])),),
                       *_tail(reply, 7, 1))
    slot_ready = tuple(float(v) for v in reply[2:2 + n])
    generations = tuple(int(v) for v in reply[2 + n:2 + 2 * n])
    versions = tuple(int(v) for v in reply[2 + 2 * n:2 + 3 * n])
    sends = tuple((None if v in (b"", "") else float(v), float(w))
                  for v, w in zip(reply[2 + 3 * n:2 + 4 * n], reply[2 + 4 * n:2 + 5 * n], strict=True))
    return Granted(slot_ready, generations, versions, sends, *_tail(reply, 2 + 5 * n, n))


_Tail = tuple[tuple[int, ...], tuple[float | None, ...], tuple[float | None, ...], tuple[bytes | None, ...]]


def _tail(reply: Sequence[Any], end: int, n: int) -> _Tail:
    """The in-flight counts, spacings, latest writes and policy blobs that close a plain reply (a
    cluster's merged one has none)."""
    if len(reply) != end + 4 * n:
        return (), (), (), ()
    return (tuple(int(v) for v in reply[end:end + n]),
            tuple(None if v in (b"", "") else float(v) for v in reply[end + n:end + 2 * n]),
            tuple(None if v in (b"", "") else float(v) for v in reply[end + 2 * n:end + 3 * n]),
            tuple(None if v is None else v.encode() if isinstance(v, str) else v
                  for v in reply[end + 3 * n:end + 4 * n]))


#: Seconds after which a worker asks again about a scope in rampup's start phase that the
#: store told to wait ``START_RECHECK_PAST`` or longer: the fleet's answers may shorten that
#: wait meanwhile. (Shorter waits are the rate's own gaps: asked about again and again, four
#: workers on a slow site of the fleet-learning test sent 3.6 requests a second, not 3.9. Asked
#: every 0.05 s, the mixed farm's token-bucket and Retry-After sites drew more refusals.)
START_RECHECK, START_RECHECK_PAST = 0.1, 0.5


def sooner(result: Blocked, policies: SharedPolicies, now: float, server_now: float) -> Blocked:
    """``result``, its ready times at most ``START_RECHECK`` after ``now`` for a scope starting up.

    One process tries a waiting scope again at each of its own answers, and a
    start phase's answers shorten its waits many times over (robots.txt's
    door, then a starting gap of a second, then one round trip once the
    window of one is confirmed). A fleet's worker hears of the other workers'
    answers only when it asks: told "not before one second" right after
    robots.txt, three of eight workers sat out that second while the others
    sent a quick site's pages a round trip apart (the mixed farm's busyforum,
    20 pages in 0.7 s alone, spread over 1.4 s by the fleet). Once the start
    phase is over, waits change rarely, and are taken as they are; so is a server's hold
    (``Retry-After``) in force on the server's clock (``server_now``), which no answer shortens, even
    in the start phase (a refusal of a scope's first send leaves it there).
    """
    ready = result.ready_at
    if ready is None or ready - now < START_RECHECK_PAST:
        return result
    if not any(_starting(policies, name, server_now) for name, _at in result.waiting_on):
        return result
    soon = now + START_RECHECK
    waiting = tuple((name, None if at is None else min(at, soon)) for name, at in result.waiting_on)
    return Blocked(soon, waiting)


def _starting(policies: SharedPolicies, name: str, server_now: float) -> bool:
    """Whether this worker's copy of ``name``'s policy is in rampup's start phase, with no floor
    under its delay and no hold in force (a Crawl-delay, a server's pace or hold: a wait they set is
    not shortened by answers)."""
    if policies.peek(name) is None:
        return False
    policy = policies.policy(name)
    rampup = policy.rampup
    return (rampup is not None and rampup.phase == "start" and policy.limits.floor <= 0.0
            and policy.hold_until <= server_now)


def blocked(demands: tuple[Demand, ...], reply: Sequence[Any], server_now: float,
            local: Callable[[float], float]) -> Blocked:
    """Why the acquire script refused: each scope's ready time in this worker's clock (``local``)."""
    waiting: list[tuple[str, float | None]] = []
    for (name, _use), value in zip(demands, reply[2:2 + len(demands)], strict=True):
        at = float(value)
        if at < 0:
            waiting.append((name, None))
        elif at > server_now:
            waiting.append((name, local(at)))
    if not waiting:  # ready by the time the reply was read: ask again at once
        now_local = local(server_now)
        return Blocked(now_local, tuple((name, now_local) for name, _ in demands))
    times = [t for _, t in waiting]
    latest = None if None in times else max(t for t in times if t is not None)
    return Blocked(latest, tuple(waiting))


async def learn_versions(policies: SharedPolicies, demands: tuple[Demand, ...], got: Granted,
                         known: tuple[int | None, ...],
                         fetch_blob: Callable[[str], Awaitable[bytes | None]],
                         down: tuple[type[Exception], ...]) -> None:
    """After an admission: take the policies other workers wrote since, and record the sends.

    ``known`` is the version of each scope's copy the call sent (:func:`known_versions`). Where
    the stored version is another, the reply carries the stored blob, read by the script with
    that version, and no read is made. A blob is read (one round trip) only when the reply
    carries none (a cluster's request that spans slots), or when this worker's copy changed
    while the call was out (another of its replies taught it meanwhile, or the copy was forgotten).
    """
    for index, ((name, _use), version, (gap, at)) in enumerate(
            zip(demands, got.versions, got.sends, strict=True)):
        cached = policies.peek(name)
        if cached is None or cached.version != version:
            # Another worker wrote the policy since (or this one forgot it).
            if got.blobs and version != known[index]:
                policies.know(name, version, got.blobs[index] if version else None)
                policies.saw_send(name, gap, at)
                continue
            try:
                policies.know(name, version, await fetch_blob(name) if version else None)
            except down as exc:
                # The server went away between the two calls. The permit stands (it was
                # granted); the copy stays stale, so the next reply's version reads it again.
                logger.debug("scope %s: could not read the newer policy (%s); read at the next "
                             "admission", name, exc)
        policies.saw_send(name, gap, at)


def quota_known(policies: SharedPolicies, demands: tuple[Demand, ...]) -> tuple[bool, ...]:
    """Per scope, whether this worker's copy has a quota: the acquire script charges only then."""
    return tuple(policies.policy(name).quota is not None for name, _use in demands)


def uncharged(policies: SharedPolicies, demands: tuple[Demand, ...], known: tuple[bool, ...]
              ) -> tuple[Demand, ...]:
    """``demands`` with no use for a scope whose quota this admission did not charge.

    A worker whose copy of a policy was stale sends no quota for it (another
    worker learned the budget meanwhile: :func:`learn_versions` reads it only
    after the admission). The request went uncharged, so its answer's actual
    use is charged whole at the release (``consumed - 0``), not as a
    difference from a reservation that was never made.
    """
    stale = [not had and use > 0.0 and policies.policy(name).quota is not None
             for (name, use), had in zip(demands, known, strict=True)]
    if not any(stale):
        return demands  # the common case: every copy was current
    return tuple((name, 0.0) if late else (name, use)
                 for (name, use), late in zip(demands, stale, strict=True))


def door_open(policies: SharedPolicies, name: str) -> bool:
    """Whether this worker's copy of ``name``'s policy has robots.txt's door open (``_rampup_start``)."""
    cached = policies.peek(name)
    if cached is None or cached.blob is None:
        return False
    rampup = policies.policy(name).rampup
    return rampup is not None and rampup.door_open()


async def pass_doors(writer: PolicyWriter, demands: tuple[Demand, ...], got: Granted,
                     down: tuple[type[Exception], ...]) -> Granted:
    """After an admission through an open door: write the closed door back (``PolicyWriter.pass_door``).

    Returns ``got`` with the sends as written: the lease's release reads its scope's gap there.
    """
    sends = list(got.sends)
    for index, ((name, _use), (_gap, at)) in enumerate(zip(demands, got.sends, strict=True)):
        try:
            written = await writer.pass_door(name, at)
        except down as exc:  # the permit stands; the page's answer writes the lesson
            logger.debug("scope %s: could not close the start's door (%s)", name, exc)
            continue
        if written is not None:
            sends[index] = (written, at)
    return replace(got, sends=tuple(sends))
