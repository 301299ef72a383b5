"""Draw docs/img/dashboard.png: the live dashboard of a crawl of the simulator's mixed farm.

Run from a checkout with Chromium installed: ``.venv/bin/python scripts/screenshot_dashboard.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from crawlpace import Settings
from crawlpace.crawl import CrawlJob, CrawlOptions
from crawlpace.observe import CrawlFigures, Monitor, MonitorOptions
from crawlpace.sim import Farm

OUT = Path(__file__).resolve().parent.parent / "docs" / "img" / "dashboard.png"


async def main(seconds: float) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs chromium on PATH (apt-get install chromium)")
    async with Farm.builtin("mixed") as farm:
        most = max(site.app.pages for site in farm.sites)
        urls = [f"{site.url}/page/{n}" for n in range(1, most + 1) for site in farm.sites
                if n <= site.app.pages]
        with tempfile.TemporaryDirectory() as folder:
            job = CrawlJob(Settings.from_scrapy({"THROTTLING_SCOPE_DEFAULTS": {"rampup": True}}),
                           CrawlOptions(output=Path(folder) / "out.jsonl", trust_env=False))
            summary = job.summary
            figures = CrawlFigures(outcomes=lambda: summary.outcomes,
                                   queued=lambda: max(summary.urls - sum(summary.outcomes.values()), 0),
                                   retries=lambda: summary.retries, queued_by_scope=job.scheduler.scope_sizes,
                                   hosts=lambda: summary.scopes)
            monitor = Monitor(job.throttler, MonitorOptions(dashboard_port=0, interval=0.5), crawl=figures,
                              site_names={site.host: site.name for site in farm.sites})
            await monitor.start()
            runner = asyncio.ensure_future(job.run(urls))
            await asyncio.sleep(seconds)
            assert monitor.dashboard is not None
            await asyncio.to_thread(subprocess.run, [
                chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--virtual-time-budget=2500", "--window-size=1640,760", f"--screenshot={OUT}",
                monitor.dashboard.url], capture_output=True, check=True)
            job.stop()
            await runner
            await monitor.aclose()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 12.0))
