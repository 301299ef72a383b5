"""Bench scripts (``bench/*.py``, not a package) loaded as modules, for tests of what they measure."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str, relative: str) -> ModuleType:
    """The bench script at ``bench/<relative>`` as the module ``name``; registered in ``sys.modules``
    before it runs, so that its dataclasses can look their module up."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / relative)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
