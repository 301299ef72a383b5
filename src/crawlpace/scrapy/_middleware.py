"""The downloader middleware: the point where requests meet the network.

It sits last before the download handlers (priority 950, after Scrapy's
HTTP cache, so cached answers are never throttled), and there:

* a request the scheduler admitted is sent under its permit, unless a hold
  the crawl heard since (a sibling's ``Retry-After``) still runs: the last
  look (:meth:`~crawlpace.scrapy._runtime.Runtime.claim`) admits it again; one that
  arrives without a usable permit (robots.txt fetches, ``engine.download``,
  requests of a spider that keeps Scrapy's scheduler) waits for its scopes
  here, in memory, counted against ``DELAYED_REQUESTS_WARN_THRESHOLD``;
* each response and each download exception is fed back to the request's
  scopes (backoff, ``Retry-After`` and rate-limit headers, AutoThrottle,
  rampup, the circuit breaker), and the permit is released;
* a robots.txt response gives its Crawl-Delay to the scopes before its
  permit goes back, so that the next request already keeps to it;
* a soft block (a response matching ``THROTTLING_BLOCK_RULES`` or a default rule, a
  ``cf-mitigated: challenge`` header, a quota problem+json) backs the scopes
  off like a 429 and is retried within ``RETRY_TIMES`` (Scrapy's
  ``get_retry_request``); when the retries are spent the response goes on to
  the spider with ``meta["crawlpace_blocked"]`` naming the rule.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.exceptions import IgnoreRequest

from .._exceptions import QuotaError, ScopeError, ScopeGivenUp, ThrottlerClosed
from .._responses._blocks import BlockRules
from ._runtime import Runtime, runtime_of
from ._tickets import DELAY_DONE_KEY, DONT_THROTTLE_KEY, REFUSAL_KEY, TICKET_KEY, pending_delay

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

__all__ = ["BLOCKED_KEY", "RequestRefused", "ThrottlingMiddleware"]

#: Request meta key naming the block rule a response matched.
BLOCKED_KEY = "crawlpace_blocked"

logger = logging.getLogger("crawlpace.scrapy")


class RequestRefused(IgnoreRequest):
    """A request that can never be admitted: it is dropped like one robots.txt forbids.

    Its errback receives this exception. Causes: its scope was given up by
    the circuit breaker, its ``throttling_scopes`` are malformed, or it
    expects more quota than its scope holds per window.
    """


# Scrapy names exception counts in its stats by module and class; the public path reads better
# (downloader/exception_type_count/crawlpace.scrapy.RequestRefused).
RequestRefused.__module__ = "crawlpace.scrapy"

def _is_robots(request: Any) -> bool:
    return bool(request.meta.get("dont_obey_robotstxt")) and urlsplit(request.url).path == "/robots.txt"


def _text_headers(headers: Any) -> dict[str, str]:
    """Scrapy's headers as lower-case text names and first values, for the block rules."""
    found: dict[str, str] = {}
    for name, values in headers.items():
        value = values[0] if isinstance(values, list) and values else values
        if isinstance(name, bytes) and isinstance(value, bytes):
            found[name.decode("latin-1").lower()] = value.decode("latin-1")
    return found


class ThrottlingMiddleware:
    """Sends each request under a permit and feeds its outcome back.

    Added by :class:`~crawlpace.scrapy.Addon` at priority 950.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.blocks = BlockRules.of(runtime.config.settings)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ThrottlingMiddleware:
        """Build the middleware on the crawl's runtime."""
        return cls(runtime_of(crawler))

    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        """Hold the request until its scopes admit it (at once, if the scheduler did)."""
        refusal = request.meta.get(REFUSAL_KEY)
        if refusal is not None:
            raise RequestRefused(refusal)
        runtime = self.runtime
        if request.meta.get(DONT_THROTTLE_KEY):
            runtime.forget(request)
            if not runtime.config.use_scheduler:  # the scheduler counts those it hands out
                runtime.stats.inc_value("throttling/dont_throttle")
            return
        hold = pending_delay(request.meta)
        if hold > 0:  # Scrapy's scheduler kept it: its ``delay`` is served here, once
            request.meta[DELAY_DONE_KEY] = True
            await runtime.config.clock.sleep(hold)
        if await runtime.claim(request) is not None:
            return
        try:
            await runtime.admit(request)
        except ThrottlerClosed as exc:
            raise IgnoreRequest("the crawl is closing") from exc
        except (ScopeGivenUp, ScopeError) as exc:
            reason = "given_up" if isinstance(exc, ScopeGivenUp) else \
                "quota" if isinstance(exc, QuotaError) else "scopes"
            runtime.note_refused(reason)
            if _is_robots(request):
                # Scrapy 2.13's robots.txt middleware logs any other exception as an error.
                raise IgnoreRequest(str(exc)) from exc
            raise RequestRefused(str(exc)) from exc

    async def process_response(self, request: Request, response: Response,
                               spider: Spider | None = None) -> Response | Request:
        """Feed the response back to the request's scopes and release its permit."""
        runtime = self.runtime
        ticket = request.meta.get(TICKET_KEY)
        if ticket is not None and runtime.config.robots and _is_robots(request):
            await runtime.crawl_delays.robots_response(request, response, ticket.scopes)
        if getattr(response, "request", None) is None:
            response.request = request  # the hooks of seed 001's managers read it
        latency = request.meta.get("download_latency")
        rule = None if _is_robots(request) else self.blocks.match(
            response.status, _text_headers(response.headers), response.body)
        await runtime.settle(request, response=response, blocked=rule is not None,
                             latency=latency if isinstance(latency, float) else None)
        if rule is None:
            return response
        # Every soft block counts in throttling/backoffs/soft_block; throttling/blocked counts the pages
        # still blocked after their retries, which the spider receives.
        request.meta[BLOCKED_KEY] = rule
        spider = spider or getattr(runtime.crawler, "spider", None)
        retry = None if spider is None else get_retry_request(
            request, spider=spider, reason=f"soft block ({rule})")
        if retry is not None:
            return retry
        runtime.stats.inc_value("throttling/blocked")
        logger.info("%s: still a soft block (%s) after the retries; passed on to the spider",
                    request.url, rule)
        return response

    async def process_exception(self, request: Request, exception: Exception,
                                spider: Spider | None = None) -> None:
        """Feed a failed download back to the request's scopes and release its permit."""
        if isinstance(exception, IgnoreRequest):
            # Dropped on its way (robots.txt, offsite, a refusal): never sent.
            await self.runtime.settle(request)
            return
        await self.runtime.settle(request, exception=exception)
