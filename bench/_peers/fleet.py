"""A fleet of ``crawlpace crawl --redis`` workers sharing one store, for ``bench/crawl_efficiency.py``.

Run it as ``python bench/_peers/fleet.py URLS.txt OUT.jsonl WORKERS``.

It starts a private ``redis-server`` on a free port of 127.0.0.1 (no persistence), fills
the shared frontier with ``crawlpace enqueue URLS --redis URL``, and starts WORKERS
processes of ``crawlpace crawl --redis URL -o OUT.N.jsonl --quiet --json`` without a URL
file: each takes URLs from the shared frontier, and all of them share every host's
limits, rampup state included, through the store. When they have all ended, their
output files are joined into OUT.jsonl (the contender's record of pages done). SIGTERM
stops the workers (then the server) and still joins what they wrote.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

#: Seconds the server may take to answer its first PING.
SERVER_START = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        sys.exit("fleet: no redis-server (or valkey-server) on PATH")
    port = free_port()
    server = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--dir", str(folder)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + SERVER_START
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            if conn.recv(16).startswith(b"+PONG"):
                return server, f"redis://127.0.0.1:{port}/0"
        time.sleep(0.05)
    server.kill()
    sys.exit(f"fleet: redis-server did not answer on port {port}")


def main(urls: Path, output: Path, workers: int) -> int:
    folder = output.parent
    server, store = start_redis(folder)
    crawlers: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        for crawler in crawlers:
            if crawler.poll() is None:
                crawler.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    outputs = [folder / f"{output.name}.{n}" for n in range(workers)]
    try:
        subprocess.run([sys.executable, "-m", "crawlpace", "enqueue", str(urls), "--redis", store],
                       check=True, stdout=subprocess.DEVNULL)
        for n, out in enumerate(outputs):
            with (folder / f"worker{n}.stderr").open("wb") as err:
                crawlers.append(subprocess.Popen(
                    [sys.executable, "-m", "crawlpace", "crawl", "-o", str(out), "--redis", store, "--quiet",
                     "--json"], stdout=subprocess.DEVNULL, stderr=err))
        codes = [crawler.wait() for crawler in crawlers]
    finally:
        for crawler in crawlers:
            if crawler.poll() is None:
                crawler.kill()
                crawler.wait()
        server.terminate()
        server.wait()
        with output.open("w", encoding="utf-8") as joined:
            for out in outputs:
                if out.exists():
                    joined.write(out.read_text(encoding="utf-8", errors="replace"))
    return max(codes, default=0)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: fleet.py URLS.txt OUT.jsonl WORKERS")
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])))
