"""The claim loop the crawl's workers and Scrapy's shared scheduler both run (frontier/_claim_loop.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from crawlpace import Settings
from crawlpace.frontier._claim_loop import ClaimLoop, Wording
from crawlpace.frontier._claims import claim_per_scope
from crawlpace.frontier._shared import Claim, SharedFrontier

WORDS = Wording(items="URLs", holder="worker", visibility="the visibility", down="")


class Idle(SharedFrontier):
    """A frontier whose one ready scope is the one the worker skips: every claim gets nothing."""

    def __init__(self) -> None:
        super().__init__("redis://127.0.0.1:1/0")  # never connected: claim is answered here
        self.skips: list[tuple[str, ...]] = []

    async def claim(self, count: int, *, spacing: float, skip: Sequence[str] = ()) -> Claim:
        self.skips.append(tuple(skip))
        # The skipped scope is ready now, so the frontier's next ready time is 0.
        return Claim(urls=(), queued=5, claimed=3, next_in=0.0, requeued=0)


async def test_a_claim_that_skipped_full_scopes_and_got_nothing_waits_the_whole_poll() -> None:
    # Scrapy's copy of the loop waited the frontier's next ready time (0, so 10 ms) and asked Redis
    # again a hundred times a second while its only ready scope was full.
    settings = Settings()
    frontier = Idle()
    loop = ClaimLoop(frontier, settings, now=time.monotonic, poll=0.1, wording=WORDS,
                     logger=logging.getLogger("test"))
    for fid in range(claim_per_scope(settings)):
        loop.hold(fid, "slow.test")
    assert loop.full_scopes() == ["slow.test"]
    end = time.monotonic() + 0.25
    try:
        await loop.run(before=_nothing, take=lambda claim: False, stopping=lambda: time.monotonic() > end)
    finally:
        await frontier.aclose()
    assert 2 <= len(frontier.skips) <= 4, len(frontier.skips)  # about one claim per poll, not 25
    assert set(frontier.skips) == {("slow.test",)}


def test_what_is_held_is_counted_per_scope() -> None:
    loop = ClaimLoop(Idle(), Settings(), now=time.monotonic, poll=0.1, wording=WORDS,
                     logger=logging.getLogger("test"))
    loop.hold(1, "a.test")
    loop.hold(2, "a.test")
    assert loop.release(1)
    assert not loop.release(1)  # released once only
    assert dict(loop.per_scope) == {"a.test": 1}
    assert loop.release(2)
    assert not loop.per_scope
    assert not loop.held


async def _nothing() -> None:
    return None
