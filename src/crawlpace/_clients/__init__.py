"""The one core of crawlpace's HTTP clients; each client module adapts it to its library.

Four clients throttle requests: :mod:`crawlpace.http` (httpx, async and
blocking), :mod:`crawlpace.aiohttp` and :mod:`crawlpace.requests`. What they
do around a send is the same and lives here once (:mod:`.core`):

- the store is asked once, at first use, whether it answers
  (:func:`crawlpace.stores.reach`): a closed port or a wrong password raises
  :class:`~crawlpace.StoreUnreachable` within the connect timeout instead of
  leaving the request waiting for a server that will never answer;
- robots.txt, when asked for (:class:`~crawlpace._robotstxt._robots_guard.RobotsGuard`);
- the retry loop (:mod:`crawlpace._clients._retry`): a permit, the send, the outcome
  fed back, a backoff outcome sent again;
- the last look (:mod:`crawlpace._clients._last_look`): just before a request's
  headers are written, a hold (``Retry-After``) heard after its permit was
  granted stops the write, and the request waits for the throttler again;
- the soft-block rules (:class:`~crawlpace.BlockRules`) on each answer's
  status and headers;
- the attempt count of each response (:func:`attempts`).

An adapter supplies only what its library does differently: how to send once,
how to close an unwanted response, how to GET a robots.txt, whether a body
can be sent twice, and where its "just before the headers are written" moment
is (httpx's ``trace`` extension, aiohttp's ``ClientRequest.send``, urllib3's
``HTTPConnection.request``), where it calls :func:`last_look` or
:func:`last_look_sync`.
"""

from __future__ import annotations

from .core import AsyncCore, SyncCore, attempts, last_look, last_look_sync, store_checked

__all__ = ["AsyncCore", "SyncCore", "attempts", "last_look", "last_look_sync", "store_checked"]
