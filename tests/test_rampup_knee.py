"""Rampup's load fit: a latency per count in flight, and the count that serves the most (pure, no clock).

Whole crawls against knees and caps are in ``test_rampup_limiters``; these cases pin the
fit's own rules: which samples it takes, and where it puts the best load.
"""

from __future__ import annotations

import pytest

from crawlpace.policy.rampup import Rampup


def controller() -> Rampup:
    return Rampup(start_rate=1.0, min_rate=1 / 300, max_rate=100.0, max_concurrency=16, window=60.0,
                  target=(1.0, 1.0))


def fill(ramp: Rampup, latency_at: dict[int, float], rounds: int = 3) -> None:
    """Answers at each count in flight, each sent after the count settled, ``rounds`` rounds of it."""
    now = 0.0
    for n, latency in latency_at.items():
        ramp._note_load(now, n, latency, now)  # the first answer at a new count only marks it
        for _ in range(rounds * n):
            now += latency / n
            ramp._note_load(now, n, latency, now - latency)
        now += 1.0


@pytest.mark.parametrize(("exponent", "best"), [(1.0, 5), (2.0, 5)])
def test_the_best_load_is_where_more_in_flight_stops_paying(exponent: float, best: int) -> None:
    # Past a knee of 5 the latency grows as (n / 5) ** exponent: the throughput stays level
    # (exponent 1) or falls (2). The level stretch adds nothing, so the knee is the best load.
    ramp = controller()
    fill(ramp, {n: 0.2 * max(1.0, n / 5) ** exponent for n in range(1, 11)})
    assert ramp.best_load() == best


def test_latency_that_buys_throughput_is_the_loads_price() -> None:
    # Each request held adds a sixth of the latency, up to a hard limit of 9: the throughput still
    # grows at 9 (by 4 % a step), so the best load is the top, though latency there is 2.4 times
    # the baseline, past rampup's cut line.
    ramp = controller()
    fill(ramp, {n: 0.355 + 0.0613 * (n - 1) for n in range(1, 10)})
    assert ramp.best_load() == 9


def test_one_slow_answer_among_quick_ones_moves_the_fit_little() -> None:
    ramp = controller()
    fill(ramp, {3: 0.2})
    ramp._note_load(100.0, 3, 6.0, 94.0)  # a success answered after 6 s
    got = ramp.throughput(3)
    assert got is not None
    assert got >= 0.8 * 3 / 0.2


def test_a_sample_counts_only_when_its_count_held_from_send_to_answer() -> None:
    ramp = controller()
    ramp._note_load(0.0, 4, 0.2, -0.2)
    for i in range(1, 5):
        # Sent before the count in flight settled at 4: its latency belongs to another load.
        ramp._note_load(0.01 * i, 4, 0.2, -0.1)
    assert ramp.throughput(4) is None
    for i in range(1, 5):
        ramp._note_load(1.0 + 0.05 * i, 4, 0.2, 0.5)
    assert ramp.throughput(4) == pytest.approx(4 / 0.2)
