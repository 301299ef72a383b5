"""How the httpx transports send a robots.txt GET for
:class:`~crawlpace._robotstxt._robots_guard.RobotsGuard`.

The guard (one for every client) decides when an origin's file is fetched and
what it means; these functions are the httpx part: one GET through the
transport's inner transport (so that the throttling transport does not meet
its own robots.txt request), the body's first bytes read, the response closed.
The blocking transport's GET runs in a worker thread, off the throttler's loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx

from .._clients._httpx_common import discard_async, discard_sync
from ._robots import MAX_ROBOTS_BYTES
from ._robots_guard import FetchRobots, RobotsAnswer

__all__ = ["async_fetch", "sync_fetch"]

logger = logging.getLogger("crawlpace.http")


def _request(url: str, user_agent: str, extensions: Mapping[str, Any]) -> httpx.Request:
    # Only the time limit of the request that needed the file carries over.
    return httpx.Request("GET", url, headers={"user-agent": user_agent},
                         extensions={key: value for key, value in extensions.items() if key == "timeout"})


class _Head:
    """The first :data:`MAX_ROBOTS_BYTES` plus one bytes of a body (enough to tell a file is too large)."""

    __slots__ = ("chunks", "size")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, chunk: bytes) -> bool:
        """Keep ``chunk``; True once enough is kept."""
        self.chunks.append(chunk)
        self.size += len(chunk)
        return self.size > MAX_ROBOTS_BYTES

    def bytes(self) -> bytes:
        return b"".join(self.chunks)[:MAX_ROBOTS_BYTES + 1]


def async_fetch(send: Callable[[httpx.Request], Awaitable[httpx.Response]],
                extensions: Mapping[str, Any]) -> FetchRobots:
    """A robots.txt GET through ``send`` (an async transport's ``handle_async_request``)."""

    async def fetch(url: str, user_agent: str) -> RobotsAnswer:
        response = await send(_request(url, user_agent, extensions))
        try:
            head = _Head()
            if 200 <= response.status_code < 300:
                try:
                    async for chunk in response.aiter_bytes():
                        if head.add(chunk):
                            break
                except httpx.HTTPError as exc:  # a body cut short: what arrived is what there is
                    logger.warning("%s: the body was cut short (%s)", url, exc)
        finally:
            await discard_async(response)
        return RobotsAnswer(response.status_code, response.headers, response.headers.get("location"),
                            head.bytes())

    return fetch


def sync_fetch(send: Callable[[httpx.Request], httpx.Response], extensions: Mapping[str, Any]) -> FetchRobots:
    """A robots.txt GET through ``send`` (a blocking transport's ``handle_request``), in a thread."""

    def blocking(url: str, user_agent: str) -> RobotsAnswer:
        response = send(_request(url, user_agent, extensions))
        try:
            head = _Head()
            if 200 <= response.status_code < 300:
                try:
                    for chunk in response.iter_bytes():
                        if head.add(chunk):
                            break
                except httpx.HTTPError as exc:  # a body cut short: what arrived is what there is
                    logger.warning("%s: the body was cut short (%s)", url, exc)
        finally:
            discard_sync(response)
        return RobotsAnswer(response.status_code, response.headers, response.headers.get("location"),
                            head.bytes())

    async def fetch(url: str, user_agent: str) -> RobotsAnswer:
        return await asyncio.to_thread(blocking, url, user_agent)

    return fetch
