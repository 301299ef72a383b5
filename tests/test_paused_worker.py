"""A worker paused past its lease (SIGSTOP), then woken (SIGCONT): its late renewal and release must not
free the slot another worker took meanwhile. Real redis-server, real child process, real time."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from crawlpace import Settings
from crawlpace._clock import AsyncioClock
from crawlpace.stores import Blocked, Lease, Outcome

from .redis_server import reap
from .test_redis_faults import LEASE, SRC, make_store

pytestmark = pytest.mark.redis

RAW = {"RANDOMIZE_DOWNLOAD_DELAY": False,
       "THROTTLING_SCOPES": {"paused.example": {"concurrency": 1, "delay": 0.0, "delay_per_slot": 0.0}}}
FULL = Blocked(None, (("paused.example", None),))

# The child: take the only slot, say so, then release it when told to on standard input.
CHILD = """
import asyncio, json, random, sys
from crawlpace import Settings
from crawlpace._clock import AsyncioClock
from crawlpace.stores import Lease, Outcome, open_store

async def main():
    store = open_store(sys.argv[1], Settings.from_scrapy(json.loads(sys.argv[2])), AsyncioClock(),
                       random.Random(1))
    lease = await store.acquire((("paused.example", 1.0),))
    if not isinstance(lease, Lease):
        print("not admitted:", lease, flush=True)
        sys.exit(3)
    print("held", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    given_up = await store.release(lease, Outcome(status=200, latency=0.1))
    print("released", list(given_up), flush=True)
    await store.aclose()

asyncio.run(main())
"""


def spawn(url: str) -> subprocess.Popen[bytes]:
    """Start the child that takes the only slot of ``paused.example`` (it prints "held" once it has)."""
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-c", CHILD, url, json.dumps(RAW)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": path})


async def read_line(child: subprocess.Popen[bytes], within: float = 15.0) -> str:
    assert child.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), within)
    return line.decode().strip()


async def test_a_paused_workers_late_release_frees_nothing_of_anothers(redis_url: str) -> None:
    url = f"{redis_url}&lease={LEASE:g}"
    child = spawn(url)
    clock = AsyncioClock()
    store = make_store(url, Settings.from_scrapy(RAW), clock)
    try:
        assert await read_line(child) == "held"
        assert await store.acquire((("paused.example", 1.0),)) == FULL

        child.send_signal(signal.SIGSTOP)  # no renewals from now on
        stopped = time.monotonic()
        while True:  # the paused worker's lease runs out; this worker takes the slot
            mine = await store.acquire((("paused.example", 1.0),))
            if isinstance(mine, Lease):
                break
            assert time.monotonic() - stopped < LEASE + 2.0, "the paused worker's slot never came back"
            await asyncio.sleep(0.05)
        await asyncio.sleep(LEASE)  # well past the lease: the child is still stopped

        child.send_signal(signal.SIGCONT)
        await asyncio.sleep(LEASE)  # its renewer wakes and tries (lease / 3) before it releases
        assert await store.acquire((("paused.example", 1.0),)) == FULL  # still mine alone
        assert child.stdin is not None
        child.stdin.write(b"release\n")
        child.stdin.flush()
        assert (await read_line(child)).startswith("released")
        assert await store.acquire((("paused.example", 1.0),)) == FULL  # the late release freed nothing
        snap = await store.snapshot("paused.example")
        assert snap is not None
        assert snap.inflight == 1

        await store.release(mine, Outcome(status=200, latency=0.1))
        again = await store.acquire((("paused.example", 1.0),))
        assert isinstance(again, Lease)  # and the slot is whole: one slot, free once mine went back
        await store.release(again, Outcome(status=200, latency=0.1))
        child.wait(10.0)
        assert child.returncode == 0
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGCONT)
        reap(child, signal_first=False)
        if child.stdin is not None:
            child.stdin.close()
        await store.aclose()
