"""Did-you-mean for misspelt top-level setting names.

Two kinds of slip are caught. A name with one of crawlpace's prefixes that
is not a setting: the suggestion goes where the user meant to go, so
``RAMPUP_ENABLED`` points at ``THROTTLING_SCOPE_DEFAULTS = {"rampup": True}``
(rampup is a per-scope key) before any look-alike name. And a near miss of
one of the Scrapy names crawlpace reads (``CONCURRENT_REQUEST_PER_DOMAIN``,
``DOWNLOAD_DELAYS``, lower-case ``download_delay``), which would otherwise
be ignored as somebody else's setting while the defaults apply.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping

__all__ = ["NEAR_MISS_CUTOFF", "misspelt_name", "unknown_name"]

#: How close (difflib ratio) a foreign name must be to one of ours to count as a slip.
#: Scrapy's own settings stay below it (DOWNLOAD_DELAY_JITTER and REFERER_ENABLED score 0.8).
NEAR_MISS_CUTOFF = 0.85

_PREFIXES = ("THROTTLING_SCOPE_", "THROTTLING_", "BACKOFF_", "BREAKER_", "RAMPUP_", "AUTOTHROTTLE_")
_SUFFIXES = ("_ENABLED", "_ON", "_ENABLE")

# Per-scope keys that a top-level name may be reaching for, with an example value.
_SCOPE_EXAMPLES: Mapping[str, str] = {"rampup": "True", "quota": "1000", "window": "60",
                                      "concurrency": "4", "delay": "0.5", "delay_per_slot": "0.5",
                                      "rampup_min_delay": "0.05", "rampup_max_concurrency": "8",
                                      "ignore_robots_txt": "True", "jitter": "False",
                                      "gradual_slots": "True"}


def _scope_key(name: str) -> str | None:
    """The per-scope key a top-level name seems to mean (``RAMPUP_ENABLED`` -> ``rampup``)."""
    stem = name.upper()
    for prefix in _PREFIXES:
        if stem.startswith(prefix) and stem != prefix.rstrip("_"):
            stem = stem[len(prefix):]
            break
    for suffix in _SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    key = stem.lower()
    if key in _SCOPE_EXAMPLES:
        return key
    if name.upper().rstrip("_") in ("RAMPUP", "THROTTLING_RAMPUP", "RAMPUP_ENABLED"):
        return "rampup"
    return None


def unknown_name(name: str, known: Collection[str], top_names: Mapping[str, str] | None = None) -> str:
    """The message for ``name``, which has one of our prefixes but is not a setting.

    Args:
        name: the unknown name.
        known: every setting name.
        top_names: per-scope key -> the top-level name that sets it for every
            scope (``delay`` -> ``DOWNLOAD_DELAY``), preferred in suggestions.
    """
    key = _scope_key(name)
    top = (top_names or {}).get(key or "")
    if key is not None and top is not None:
        hint = f' did you mean "{top}" (every scope), or the key "{key}" in THROTTLING_SCOPES for some?'
    elif key is not None:
        hint = (f' did you mean THROTTLING_SCOPE_DEFAULTS = {{"{key}": {_SCOPE_EXAMPLES[key]}}} '
                f'(every scope), or the key "{key}" in THROTTLING_SCOPES for some?')
    else:
        close = difflib.get_close_matches(name.upper(), list(known), n=1, cutoff=0.6)
        hint = f' did you mean "{close[0]}"?' if close else ""
    return f"{name}: unknown crawlpace setting;{hint} see docs/settings.md for the full list"


def misspelt_name(name: str, known: Collection[str]) -> str | None:
    """A message when ``name`` (not one of ours) is a near miss of one of ``known``, else ``None``."""
    if name in known:
        return None
    if name.upper() in known:
        return f'{name}: setting names are upper case; did you mean "{name.upper()}"?'
    close = difflib.get_close_matches(name.upper(), list(known), n=1, cutoff=NEAR_MISS_CUTOFF)
    if not close:
        return None
    return (f'{name}: not a setting crawlpace reads, and so without effect; did you mean "{close[0]}"? '
            "see docs/settings.md")
