"""Prometheus / OpenMetrics series of a throttler, through ``prometheus-client``.

:class:`ThrottlerCollector` is a custom collector: register it in any
``CollectorRegistry``. It reads the counters of a :class:`Recorder` and the
latest snapshots of a :class:`Sampler` when scraped. Cardinality is bounded:
the ``top_n`` busiest scopes keep their own ``scope`` label, the counters of
every other scope are summed under ``scope="other"``, and the gauges
(delay, concurrency, ...) exist only for the scopes that keep a label.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._recorder import OTHER, OUTCOMES, WAIT_BUCKETS, Recorder, ScopeCounts
from ._sampler import Sampler, limit_rate

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["BREAKER_STATES", "METRICS", "ThrottlerCollector", "metrics_text"]

#: Breaker states, one series each in ``crawlpace_breaker_state``.
BREAKER_STATES = ("closed", "open", "half_open", "given_up", "off")

#: Every series: name -> (type, labels, help). docs/observability.md lists the same.
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "crawlpace_requests": ("counter", ("scope", "outcome"), "Requests released, by outcome"),
    "crawlpace_pushbacks": ("counter", ("scope",), "Answers 429 and 503"),
    "crawlpace_given_up": ("counter", ("scope",), "Times the circuit breaker gave the scope up"),
    "crawlpace_admission_wait_seconds": ("histogram", ("scope",), "Seconds a request waited for a permit"),
    "crawlpace_delay_seconds": ("gauge", ("scope",), "Seconds between two sends in force"),
    "crawlpace_delay_per_slot_seconds": ("gauge", ("scope",), "Seconds between two sends of one slot"),
    "crawlpace_concurrency": ("gauge", ("scope",), "Slots in force"),
    "crawlpace_inflight": ("gauge", ("scope",), "Requests in flight"),
    "crawlpace_queue_length": ("gauge", ("scope",), "Requests of this process waiting for a permit"),
    "crawlpace_limit_rate": ("gauge", ("scope",), "Sends per second the limits allow"),
    "crawlpace_rampup_rate": ("gauge", ("scope",), "Sends per second rampup allows (rampup scopes)"),
    "crawlpace_backoff_level": ("gauge", ("scope",), "Backoff level (0: none)"),
    "crawlpace_breaker_state": ("gauge", ("scope", "state"), "1 for the breaker's current state"),
    "crawlpace_quota_remaining": ("gauge", ("scope",), "Quota units left (scopes with a quota)"),
    "crawlpace_scopes_tracked": ("gauge", (), "Scopes counted apart (the rest are under other)"),
}


class ThrottlerCollector:
    """A ``prometheus_client`` collector of one throttler's series.

    Args:
        recorder: the counters (attach it with ``throttler.observe(recorder)``).
        sampler: the latest snapshots, for the gauges (optional).
        top_n: scopes that keep their own label; the rest are ``other``.

    Example::

        recorder = Recorder()
        throttler.observe(recorder)
        sampler = Sampler(throttler_reader(throttler, recorder), recorder=recorder)
        sampler.start()
        registry.register(ThrottlerCollector(recorder, sampler))
    """

    def __init__(self, recorder: Recorder, sampler: Sampler | None = None, *, top_n: int = 50) -> None:
        if top_n < 0:
            raise ValueError(f"top_n: {top_n!r} is negative; use e.g. 50")
        self.recorder = recorder
        self.sampler = sampler
        self.top_n = top_n

    def describe(self) -> list[Any]:
        """Nothing: the series' labels change between scrapes."""
        return []

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

        top, rest = self.recorder.top(self.top_n)
        rows: list[tuple[str, ScopeCounts]] = list(top)
        if rest.admitted or rest.requests or rest.given_up:
            rows.append((OTHER, rest))
        requests, pushbacks, given_up = (family("crawlpace_requests"), family("crawlpace_pushbacks"),
                                         family("crawlpace_given_up"))
        waits = family("crawlpace_admission_wait_seconds")
        for name, counts in rows:
            for outcome in OUTCOMES:
                requests.add_metric([name, outcome], counts.outcomes[outcome])
            pushbacks.add_metric([name], counts.pushbacks)
            given_up.add_metric([name], counts.given_up)
            buckets, running = [], 0
            for bound, count in zip((*WAIT_BUCKETS, math.inf), counts.wait_buckets, strict=True):
                running += count
                buckets.append(("+Inf" if bound == math.inf else repr(bound), running))
            waits.add_metric([name], buckets, counts.wait_sum)
        yield from (requests, pushbacks, given_up, waits)
        yield from self._gauges(family, {name for name, _ in top})

    def _gauges(self, family: Any, labelled: set[str]) -> Iterator[Any]:
        names = ("crawlpace_delay_seconds", "crawlpace_delay_per_slot_seconds", "crawlpace_concurrency",
                 "crawlpace_inflight", "crawlpace_queue_length", "crawlpace_limit_rate",
                 "crawlpace_rampup_rate", "crawlpace_backoff_level", "crawlpace_breaker_state",
                 "crawlpace_quota_remaining")
        fams = {name: family(name) for name in names}
        latest = dict(self.sampler.latest) if self.sampler is not None else {}
        if not labelled:  # no admissions seen here (a fleet view): the busiest sampled scopes
            labelled = set(sorted(latest, key=lambda name: -latest[name].sends)[:self.top_n])
        for name in sorted(labelled):
            snap = latest.get(name)
            if snap is None:
                continue
            fams["crawlpace_delay_seconds"].add_metric([name], snap.delay)
            fams["crawlpace_delay_per_slot_seconds"].add_metric([name], snap.delay_per_slot)
            fams["crawlpace_concurrency"].add_metric([name], snap.concurrency)
            fams["crawlpace_inflight"].add_metric([name], snap.inflight)
            fams["crawlpace_queue_length"].add_metric([name], getattr(snap, "queued", 0))
            rate = limit_rate(snap)
            if rate is not None:
                fams["crawlpace_limit_rate"].add_metric([name], rate)
            if snap.rampup is not None:
                fams["crawlpace_rampup_rate"].add_metric([name], snap.rampup.rate)
            fams["crawlpace_backoff_level"].add_metric([name], snap.backoff)
            for state in BREAKER_STATES:
                on = 1.0 if snap.breaker == state else 0.0
                fams["crawlpace_breaker_state"].add_metric([name, state], on)
            if snap.quota_remaining is not None:
                fams["crawlpace_quota_remaining"].add_metric([name], snap.quota_remaining)
        tracked = family("crawlpace_scopes_tracked")
        tracked.add_metric([], len(list(self.recorder.tracked())))
        yield from fams.values()
        yield tracked


def metrics_text(registry: CollectorRegistry, accept: str = "") -> tuple[bytes, str]:
    """The exposition of ``registry`` in the format ``accept`` asks for, with its content type."""
    from prometheus_client.exposition import choose_encoder

    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
