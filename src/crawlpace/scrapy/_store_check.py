"""The shared store is asked once before the crawl starts: no answer, no crawl.

A crawl whose Redis cannot be reached (a closed port, a refused password, a
TLS port spoken to in plain text) would otherwise start, hold every request
(the store fails closed) and end with exit status 0, so a cron job could not
tell that nothing was fetched. The add-on therefore asks the store in
``update_settings``, where an exception stops ``scrapy crawl`` with a
non-zero exit status, and says in one line what failed and what to check
(the message is :func:`crawlpace.stores.reach`'s, the same as ``crawlpace
crawl``'s).

The documented way to crawl on anyway is the store URL's own
``fallback=memory`` option: the crawl then starts on the cautious memory
fallback, with a warning, and goes back to Redis once it answers.

``update_settings`` is synchronous and may run inside the crawl's event
loop, so the question runs in a thread of its own, on a store opened for it
and closed after.
"""

from __future__ import annotations

import asyncio
import logging
import random
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qsl, urlsplit

from .._clock import AsyncioClock
from .._exceptions import StoreUnreachable
from .._redact import redact
from ..stores import open_store, reach
from ._settings import AddonConfig

__all__ = ["check_store", "has_fallback"]

logger = logging.getLogger("crawlpace.scrapy")

#: Seconds the start-up check waits for an answer (a firewall that drops packets).
REACH_WITHIN = 5.0


def has_fallback(url: str) -> bool:
    """Whether the store URL asks for the memory fallback (``fallback=memory``)."""
    query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    return query.get("fallback", "").strip().lower() == "memory"


def check_store(config: AddonConfig, *, within: float = REACH_WITHIN) -> None:
    """Make sure the crawl's shared store answers; a no-op for the memory store.

    The shared queue's Redis (``CRAWLPACE_FRONTIER``), when it is another,
    is asked too; it has no fallback, and neither has a store that also
    holds the shared queue.

    Raises:
        StoreUnreachable: the store cannot be reached and its URL has no
            ``fallback=memory``; the message names the store (password
            hidden), the reason and what to check.
    """
    frontier = config.frontier_url
    if frontier is not None and frontier != config.store_url:
        # The shared queue has no fallback: without it a fleet process has nothing to crawl.
        failure = _in_thread(frontier, "CRAWLPACE_FRONTIER", config, within)
        if failure is not None:
            raise failure
    if not config.store.shared:
        return
    failure = _in_thread(config.store_url, "CRAWLPACE_STORE", config, within)
    if failure is None:
        return
    if has_fallback(config.store_url) and (frontier is None or frontier != config.store_url):
        logger.warning("%s; the crawl starts on the memory fallback (fallback=memory in CRAWLPACE_STORE) "
                       "and goes back to the store when it answers", failure)
        return
    raise failure


def _in_thread(url: str, name: str, config: AddonConfig, within: float) -> StoreUnreachable | None:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="crawlpace-store-check") as pool:
        return pool.submit(asyncio.run, _ask(url, name, config, within)).result()


async def _ask(url: str, name: str, config: AddonConfig, within: float) -> StoreUnreachable | None:
    store = open_store(url, config.settings, AsyncioClock(), random.Random())
    try:
        await reach(store, url, within=within)
    except StoreUnreachable as exc:
        # One line: the cause is in the message already, a chained traceback would only repeat it.
        message = f"{name}: {exc}"
        if urlsplit(url).scheme == "rediss" and "no answer" in message:
            # A plain port never answers a TLS handshake: the likeliest cause, said first.
            message += "; a rediss:// URL speaks TLS: make sure the port is a TLS port, or use redis://"
        return StoreUnreachable(message)
    except Exception as exc:  # anything else the driver raises, said in one line all the same
        return StoreUnreachable(f"{name}: store {redact(url)}: cannot be reached: "
                                f"{redact(str(exc)) or type(exc).__name__}")
    finally:
        try:
            await store.aclose()
        except Exception as exc:  # closing a store that never connected may fail too
            logger.debug("closing the start-up check's store: %s", exc)
    return None
