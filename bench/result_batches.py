"""What writing result lines at the end of each loop turn costs, beside the 0.1 s batches of 0.7.

A crawl of one fast local site (127.0.0.1, 16 in flight, no delay, no
robots.txt), run alternately with each batching: CPU seconds of the process,
wall seconds, and write calls for the output file; medians of the rounds.
0.7 held lines up to 0.1 s (or 256 lines), so a ``kill -9`` re-sent the pages
whose lines waited; now a batch is written when its loop turn ends
(``crawl/_output.py``). The reference is the old batching, measured in the
same run.

Run from the repository root: ``python bench/result_batches.py --quick``
(1,000 pages, one round each) or without it (3,000 pages, three rounds).
``--json`` ends with one line of JSON.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
import crawlpace.crawl._job as jobmod  # noqa: E402
from crawlpace import Settings  # noqa: E402
from crawlpace.crawl import CrawlJob, CrawlOptions  # noqa: E402
from crawlpace.crawl._output import ResultBatch  # noqa: E402


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()

async def crawl(delay: float, n: int, tmp: str) -> tuple[float, float, int, bool]:
    """One crawl of ``n`` pages with batches of ``max_delay=delay``: (cpu s, wall s, writes, complete)."""
    def batch(write: Any, settled: Any, on_error: Any) -> ResultBatch[Any]:
        return ResultBatch(write, settled, on_error=on_error, max_delay=delay)

    jobmod.ResultBatch = batch  # type: ignore[attr-defined,assignment]
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    urls = [f"http://127.0.0.1:{port}/p/{i}" for i in range(n)]
    out = Path(tmp) / f"o{delay}-{time.monotonic_ns()}.jsonl"  # a fresh file and journal each run
    settings = Settings.from_scrapy({"DOWNLOAD_DELAY": 0, "DOWNLOAD_DELAY_PER_SLOT": 0,
                                     "CONCURRENT_REQUESTS": 32, "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
                                     "RANDOMIZE_DOWNLOAD_DELAY": False})
    writes = 0
    real = jobmod.CrawlJob._write_results

    def counting(self: CrawlJob, results: list[Any]) -> None:
        nonlocal writes
        writes += 1
        real(self, results)

    jobmod.CrawlJob._write_results = counting  # type: ignore[method-assign]
    c0, w0 = time.process_time(), time.monotonic()
    async with server:
        s = await CrawlJob(settings, CrawlOptions(output=out, trust_env=False, robots=False)).run(urls)
    jobmod.CrawlJob._write_results = real  # type: ignore[method-assign]
    return time.process_time() - c0, time.monotonic() - w0, writes, s.complete


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 pages, one round")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = parser.parse_args()
    pages, rounds = (1000, 1) if args.quick else (3000, 3)
    rows: dict[float, list[tuple[float, float, int, bool]]] = {0.1: [], 0.0: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for delay in (0.1, 0.0):  # alternated: the machine's load falls on both alike
                rows[delay].append(asyncio.run(crawl(delay, pages, tmp)))
    figures: dict[str, Any] = {"pages": pages, "rounds": rounds}
    for delay, name in ((0.1, "batches_0_1s"), (0.0, "per_turn")):
        runs = rows[delay]
        figures[name] = {"cpu_s": round(statistics.median(r[0] for r in runs), 3),
                         "wall_s": round(statistics.median(r[1] for r in runs), 3),
                         "writes": statistics.median(r[2] for r in runs), "complete": all(r[3] for r in runs)}
        print(f"{name:<14} cpu {figures[name]['cpu_s']:.3f} s  wall {figures[name]['wall_s']:.3f} s  "
              f"writes {figures[name]['writes']:g}")
    figures["cpu_ratio"] = round(figures["per_turn"]["cpu_s"] / figures["batches_0_1s"]["cpu_s"], 3)
    print(f"per-turn CPU / 0.1 s batches CPU: {figures['cpu_ratio']:.3f}")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
