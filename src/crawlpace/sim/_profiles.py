"""The registry of behaviour profiles: sites that each hide one kind of limit.

Each profile, what it does, and its capacity in successful requests per second:

- ``ratelimit``: a token bucket of ``rate`` per second holding ``burst``; 429
  when it is empty, with ``Retry-After`` unless ``retry_after = false``.
  Capacity ``rate``.
- ``retryafter``: past ``rate`` (a bucket of ``burst``), 429 with
  ``Retry-After: embargo``, and silence expected until then. Capacity ``rate``.
- ``headers``: ``limit`` requests per ``window``, announced in every answer
  with RateLimit headers of one ``style``; 429 past it. Capacity
  ``limit / window``.
- ``crawldelay``: robots.txt asks ``Crawl-delay: delay``; requests closer than
  that are answered anyway but counted. Capacity ``1 / delay``.
- ``quota``: :class:`crawlpace.guard.Guard` rations ``quota`` requests per
  ``window`` seconds for the whole site, braking in stages. Capacity
  ``quota / window``.
- ``overload``: each request takes ``latency + per_inflight * busy`` seconds,
  ``busy`` being the requests already in flight; 503 once ``limit`` are.
  Capacity ``limit / (latency + per_inflight * (limit - 1))``.
- ``slow``: each request takes ``low`` to ``high`` seconds; 503 once
  ``limit`` are in flight. Capacity ``limit`` per mean latency.
- ``flaky``: a share ``errors`` of 500s and a share ``hangs`` of requests that
  wait ``hang`` seconds. No capacity.
- ``dead``: every request, robots.txt included, gets ``status`` (503) or,
  for a share ``resets``, a reset connection. Capacity 0.
- ``challenge``: like ``ratelimit``, but past the bucket a 200 "verify you
  are human" page (with ``cf-mitigated: challenge`` unless ``header =
  false``), counted as a refusal. Capacity ``rate``.
- ``window``: ``limit`` requests per ``window`` seconds, in windows aligned
  to the clock (``kind = "fixed"``) or any span (``"sliding"``), refusals
  counted or not, with RateLimit headers and ``Retry-After`` as asked.
  Capacity ``limit / window``.
- ``reqrate``: HAProxy's ``http_req_rate`` counter over ``period`` seconds,
  refused requests counted; 429 above ``limit``; ``phase``: the share of its
  first period gone at the first request. Capacity ``limit / period``.
- ``conncap``: ``cap`` requests at once, each ``latency`` long, each slot
  freed ``lag`` after its answer; 503 past it. Capacity ``cap / (latency + lag)``.
- ``queue``: nginx's ``limit_req`` with ``burst`` and without ``nodelay``: a
  request ahead of ``rate`` waits its turn (``burst`` may wait), served at the
  rate; ``status`` (503) once the line is full. Capacity ``rate``.
- ``shifting``: a ``base`` profile whose capacity follows ``changes``.

Every profile also counts the common ``retry_after`` violation (see
:class:`~crawlpace.sim.Site`); ``crawldelay`` adds ``crawl_delay`` violations.
A new profile is a :class:`Site` subclass with a ``profile`` name and its
``PARAMS``, listed in :data:`PROFILES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ._challenge import ChallengeSite
from ._faults import DeadSite, FlakySite
from ._load import OverloadSite, SlowSite
from ._rates import CrawlDelaySite, HeadersSite, QuotaSite, RateLimitSite, RetryAfterSite
from ._shifting import ShiftingSite
from ._site import Site
from ._windows import QueueSite, RequestRateSite, SlotCapSite, WindowSite

__all__ = ["PROFILES"]

#: Profile name to site class, for farm files.
PROFILES: Mapping[str, type[Site]] = MappingProxyType({
    cls.profile: cls
    for cls in (RateLimitSite, RetryAfterSite, HeadersSite, CrawlDelaySite, QuotaSite, OverloadSite,
                SlowSite, FlakySite, DeadSite, ShiftingSite, ChallengeSite, WindowSite, RequestRateSite,
                SlotCapSite, QueueSite)
})
