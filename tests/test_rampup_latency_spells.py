"""Rampup's latency cuts on slow spells that the crawl's rate does not cause (bench/latency_spells.py).

A knee's latency follows the rate: cut it, and the next answers come quicker. A server slowed by
others (its other clients, a loaded machine) answers as slowly at any rate; a latency cut there goes
on only while the answers since the last cut come quicker, then holds, and once the latency is down
the rate climbs back to where the cuts started. Fake clock, no sockets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from crawlpace.policy.rampup import Rampup

from .test_rampup import controller, drive, send_and_answer
from .test_rampup_limiters import Bucket, HardKnee, Response, crawl


@dataclass
class SpellBucket(HardKnee):
    """A token bucket of ``rate`` per second, ``burst`` deep, whose accepted answers take ``quick``
    seconds, or ``slow`` inside a spell (start, end): slow whatever the rate it is sent at.

    A :class:`HardKnee` only so that the harness asks it each answer's time; no limit in flight."""

    rate: float = 44.1
    burst: float = 20.0
    quick: float = 0.003
    slow: float = 0.1
    spells: tuple[tuple[float, float], ...] = ()
    now: float = 0.0
    accepted_at: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.inner = Bucket(self.rate, self.burst, 1)

    @property
    def capacity(self) -> float:
        return self.rate

    def arrive(self, now: float) -> Response:
        self.now = now
        answer: Response = self.inner.arrive(now)
        if answer.status_code == 200:
            self._inflight += 1
            self.accepted_at.append(now)
        return answer

    def service(self) -> float:
        return self.slow if any(start <= self.now < end for start, end in self.spells) else self.quick


def _every(first: float, every: float, length: float, seconds: float) -> tuple[tuple[float, float], ...]:
    starts = [first + every * index for index in range(int((seconds - first) // every) + 1)]
    return tuple((start, start + length) for start in starts if start < seconds)


SECONDS = 100.0


@pytest.mark.parametrize(("length", "share", "tail_share"), [
    (5.0, 0.6, 0.5),   # 0.667, the last 8 s 0.66; main (3f9d7f9): 0.455 and 0.20, each spell cut 44/s to 8/s
    (1.0, 0.72, 0.7),  # 0.741 and 0.80; main: 0.683 and 0.62
])
async def test_slow_spells_the_rate_does_not_cause_hold_the_rate_instead_of_cutting_it(
        length: float, share: float, tail_share: float, caplog: pytest.LogCaptureFixture) -> None:
    site = SpellBucket(latency=0.003, per_inflight=0.0, limit=10**6,
                       spells=_every(10.0, 20.0, length, SECONDS))
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        out = await crawl(site, SECONDS, latency=0.003)
    assert out.share >= share
    assert out.refused <= 12
    assert "did not fall with the last cut" in caplog.text
    assert "climbing back to" in caplog.text
    # After the last spell (from 90 s) the rate climbs back to where the cuts started, not from their floor.
    tail = sum(1 for at in site.accepted_at if at >= SECONDS - 8.0) / 8.0 / site.rate
    assert tail >= tail_share


def _drive_knee(ramp: Rampup, start: float, end: float, knee_rate: float) -> float:
    """Send as fast as allowed; each answer takes 50 ms, times (rate / ``knee_rate``) squared past it."""
    now = start
    while now < end:
        rate = ramp.allowed_rate(now)
        send_and_answer(ramp, now, latency=0.05 * max(1.0, rate / knee_rate) ** 2)
        now += 1.0 / rate
    return now


def test_a_knee_whose_latency_follows_the_rate_is_cut_until_it_is_down(
        caplog: pytest.LogCaptureFixture) -> None:
    ramp = controller(start_rate=8.0, max_concurrency=16)
    drive(ramp, 0.0, 2.0, latency=0.05)
    send_and_answer(ramp, 2.0, pushback=True)  # ends the start phase
    end = drive(ramp, 2.0, 30.0, latency=0.05)
    top = ramp.allowed_rate(end)
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        end = _drive_knee(ramp, end, end + 10.0, knee_rate=top / 2.0)
    # Cut while the answers since each cut came quicker, down under the cut line (as on main: 40 -> 32/s).
    assert caplog.text.count("cut: latency") >= 2
    assert "did not fall" not in caplog.text
    assert ramp.allowed_rate(end) <= top * 0.85


def test_a_refusal_ends_a_held_run_of_latency_cuts(caplog: pytest.LogCaptureFixture) -> None:
    ramp = controller(start_rate=8.0, max_concurrency=16)
    drive(ramp, 0.0, 2.0, latency=0.05)
    send_and_answer(ramp, 2.0, pushback=True)
    end = drive(ramp, 2.0, 30.0, latency=0.05)
    end = drive(ramp, end, end + 2.0, latency=0.4)  # slow at any rate: one cut, then held
    assert "did not fall with the last cut" in ramp.decision
    send_and_answer(ramp, end, pushback=True, latency=0.4)  # the limit's: the run ends
    with caplog.at_level(logging.DEBUG, logger="crawlpace.policy.rampup"):
        drive(ramp, end + 0.5, end + 3.0, latency=0.05)
    assert "climbing back to" not in caplog.text
