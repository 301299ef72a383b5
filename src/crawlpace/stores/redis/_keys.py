"""The Redis keys of a crawlpace namespace: their names, SCAN patterns that match them exactly, and purging.

Every key of a namespace starts with ``cp:<namespace>:``, then one of three
families: a scope's admission keys carry the scope as their hash tag
(``cp:<ns>:{<scope>}:a`` and ``:l``, ``:r``, ``:p``, ``:w``), so on a Redis Cluster a
scope lives in one slot; the shared frontier's keys carry the namespace as
theirs (``cp:<ns>:frontier:{<ns>}:...``); a shared guard's brake carries its
name (``cp:<ns>:guard:{<name>}...``). A namespace holds no colon: ``job``'s
prefix would otherwise begin every key of ``job:2``.

Scope names and namespaces may hold the characters SCAN's glob patterns give
a meaning to (``*``, ``?``, ``[``, ``]``, ``\\``): :func:`glob_escape` quotes
them, so a pattern never matches another job's keys.

Warm-start records (``<namespace>:learned:<scope>``) are kept apart from a job's keys: they
are meant to outlive it, and only an explicit request removes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["SCOPE_SUFFIXES", "check_namespace", "count_learned", "frontier_prefix", "glob_escape",
           "guard_prefix", "learned_prefix", "list_scopes", "namespace_pattern", "owned", "prefix", "purge",
           "purge_learned", "scope_keys", "scope_pattern", "writes_key"]

logger = logging.getLogger(__name__)

#: A scope's keys: its admission hash, its lease set, its resting-slot set, its learned policy and,
#: once it has held, the notes of its writes (:func:`writes_key`).
SCOPE_SUFFIXES = ("a", "l", "r", "p", "w")
# Keys deleted per UNLINK while purging.
_PURGE_BATCH = 500


def glob_escape(text: str) -> str:
    """``text`` with every character that SCAN's MATCH treats specially quoted by a backslash."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def prefix(namespace: str) -> str:
    """The start of every key of ``namespace``."""
    return f"cp:{namespace}:"


def check_namespace(namespace: str) -> list[str]:
    """What is wrong with ``namespace`` as the name of a crawl job's keys (nothing: an empty list)."""
    if ":" in namespace:
        return [f"namespace {namespace!r}: a colon would make another job's keys look like this one's "
                f"(cp:<namespace>:...); use another separator, e.g. {namespace.replace(':', '-')!r}"]
    return []


def learned_prefix(namespace: str) -> str:
    """The start of every warm-start record of ``namespace`` (``{namespace}:learned:{scope}``).

    These records sit outside the ``cp:`` prefix on purpose: they exist to outlive a job,
    so :func:`purge` leaves them unless asked (:func:`purge_learned`).
    """
    return f"{namespace}:learned:"


def frontier_prefix(namespace: str) -> str:
    """The start of every key of the shared frontier of ``namespace`` (the namespace is its hash tag)."""
    return f"{prefix(namespace)}frontier:{{{namespace}}}:"


def guard_prefix(namespace: str, name: str) -> str:
    """The start of every key of the shared guard brake ``name`` (its hash tag) in ``namespace``."""
    return f"{prefix(namespace)}guard:{{{name}}}"


def owned(key: bytes, namespace: str) -> bool:
    """Whether ``key`` is one of ``namespace``'s keys: its prefix, then one of the three families."""
    start = prefix(namespace).encode()
    if not key.startswith(start):
        return False
    rest = key[len(start):]
    return rest.startswith((b"{", b"guard:{", f"frontier:{{{namespace}}}:".encode()))


def scope_keys(namespace_prefix: str, scope: str) -> tuple[str, str, str, str]:
    """The admission hash, lease set, resting set and policy key of ``scope``."""
    base = f"{namespace_prefix}{{{scope}}}"
    return f"{base}:a", f"{base}:l", f"{base}:r", f"{base}:p"


def writes_key(namespace_prefix: str, scope: str) -> str:
    """The set of ``scope``'s writes still out, each lease scored by its write's time (``lua/look.lua``)."""
    return f"{namespace_prefix}{{{scope}}}:w"


def scope_pattern(namespace_prefix: str) -> str:
    """A SCAN pattern for the admission hash of every scope of a namespace (and nothing else)."""
    return f"{glob_escape(namespace_prefix)}{{*}}:a"


async def list_scopes(client: Any, namespace_prefix: str) -> list[str]:
    """The name of every scope of a namespace with an admission hash (SCAN, in batches)."""
    start, end = len(namespace_prefix) + 1, -len("}:a")
    names = []
    async for key in client.scan_iter(match=scope_pattern(namespace_prefix), count=1000):
        text = key.decode() if isinstance(key, bytes) else key
        if text.startswith(namespace_prefix):
            names.append(text[start:end])
    return names


def namespace_pattern(namespace: str) -> str:
    """A SCAN pattern for every key of ``namespace``, and only of it."""
    return f"{glob_escape(prefix(namespace))}*"


async def purge(client: Any, namespace: str, *, count: int = 1000, dry_run: bool = False) -> int:
    """Delete every key of ``namespace`` (SCAN + UNLINK, in batches); return how many.

    Another namespace is never touched, whatever characters the names hold:
    the pattern is escaped, and each key found is checked against the
    namespace's key families (:func:`owned`) before it goes. On a Redis Cluster, ``client`` scans
    every primary (redis-py's cluster client does) and each key is unlinked
    on its own node. Warm-start records are not this job's keys: see :func:`purge_learned`.
    """
    removed = await _unlink_matching(client, namespace_pattern(namespace), lambda key: owned(key, namespace),
                                     count=count, dry_run=dry_run)
    logger.info("namespace %s: %s %d keys", namespace, "would remove" if dry_run else "removed", removed)
    return removed


async def purge_learned(client: Any, namespace: str, *, count: int = 1000, dry_run: bool = False) -> int:
    """Delete the warm-start records of ``namespace`` (:func:`learned_prefix`); return how many."""
    start = learned_prefix(namespace)
    mine = start.encode()
    removed = await _unlink_matching(client, glob_escape(start) + "*", lambda key: key.startswith(mine),
                                     count=count, dry_run=dry_run)
    logger.info("namespace %s: %s %d warm-start records", namespace,
                "would remove" if dry_run else "removed", removed)
    return removed


async def count_learned(client: Any, namespace: str, *, count: int = 1000) -> int:
    """How many warm-start records ``namespace`` has (what :func:`purge` leaves behind)."""
    return await purge_learned(client, namespace, count=count, dry_run=True)


async def _unlink_matching(client: Any, pattern: str, keep: Callable[[bytes], bool], *, count: int,
                           dry_run: bool) -> int:
    """SCAN ``pattern``, check each key with ``keep`` (never trust a pattern alone), UNLINK in batches."""
    batch: list[bytes] = []
    removed = 0

    async def flush() -> int:
        if not batch or dry_run:
            return len(batch)
        if getattr(client, "get_nodes", None) is not None:  # a cluster: one key per command, any node
            for key in batch:
                await client.unlink(key)
            return len(batch)
        return int(await client.unlink(*batch))

    async for key in client.scan_iter(match=pattern, count=count):
        raw = key if isinstance(key, bytes) else str(key).encode()
        if not keep(raw):
            continue
        batch.append(raw)
        if len(batch) >= _PURGE_BATCH:
            removed += await flush()
            batch = []
    removed += await flush()
    return removed
