"""A real three-node Redis Cluster on loopback, for the tests that need one.

Three ``redis-server`` processes in cluster mode, each on a free port of
127.0.0.1 with its own directory and no persistence, joined by
``redis-cli --cluster create`` into one cluster of three primaries (no
replicas) that share the 16384 hash slots.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from .redis_server import free_port, reap

__all__ = ["RedisCluster", "cluster_binaries"]


def cluster_binaries() -> tuple[str, str] | None:
    """``(redis-server, redis-cli)`` on PATH (or their Valkey twins), if both are there."""
    server = shutil.which("redis-server") or shutil.which("valkey-server")
    cli = shutil.which("redis-cli") or shutil.which("valkey-cli")
    return (server, cli) if server and cli else None


def _ask(port: int, command: bytes, timeout: float = 0.5) -> bytes:
    """Send one inline command to 127.0.0.1:``port`` and return what arrives first."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(command + b"\r\n")
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        # A bulk reply: "$<length>\r\n<payload>\r\n"; read the payload too.
        if data.startswith(b"$"):
            head, _, body = data.partition(b"\r\n")
            length = int(head[1:])
            while len(body) < length + 2:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                body += chunk
            return body[:length]
        return data


def _answers(port: int, command: bytes, expected: bytes) -> bool:
    return expected in _ask(port, command)


class RedisCluster:
    """Three cluster-mode redis-server processes on 127.0.0.1, joined into one cluster.

    Args:
        server: the redis-server binary.
        cli: the redis-cli binary (``--cluster create`` does the joining).
        nodes: how many primaries (at least three, as ``--cluster create`` wants).
    """

    def __init__(self, server: str, cli: str, nodes: int = 3) -> None:
        self.server = server
        self.cli = cli
        self.ports = [free_port() for _ in range(nodes)]
        # The cluster bus gets a free port of its own: the default, port + 10000, may be taken
        # or past 65535.
        self.bus_ports = [free_port() for _ in range(nodes)]
        self._dir = Path(tempfile.mkdtemp(prefix="crawlpace-cluster-"))
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """A store URL naming every node as a seed, in cluster mode."""
        return "redis://" + ",".join(f"127.0.0.1:{port}" for port in self.ports) + "/0?cluster=1"

    def start(self, timeout: float = 20.0) -> None:
        """Start the nodes, join them, and wait until every node reports ``cluster_state:ok``.

        Raises:
            RuntimeError: when a node exits, the joining fails or the cluster
                is not ready within ``timeout`` seconds (the nodes are stopped).
        """
        try:
            self._start(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, deadline: float) -> None:
        for port, bus in zip(self.ports, self.bus_ports, strict=True):
            home = self._dir / str(port)
            home.mkdir()
            with (home / "log").open("wb") as log:  # the child keeps its own copy of the descriptor
                self._processes.append(subprocess.Popen(
                    [self.server, "--port", str(port), "--cluster-port", str(bus), "--bind", "127.0.0.1",
                     "--cluster-enabled", "yes", "--cluster-config-file", str(home / "nodes.conf"),
                     "--cluster-node-timeout", "2000", "--appendonly", "no", "--save", "",
                     "--dir", str(home), "--protected-mode", "yes"],
                    stdout=log, stderr=subprocess.STDOUT))
        for port in self.ports:
            self._wait(partial(_answers, port, b"PING", b"+PONG"), deadline, f"node {port} is silent")
        create = subprocess.run(
            [self.cli, "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, timeout=max(1.0, deadline - time.monotonic()), check=False)
        if create.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed ({create.returncode}):\n"
                               f"{create.stdout.decode()}\n{create.stderr.decode()}")
        for port in self.ports:
            self._wait(partial(_answers, port, b"CLUSTER INFO", b"cluster_state:ok"), deadline,
                       f"node {port} never reported cluster_state:ok")

    def _wait(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.poll() is not None:
                    log = (self._dir / str(self.ports[self._processes.index(process)]) / "log")
                    raise RuntimeError(f"a cluster node exited with {process.returncode}:\n"
                                       f"{log.read_text(errors='replace')[-2000:]}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(what)

    def stop(self) -> None:
        """Stop every node (the cluster cannot be started again: use a new one)."""
        processes, self._processes = self._processes, []
        reap(*processes)

    def close(self) -> None:
        """Stop the nodes and remove their directories."""
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
