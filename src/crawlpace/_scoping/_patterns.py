"""Scope patterns: ``THROTTLING_SCOPES`` keys that stand for many scopes.

A key with a wildcard (``*`` any run of characters, ``?`` one character,
``[...]`` a set) applies to every scope it matches, as in shell globs:
``"*.example.com"`` matches ``a.example.com`` and ``b.a.example.com`` but
not ``example.com``; ``"*"`` matches every scope.

Precedence, one rule: an exact name wins over any pattern; among patterns,
the one with more literal (non-wildcard) characters wins, so ``"*"`` comes
last; a tie goes to the key that sorts first. Scopes matched by no key get
``THROTTLING_SCOPE_DEFAULTS``.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping

__all__ = ["is_pattern", "resolve_scope"]

_WILD = re.compile(r"[*?\[]")
# Scope names remembered per pattern table; beyond it matches are worked out again.
_MEMO = 10_000


def is_pattern(key: str) -> bool:
    """True when ``key`` holds a wildcard."""
    return _WILD.search(key) is not None


def _literal_length(pattern: str) -> int:
    """Characters of ``pattern`` that must match themselves (how specific it is)."""
    return len(re.sub(r"\[[^\]]*\]|[*?]", "", pattern))


class _Table:
    """The patterns among a set of keys, most specific first, with a bounded memo."""

    def __init__(self, keys: Iterable[str]) -> None:
        patterns = sorted((key for key in keys if is_pattern(key)),
                          key=lambda key: (-_literal_length(key), key))
        self.patterns = [(key, re.compile(fnmatch.translate(key))) for key in patterns]
        self.memo: dict[str, str | None] = {}

    def match(self, scope: str) -> str | None:
        found = self.memo.get(scope, "")
        if found != "":
            return found
        result = next((key for key, regex in self.patterns if regex.match(scope)), None)
        if len(self.memo) >= _MEMO:
            self.memo.clear()
        self.memo[scope] = result
        return result


@functools.lru_cache(maxsize=32)
def _table(keys: tuple[str, ...]) -> _Table:
    return _Table(keys)


def resolve_scope(scopes: Mapping[str, object], scope: str) -> str | None:
    """The key of ``scopes`` whose settings apply to ``scope``, or ``None`` for the defaults."""
    if scope in scopes:
        return scope
    if not scopes:
        return None
    table = _table(tuple(scopes))
    if not table.patterns:
        return None
    return table.match(scope)
