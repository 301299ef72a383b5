"""``bench/real_limiters.py``'s tally of a limiter's log, on a log written by hand (no server started)."""

from __future__ import annotations

from pathlib import Path

from .bench_scripts import load_bench

real = load_bench("_bench_real_limiters", "real_limiters.py")


def test_haproxys_readiness_row_is_not_the_crawls_time(tmp_path: Path) -> None:
    # HAProxy logs the benchmark's readiness check (a bare connection, made before the contender
    # starts) as <BADREQ>. The crawl's process then took 3.8 s to start (at load 5) where the oracle,
    # run in the benchmark's own process, took 0.4 s: timed from that row, a crawl whose pages went
    # at the oracle's pace read 0.88 x the oracle. Its time and its requests are the crawl's own.
    log = tmp_path / "haproxy.log"
    rows = ["1000 0 400 <BADREQ>", "1003 800 404 /robots.txt", "1003 810 200 /page/1",
            "1004 810 429 /page/2", "1005 810 200 /page/2", "1013 800 200 /page/3"]
    log.write_text("\n".join(rows) + "\n", encoding="utf-8")
    case = next(case for case in real.CASES if case.name == "haproxy-req-rate")
    limiter = real.Limiter("http://127.0.0.1:1", log, [], real.haproxy_line)
    result = real.tally(case, "crawlpace", limiter, False, 0)
    assert result.seconds == 10.0
    assert result.requests == 5
    assert result.refused == 1
    assert result.ok == 3
    assert result.goodput == 0.3
    assert result.pushback == 0.2
