"""``crawlpace purge``: remove one crawl job's keys (admission state, policies, frontier) from Redis."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from .._exceptions import ConfigError
from ..stores import REDIS_SCHEMES

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
    purge.add_argument("--store", "--redis", dest="store", required=True, metavar="URL",
                       help="the Redis/Valkey server (redis://host:6379/0, rediss://..., unix:///path; "
                            "add ?cluster=1 for a Redis Cluster)")
    purge.add_argument("--namespace", required=True, help="the crawl job whose keys go (no default: say it)")
    purge.add_argument("--dry-run", action="store_true", help="count the keys, remove nothing")
    purge.add_argument("--json", action="store_true", help="end with one line of JSON holding the figures")


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace purge``; return the exit status."""
    from ..stores import _keys
    from ..stores.connection import RedisConnection, cluster_flag, parse_url, unreachable

    if urlsplit(args.store).scheme not in REDIS_SCHEMES:
        raise ConfigError([f"--store: {args.store!r} is not a Redis URL; give e.g. "
                           "--store redis://127.0.0.1:6379/0"])
    if not args.namespace:
        raise ConfigError(["--namespace: give the crawl job's namespace (an empty one would name no job)"])
    url, options = parse_url(args.store)
    cluster = cluster_flag(options.get("cluster"))
    if cluster is None:
        raise ConfigError([f"--store: cluster={options.get('cluster')!r} is not a flag; give cluster=1"])
    connection = RedisConnection(url, {}, cluster=cluster)

    async def purge() -> int:
        try:
            return await _keys.purge(await connection.client(), args.namespace, dry_run=args.dry_run)
        finally:
            await connection.aclose()

    try:
        count = asyncio.run(purge())
    except Exception as exc:
        if not unreachable(exc, cluster=cluster):
            raise
        print(f"crawlpace purge: cannot reach {url.split('@')[-1]}: {exc}", file=sys.stderr)
        return 2
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {count} keys of namespace {args.namespace!r}")
    if args.json:
        print(json.dumps({"namespace": args.namespace, "keys": count, "dry_run": bool(args.dry_run)}))
    return 0
