"""A worker paused past its lease (SIGSTOP), then woken (SIGCONT): its late renewal and release must not
free the slot another worker took meanwhile, and its late touch and acknowledgement must not take or
finish a frontier claim another worker took meanwhile. Real redis-server, real child process, real time."""

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
from crawlpace.frontier._shared import SharedFrontier
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
from crawlpace.frontier._shared import SharedFrontier
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


def end_child(child: subprocess.Popen[bytes]) -> None:
    """Wake the worker if it is still stopped, then end it and close its input."""
    if child.poll() is None:
        child.send_signal(signal.SIGCONT)
    reap(child, signal_first=False)
    if child.stdin is not None:
        child.stdin.close()


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
        end_child(child)
        await store.aclose()


# The frontier child: claim the only URL, say which, then touch and acknowledge it when told to.
FRONTIER_CHILD = """
import asyncio, sys
from crawlpace.frontier._shared import SharedFrontier

async def main():
    frontier = SharedFrontier(sys.argv[1], worker="paused", visibility=float(sys.argv[2]))
    claim = await frontier.claim(1, spacing=0.0)
    print("claimed", *[item.id for item in claim.urls], flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    lost = await frontier.touch([item.id for item in claim.urls])
    print("lost", *lost, flush=True)
    done, dups = await frontier.ack([item.id for item in claim.urls], "ok")
    print("acked", done, dups, flush=True)
    await frontier.aclose()

asyncio.run(main())
"""


def spawn_frontier(url: str, visibility: float) -> subprocess.Popen[bytes]:
    """Start the child that claims the frontier's only URL (it prints "claimed ID" once it has)."""
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-c", FRONTIER_CHILD, url, str(visibility)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": path})


async def test_a_paused_workers_late_touch_and_ack_leave_anothers_claim_alone(redis_url: str) -> None:
    visibility = 1.0
    child = spawn_frontier(redis_url, visibility)
    mine = SharedFrontier(redis_url, worker="awake", visibility=30.0)
    try:
        await mine.enqueue(["http://paused.example/only"])
        words = (await read_line(child)).split()
        assert words[0] == "claimed"
        assert len(words) == 2
        paused_id = int(words[1])
        assert (await mine.claim(1, spacing=0.0)).urls == ()  # the paused worker holds it

        child.send_signal(signal.SIGSTOP)  # no touches from now on
        stopped = time.monotonic()
        while True:  # its claim expires; this worker takes the URL over
            claim = await mine.claim(1, spacing=0.0)
            if claim.urls:
                break
            assert time.monotonic() - stopped < visibility + 2.0, "the paused worker's claim never came back"
            await asyncio.sleep(0.05)
        assert [item.id for item in claim.urls] == [paused_id]
        assert claim.requeued == 1

        child.send_signal(signal.SIGCONT)
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert (await read_line(child)).split() == ["lost", str(paused_id)]  # its touch extended nothing
        assert (await read_line(child)).split() == ["acked", "0", "0"]  # and its ack finished nothing
        counts = await mine.counts()
        assert (counts.claimed, counts.done, counts.late) == (1, 0, 1)  # the claim stands, still mine
        assert await mine.touch([paused_id]) == []
        assert await mine.ack([paused_id], "ok") == (1, 0)  # the owner finishes it
        counts = await mine.counts()
        assert (counts.claimed, counts.done, counts.queued) == (0, 1, 0)
        child.wait(10.0)
        assert child.returncode == 0
    finally:
        end_child(child)
        await mine.aclose()
