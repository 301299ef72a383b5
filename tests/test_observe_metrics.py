"""Metrics: the throttler's observer hooks, the recorder's bounded counts, the Prometheus collector."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from crawlpace import ThrottleObserver
from crawlpace.observe import (
    METRICS,
    OTHER,
    CrawlFigures,
    Monitor,
    MonitorOptions,
    Recorder,
    Sampler,
    ServeError,
    ThrottlerCollector,
    throttler_reader,
)
from crawlpace.observe._metrics import FleetCollector, metrics_text
from crawlpace.stores.base import Outcome

from .conftest import ThrottlerFactory


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = metrics_text(registry)
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_recorder_counts_outcomes_and_waits_through_the_throttler(
        make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 1.0, "DOWNLOAD_DELAY_PER_SLOT": 1.0})
    recorder = Recorder()
    assert isinstance(recorder, ThrottleObserver)
    throttler.observe(recorder)
    for status in (200, 429, 503, 404, 500):
        async with throttler.slot("https://a.example/") as permit:
            permit.feedback(status=status)
    with pytest.raises(RuntimeError):
        async with throttler.slot("https://a.example/"):
            raise RuntimeError("boom")
    counts = recorder.scope("a.example")
    assert counts is not None
    assert counts.outcomes == {"ok": 1, "blocked": 0, "http_4xx": 1, "http_429": 1, "http_5xx": 1,
                               "http_503": 1, "exception": 1, "no_feedback": 0}
    assert counts.pushbacks == 2
    assert counts.admitted == 6
    # The first request went at once; each later one waited about the delay (backoff makes some longer).
    assert counts.wait_buckets[0] == 1
    assert counts.wait_sum >= 5 * 0.99


def test_recorder_folds_quiet_scopes_into_other_without_losing_counts() -> None:
    recorder = Recorder(max_tracked=10)
    for index in range(100):
        for _ in range(index % 7 + 1):
            recorder.admitted((f"h{index}",), 0.0)
            recorder.released((f"h{index}",), Outcome(status=200))
    assert len(list(recorder.tracked())) <= 10
    total = recorder.total()
    assert total.outcomes["ok"] == sum(index % 7 + 1 for index in range(100))
    top, rest = recorder.top(3)
    assert len(top) == 3
    assert all(counts.admitted == 7 for _, counts in top)
    assert sum(c.admitted for _, c in top) + rest.admitted == total.admitted


async def test_collector_keeps_the_busiest_scopes_and_sums_the_rest_into_other(
        make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0})
    recorder = Recorder()
    throttler.observe(recorder)
    for index in range(30):
        for _ in range(30 - index):
            async with throttler.slot(f"https://h{index}.example/") as permit:
                permit.feedback(status=429 if index == 0 else 200)
    sampler = Sampler(throttler_reader(throttler, recorder), recorder=recorder, max_scopes=5)
    await sampler.sample()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ThrottlerCollector(recorder, sampler, top_n=5))
    samples = _samples(registry)
    scopes = {dict(labels)["scope"] for name, labels in samples if name == "crawlpace_requests_total"}
    assert scopes == {"h0.example", "h1.example", "h2.example", "h3.example", "h4.example", OTHER}
    requests = {dict(labels)["scope"]: value for (name, labels), value in samples.items()
                if name == "crawlpace_requests_total" and dict(labels)["outcome"] == "ok"}
    assert requests[OTHER] == sum(30 - index for index in range(5, 30))
    assert samples[("crawlpace_pushbacks_total", (("scope", "h0.example"),))] == 30
    assert samples[("crawlpace_admission_wait_seconds_count", (("scope", "h1.example"),))] == 29
    assert samples[("crawlpace_concurrency", (("scope", "h1.example"),))] == 1
    assert samples[("crawlpace_breaker_state", (("scope", "h1.example"), ("state", "closed")))] == 1
    assert ("crawlpace_delay_seconds", (("scope", OTHER),)) not in samples
    assert samples[("crawlpace_scopes_tracked", ())] == 30


async def test_monitor_serves_metrics_on_loopback_and_refuses_a_port_in_use(
        make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler()
    monitor = Monitor(throttler, MonitorOptions(metrics_port=0, interval=0.05))
    await monitor.start()
    try:
        async with throttler.slot("https://a.example/") as permit:
            permit.feedback(status=200)
        server = monitor.metrics_server
        assert server is not None
        assert server.host == "127.0.0.1"
        url = f"http://127.0.0.1:{server.port}/metrics"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
        assert 'crawlpace_requests_total{outcome="ok",scope="a.example"} 1.0' in body
        busy = Monitor(throttler, MonitorOptions(metrics_port=server.port))
        with pytest.raises(ServeError, match=rf"--metrics-port: cannot listen on 127.0.0.1:{server.port}"):
            await busy.start()
    finally:
        await monitor.aclose()


def test_dashboard_off_loopback_without_a_token_is_refused(make_throttler: ThrottlerFactory) -> None:
    with pytest.raises(ServeError, match=r"binding to 0\.0\.0\.0 .* give a token"):
        Monitor(make_throttler(), MonitorOptions(dashboard_port=0, dashboard_host="0.0.0.0"))


async def test_the_fleet_reader_ranks_the_store_now_and_then_and_reads_only_the_top_between(
        make_throttler: ThrottlerFactory) -> None:
    from crawlpace.observe import store_reader

    throttler = make_throttler({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0})
    for index in range(6):
        for _ in range(6 - index):
            async with throttler.slot(f"https://h{index}.example/") as permit:
                permit.feedback(status=200)
    now = [0.0]
    listed = []
    store = throttler.store
    original = store.scopes

    async def counting_scopes() -> list[str]:
        listed.append(now[0])
        return await original()

    store.scopes = counting_scopes  # type: ignore[method-assign]
    read = store_reader(store, rerank=30.0, clock=lambda: now[0])
    assert list(await read(2)) == ["h0.example", "h1.example"]
    async with throttler.slot("https://h5.example/") as permit:  # h5 is still far behind
        permit.feedback(status=200)
    now[0] = 10.0
    assert list(await read(2)) == ["h0.example", "h1.example"]
    now[0] = 31.0
    assert list(await read(2)) == ["h0.example", "h1.example"]
    assert listed == [0.0, 31.0]  # the store was listed only to rank


async def test_labels_are_kept_for_the_run_and_other_never_goes_down(
        make_throttler: ThrottlerFactory) -> None:
    # A scope that was counted under "other" and later gets busy must not move counts out of
    # "other" (Prometheus would read it as a counter reset), and a labelled scope keeps its label.
    throttler = make_throttler({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0})
    recorder = Recorder()
    throttler.observe(recorder)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ThrottlerCollector(recorder, None, top_n=2))

    async def send(host: str, times: int) -> None:
        for _ in range(times):
            async with throttler.slot(f"https://{host}/") as permit:
                permit.feedback(status=200)

    def ok_by_scope() -> dict[str, float]:
        return {dict(labels)["scope"]: value for (name, labels), value in _samples(registry).items()
                if name == "crawlpace_requests_total" and dict(labels)["outcome"] == "ok"}

    await send("a.example", 5)
    first = ok_by_scope()
    assert first == {"a.example": 5}
    await send("b.example", 1)
    await send("c.example", 1)
    second = ok_by_scope()  # b gets the second label; c is "other"
    assert second == {"a.example": 5, "b.example": 1, OTHER: 1}
    await send("c.example", 50)  # c is now the busiest, but the labels are taken
    third = ok_by_scope()
    assert set(third) == {"a.example", "b.example", OTHER}
    assert third[OTHER] == 51
    for scope, value in second.items():
        assert third[scope] >= value


async def test_soft_blocks_count_as_pushbacks_and_in_flight_is_this_process(
        make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0,
                                "CONCURRENT_REQUESTS_PER_DOMAIN": 4})
    recorder = Recorder()
    throttler.observe(recorder)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ThrottlerCollector(recorder, None, top_n=5))
    async with throttler.slot("https://shop.example/") as permit:
        permit.feedback(status=200, blocked=True)  # a challenge page
    held = await throttler.acquire("https://shop.example/")
    samples = _samples(registry)
    assert samples[("crawlpace_requests_total", (("outcome", "blocked"), ("scope", "shop.example")))] == 1
    assert samples[("crawlpace_requests_total", (("outcome", "ok"), ("scope", "shop.example")))] == 0
    assert samples[("crawlpace_pushbacks_total", (("scope", "shop.example"),))] == 1
    assert samples[("crawlpace_inflight", (("scope", "shop.example"),))] == 1
    held.feedback(status=200)
    await held.release()
    samples = _samples(registry)
    assert samples[("crawlpace_inflight", (("scope", "shop.example"),))] == 0
    assert samples[("crawlpace_response_latency_seconds_count", (("scope", "shop.example"),))] == 2


def test_every_series_passes_promtool(tmp_path: Path) -> None:
    # Prometheus's own linter on a full exposition: every family, crawl figures and the
    # fleet gauges included, with values in every label.
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("no promtool on PATH (Debian's prometheus package ships it; scripts/test installs it)")
    recorder = Recorder()
    recorder.admitted(("a.example",), 0.02)
    recorder.released(("a.example",), Outcome(status=200, latency=0.05))
    recorder.gave_up("b.example", "dead")
    figures = CrawlFigures(outcomes=lambda: {"ok": 3, "exhausted": 2}, queued=lambda: 4, retries=lambda: 1,
                           queued_by_scope=lambda: {"a.example": 4})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ThrottlerCollector(recorder, None, top_n=5, crawl=figures,
                                         site_names={"a.example": "shop A"}))
    body, _ = metrics_text(registry)
    text = body.decode()
    assert 'crawlpace_scope_info{scope="a.example",site="shop A"} 1.0' in text
    assert 'crawlpace_scope_info{scope="b.example",site="b.example"} 1.0' in text  # no name: the key
    fleet_only = {"crawlpace_fleet_inflight", "crawlpace_frontier_urls", "crawlpace_frontier_outcomes",
                  "crawlpace_worker_last_seen_seconds"}
    for name, (kind, _labels, _help) in METRICS.items():
        if name not in fleet_only:
            assert f"# TYPE {name}{'_total' if kind == 'counter' else ''} {kind}" in text, name
    assert 'crawlpace_urls_total{outcome="exhausted"} 2.0' in text
    assert "crawlpace_urls_queued 4.0" in text
    assert "crawlpace_received_bytes_total 0.0" in text
    assert 'crawlpace_queue_length{scope="a.example"} 4.0' in text
    fleet = CollectorRegistry(auto_describe=False)
    fleet.register(ThrottlerCollector(Recorder(), None, fleet=True))
    fleet.register(FleetCollector(lambda: {"queued": 7, "claimed": 1, "done": 2, "enqueued": 10,
                                           "outcomes": {"ok": 2}, "workers": {"w1": 0.5}}))
    assert 'crawlpace_frontier_urls{state="queued"} 7.0' in metrics_text(fleet)[0].decode()
    for exposition in (body, metrics_text(fleet)[0]):
        done = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True,
                              timeout=30)
        assert done.returncode == 0, (done.stdout + done.stderr).decode()


async def test_the_final_figures_wait_for_the_scraper_that_watched_the_run(
        make_throttler: ThrottlerFactory) -> None:
    throttler = make_throttler({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0})

    def scrape(port: int) -> str:
        url = f"http://127.0.0.1:{port}/metrics"
        return str(urllib.request.urlopen(url, timeout=5).read().decode())

    # Nobody scraped during the run: closing does not wait.
    quiet = Monitor(throttler, MonitorOptions(metrics_port=0, interval=0.05, linger=30.0))
    await quiet.start()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await quiet.aclose()
    assert loop.time() - started < 5.0

    watched = Monitor(throttler, MonitorOptions(metrics_port=0, interval=0.05, linger=30.0))
    await watched.start()
    server = watched.metrics_server
    assert server is not None
    assert "crawlpace_requests_total" in await asyncio.to_thread(scrape, server.port)
    async with throttler.slot("https://last.example/") as permit:  # the run's last request
        permit.feedback(status=200)
    closing = asyncio.ensure_future(watched.aclose())
    await asyncio.sleep(0.3)
    assert not closing.done()  # still serving: the scraper has not read the final figures yet
    final = await asyncio.to_thread(scrape, server.port)
    assert 'crawlpace_requests_total{outcome="ok",scope="last.example"} 1.0' in final
    await asyncio.wait_for(closing, timeout=5.0)


def test_the_grafana_dashboard_queries_series_that_exist(tmp_path: Path) -> None:
    # Every panel's query names only series crawlpace exports, and parses as PromQL
    # (promtool checks them as recording rules). bench/grafana_check.py runs them against
    # a real Prometheus scraping a real crawl.
    import json
    import re
    from importlib import resources

    text = resources.files("crawlpace.observe").joinpath("assets/grafana-dashboard.json").read_text("utf-8")
    dashboard = json.loads(text)
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) >= 9
    known = set(METRICS)
    for expr in exprs:
        for name in re.findall(r"\b(crawlpace_[a-z_]+)", expr):
            base = re.sub(r"(_total|_bucket|_sum|_count)$", "", name)
            assert base in known, f"{expr}: {name} is not exported"
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("no promtool on PATH (Debian's prometheus package ships it; scripts/test installs it)")
    rules = tmp_path / "rules.yml"
    rules.write_text("groups:\n  - name: dashboard\n    rules:\n" + "".join(
        f"      - record: crawlpace:panel_{index}\n        expr: {json.dumps(expr)}\n"
        for index, expr in enumerate(exprs)), encoding="utf-8")
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
