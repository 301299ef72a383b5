"""``crawlpace crawl`` against real rate limiters on loopback, each beside an oracle told the limit.

Run it as ``python bench/real_limiters.py`` (a few minutes; ``--quick`` for a smoke run under a
minute, ``--json`` for a machine-readable last line, ``--cases NAME,NAME`` for some of them).

Every case starts a real limiter from the Debian or PyPI package on 127.0.0.1 with a
configuration written to a temporary folder, in front of pages it serves itself (nginx) or
of a small threaded Python backend (``--serve-backend``, started by this script):

* **nginx-req**: nginx ``limit_req`` at 10 r/s per client, no burst (``limit_req_status 429``);
* **nginx-req-burst**: the same with ``burst=10`` (excess requests wait in nginx's queue);
* **nginx-req-503**: ``burst=1`` with nginx's default ``limit_req_status`` (503, no
  ``Retry-After``): a line of one, whose refusals look like a server's errors;
* **nginx-req-nodelay**: ``burst=10 nodelay`` (ten at once, then the rate);
* **nginx-conn**: ``limit_conn`` 4 per client in front of a backend that takes 100 ms;
* **haproxy-req-rate**: a stick table ``http_req_rate(10s)`` and ``http-request deny
  deny_status 429 if { sc_http_req_rate(0) gt 100 }``: 10/s, refused requests counted too;
* **haproxy-conn-cur**: ``conn_cur`` with ``deny_status 503 if { sc_conn_cur(0) gt 4 }``,
  ``option httpclose`` (so a slot is freed when the connection closes, a moment after the
  answer), in front of the 100 ms backend;
* **flask-fixed** and **flask-moving**: a Flask app behind Flask-Limiter (``limits``),
  ``20 per 2 second`` per client with the fixed-window and the moving-window strategy and its
  headers on (``X-RateLimit-*`` and ``Retry-After`` on every answer); **flask-fixed-1s** and
  **flask-moving-1s** the same at ``10 per 1 second``.

A limiter whose binary or package is missing is skipped with a line saying so. Each case
runs two contenders one after the other, each on a fresh limiter: **crawlpace** (``crawlpace
crawl URLS -o OUT --quiet --json``, adaptive as by default) and **oracle**, an httpx client in
this process told the limit: for a rate, one request in flight, each sent 1.05 x the
limit's gap after the previous one's send and its answer (nginx refuses a request that
arrives a millisecond early, and a loaded machine delays some arrivals); with nginx's
``burst=10`` (the excess waits in line), 4 in flight and no gap: each request is sent after an
answer, so it finds at most 3 ahead of it, and nginx serves the line at exactly the rate (the
simulator's oracle does the same on a ``queue`` site); with nginx's
``burst=10 nodelay``, a bucket of 10 refilled at that pace, 4 in flight; for a Flask-Limiter
window, 4 in flight while fewer than its count less one went in the last window (plus 50 ms);
for HAProxy's counter, its count less one at once when the whole run fits in it, the rate's
gap otherwise (the counter's estimate keeps a burst against the client for one to two
periods, so past the first count a burst gains nothing); for a concurrency cap, the cap in
flight with each slot resting 5 ms after its answer. What counts is what the limiter logged (its own
access log, or the app's): requests, 200s and refusals (429 and 503), with their times.
Reported per case and contender: **goodput/limit** (200s per second from the first to the last
request, over the configured limit), **x oracle** (that over the oracle's) and the
**pushback** share (refusals per request).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime as dt
import http.server
import importlib.util
import json
import math
import os
import platform
import shutil
import signal
import socket
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _spawn_env import pin_pythonpath

HERE = Path(__file__).resolve().parent
#: Seconds a crawl may take at most; past it the contender is stopped and the run counts as cut.
LIMIT, QUICK_LIMIT = 120.0, 6.0
#: Seconds of pages at the limit in each case, and with --quick.
SECONDS, QUICK_SECONDS = 30.0, 2.0
#: The cases --quick runs: one of each kind of limit.
QUICK_CASES = ("nginx-req", "nginx-conn", "haproxy-req-rate", "haproxy-conn-cur", "flask-fixed")
#: Seconds a server may take to answer its first request.
START = 10.0
#: The backend's latency in the concurrency cases.
SLOW = 0.1
#: The oracle's margins: its gap over the limit's, and the rest of a concurrency slot after an answer.
ORACLE_GAP = 1.05
ORACLE_REST = 0.005
REFUSALS = frozenset({429, 503})


@dataclass(frozen=True)
class Case:
    """One limiter configuration.

    Attributes:
        name: the case's name.
        server: ``nginx``, ``haproxy`` or ``flask``.
        rate: the limit in requests per second (for a cap: cap over the backend's latency).
        inflight: the oracle's requests in flight.
        gap: the oracle's seconds between sends (0: none).
        rest: the oracle's rest of a slot after its answer.
        backend_delay: the Python backend's latency (None: no backend, nginx serves the pages).
        config: the limiter's settings, as its builder reads them.
    """

    name: str
    server: str
    rate: float
    inflight: int
    gap: float
    rest: float = 0.0
    backend_delay: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    #: Requests the limiter lets through at once from a fresh start (1: none beyond the rate).
    allowance: int = 1
    #: How the allowance comes back: ``bucket`` (one per ``gap``, nginx's ``burst``), ``window``
    #: (``allowance`` in any ``window`` seconds, Flask-Limiter) or ``once`` (a counter such as
    #: HAProxy's ``http_req_rate``, whose estimate of the rate keeps a burst for a whole period and
    #: more: the allowance is used only when every request fits in it).
    refill: str = "bucket"
    window: float = 0.0


#: Requests the oracle keeps in flight where a limiter lets a burst through.
BURST_INFLIGHT = 4

CASES: tuple[Case, ...] = (
    Case("nginx-req", "nginx", 10.0, 1, ORACLE_GAP / 10.0, config={"limit_req": ""}),
    # burst=10 without nodelay: nginx queues the excess and serves it at the rate, so a burst
    # gains nothing; the oracle keeps a few in line, so that nginx serves at exactly the rate.
    Case("nginx-req-burst", "nginx", 10.0, BURST_INFLIGHT, 0.0, config={"limit_req": " burst=10"}),
    # burst=1 and nginx's default status, 503 with no Retry-After: a line of one, refused past it
    # with the status a server error has too. The oracle keeps one in line, no gap.
    Case("nginx-req-503", "nginx", 10.0, 1, 0.0, config={"limit_req": " burst=1", "status": 503}),
    # burst=10 nodelay: 11 at once (the request and the burst), then one per 100 ms.
    Case("nginx-req-nodelay", "nginx", 10.0, BURST_INFLIGHT, ORACLE_GAP / 10.0,
         config={"limit_req": " burst=10 nodelay"}, allowance=11),
    Case("nginx-conn", "nginx", 4 / SLOW, 4, 0.0, ORACLE_REST, backend_delay=SLOW, config={"limit_conn": 4}),
    # 100 per 10 s, refusals counted: a fresh counter lets 100 through at once, but HAProxy's
    # estimate (this period's count plus the last one's, prorated) holds a burst against the
    # client for up to two periods, so a burst only pays when every request fits in it.
    Case("haproxy-req-rate", "haproxy", 10.0, BURST_INFLIGHT, ORACLE_GAP / 10.0, backend_delay=0.0,
         config={"req_rate": 100, "period": 10}, allowance=100, refill="once"),
    Case("haproxy-conn-cur", "haproxy", 4 / SLOW, 4, 0.0, ORACLE_REST, backend_delay=SLOW,
         config={"conn_cur": 4}),
    # 20 per 2 s: the oracle sends while fewer than 20 went in the last 2 s (a little more, for
    # the time a request takes to arrive), as many at once as that allows.
    Case("flask-fixed", "flask", 10.0, BURST_INFLIGHT, 2.0 / 19,
         config={"strategy": "fixed-window", "limit": "20 per 2 second"}, allowance=20, refill="window",
         window=2.0),
    Case("flask-moving", "flask", 10.0, BURST_INFLIGHT, 2.0 / 19,
         config={"strategy": "moving-window", "limit": "20 per 2 second"}, allowance=20, refill="window",
         window=2.0),
    # The same windows at 1 s: shorter windows the crawl must not mistake for a rate.
    Case("flask-fixed-1s", "flask", 10.0, BURST_INFLIGHT, 1.0 / 9,
         config={"strategy": "fixed-window", "limit": "10 per 1 second"}, allowance=10, refill="window",
         window=1.0),
    Case("flask-moving-1s", "flask", 10.0, BURST_INFLIGHT, 1.0 / 9,
         config={"strategy": "moving-window", "limit": "10 per 1 second"}, allowance=10, refill="window",
         window=1.0),
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def missing(case: Case) -> str | None:
    """Why a case cannot run here, or None."""
    if case.server in ("nginx", "haproxy") and shutil.which(case.server) is None:
        return f"no {case.server} binary on PATH (apt-get install {case.server})"
    if case.server == "flask" and importlib.util.find_spec("flask_limiter") is None:
        return "Flask-Limiter is not installed (pip install 'crawlpace[bench]')"
    return None


# -- the servers ------------------------------------------------------------------------------


PAGE = b"<!doctype html><title>page</title><p>a page</p>\n"


class Backend(http.server.BaseHTTPRequestHandler):
    """Pages after a fixed delay; every request logged as ``time status path``."""

    delay = 0.0
    log_file: Any = None
    lock = threading.Lock()
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.delay:
            time.sleep(self.delay)
        status = 200 if self.path.startswith("/page/") else 404
        body = PAGE if status == 200 else b"not found\n"
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.log_file is not None:
            with self.lock:
                self.log_file.write(f"{time.time():.6f} {status} {self.path}\n")
                self.log_file.flush()

    def log_message(self, format: str, *args: Any) -> None:
        return


class ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve_backend(port: int, delay: float, log: str | None) -> None:
    """``--serve-backend``: the Python backend, until SIGTERM."""
    Backend.delay = delay
    Backend.log_file = open(log, "a", encoding="utf-8") if log else None  # noqa: SIM115 - lives as long as the process
    server = ThreadingServer(("127.0.0.1", port), Backend)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


def serve_flask(port: int, strategy: str, limit: str, log: str) -> None:
    """``--serve-flask``: a Flask app behind Flask-Limiter, every answer logged, until SIGTERM."""
    from flask import Flask
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address
    from werkzeug.serving import make_server

    app = Flask("real_limiters")
    Limiter(get_remote_address, app=app, default_limits=[limit], strategy=strategy, headers_enabled=True,
            storage_uri="memory://")

    @app.route("/page/<int:number>")
    def page(number: int) -> bytes:
        return PAGE

    out = open(log, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    lock = threading.Lock()
    inner = app.wsgi_app

    def logged(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        arrived = time.time()

        def start(status: str, headers: list[tuple[str, str]], *args: Any) -> Any:
            with lock:
                out.write(f"{arrived:.6f} {status.split()[0]} {environ.get('PATH_INFO', '')}\n")
                out.flush()
            return start_response(status, headers, *args)

        return inner(environ, start)

    app.wsgi_app = logged  # type: ignore[method-assign]
    server = make_server("127.0.0.1", port, app, threaded=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


def nginx_config(case: Case, folder: Path, port: int, backend: int | None) -> str:
    zone = ""
    rule = ""
    if "limit_req" in case.config:
        zone = "limit_req_zone $binary_remote_addr zone=perip:1m rate=10r/s;"
        rule = (f"limit_req zone=perip{case.config['limit_req']}; "
                f"limit_req_status {case.config.get('status', 429)};")
    if "limit_conn" in case.config:
        zone = "limit_conn_zone $binary_remote_addr zone=conns:1m;"
        rule = f"limit_conn conns {case.config['limit_conn']}; limit_conn_status 503;"
    serve = (f"proxy_pass http://127.0.0.1:{backend}; proxy_http_version 1.1; "
             f"proxy_set_header Connection \"\";" if backend is not None else f"root {folder / 'www'};")
    return f"""daemon off;
master_process off;
worker_processes 1;
pid {folder / 'nginx.pid'};
error_log {folder / 'error.log'} warn;
events {{ worker_connections 1024; }}
http {{
    log_format timed '$msec $status $uri';
    access_log {folder / 'access.log'} timed;
    client_body_temp_path {folder / 'tmp'};
    proxy_temp_path {folder / 'tmp'};
    fastcgi_temp_path {folder / 'tmp'};
    uwsgi_temp_path {folder / 'tmp'};
    scgi_temp_path {folder / 'tmp'};
    default_type text/html;
    {zone}
    server {{
        listen 127.0.0.1:{port};
        location / {{ {rule} {serve} }}
    }}
}}
"""


def haproxy_config(case: Case, port: int, backend: int) -> str:
    if "req_rate" in case.config:
        period, most = case.config["period"], case.config["req_rate"]
        track = (f"    stick-table type ip size 100k expire 60s store http_req_rate({period}s)\n"
                 f"    http-request track-sc0 src\n"
                 f"    http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt {most} }}\n")
    else:
        track = ("    option httpclose\n"
                 "    stick-table type ip size 100k expire 60s store conn_cur\n"
                 "    tcp-request connection track-sc0 src\n"
                 f"    http-request deny deny_status 503 if {{ sc_conn_cur(0) gt {case.config['conn_cur']} }}"
                 "\n")
    return f"""global
    log stdout format raw local0
    maxconn 2000
defaults
    mode http
    log global
    log-format "%Ts %ms %ST %HU"
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend web
    bind 127.0.0.1:{port}
{track}    default_backend app
backend app
    server s1 127.0.0.1:{backend}
"""


@dataclass
class Limiter:
    """A running limiter (and its backend): where it listens and where its log is."""

    base: str
    log: Path
    processes: list[subprocess.Popen[bytes]]
    log_parser: Callable[[str], tuple[float, int, str] | None]


def plain_line(line: str) -> tuple[float, int, str] | None:
    """``time status path`` (nginx's ``timed`` format, the Flask app's and the backend's)."""
    parts = line.split()
    if len(parts) < 3:
        return None
    with contextlib.suppress(ValueError):
        return float(parts[0]), int(parts[1]), parts[2]
    return None


def haproxy_line(line: str) -> tuple[float, int, str] | None:
    """``%Ts %ms %ST %HU``: seconds, milliseconds, status, URI."""
    parts = line.split()
    if len(parts) < 4:
        return None
    with contextlib.suppress(ValueError):
        return int(parts[0]) + int(parts[1]) / 1000, int(parts[2]), parts[3]
    return None


def spawn(command: list[str], folder: Path, name: str, stdout: Path | None = None) -> subprocess.Popen[bytes]:
    out = open(stdout or folder / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=folder,
                                start_new_session=True)
    finally:
        out.close()


def wait_serving(url: str, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START
    while time.monotonic() < deadline:
        if any(process.poll() is not None for process in processes):
            raise RuntimeError(f"a server for {url} exited at start")
        with (contextlib.suppress(OSError),
              socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=0.5)):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not start serving within {START:g} s")


def start_limiter(case: Case, folder: Path, pages: int) -> Limiter:
    folder.mkdir(parents=True)
    (folder / "tmp").mkdir()
    port = free_port()
    processes: list[subprocess.Popen[bytes]] = []
    backend: int | None = None
    try:
        if case.backend_delay is not None:
            backend = free_port()
            processes.append(spawn([sys.executable, __file__, "--serve-backend", str(backend),
                                    str(case.backend_delay)], folder, "backend"))
            wait_serving(f"http://127.0.0.1:{backend}", processes)
        if case.server == "nginx":
            www = folder / "www" / "page"
            www.mkdir(parents=True)
            for number in range(1, pages + 1):
                (www / str(number)).write_bytes(PAGE)
            conf = folder / "nginx.conf"
            conf.write_text(nginx_config(case, folder, port, backend), encoding="utf-8")
            processes.append(spawn(["nginx", "-c", str(conf), "-p", str(folder)], folder, "nginx"))
            log, parser = folder / "access.log", plain_line
        elif case.server == "haproxy":
            assert backend is not None
            conf = folder / "haproxy.cfg"
            conf.write_text(haproxy_config(case, port, backend), encoding="utf-8")
            log, parser = folder / "haproxy.log", haproxy_line
            processes.append(spawn(["haproxy", "-f", str(conf), "-db"], folder, "haproxy", stdout=log))
        else:
            log, parser = folder / "flask.log", plain_line
            command = [sys.executable, __file__, "--serve-flask", str(port), case.config["strategy"],
                       case.config["limit"], str(log)]
            processes.append(spawn(command, folder, "flask"))
        wait_serving(f"http://127.0.0.1:{port}", processes)
    except BaseException:
        stop(processes)
        raise
    time.sleep(0.2)  # the limiter's own start-up lines go before the runs' in its log
    log.touch()
    return Limiter(f"http://127.0.0.1:{port}", log, processes, parser)


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# -- the contenders ---------------------------------------------------------------------------


#: The oracle's margins on a burst: requests it leaves unused of an allowance, and the seconds it
#: adds to a window (a request takes a moment to arrive).
ALLOWANCE_SPARE = 1
WINDOW_MARGIN = 0.05


class OraclePace:
    """When the oracle may send next, from what it was told of the limiter.

    Without an allowance, one send per ``gap``. A ``bucket`` allowance is a token bucket of that
    many less one spare, refilled one per ``gap``; a ``window`` allowance lets that many less
    one go in any window (plus a margin); a ``once`` allowance is spent only when the whole run
    (``total`` requests) fits in it, else the oracle keeps the gap.
    """

    def __init__(self, case: Case, total: int) -> None:
        self.case = case
        room = max(case.allowance - ALLOWANCE_SPARE, 1)
        self.refill = case.refill if room > 1 else "bucket"
        if self.refill == "once" and total > room:
            room = 1
        self.room = room
        self.tokens = float(room)
        self.stamp = time.monotonic()
        self.sent: collections.deque[float] = collections.deque()
        self.next_send = 0.0

    def delay(self, now: float) -> float:
        """Seconds from ``now`` until a send is allowed."""
        if self.refill == "window":
            horizon = self.case.window + WINDOW_MARGIN
            while self.sent and self.sent[0] <= now - horizon:
                self.sent.popleft()
            return 0.0 if len(self.sent) < self.room else self.sent[0] + horizon - now
        if self.room == 1:
            return max(self.next_send - now, 0.0)
        if self.refill == "bucket":
            self.tokens = min(self.tokens + (now - self.stamp) / self.case.gap, float(self.room))
            self.stamp = now
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) * self.case.gap

    def take(self, now: float) -> None:
        self.sent.append(now)
        self.tokens -= 1.0
        self.next_send = now + self.case.gap

    def answered(self, now: float) -> None:
        # One in flight at the rate: the gap runs from the answer too. The request arrived before
        # its answer came back, so the next one arrives at least a gap after it, however late it
        # got there.
        if self.room == 1 and self.case.inflight == 1:
            self.next_send = max(self.next_send, now + self.case.gap)


async def oracle(case: Case, urls: list[str]) -> None:
    """Every URL, paced as the case says, resent after a refusal or an error (8 times at most)."""
    queue = list(reversed(urls))
    lock = asyncio.Lock()
    pace = OraclePace(case, len(urls) + 1)  # the pages and robots.txt

    async def turn() -> None:
        async with lock:
            wait = pace.delay(time.monotonic())
            if wait > 0:  # exactly until the send is allowed: the lock keeps the others out
                await asyncio.sleep(wait + 1e-4)
            pace.take(time.monotonic())

    def answered() -> None:
        pace.answered(time.monotonic())

    async def worker(client: httpx.AsyncClient) -> None:
        while queue:
            url = queue.pop()
            for _attempt in range(9):
                await turn()
                try:
                    status = (await client.get(url)).status_code
                except httpx.HTTPError:
                    status = 0
                answered()
                if case.rest:
                    await asyncio.sleep(case.rest)
                if status not in REFUSALS and status != 0:
                    break

    limits = httpx.Limits(max_connections=case.inflight, max_keepalive_connections=case.inflight)
    async with httpx.AsyncClient(timeout=10.0, limits=limits, trust_env=False) as client:
        # robots.txt first, as a crawler reads it: the connection is open before the first page is
        # timed (a new connection would delay that page's arrival and bunch it with the next).
        base = urls[0].split("/page/", 1)[0] if urls else ""
        with contextlib.suppress(httpx.HTTPError):
            await turn()
            await client.get(f"{base}/robots.txt")
            answered()
        await asyncio.gather(*(worker(client) for _ in range(case.inflight)))


def run_crawlpace(urls: list[str], folder: Path, limit: float,
                  debug: bool = False) -> tuple[bool, int | None]:
    """``crawlpace crawl`` on the URLs; return whether it was cut at the time limit, and its exit code.

    With ``debug`` the crawl logs every decision (``-vv``) into ``crawl.out`` instead of staying quiet.
    """
    url_file = folder / "urls.txt"
    url_file.write_text("\n".join(urls) + "\n", encoding="utf-8")
    with (folder / "crawl.out").open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "crawlpace", "crawl", str(url_file), "-o",
                                    str(folder / "out.jsonl"), "-vv" if debug else "--quiet", "--json"],
                                   stdout=out, stderr=subprocess.STDOUT, cwd=folder, start_new_session=True)
    try:
        process.wait(limit)
        return False, process.returncode
    except subprocess.TimeoutExpired:
        stop([process])
        return True, process.returncode


