"""``bench/lockout_model.py``'s sliding window that counts every send, on send records written by hand."""

from __future__ import annotations

import math

import pytest

from .bench_scripts import load_bench

model = load_bench("_bench_lockout_model", "lockout_model.py")

# Five sends accepted 0.1 s apart from 0, the sixth refused at 0.5 s.
SENDS = [(0.1 * k, True) for k in range(5)] + [(0.5, False)]
TIMES = [at for at, _ in SENDS]


def test_a_window_over_every_send_fits_the_count_the_refusal_passed() -> None:
    # Over 1 s every accepted send saw at most 5 (itself counted), the refused one 6: N = 5 exactly.
    assert model._bounds(SENDS, TIMES, 1.0) == (5, 5)


def test_a_window_shorter_than_the_burst_fits_no_limit() -> None:
    # Over 0.25 s the accepted send at 0.4 saw 3 and the refused one at 0.5 saw 3 too: no N fits both.
    low, high = model._bounds(SENDS, TIMES, 0.25)
    assert low > high


def test_the_window_lets_a_send_through_once_two_sends_aged_out() -> None:
    # The refused send counted: six in the window, and a seventh sees at most 5 once 0.0 and 0.1 left it.
    assert model._opens(TIMES, 1.0, 5, 0.5) == pytest.approx(1.1)
    assert model._opens(TIMES, 1.0, 0, 0.5) == math.inf  # (nothing sent passes a limit of 0)
