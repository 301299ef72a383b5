"""``crawlpace purge``: remove one crawl job's keys (admission state, policies, frontier) from Redis."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from .._exceptions import ConfigError
from .._redact import redact
from ._options import URL_FORMS, add_json_option, add_store_options, require_redis

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Declare the ``purge`` subcommand and its options."""
    purge = sub.add_parser(
        "purge", parents=[common], help="remove every key of one crawl job (namespace) from Redis",
        description="Remove every key crawlpace keeps for one namespace: each scope's admission state "
                    "and learned policy, and the shared frontier with its queues. Keys of other "
                    "namespaces are never touched, whatever characters the names hold. Run it once the "
                    "job's workers have stopped. Exit status: 0, 2 when the server cannot be reached, "
                    "3 for invalid options.")
    add_store_options(purge, store_help=f"the Redis/Valkey server ({URL_FORMS}; add ?cluster=1 for a Redis "
                      "Cluster)", namespace_help="the crawl job whose keys go (no default: say it)",
                      namespace_required=True)
    purge.add_argument("--dry-run", action="store_true", help="count the keys, remove nothing")
    purge.add_argument("--learned", action="store_true",
                       help="also remove the namespace's warm-start records (NAMESPACE:learned:*), which are "
                            "otherwise kept for the next crawl")
    add_json_option(purge, "the figures")


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace purge``; return the exit status."""
    from ..stores.redis import _keys
    from ..stores.redis.connection import RedisConnection, cluster_flag, parse_url, unreachable

    require_redis(args, "purge removes a job's keys from Redis")
    if not args.namespace:
        raise ConfigError(["--namespace: give the crawl job's namespace (an empty one would name no job)"])
    problems = _keys.check_namespace(args.namespace)
    if problems:
        raise ConfigError([f"--{problem}" for problem in problems])
    from ..stores._check import check_url

    url_problems = check_url(args.store)  # a misspelled option, a one-slash URL...: exit 3, as documented
    if url_problems:
        raise ConfigError([f"--store: {problem}" for problem in url_problems])
    url, options = parse_url(args.store)
    cluster = cluster_flag(options.get("cluster"))
    if cluster is None:
        raise ConfigError([f"--store: cluster={options.get('cluster')!r} is not a flag; give cluster=1"])
    connection = RedisConnection(url, {}, cluster=cluster)

    async def purge() -> tuple[int, int]:
        try:
            client = await connection.client()
            count = await _keys.purge(client, args.namespace, dry_run=args.dry_run)
            if args.learned:
                return count, await _keys.purge_learned(client, args.namespace, dry_run=args.dry_run)
            return count, await _keys.count_learned(client, args.namespace)
        finally:
            await connection.aclose()

    try:
        count, learned = asyncio.run(purge())
    except Exception as exc:
        if not unreachable(exc, cluster=cluster):
            raise
        print(f"crawlpace purge: cannot reach {redact(url)}: {redact(exc)}", file=sys.stderr)
        return 2
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {count} keys of namespace {args.namespace!r}")
    if args.learned:
        print(f"{verb} {learned} warm-start records ({_keys.learned_prefix(args.namespace)}*)")
    elif learned:
        print(f"kept {learned} warm-start records ({_keys.learned_prefix(args.namespace)}*); "
              "add --learned to remove them too")
    if args.json:
        removed = bool(args.learned and not args.dry_run)
        print(json.dumps({"namespace": args.namespace, "keys": count, "dry_run": bool(args.dry_run),
                          "learned_records": learned, "learned_removed": removed}))
    return 0
