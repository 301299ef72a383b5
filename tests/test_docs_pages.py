"""The docs read as a user's guide: pages of a readable length, fences that close, a short changelog."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md"])
#: A page longer than this answers more than one question: split it by question.
MAX_LINES = 900


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_page_is_short_enough_and_its_fences_close(page: Path) -> None:
    lines = page.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"{page.name}: {len(lines)} lines; split it by question"
    fences = [line for line in lines if line.startswith("```")]
    assert len(fences) % 2 == 0, f"{page.name}: a code fence is left open"


def test_the_performance_page_and_the_changelog_stay_short() -> None:
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()
    assert len(performance) <= 300
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    release = re.search(r"^## \[0\.7\.0\].*?(?=^## \[)", changelog, re.S | re.M)
    assert release is not None
    assert len(release.group(0).splitlines()) <= 180, "one line per user-visible change"
