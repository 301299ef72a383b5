"""The guard's store URL, checked when the guard is built, by the crawler's own rules.

The shape of a Redis URL (two slashes, a host, a numeric port and database,
options that exist) is checked by :func:`crawlpace.stores._check.check_url`,
the validator the crawler uses, so both read a URL the same way. On top of
it, the guard names what only it cares about: a scheme that is not a store
at all (``reddis://``), and options of the crawler's store that the guard
does not read (``?fallback=memory``: the guard always falls back to a local
count while Redis is away). Every message hides the password.
"""

from __future__ import annotations

import difflib
from urllib.parse import parse_qsl, urlsplit

from .._exceptions import ConfigError
from .._redact import redact
from ..stores import REDIS_SCHEMES
from ..stores._check import CRAWLPACE_OPTIONS, check_url
from ..stores.redis._cluster import is_on
from ..stores.redis._keys import check_namespace

__all__ = ["GUARD_OPTIONS", "check_store", "is_local"]

#: crawlpace's options of a store URL that the guard reads (see docs/guard.md).
GUARD_OPTIONS = frozenset({"namespace", "cluster"})

_LOCAL = ("", "memory://")


def is_local(store: str | None) -> bool:
    """Whether ``store`` means counting in this process (``None``, ``""`` or ``"memory://"``)."""
    return store is None or store in _LOCAL


def check_store(url: str) -> None:
    """Check a guard's store URL without connecting.

    Raises:
        ConfigError: one line per problem, each naming the URL (password
            hidden), the problem and the fix.
    """
    shown = redact(url)
    if not isinstance(url, str):
        raise ConfigError([f"store must be a URL string such as 'redis://127.0.0.1:6379/0', got {shown!r}"])
    try:
        scheme = urlsplit(url).scheme
    except ValueError:
        scheme = ""
    if scheme not in REDIS_SCHEMES:
        close = difflib.get_close_matches(scheme, sorted(REDIS_SCHEMES | {"memory"}), n=1)
        hint = f"did you mean '{close[0]}://'? " if close else ""
        raise ConfigError([f"store {shown!r}: unknown scheme {scheme!r}; {hint}give None or 'memory://' to "
                           "count in this process, or 'redis://host:port/db' (also rediss://, valkey://, "
                           "unix:///path/to/redis.sock) to share the count between processes"])
    problems = check_url(url)
    query = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    for key, value in query:
        if key == "fallback":
            problems.append(f"store {shown!r}: the guard has no 'fallback' option: while Redis cannot be "
                            "reached it always counts in each process, on that process's part of what is "
                            "left of the quota (see workers=); remove fallback=")
        elif key in CRAWLPACE_OPTIONS and key not in GUARD_OPTIONS:
            problems.append(f"store {shown!r}: {key!r} is an option of the crawler's store, which the guard "
                            f"does not read; remove {key}= (the guard reads: "
                            f"{', '.join(sorted(GUARD_OPTIONS))})")
        elif key == "cluster" and is_on(value) is None:
            problems.append(f"store {shown!r}: cluster={value!r} is not a flag; give cluster=1 "
                            "(or leave it out)")
        elif key == "namespace":
            problems += [f"store {shown!r}: {problem}" for problem in check_namespace(value or "crawlpace")]
    if problems:
        raise ConfigError(problems)
