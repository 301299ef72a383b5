"""Signals the add-on sends, for alerting from a Scrapy project.

Connect a handler as with Scrapy's own signals::

    from crawlpace.scrapy import signals as crawlpace_signals

    crawler.signals.connect(handler, signal=crawlpace_signals.scope_given_up)

* ``scope_given_up(scope, reason)``: the circuit breaker gave a scope up; its
  requests are refused from now on.
* ``breaker_opened(scope, reason)``: a scope's breaker was seen open (it
  pauses the scope, then probes). Sent while the add-on watches the crawl:
  with ``CRAWLPACE_METRICS_PORT`` or ``CRAWLPACE_ON_GIVE_UP`` set.
"""

from __future__ import annotations

__all__ = ["breaker_opened", "scope_given_up"]

scope_given_up = object()
breaker_opened = object()
