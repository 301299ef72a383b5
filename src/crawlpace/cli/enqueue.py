"""``crawlpace enqueue``: add URLs to the shared frontier that crawl workers work through."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any
from urllib.parse import urlsplit

from .._exceptions import ConfigError
from .._redact import redact
from ..stores import REDIS_SCHEMES
from .crawl import read_urls, store_url

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Declare the ``enqueue`` subcommand and its options."""
    enqueue = sub.add_parser(
        "enqueue", parents=[common], help="add URLs to a shared frontier in Redis for crawl workers",
        description="Add the URLs of a file to the shared frontier of a crawl job; any number of "
                    "'crawlpace crawl --redis URL' workers, started without a URL file, then work "
                    "through them. A URL already queued or being fetched is skipped. Exit status: 0, "
                    "or 2 when the server cannot be reached, 3 for invalid options.")
    enqueue.add_argument("urls", help="file of URLs, one per line ('-' for standard input)")
    enqueue.add_argument("--store", "--redis", dest="store", required=True, metavar="URL",
                         help="the Redis/Valkey server (redis://host:6379/0, rediss://..., unix:///path)")
    enqueue.add_argument("--namespace", help="the crawl job (default: crawlpace); workers must use the same")
    enqueue.add_argument("--json", action="store_true", help="end with one line of JSON holding the figures")


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace enqueue``; return the exit status."""
    from ..frontier._shared import SharedFrontier, frontier_unreachable

    url = store_url(args.store, args.namespace)
    if urlsplit(url).scheme not in REDIS_SCHEMES:
        raise ConfigError([f"--store: {args.store!r} is not a Redis URL; the shared frontier lives in "
                           "Redis, e.g. --redis redis://127.0.0.1:6379/0"])
    frontier = SharedFrontier(url)

    async def fill() -> Any:
        try:
            return await frontier.enqueue(read_urls(args.urls, None))
        finally:
            await frontier.aclose()

    try:
        report = asyncio.run(fill())
    except Exception as exc:
        if not frontier_unreachable(exc):
            raise
        print(f"crawlpace enqueue: cannot reach {redact(frontier.url)}: {redact(exc)}", file=sys.stderr)
        return 2
    print(f"{report.added} URLs queued in namespace {frontier.namespace!r} ({report.duplicates} already "
          f"there, {report.invalid} without a usable host, of {report.read} read)")
    if args.json:
        print(json.dumps({"namespace": frontier.namespace, "read": report.read, "added": report.added,
                          "duplicates": report.duplicates, "invalid": report.invalid}, sort_keys=True))
    return 0
