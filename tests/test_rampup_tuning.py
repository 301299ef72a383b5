"""Rampup's tuning and the user's guide agree: the table of numbers names every one, with its value.

``docs/concepts/rampup.md`` ("The numbers it is tuned with") lists every field of
:class:`~crawlpace.policy._rampup_tuning.RampupTuning` and every number derived from
them, each with its kind; a field added, merged or changed without the table fails here, naming it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from crawlpace.policy._rampup_tuning import TUNING, RampupTuning
from crawlpace.policy._shared_rules import GAP_WEIGHT

PAGE = Path(__file__).resolve().parents[1] / "docs" / "concepts" / "rampup.md"
#: A name in backquotes, then either its value or " = formula = value" (a derived number), with a unit.
_ENTRY = re.compile(r"`(\w+)`(?: = [^*|]*=)? (\d+(?:\.\d+)?)( ms| s)?")


#: What a number may be: it follows from how limiters and HTTP work, it was set against other values
#: on named cases, it is a design choice not yet compared with others, or it follows by a formula.
KINDS = ("model", "measured", "chosen", "derived")


def _table() -> tuple[str, dict[str, float], dict[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## The numbers it is tuned with", 1)[1].split("\n## ", 1)[0]
    numbers: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for row in section.splitlines():
        cells = row.split("|")
        if len(cells) < 4 or not row.startswith("| ") or "`" not in cells[2]:
            continue
        for name, value, unit in _ENTRY.findall(cells[2]):
            numbers[name] = float(value) / (1000.0 if unit == " ms" else 1.0)
            kinds[name] = cells[1].strip()
    return section, numbers, kinds


def _derived() -> list[str]:
    return [name for name, member in vars(RampupTuning).items() if isinstance(member, property)]


def test_the_table_names_every_number_with_its_value() -> None:
    section, table, _ = _table()
    fields = {f.name: getattr(TUNING, f.name) for f in dataclasses.fields(RampupTuning)}
    derived = {name: getattr(TUNING, name) for name in _derived()}
    missing = sorted((set(fields) | set(derived)) - set(table))
    assert not missing, f"{PAGE.name}: the table of numbers lacks {missing}"
    stale = sorted(set(table) - set(fields) - set(derived))
    assert not stale, f"{PAGE.name}: the table names {stale}, which RampupTuning no longer has"
    for name, value in {**fields, **derived}.items():
        assert table[name] == pytest.approx(value, abs=0.005), (
            f"{PAGE.name}: `{name}` is {value}, not {table[name]}")
    assert f"it: {len(fields)} fields, and {len(derived)} numbers derived" in " ".join(section.split())


def test_each_number_has_its_kind() -> None:
    _, _, kinds = _table()
    unknown = {name: kind for name, kind in kinds.items() if kind not in KINDS}
    assert not unknown, f"{PAGE.name}: kinds must be one of {KINDS}: {unknown}"
    derived = sorted(name for name, kind in kinds.items() if kind == "derived")
    assert derived == sorted(_derived()), f"{PAGE.name}: the derived numbers are {sorted(_derived())}"


def test_a_derived_number_follows_its_fields() -> None:
    # The formulas the table states, applied to a tuning with other values.
    other = dataclasses.replace(TUNING, tolerance=0.1, cut=0.85, late_share=0.2,
                                ceiling_share=0.9, cut_deep=0.36, knee_slack=0.02, confirm=4)
    assert other.cut_over == pytest.approx(0.7)
    assert other.latency_noise == pytest.approx(0.1)
    assert other.open_slots == 16
    assert other.used_share == pytest.approx(0.36)
    assert other.sent_cap == pytest.approx(1.0 / 0.36)
    assert other.good_ceiling == pytest.approx(0.9)
    assert other.near_share == pytest.approx(0.63)
    assert other.lockout_gaps == pytest.approx(5.0)
    assert other.start_ceiling_share == pytest.approx(0.81)
    assert other.good_share == pytest.approx(0.6)
    assert other.climb_share == pytest.approx(0.8)
    assert other.search_pace == pytest.approx(1.0 / 0.36)
    assert other.quick_refusal == pytest.approx(0.36)
    assert other.strict_near == pytest.approx(0.63)
    assert other.fit_share == pytest.approx(0.9 * 1.05)
    assert other.fit_hold == pytest.approx(1.0 / 0.36 ** 2)
    assert other.latency_signal == pytest.approx(0.04)
    assert other.start_sent_weight == pytest.approx(1.0 - GAP_WEIGHT)
    assert other.hold_long == pytest.approx((1.0 + 1.0 / 0.36) / 2.0)
    assert other.probe_gap_max == pytest.approx(1.0 / 0.36)
    assert other.min_round == pytest.approx(0.36)
    assert other.high == pytest.approx(1.0 / 0.36)