@dataclass
class Result:
    """One contender on one case, as the limiter logged it."""

    case: str
    contender: str
    requests: int = 0
    ok: int = 0
    refused: int = 0
    seconds: float | None = None
    goodput: float | None = None
    goodput_over_limit: float | None = None
    pushback: float | None = None
    over_oracle: float | None = None
    cut: bool = False
    exit_code: int | None = None


def tally(case: Case, contender: str, limiter: Limiter, cut: bool, exit_code: int | None) -> Result:
    # Only the contender's requests: HAProxy also logs the readiness check's bare connection
    # (``wait_serving``) as ``<BADREQ>``, made before the contender starts. Timed from it, the crawl's
    # figure counted the seconds its process took to start (2-4 s at load) where the oracle, run
    # in this process, took 0.4 s: 0.86 x the oracle on ``haproxy-req-rate`` whose pages went at
    # the oracle's pace (bench/results/counters14.md). nginx and the Flask app log no such row.
    rows = [row for line in limiter.log.read_text(encoding="utf-8", errors="replace").splitlines()
            if (row := limiter.log_parser(line)) is not None and row[2].startswith("/")]
    result = Result(case.name, contender, cut=cut, exit_code=exit_code)
    pages = [row for row in rows if row[2].startswith("/page/")]
    result.requests = len(rows)
    result.ok = sum(1 for row in pages if row[1] == 200)
    result.refused = sum(1 for row in rows if row[1] in REFUSALS)
    if len(rows) >= 2:
        times = [row[0] for row in rows]
        result.seconds = round(max(times) - min(times), 3)
        if result.seconds > 0:
            result.goodput = round(result.ok / result.seconds, 3)
            result.goodput_over_limit = round(min(result.goodput / case.rate, 9.99), 3)
    result.pushback = round(result.refused / result.requests, 4) if result.requests else None
    return result


