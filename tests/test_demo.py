"""``crawlpace demo``: the simulator farm crawled end to end, reported from both sides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawlpace.cli import main


def test_quick_demo_crawls_every_site_politely(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "demo"
    assert main(["demo", "--quick", "--json", "--out-dir", str(out_dir)]) == 0
    text = capsys.readouterr().out
    figures = json.loads(text.strip().splitlines()[-1])
    crawl, sites = figures["crawl"], figures["sites"]
    assert crawl["urls"] == 55
    # The dead site's robots.txt answers 503: RFC 9309 forbids the site, its pages are left for a resume.
    assert crawl["outcomes"] == {"exhausted": 5, "ok": 50}
    assert figures["site_totals"]["violations"] == 0
    for name, site in sites.items():
        if site["profile"] != "dead":
            assert site["ok"] == 6, name  # five pages and robots.txt
    assert sites["deadlink"]["requests"] == 2  # robots.txt, tried twice; no page
    assert figures["seconds"] < 60
    lines = (out_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 55
    assert len({json.loads(line)["url"] for line in lines}) == 55
    assert (out_dir / "rates.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out_dir / "sites.json").read_text(encoding="utf-8"))["slowshop"]["timeline"]["ok"]
    # One row per site, both sides joined: the site's name beside the crawler's host, and the dead
    # site's pages left over are said to be expected, not reported as a failed run.
    assert figures["as_expected"] is True
    slowshop_host = sites["slowshop"]["url"].split("/")[2].split(":")[0]
    row = next(line for line in text.splitlines() if line.startswith("slowshop "))
    assert slowshop_host in row.split()
    dead_row = next(line for line in text.splitlines() if line.startswith("deadlink "))
    assert "given up, as designed" in dead_row
    assert "as expected: 50 of 55 pages fetched" in text
    assert "incomplete" not in text
    assert "0 broken rules" in text
    # The HTML report joins both sides on one row per site: the crawler's host and the site's name.
    report = (out_dir / "report.html").read_text(encoding="utf-8")
    host = json.loads((out_dir / "sites.json").read_text(encoding="utf-8"))["slowshop"]["url"].split("/")[2]
    key = '<span class="key">' + host.split(":")[0] + "</span>"
    row = next(row for row in report.split("<tr") if key in row)
    assert '<td>slowshop<span class="key">' in row
    assert f"<td>{sites['slowshop']['requests']}</td>" in row
    assert "report.html" in text
