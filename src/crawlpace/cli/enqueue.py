"""``crawlpace enqueue``: add URLs to the shared frontier that crawl workers work through."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from .._redact import redact
from ._options import URL_FORMS, add_json_option, add_store_options, require_redis, store_url
from .crawl import read_urls

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
    add_store_options(enqueue, store_help=f"the Redis/Valkey server ({URL_FORMS})",
                      namespace_help="the crawl job (default: crawlpace); workers must use the same")
    add_json_option(enqueue, "the figures")


def run(args: argparse.Namespace) -> int:
    """Run ``crawlpace enqueue``; return the exit status."""
    from ..frontier._shared import EnqueueStopped, SharedFrontier, frontier_unreachable

    url = store_url(args.store, args.namespace)
    require_redis(args, "the shared frontier lives in Redis")
    frontier = SharedFrontier(url)

    async def fill() -> Any:
        try:
            return await frontier.enqueue(read_urls(args.urls, None))
        finally:
            await frontier.aclose()

    try:
        report = asyncio.run(fill())
    except EnqueueStopped as stopped:
        exc, done = stopped.error, stopped.report
        reason = redact(" ".join(str(exc).split()) or type(exc).__name__)
        if frontier_unreachable(exc):
            what = f"cannot reach {redact(frontier.url)}: {reason}"
        elif "OOM" in str(exc) or "maxmemory" in str(exc):
            what = (f"{redact(frontier.url)} is full ({reason}); raise its maxmemory, or free memory, then "
                    "enqueue the same file again (URLs already queued are skipped)")
        else:
            what = f"{redact(frontier.url)} refused the URLs: {reason}"
        print(f"crawlpace enqueue: {what}. {done.added} URLs were queued before it stopped "
              f"(of {done.read} read)", file=sys.stderr)
        if args.json:
            print(json.dumps({"namespace": frontier.namespace, "read": done.read, "added": done.added,
                              "duplicates": done.duplicates, "invalid": done.invalid, "error": reason},
                             sort_keys=True))
        return 2
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
