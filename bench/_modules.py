"""Loading another file of the repository as a module: a bench script reusing a sibling's or a test's
models and harness, so that each lives in one place."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["load_file"]


def load_file(name: str, path: Path) -> ModuleType:
    """The Python file at ``path`` as the module ``name``, loaded once.

    The module is registered in ``sys.modules`` before it runs (its dataclasses look their module up
    there), and a module already registered under ``name`` (by pytest, or an earlier call) is returned
    as it is: one copy, not two.

    Raises:
        SystemExit: when the file cannot be loaded.
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def seed_list(text: str) -> list[int]:
    """Seeds written as a range ``"1-20"`` or a list ``"3,7,9"``."""
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(part) for part in text.split(",")]
