"""The clock-window fit (``policy/_rampup_window``): a window aligned to the clock is told from a
request-rate counter that counts refusals by every send, and its next boundary is predicted."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from crawlpace.policy._rampup_window import fit_window

SLACK = 0.01
LATE_SHARE = 0.25


def _clock_window(limit: int, window: float, phase: float) -> Callable[[float], bool]:
    counts: dict[int, int] = {}

    def arrive(now: float) -> bool:
        index = math.floor((now - phase) / window)
        counts[index] = counts.get(index, 0) + 1
        return counts[index] <= limit

    return arrive


def _request_rate(limit: float, period: float) -> Callable[[float], bool]:
    """HAProxy's ``http_req_rate``: every request counted, refused ones too, the last period blended in."""
    state = {"start": 0.0, "current": 0, "previous": 0}

    def arrive(now: float) -> bool:
        while now >= state["start"] + period:
            state["previous"], state["current"] = state["current"], 0
            state["start"] += period
        left = 1.0 - (now - state["start"]) / period
        state["current"] += 1
        return state["previous"] * left + state["current"] <= limit

    return arrive


def _crawl(arrive: Callable[[float], bool], pace: float, seconds: float) -> list[tuple[float, bool]]:
    """Sends at ``pace`` a second; after a refusal, probes at doubling gaps from the pace's up to
    2 s until one is accepted (a lock-out's probes, as rampup's episode sends them)."""
    sends: list[tuple[float, bool]] = []
    now, gap = 0.0, 1.0 / pace
    while now < seconds:
        ok = arrive(now)
        sends.append((now, ok))
        gap = 1.0 / pace if ok else min(2.0, 2.0 * gap)
        now += gap
    return sends


@pytest.mark.parametrize(("limit", "window", "phase", "pace"), [(30, 10.0, 3.7, 4.0), (57, 5.2, 1.1, 13.0),
                                                               (7, 1.2, 0.5, 7.0)])
def test_a_clock_windows_sends_give_its_next_boundary(limit: int, window: float, phase: float,
                                                      pace: float) -> None:
    sends = _crawl(_clock_window(limit, window, phase), pace, 12.0 * window)
    refused = [at for at, ok in sends if not ok]
    last = refused[-1]
    fit = fit_window(sends, last, SLACK, LATE_SHARE, complete=False)
    assert fit is not None
    earliest, latest, width = fit
    boundary = phase + math.floor((last - phase) / window + 1.0) * window
    # a probe at the latest boundary is accepted, and at most a tenth of the window late
    assert boundary - SLACK <= latest <= boundary + 0.1 * window
    assert earliest <= latest
    assert width == pytest.approx(window, rel=0.05)


@pytest.mark.parametrize(("limit", "period", "pace"), [(100, 10.0, 14.0), (10, 1.4, 9.0), (30, 10.0, 4.0)])
def test_a_counter_that_counts_refusals_fits_no_clock_window(limit: int, period: float, pace: float) -> None:
    # Its refused probes keep it locked, and its periods with a refusal accept varying counts: a
    # probe at a predicted boundary would be refused and counted, so no window is fitted.
    sends = _crawl(_request_rate(limit, period), pace, 12.0 * period)
    assert not all(ok for _, ok in sends)
    for at in [at for at, ok in sends if not ok]:
        assert fit_window([s for s in sends if s[0] <= at], at, SLACK, LATE_SHARE, complete=False) is None


def test_a_record_with_one_lock_out_gives_no_fit() -> None:
    # One lock-out's end and nothing else: a period is not told by one boundary.
    sends = _crawl(_clock_window(20, 4.0, 1.0), 8.0, 6.0)
    refused = [at for at, ok in sends if not ok]
    assert refused
    assert fit_window(sends, refused[-1], SLACK, LATE_SHARE, complete=False) is None