def run_case(case: Case, root: Path, pages: int, limit: float, debug: bool = False) -> list[Result]:
    results: list[Result] = []
    for contender in ("crawlpace", "oracle"):
        folder = root / f"{case.name}-{contender}"
        limiter = start_limiter(case, folder, pages)
        try:
            urls = [f"{limiter.base}/page/{number}" for number in range(1, pages + 1)]
            cut = False
            code_or_none: int | None = 0
            if contender == "crawlpace":
                cut, code_or_none = run_crawlpace(urls, folder, limit, debug)
            else:
                try:
                    asyncio.run(asyncio.wait_for(oracle(case, urls), limit))
                except TimeoutError:
                    cut = True
            time.sleep(0.3)  # the last log lines
        finally:
            stop(limiter.processes)
        results.append(tally(case, contender, limiter, cut, code_or_none))
    mine, best = results
    if mine.goodput is not None and best.goodput:
        mine.over_oracle = round(mine.goodput / best.goodput, 3)
        best.over_oracle = 1.0
    return results


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> None:
    pin_pythonpath()  # the crawls it starts run this tree's crawlpace (bench/_spawn_env.py)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help=f"a few pages per case, only {', '.join(QUICK_CASES)} (under a minute)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON on the last line")
    parser.add_argument("--cases", default=None, help=f"comma-separated: {', '.join(c.name for c in CASES)}")
    parser.add_argument("--seconds", type=float, default=0.0,
                        help=f"seconds of pages at each limit (default {SECONDS:g}, quick {QUICK_SECONDS:g})")
    parser.add_argument("--workdir", default=None, help="keep every config and log here")
    parser.add_argument("--debug-log", action="store_true",
                        help="the crawl logs every decision (-vv) into CASE-crawlpace/crawl.out; "
                             "give --workdir to keep it (a cut or slow crawl can then be read)")
    parser.add_argument("--serve-backend", nargs=2, metavar=("PORT", "DELAY"), help=argparse.SUPPRESS)
    parser.add_argument("--serve-flask", nargs=4, metavar=("PORT", "STRATEGY", "LIMIT", "LOG"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_backend:
        serve_backend(int(args.serve_backend[0]), float(args.serve_backend[1]), None)
        return
    if args.serve_flask:
        port, strategy, limit_text, log = args.serve_flask
        serve_flask(int(port), strategy, limit_text, log)
        return
    wanted = (set(QUICK_CASES) if args.quick else None) if args.cases is None else {
        name.strip() for name in args.cases.split(",") if name.strip()}
    unknown = (wanted or set()) - {case.name for case in CASES}
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(sorted(unknown))}; choose from: "
                         f"{', '.join(case.name for case in CASES)}")
    seconds = args.seconds or (QUICK_SECONDS if args.quick else SECONDS)
    limit = QUICK_LIMIT if args.quick else LIMIT
    started = time.monotonic()
    print(f"real limiters: {seconds:g} s of pages at each limit, crawlpace crawl beside an oracle told "
          f"the limit; Python {platform.python_version()}", flush=True)
    results: list[Result] = []
    skipped: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        root = (Path(args.workdir).resolve() if args.workdir
                else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="real-limiters-"))))
        root.mkdir(parents=True, exist_ok=True)
        for case in CASES:
            if wanted is not None and case.name not in wanted:
                continue
            why = missing(case)
            if why:
                skipped[case.name] = why
                print(f"  {case.name}: skipped: {why}", flush=True)
                continue
            pages = max(math.ceil(case.rate * seconds), 10)
            try:
                pair = run_case(case, root, pages, limit, args.debug_log)
            except RuntimeError as exc:
                skipped[case.name] = str(exc)
                print(f"  {case.name}: skipped: {exc}", flush=True)
                continue
            results += pair
            if not args.json:
                mine = pair[0]
                print(f"  {case.name}: crawlpace {mine.ok} pages in {fmt(mine.seconds, 1)} s, "
                      f"{mine.refused} refused; x oracle {fmt(mine.over_oracle)}", flush=True)
    print()
    print("| case | contender | requests | 200 | 429+503 | pushback % | seconds | goodput/s | goodput/limit "
          "| x oracle |")
    print("|:--|:--|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        print(f"| {r.case} | {r.contender} | {r.requests} | {r.ok} | {r.refused} | "
              f"{fmt(None if r.pushback is None else 100 * r.pushback, 1)} | {fmt(r.seconds, 1)} | "
              f"{fmt(r.goodput)} | {fmt(r.goodput_over_limit)} | {fmt(r.over_oracle)}"
              f"{' (cut)' if r.cut else ''} |")
    crawled = [r for r in results if r.contender == "crawlpace"]
    ratios = [r.over_oracle for r in crawled if r.over_oracle is not None]
    pushback = sum(r.refused for r in crawled) / max(sum(r.requests for r in crawled), 1)
    summary = {"median_over_oracle": None if not ratios else round(statistics.median(ratios), 3),
               "worst_over_oracle": None if not ratios else min(ratios),
               "pushback_share": round(pushback, 4)}
    if crawled:
        print(f"\ncrawlpace: median {fmt(summary['median_over_oracle'])} x oracle, worst "
              f"{fmt(summary['worst_over_oracle'])}, pushback {100 * pushback:.1f} % of its requests")
    print(f"whole benchmark: {time.monotonic() - started:.1f} s")
    if args.json:
        print(json.dumps({"benchmark": "real_limiters", "quick": args.quick, "seconds_of_pages": seconds,
                          "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                          "python": platform.python_version(), "cpus": os.cpu_count(),
                          "results": [asdict(r) for r in results], "skipped": skipped, "summary": summary,
                          "seconds": round(time.monotonic() - started, 1)}, sort_keys=True))


if __name__ == "__main__":
    main()
