"""Prometheus / OpenMetrics series of a throttler, through ``prometheus-client``.

:class:`ThrottlerCollector` is a custom collector: register it in any
``CollectorRegistry``. It reads the counters of a :class:`Recorder` and the
latest snapshots of a :class:`Sampler` when scraped, and, for a crawl, the
crawl's own figures (URL outcomes, queued URLs) through a :class:`CrawlFigures`.

Cardinality is bounded and series are stable: the first ``top_n`` scopes seen
busy keep their own ``scope`` label for the whole run, every other scope is
counted under ``scope="other"``, and no scope ever moves from its own label
into ``other`` (Prometheus would read the drop as a counter reset). A scope
given its label after a scrape already counted it under ``other`` starts its
own series from that point, so ``other`` never goes down either.

In a fleet, each worker exports what *it* did: its requests, its requests in
flight. What the shared store knows for the whole fleet is exported once, by
``crawlpace dashboard``, under ``crawlpace_fleet_*`` names, so that summing a
series over workers never counts a request twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._recorder import LATENCY_BUCKETS, OTHER, OUTCOMES, WAIT_BUCKETS, Recorder, ScopeCounts
from ._sampler import Sampler, limit_rate

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["BREAKER_STATES", "METRICS", "CrawlFigures", "FleetCollector", "ThrottlerCollector",
           "metrics_text"]

#: Breaker states, one series each in ``crawlpace_breaker_state``.
BREAKER_STATES = ("closed", "open", "half_open", "given_up", "off")

#: Every series: name -> (type, labels, help). docs/observability.md lists the same.
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "crawlpace_requests": ("counter", ("scope", "outcome"), "Requests released by this process, by outcome"),
    "crawlpace_pushbacks": ("counter", ("scope",), "Answers 429 and 503 and soft blocks (challenge pages)"),
    "crawlpace_given_up": ("counter", ("scope",), "Times the circuit breaker gave the scope up"),
    "crawlpace_admission_wait_seconds": ("histogram", ("scope",), "Seconds a request waited for a permit"),
    "crawlpace_response_latency_seconds": ("histogram", ("scope",),
                                           "Seconds from connection to response headers"),
    "crawlpace_delay_seconds": ("gauge", ("scope",), "Seconds between two sends in force"),
    "crawlpace_delay_per_slot_seconds": ("gauge", ("scope",), "Seconds between two sends of one slot"),
    "crawlpace_concurrency": ("gauge", ("scope",), "Slots in force"),
    "crawlpace_inflight": ("gauge", ("scope",), "Requests of this process in flight"),
    "crawlpace_queue_length": ("gauge", ("scope",), "Requests of this process waiting to be sent"),
    "crawlpace_limit_requests_per_second": ("gauge", ("scope",),
                                            "Sends per second allowed: the lowest rule that binds"),
    "crawlpace_rampup_requests_per_second": ("gauge", ("scope",), "Sends per second rampup has learned"),
    "crawlpace_backoff_level": ("gauge", ("scope",), "Backoff level (0: none)"),
    "crawlpace_hold_seconds": ("gauge", ("scope",), "Seconds left of a server's Retry-After hold"),
    "crawlpace_crawl_delay_seconds": ("gauge", ("scope",), "robots.txt Crawl-delay in force"),
    "crawlpace_pace_seconds": ("gauge", ("scope",),
                               "Seconds between sends a budget the server announced asks for"),
    "crawlpace_breaker_state": ("gauge", ("scope", "state"), "1 for the breaker's current state"),
    "crawlpace_quota_remaining": ("gauge", ("scope",), "Quota units left (scopes with a quota)"),
    "crawlpace_scopes_tracked": ("gauge", (), "Scopes seen (those without their own label are under other)"),
    "crawlpace_scope_info": ("gauge", ("scope", "site"),
                             "1 for each scope, with its site's name (the scope when none is known)"),
    "crawlpace_urls": ("counter", ("outcome",), "URLs of this process's crawl settled, by final outcome"),
    "crawlpace_urls_queued": ("gauge", (), "URLs of this process's crawl not yet settled"),
    "crawlpace_retries": ("counter", (), "Requests sent again for a URL already tried"),
    "crawlpace_received_bytes": ("counter", (), "Bytes of the bodies of the crawl's answers"),
    "crawlpace_fleet_inflight": ("gauge", ("scope",), "Requests in flight over every worker of a fleet"),
    "crawlpace_frontier_urls": ("gauge", ("state",), "URLs of the shared frontier by state"),
    "crawlpace_frontier_outcomes": ("gauge", ("outcome",), "URLs the shared frontier settled, by outcome"),
    "crawlpace_worker_last_seen_seconds": ("gauge", ("worker",),
                                           "Seconds since a fleet worker was last heard from"),
}

#: The gauges read from a scope's snapshot, in the order they are exported.
_SNAPSHOT_GAUGES = ("crawlpace_delay_seconds", "crawlpace_delay_per_slot_seconds", "crawlpace_concurrency",
                    "crawlpace_limit_requests_per_second", "crawlpace_rampup_requests_per_second",
                    "crawlpace_backoff_level", "crawlpace_hold_seconds", "crawlpace_crawl_delay_seconds",
                    "crawlpace_pace_seconds", "crawlpace_breaker_state", "crawlpace_quota_remaining")


@dataclass(slots=True)
class CrawlFigures:
    """What a crawl adds to its throttler's series: read when scraped.

    Attributes:
        outcomes: the URLs settled so far by final outcome (``ok``, ``failed``,
            ``exhausted``, ``disallowed``, ...), as the output file has them.
        queued: URLs not yet settled.
        retries: requests sent again for a URL already tried.
        received_bytes: bytes of the bodies of the answers.
        queued_by_scope: URLs waiting per scope, for ``crawlpace_queue_length``.
        hosts: per host, what the crawl did there: an object with ``done``,
            ``outcomes`` (final outcome -> URLs) and ``note`` (why the last URL
            that did not end ``ok`` ended so), for the dashboard.
    """

    outcomes: Callable[[], Mapping[str, int]]
    queued: Callable[[], int]
    retries: Callable[[], int]
    queued_by_scope: Callable[[], Mapping[str, int]] = field(default=lambda: {})
    hosts: Callable[[], Mapping[str, Any]] = field(default=lambda: {})
    received_bytes: Callable[[], int] = field(default=lambda: 0)


def _minus(counts: ScopeCounts, base: ScopeCounts) -> ScopeCounts:
    """``counts`` less what ``base`` already counted (under ``other``)."""
    out = ScopeCounts()
    out.add(counts)
    for key, value in base.outcomes.items():
        out.outcomes[key] -= value
    for index, value in enumerate(base.wait_buckets):
        out.wait_buckets[index] -= value
    for index, value in enumerate(base.latency_buckets):
        out.latency_buckets[index] -= value
    out.wait_sum -= base.wait_sum
    out.latency_sum -= base.latency_sum
    out.latency_count -= base.latency_count
    out.given_up -= base.given_up
    return out


def _histogram(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, float]]:
    buckets, running = [], 0
    for bound, count in zip((*bounds, math.inf), counts, strict=True):
        running += count
        buckets.append(("+Inf" if bound == math.inf else repr(bound), float(running)))
    return buckets


class ThrottlerCollector:
    """A ``prometheus_client`` collector of one throttler's series.

    Args:
        recorder: the counters (attach it with ``throttler.observe(recorder)``).
        sampler: the latest snapshots, for the gauges (optional).
        top_n: scopes that get their own label; the rest are ``other``.
        crawl: a crawl's own figures, when the throttler serves a crawl.
        fleet: the sampler reads a whole fleet's shared store and this process
            admits nothing itself (``crawlpace dashboard``): in-flight counts
            are exported as ``crawlpace_fleet_inflight``.
        site_names: scope -> site name, where known (``--sites``): exported
            as ``crawlpace_scope_info{scope, site}``, for dashboards to join on.

    Example::

        recorder = Recorder()
        throttler.observe(recorder)
        sampler = Sampler(throttler_reader(throttler, recorder), recorder=recorder)
        sampler.start()
        registry.register(ThrottlerCollector(recorder, sampler))
    """

    def __init__(self, recorder: Recorder, sampler: Sampler | None = None, *, top_n: int = 50,
                 crawl: CrawlFigures | None = None, fleet: bool = False,
                 site_names: Mapping[str, str] | None = None) -> None:
        if top_n < 0:
            raise ValueError(f"top_n: {top_n!r} is negative; use e.g. 50")
        self.recorder = recorder
        self.sampler = sampler
        self.top_n = top_n
        self.crawl = crawl
        self.fleet = fleet
        self.site_names = dict(site_names or {})
        # Scopes with their own label, for good, each with what an earlier scrape had
        # already counted under "other" (their series start after it).
        self._labels: dict[str, ScopeCounts] = {}
        # The scopes the previous scrape counted under "other".
        self._in_other: set[str] = set()

    def describe(self) -> list[Any]:
        """Nothing: the series' labels change between scrapes."""
        return []

    def labelled(self) -> list[str]:
        """The scopes that have their own label, in the order they got it."""
        return list(self._labels)

    def _label_new_scopes(self) -> None:
        for name in self.recorder.names():
            if len(self._labels) >= self.top_n:
                break
            if name not in self._labels:
                counts = self.recorder.scope(name)
                base = ScopeCounts()
                if name in self._in_other and counts is not None:
                    # What it counted by then was shown under "other", and stays there.
                    base.add(counts)
                    base.inflight = 0
                self._labels[name] = base

    def collect(self) -> Iterator[Any]:
        """Yield every metric family."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        def family(name: str) -> Any:
            kind, labels, text = METRICS[name]
            cls = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily,
                   "histogram": HistogramMetricFamily}[kind]
            return cls(name, text, labels=list(labels))

        self._label_new_scopes()
        rows: list[tuple[str, ScopeCounts]] = []
        other = self.recorder.total()
        for name, base in self._labels.items():
            counts = self.recorder.scope(name)
            if counts is None:  # folded into the recorder's "other" bucket: counted there now
                continue
            own = _minus(counts, base)
            rows.append((name, own))
            other = _minus(other, own)
        if other.admitted or other.requests or other.given_up:
            rows.append((OTHER, other))
        self._in_other = {name for name in self.recorder.tracked() if name not in self._labels}
        requests, pushbacks, given_up = (family("crawlpace_requests"), family("crawlpace_pushbacks"),
                                         family("crawlpace_given_up"))
        waits = family("crawlpace_admission_wait_seconds")
        latencies = family("crawlpace_response_latency_seconds")
        for name, counts in rows:
            for outcome in OUTCOMES:
                requests.add_metric([name, outcome], counts.outcomes[outcome])
            pushbacks.add_metric([name], counts.pushbacks)
            given_up.add_metric([name], counts.given_up)
            waits.add_metric([name], _histogram(WAIT_BUCKETS, counts.wait_buckets), counts.wait_sum)
            latencies.add_metric([name], _histogram(LATENCY_BUCKETS, counts.latency_buckets),
                                 counts.latency_sum)
        yield from (requests, pushbacks, given_up, waits, latencies)
        yield from self._gauges(family, [name for name, _ in rows if name != OTHER],
                                other=any(name == OTHER for name, _ in rows))
        if self.crawl is not None:
            yield from self._crawl_figures(family, self.crawl)

    def _gauges(self, family: Any, labelled: list[str], *, other: bool = False) -> Iterator[Any]:
        fams = {name: family(name) for name in _SNAPSHOT_GAUGES}
        inflight = family("crawlpace_fleet_inflight" if self.fleet else "crawlpace_inflight")
        queued = family("crawlpace_queue_length")
        latest = dict(self.sampler.latest) if self.sampler is not None else {}
        if not labelled:  # no admissions seen here (a fleet view): the busiest sampled scopes
            labelled = sorted(latest, key=lambda name: -latest[name].sends)[:self.top_n]
        waiting = dict(self.crawl.queued_by_scope()) if self.crawl is not None else {}
        for name in sorted(labelled):
            counts = self.recorder.scope(name)
            snap = latest.get(name)
            if self.fleet:
                if snap is not None:
                    inflight.add_metric([name], snap.inflight)
            else:
                inflight.add_metric([name], counts.inflight if counts is not None else 0)
                queued.add_metric([name], waiting.get(name, getattr(snap, "queued", 0) if snap else 0))
            if snap is None:
                continue
            fams["crawlpace_delay_seconds"].add_metric([name], snap.delay)
            fams["crawlpace_delay_per_slot_seconds"].add_metric([name], snap.delay_per_slot)
            fams["crawlpace_concurrency"].add_metric([name], snap.concurrency)
            rate = limit_rate(snap)
            if rate is not None:
                fams["crawlpace_limit_requests_per_second"].add_metric([name], rate)
            if snap.rampup is not None:
                fams["crawlpace_rampup_requests_per_second"].add_metric(
                    [name], getattr(snap.rampup, "learned_rate", snap.rampup.rate))
            fams["crawlpace_backoff_level"].add_metric([name], snap.backoff)
            fams["crawlpace_hold_seconds"].add_metric([name], max(snap.hold_in or 0.0, 0.0))
            if snap.crawl_delay:
                fams["crawlpace_crawl_delay_seconds"].add_metric([name], snap.crawl_delay)
            if snap.pace is not None:
                fams["crawlpace_pace_seconds"].add_metric([name], snap.pace)
            for state in BREAKER_STATES:
                on = 1.0 if snap.breaker == state else 0.0
                fams["crawlpace_breaker_state"].add_metric([name, state], on)
            if snap.quota_remaining is not None:
                fams["crawlpace_quota_remaining"].add_metric([name], snap.quota_remaining)
        # One info series per scope shown, named or not: a query joining on it keeps every scope.
        info = family("crawlpace_scope_info")
        for name in sorted(labelled):
            info.add_metric([name, self.site_names.get(name, name)], 1.0)
        if other:
            info.add_metric([OTHER, OTHER], 1.0)
        tracked = family("crawlpace_scopes_tracked")
        seen = len(list(self.recorder.tracked())) + self.recorder.folded_names
        tracked.add_metric([], seen if seen else len(latest))
        yield from fams.values()
        yield inflight
        if not self.fleet:
            yield queued
        yield tracked
        yield info

    def _crawl_figures(self, family: Any, crawl: CrawlFigures) -> Iterator[Any]:
        urls = family("crawlpace_urls")
        for outcome, count in sorted(crawl.outcomes().items()):
            urls.add_metric([outcome], count)
        queued = family("crawlpace_urls_queued")
        queued.add_metric([], crawl.queued())
        retries = family("crawlpace_retries")
        retries.add_metric([], crawl.retries())
        received = family("crawlpace_received_bytes")
        received.add_metric([], crawl.received_bytes())
        yield from (urls, queued, retries, received)


class FleetCollector:
    """The shared frontier's depth and the workers' heartbeats, for ``crawlpace dashboard``.

    ``read`` returns the latest frontier figures (a mapping as
    ``FrontierCounts.as_dict()`` gives it), refreshed by the caller in the
    background: a scrape never waits for Redis.
    """

    def __init__(self, read: Callable[[], Mapping[str, Any] | None]) -> None:
        self._read = read

    def describe(self) -> list[Any]:
        """Nothing: the workers change between scrapes."""
        return []

    def collect(self) -> Iterator[Any]:
        """Yield the frontier and worker families (none before the first reading)."""
        from prometheus_client.core import GaugeMetricFamily

        data = self._read()
        if data is None:
            return
        families = {name: GaugeMetricFamily(name, METRICS[name][2], labels=list(METRICS[name][1]))
                    for name in ("crawlpace_frontier_urls", "crawlpace_frontier_outcomes",
                                 "crawlpace_worker_last_seen_seconds")}
        for state in ("queued", "claimed", "done", "enqueued"):
            families["crawlpace_frontier_urls"].add_metric([state], float(data.get(state, 0)))
        for outcome, count in sorted(dict(data.get("outcomes") or {}).items()):
            families["crawlpace_frontier_outcomes"].add_metric([str(outcome)], float(count))
        for worker, ago in sorted(dict(data.get("workers") or {}).items()):
            families["crawlpace_worker_last_seen_seconds"].add_metric([str(worker)], float(ago))
        yield from families.values()


def metrics_text(registry: CollectorRegistry, accept: str = "") -> tuple[bytes, str]:
    """The exposition of ``registry`` in the format ``accept`` asks for, with its content type."""
    from prometheus_client.exposition import choose_encoder

    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
