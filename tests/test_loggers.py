"""One logger per component, named after its own module (issue 35 item 4).

A module logs on ``logging.getLogger(__name__)``, unless its lines belong to
a logger the docs or the tests name; those few are listed here with why.
"""

from __future__ import annotations

import re
from pathlib import Path

import crawlpace

ROOT = Path(crawlpace.__file__).parent

#: Logger names other than a module's own, and who depends on them.
KEPT = {
    "crawlpace.http": "docs/http.md: the library clients log their retries and robots.txt lines on it",
    "crawlpace._responses._headers": "docs/concepts/server-hints.md; tests/test_headers.py",
    "crawlpace.policy.scope": "docs/concepts/autothrottle.md and circuit-breaker.md",
    "crawlpace._throttle._throttler": "tests/test_ineffective.py: the throttler's notes at close",
    "crawlpace.guard": "docs/guard.md; tests/test_guard.py",
    "crawlpace.scrapy": "docs/reference/scrapy.md; the add-on's tests",
}

_NAMED = re.compile(r"""getLogger\(\s*["']([^"']+)["']""")


def _named_loggers() -> dict[str, str]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        for name in _NAMED.findall(path.read_text(encoding="utf-8")):
            found[f"{path.relative_to(ROOT).as_posix()}: {name}"] = name
    return found


def test_every_logger_is_its_modules_or_a_named_one() -> None:
    assert {where for where, name in _named_loggers().items() if name not in KEPT} == set()


def test_the_finder_sees_a_named_logger() -> None:
    assert "guard/_core.py: crawlpace.guard" in _named_loggers()
