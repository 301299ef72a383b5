"""The environment a bench script hands the crawls and servers it starts.

A bench script starts ``python -m crawlpace ...`` in a folder of its own (its ``cwd``). A relative
``PYTHONPATH`` (``PYTHONPATH=src``, as a worktree is run) resolves there, finds no ``src``, and the
child imports the crawlpace installed in the virtualenv instead: an A/B of a branch against main then
runs main's code on both sides. :func:`pin_pythonpath` puts the folder of the crawlpace this process
imported first on the path, and makes every other entry absolute.
"""

from __future__ import annotations

import os
from pathlib import Path

import crawlpace


def pinned_pythonpath(current: str | None) -> str:
    """``current`` (a ``PYTHONPATH`` value) with the folder holding the imported ``crawlpace`` package
    first and every entry made absolute against this process's working directory."""
    root = str(Path(crawlpace.__file__).resolve().parent.parent)
    entries = [str(Path(entry).resolve()) for entry in (current or "").split(os.pathsep) if entry]
    return os.pathsep.join([root, *(entry for entry in entries if entry != root)])


def pin_pythonpath() -> str:
    """Set ``PYTHONPATH`` in this process's environment (inherited by every child it starts) to
    :func:`pinned_pythonpath`; returns it."""
    value = pinned_pythonpath(os.environ.get("PYTHONPATH"))
    os.environ["PYTHONPATH"] = value
    return value
