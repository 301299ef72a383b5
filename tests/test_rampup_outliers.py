"""Rampup's outliers: one answer slowed by the site (a hang answered late) is not load, a queue is.

A request that hangs for seconds and then answers 200 is overtaken by the
requests sent after it, which a queue never does; it stays out of the smoothed
latency and gets a slot of its own. The scope tells rampup when each request
goes out (``out``) and is over (``settled``), as ``policy/scope.py`` does.
"""

from __future__ import annotations

from crawlpace.policy.rampup import Rampup


def controller(**overrides: object) -> Rampup:
    options: dict[str, object] = {"start_rate": 1.0, "min_rate": 1 / 300, "max_rate": 50.0,
                                  "max_concurrency": 16, "window": 60.0, "target": (1.0, 1.0)}
    options.update(overrides)
    return Rampup(**options)  # type: ignore[arg-type]


def exchange(ramp: Rampup, now: float, latency: float) -> float:
    """One request sent at ``now`` and answered 200 ``latency`` later, before the next send; return when
    the next one may go."""
    ramp.on_send(now)
    ramp.out(now)
    ramp.on_response(now + latency, pushback=False, current=True, latency=latency, elapsed=latency)
    ramp.settled(now)
    return max(now + latency, now + 1.0 / ramp.allowed_rate(now + latency))


def test_a_late_answer_overtaken_by_quick_ones_is_not_load() -> None:
    ramp = controller()
    now = 0.0
    while now < 10.0:
        now = exchange(ramp, now, 0.01)
    rate, generation, slots = ramp.rate, ramp.generation, ramp.concurrency(ramp.rate)
    assert rate == 50.0
    hung = now  # this request hangs 6 s, then answers 200; the ones sent after it answer in 10 ms
    ramp.on_send(hung)
    ramp.out(hung)
    now += 0.02
    while now < hung + 6.0:
        now = exchange(ramp, now, 0.01)
        if now > hung + 1.0:
            # Out far longer than the answers take, and overtaken: a straggler, with a slot of its own.
            assert ramp.concurrency(ramp.rate) == slots + 1
    ramp.on_response(hung + 6.0, pushback=False, current=True, latency=6.0, elapsed=6.0)
    ramp.settled(hung)
    # Before: smoothed in, 6 s read as a queue 600 times the baseline, and the rate was halved.
    assert ramp.generation == generation
    assert ramp.rate == rate
    assert ramp.latency is not None
    assert ramp.latency < 0.02
    # Such answers are hangs the slots make room for (rate x share x duration).
    assert ramp.concurrency(ramp.rate) > slots


def test_a_queue_that_slows_every_answer_is_still_cut() -> None:
    # A knee: past some load every answer waits its turn. Nothing sent later comes back first.
    ramp = controller(max_rate=10.0)
    now = 0.0
    while now < 20.0:
        now = exchange(ramp, now, 0.1)
    generation = ramp.generation
    for _ in range(3):
        now = exchange(ramp, now, 1.0)
    assert ramp.generation > generation
    assert ramp.rate < 10.0


def test_a_late_answer_alone_in_flight_is_not_load_and_keeps_the_start_phase() -> None:
    # A fleet's slot cap of 1 (a quick 502 with one page out) held by an 8.9-s hang answered 200: no
    # send could overtake it, and smoothed in, "past the knee" ended the start phase at 0.32/s (one
    # request every 3 s for 200 s). Alone in flight, it queued behind nothing of the crawler's.
    ramp = controller(max_rate=1000.0)
    now = 0.0
    for _ in range(3):
        now = exchange(ramp, now, 0.013)
    assert ramp.phase == "start"
    ramp.on_send(now)
    ramp.out(now)
    ramp.on_response(now + 8.9, pushback=False, current=True, latency=8.9, elapsed=8.9, inflight=1)
    ramp.settled(now)
    assert ramp.phase == "start"
    assert ramp.latency is not None
    assert ramp.latency < 0.05
