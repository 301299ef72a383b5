"""What ``bench/fleet_errors.py`` and the fleet peer measure (bench/results/errors17.md).

A fleet crawls a flaky site (5xx and hangs of its own) at one process's pace on the fake clock, with
or without a loaded machine's lags: the shared errors verdict and the breaker cost a fleet nothing
there. What a fleet pays is the store's work per request: every worker waiting on the scope's gap
looks at the store when the gap ends, and one of them gets the send, so a fleet of N makes about N
admission calls a send. The fleet peer counts the server's calls so that a real run can show it.
"""

from __future__ import annotations

import socket
import uuid
from typing import Any

import pytest

from .bench_scripts import load_bench

fleet_errors = load_bench("bench_fleet_errors", "fleet_errors.py")
fleet_peer = load_bench("bench_fleet_peer", "_peers/fleet.py")

#: The random farm of stop 57's first seed (30 sites): its errors17, 266 pages, 15 % 500s at once,
#: 45 ms pages, a few hangs of 5.5 s; one process paced it at 74 pages/s, fleets of 4 and 8 at 39-41.
SEED, FARM, SITE = 1327435007, 30, "errors17"


def site() -> dict[str, Any]:
    return next(drawn for drawn in fleet_errors.errors_sites(SEED, FARM) if drawn["name"] == SITE)


@pytest.mark.redis
@pytest.mark.parametrize("lag", [None, 0.05])
async def test_a_fleet_crawls_a_flaky_site_at_one_processs_pace_on_the_fake_clock(redis_url: str,
                                                                                   lag: float | None) -> None:
    drawn = site()
    url = redis_url.split("?")[0]

    def lags() -> Any:
        return None if lag is None else fleet_errors.Lags(lag, 1.0, drawn["seed"])

    alone = await fleet_errors.measure("memory://", 1, drawn, drawn["seed"], lags())
    fleet = await fleet_errors.measure(url, 4, drawn, drawn["seed"], lags())
    assert alone.left == fleet.left == 0
    # Main at 83254da0: 8.69 s alone, 7.69 s for 4 workers; with 50 ms lags 11.45 s and 10.39 s.
    assert fleet.done <= 1.05 * alone.done
    assert fleet_errors.busiest(fleet.log) >= 0.8 * fleet_errors.busiest(alone.log)


@pytest.mark.redis
async def test_each_worker_waiting_on_the_gap_looks_at_the_store_once_a_send(redis_url: str) -> None:
    drawn = site()
    url = redis_url.split("?")[0]
    alone = await fleet_errors.measure("memory://", 1, drawn, drawn["seed"])
    fleet = await fleet_errors.measure(url, 4, drawn, drawn["seed"])
    # One process: about one refused look a send (the gap's end); 4 workers: about 4 (1,277 for 323
    # sends), each one a script call on a real server. A fleet's CPU a request grows with its workers.
    assert alone.blocked <= 1.1 * alone.sends
    assert fleet.blocked >= 3.5 * fleet.sends


@pytest.mark.redis
def test_the_fleet_peer_counts_the_servers_calls(redis_url: str) -> None:
    host_port = redis_url.split("//", 1)[1].split("/", 1)[0]
    store = f"redis://{host_port}/0"
    before = fleet_peer.command_calls(store).get("ping", 0)
    host, port = host_port.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2.0) as conn:
        for _ in range(3):
            conn.sendall(b"PING\r\n")
            assert conn.recv(16).startswith(b"+PONG")
    assert fleet_peer.command_calls(store).get("ping", 0) == before + 3
    assert fleet_peer.command_calls(f"redis://127.0.0.1:1/{uuid.uuid4().int % 16}") == {}
