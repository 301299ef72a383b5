"""The shipped Grafana dashboard against a real Prometheus scraping a real crawl.

Run it as ``python bench/grafana_check.py`` (``--quick`` for a run under a minute,
``--json`` for a machine-readable last line). It needs Debian's ``prometheus``
package (``/usr/bin/prometheus``).

What it does, all on 127.0.0.1:

1. serves the simulator's ``mixed`` farm (``crawlpace sim``), which has a site
   that is down, one that sends challenge pages, one behind a Crawl-delay and
   others that push back;
2. crawls it with ``crawlpace crawl --metrics-port``;
3. runs Prometheus with a one-second scrape of that endpoint, in a scratch folder;
4. when the crawl has ended, asks Prometheus every query of every panel of
   ``crawlpace/observe/assets/grafana-dashboard.json`` (fleet panels apart) and
   counts the panels that show data;
5. checks the figures an operator reads against the crawl's own output: the
   URLs by outcome in Prometheus against the JSON lines, the requests per host
   against what the simulator counted, and that the last requests reached
   Prometheus (the crawl waits for the final scrape before it exits);
6. checks that every series of a per-site panel carries its site's name in
   the simulator (the crawl is given ``--sites``), not only its address.

The figures: panels with data out of those that should have it, and each
comparison with both sides.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

#: Panels served only by ``crawlpace dashboard`` for a fleet: not expected from one crawl.
FLEET_PANELS = {"Fleet: shared frontier", "Fleet: seconds since each worker was heard from"}
#: Panels that show data only when something went wrong on some site (the mixed farm has such sites).
TROUBLE_PANELS = {"Holds and backoff", "Breakers not closed"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def query(base: str, expr: str, at: float) -> list[dict[str, Any]]:
    """``expr`` evaluated at ``at``: the crawl's end (after it, Prometheus has marked its series stale)."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(url, timeout=10) as answer:
        data = json.loads(answer.read().decode())
    if data.get("status") != "success":
        raise RuntimeError(f"{expr}: {data}")
    return list(data["data"]["result"])


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def run(quick: bool) -> dict[str, Any]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        raise SystemExit("bench/grafana_check.py: no prometheus on PATH (apt-get install prometheus)")
    dashboard = json.loads(resources.files("crawlpace.observe").joinpath("assets/grafana-dashboard.json")
                           .read_text(encoding="utf-8"))
    work = Path(tempfile.mkdtemp(prefix="crawlpace-grafana-"))
    processes: list[subprocess.Popen[str]] = []
    try:
        urls = work / "urls.txt"
        stats_port = free_port()
        sim = subprocess.Popen([sys.executable, "-m", "crawlpace", "sim", "mixed", "--urls", str(urls),
                                "--control-port", str(stats_port), "--output", ""],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        processes.append(sim)
        assert sim.stdout is not None
        for said in sim.stdout:
            if said.startswith("serving"):
                break
        if quick:
            per_host: Counter[str] = Counter()
            kept = []
            for url in urls.read_text(encoding="utf-8").splitlines():
                host = urllib.parse.urlsplit(url).hostname or ""
                if per_host[host] < 8:
                    per_host[host] += 1
                    kept.append(url)
            urls.write_text("\n".join(kept) + "\n", encoding="utf-8")
        metrics_port, prom_port = free_port(), free_port()
        config = work / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                          "  - job_name: crawl\n    static_configs:\n"
                          f"      - targets: ['127.0.0.1:{metrics_port}']\n", encoding="utf-8")
        prom = subprocess.Popen([prometheus, f"--config.file={config}",
                                 f"--storage.tsdb.path={work / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        processes.append(prom)
        base = f"http://127.0.0.1:{prom_port}"

        def ready() -> bool:
            try:
                return bool(urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200)
            except OSError:
                return False
        wait_for(ready, 30, "Prometheus to start")
        out = work / "out.jsonl"
        started = time.monotonic()
        crawl = subprocess.run([sys.executable, "-m", "crawlpace", "crawl", str(urls), "-o", str(out),
                                "--metrics-port", str(metrics_port), "--quiet", "--json",
                                "--linger", "10", "--sites", f"http://127.0.0.1:{stats_port}/sites"],
                               capture_output=True, text=True, timeout=600)
        seconds = time.monotonic() - started
        ended = time.time()
        if crawl.returncode not in (0, 1):
            raise RuntimeError(f"the crawl failed ({crawl.returncode}): {crawl.stderr[-2000:]}")
        time.sleep(2.0)  # let the last scrape's samples be written
        if not query(base, 'up{job="crawl"}', ended):
            raise SystemExit(f"bench/grafana_check.py: Prometheus never scraped the crawl in its "
                             f"{seconds:.1f} s (a loaded machine starts it late): nothing to check; "
                             "run it again")
        text = out.read_text(encoding="utf-8")
        lines: list[dict[str, Any]] = [json.loads(line) for line in text.splitlines()]
        written = Counter(str(line["outcome"]) for line in lines)
        shown = {item["metric"]["outcome"]: round(float(item["value"][1]))
                 for item in query(base, "max by (outcome) (crawlpace_urls_total)", ended)}
        requests = {item["metric"]["scope"]: round(float(item["value"][1]))
                    for item in query(base, "sum by (scope) (crawlpace_requests_total)", ended)}
        with urllib.request.urlopen(f"http://127.0.0.1:{stats_port}/stats", timeout=10) as answer:
            sites = json.loads(answer.read().decode())
        site_requests = {str(urllib.parse.urlsplit(str(figures["url"])).hostname): int(figures["requests"])
                         for figures in dict(sites).values()}
        names = set(sites)
        panels = []
        unnamed: list[str] = []
        for item in dashboard["panels"]:
            title = item["title"]
            if title in FLEET_PANELS:
                continue
            series = 0
            for target in item["targets"]:
                found = query(base, target["expr"], ended)
                series += len(found)
                if "{{site}}" in target.get("legendFormat", ""):
                    unnamed += [f"{title}: {row['metric']}" for row in found
                                if row["metric"].get("site") not in names | {"other"}]
            panels.append({"title": title, "series": series, "expected": title not in TROUBLE_PANELS})
        with_data = sum(1 for panel in panels if panel["series"] > 0)
        return {
            "crawl_seconds": round(seconds, 1), "urls": len(lines),
            "panels": panels, "panels_with_data": with_data, "panels_checked": len(panels),
            "missing_expected": [panel["title"] for panel in panels
                                 if panel["expected"] and not panel["series"]],
            "outcomes_jsonl": dict(written), "outcomes_prometheus": shown,
            "outcomes_match": dict(written) == shown,
            "requests_crawler": requests, "requests_sites": site_requests,
            # The crawler counts released requests; the site counts arrivals (robots.txt included both).
            "requests_match": all(requests.get(host, 0) == count for host, count in site_requests.items()),
            # Per-site panels show the simulator's site names (crawlpace_scope_info), not addresses.
            "series_without_site_name": unnamed, "sites_named": not unnamed,
        }
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="8 pages per site (under a minute)")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    args = parser.parse_args(argv)
    figures = run(args.quick)
    print(f"crawl: {figures['urls']} URLs in {figures['crawl_seconds']} s")
    for panel in figures["panels"]:
        mark = "ok" if panel["series"] else ("-" if not panel["expected"] else "NO DATA")
        print(f"  {panel['title']:<48} {panel['series']:>3} series  {mark}")
    print(f"panels with data: {figures['panels_with_data']} of {figures['panels_checked']}"
          f"; missing where expected: {figures['missing_expected'] or 'none'}")
    print(f"URL outcomes, JSON lines {figures['outcomes_jsonl']} vs Prometheus "
          f"{figures['outcomes_prometheus']}: {'match' if figures['outcomes_match'] else 'DIFFER'}")
    print(f"requests per host, crawler vs sites: {'match' if figures['requests_match'] else 'DIFFER'}")
    named = "all" if figures["sites_named"] else figures["series_without_site_name"]
    print(f"per-site series named by site: {named}")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    ok = (figures["outcomes_match"] and figures["requests_match"] and not figures["missing_expected"]
          and figures["sites_named"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
