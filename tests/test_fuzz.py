"""Every parser against hostile input: only its documented error may escape (bench/fuzz.py runs long)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzz_targets import TARGETS


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_parser_survives_hostile_input(name: str) -> None:
    strategy, check = TARGETS[name]

    # The same 150 examples every run, so the test command passes or fails alike on every
    # machine; bench/fuzz.py draws fresh ones for as long as it is given.
    @settings(max_examples=8 if name == "url lists" else 150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(strategy)
    def run(value: Any) -> None:
        check(value)

    run()


def test_the_targets_cover_every_parser() -> None:
    assert set(TARGETS) == {"robots.txt", "scrapy settings", "toml settings", "farm files",
                            "urls and store urls", "response headers", "password forms", "url lists"}
    assert all(isinstance(strategy, st.SearchStrategy) for strategy, _ in TARGETS.values())
