"""Find the runnable examples of the docs: every ```python block is run, or marked as not run.

A python block followed by the ```text block of its output is run and must
print that output; any other python block is run and must succeed and print
nothing (no output, no warning: a page that shows no output promises none).

Three comments steer the runner, each on the line right before a block:

- ``<!-- not run: why -->`` before a python block: shown but not run (it
  needs a network, a server of the reader's, a module of their project; a
  fragment of a larger example);
- ``<!-- output varies: why -->`` before a python block: run, and it must
  succeed without a warning, but what it prints changes from run to run
  (real times, ports, jitter), so it is not compared;
- ``<!-- example file: NAME -->`` before any block: the block is written to
  ``NAME`` in the working folder of the page's examples that follow it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DOCS", "Example", "examples", "not_run", "quiet_examples", "same_output"]

ROOT = Path(__file__).resolve().parents[1]
#: The pages whose examples are run: every page of docs/ and the README.
DOCS = sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md"])

_FENCE = re.compile(r"^```(\w*)\s*$")
#: In a shown output, ``...`` stands for any text on that line (ports, timings, addresses).
ELLIPSIS = "..."


_NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")
_VARIES = re.compile(r"^<!-- output varies: (.+) -->$")
_FILE = re.compile(r"^<!-- example file: (\S+) -->$")


@dataclass(frozen=True, slots=True)
class Example:
    """One example: its page, the line its code starts on, the code, the output it shows, its files."""

    page: Path
    line: int
    code: str
    shown: str
    files: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks(text: str) -> list[tuple[str, int, str, int, str]]:
    """(language, first line, body, line after the end, the comment on the line before) per block."""
    lines = text.splitlines()
    blocks = []
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match:
            before = lines[index - 1].strip() if index else ""
            start = index
            index += 1
            body = []
            while index < len(lines) and not lines[index].startswith("```"):
                body.append(lines[index])
                index += 1
            blocks.append((match.group(1), start + 1, "\n".join(body), index + 1, before))
        index += 1
    return blocks


def examples(pages: list[Path] = DOCS) -> list[Example]:
    """Every python block that a text block follows within two lines, unless marked not run."""
    found = []
    for page in pages:
        blocks = _blocks(page.read_text(encoding="utf-8"))
        files: list[tuple[str, str]] = []
        for index, (lang, line, code, end, before) in enumerate(blocks):
            after = blocks[index + 1] if index + 1 < len(blocks) else None
            named = _FILE.match(before)
            if named:
                files.append((named.group(1), code + "\n"))
            if lang != "python" or _NOT_RUN.match(before) or _VARIES.match(before):
                continue
            if after is not None and after[0] == "text" and after[1] - end <= 2:
                found.append(Example(page, line, code, after[2], tuple(files)))
    return found


def quiet_examples(pages: list[Path] = DOCS) -> list[Example]:
    """Every python block that shows no output, or whose output varies, and is not marked not run.

    Each must run without a warning; one that shows no output must print nothing, and one
    whose output varies has ``shown`` set to ``...`` (anything).
    """
    found = []
    for page in pages:
        blocks = _blocks(page.read_text(encoding="utf-8"))
        files: list[tuple[str, str]] = []
        for index, (lang, line, code, end, before) in enumerate(blocks):
            after = blocks[index + 1] if index + 1 < len(blocks) else None
            named = _FILE.match(before)
            if named:
                files.append((named.group(1), code + "\n"))
                continue
            if lang != "python" or _NOT_RUN.match(before):
                continue
            if _VARIES.match(before):
                found.append(Example(page, line, code, ELLIPSIS, tuple(files)))
                continue
            if after is not None and after[0] == "text" and after[1] - end <= 2:
                continue
            found.append(Example(page, line, code, "", tuple(files)))
    return found


def not_run(pages: list[Path] = DOCS) -> list[tuple[str, str]]:
    """(page:line, why) of every python block marked not run."""
    marked = []
    for page in pages:
        for _lang, line, _code, _end, before in _blocks(page.read_text(encoding="utf-8")):
            match = _NOT_RUN.match(before)
            if match:
                marked.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return marked


def _line_matches(shown: str, actual: str) -> bool:
    if ELLIPSIS not in shown:
        return shown == actual
    pattern = ".*".join(re.escape(part) for part in shown.split(ELLIPSIS))
    return re.fullmatch(pattern, actual) is not None


def same_output(shown: str, actual: str) -> bool:
    """Whether ``actual`` is what the page shows (trailing blanks ignored, ``...`` matching anything)."""
    want = [line.rstrip() for line in shown.strip("\n").splitlines()]
    got = [line.rstrip() for line in actual.strip("\n").splitlines()]
    return len(want) == len(got) and all(_line_matches(w, g) for w, g in zip(want, got, strict=True))
