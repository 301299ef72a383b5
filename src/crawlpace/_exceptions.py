"""Errors raised by crawlpace.

Every error derives from one base class, so ``except CrawlpaceError`` catches
anything this package raises on purpose::

    CrawlpaceError
    ├── ConfigError          invalid settings; raised at start-up (also a ValueError)
    ├── ScopeError           a request's throttling scopes cannot be used (also a ValueError)
    │   └── QuotaError       a request expects more quota than its scope has per window
    ├── ThrottlerClosed      the throttler was closed while a request waited or tried to enter
    ├── ScopeGivenUp         the circuit breaker gave a scope up; its requests fail
    ├── StoreUnreachable     a shared store did not answer at start-up (refused, bad password, silence)
    ├── RobotsDisallowed     robots.txt forbids a request of crawlpace.http (or could not be fetched)
    ├── StateFormatError     stored learned state this version cannot read (also a ValueError)
    │   └── PolicyFormatError  a store's policy record could not be read
    └── PermitError          a permit was misused (released twice, feedback after release)

Misuse by the caller (``ConfigError``, ``ScopeError``, ``PermitError``) is kept
apart from conditions that arise while running (``ThrottlerClosed``). Errors
from third-party libraries are translated at the boundary where they enter
crawlpace and chained with ``raise ... from exc``.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CrawlpaceError",
    "PermitError",
    "PolicyFormatError",
    "QuotaError",
    "RobotsDisallowed",
    "ScopeError",
    "ScopeGivenUp",
    "StateFormatError",
    "StoreUnreachable",
    "ThrottlerClosed",
]


class CrawlpaceError(Exception):
    """Base class of every error crawlpace raises on purpose."""


class ConfigError(CrawlpaceError, ValueError):
    """One or more settings are invalid.

    The message has one line per problem; each line names the setting, the
    offending value and how to fix it. ``problems`` holds those lines.
    """

    def __init__(self, problems: list[str]) -> None:
        # A settings value may be a URL with a password: no problem line shows one.
        from ._redact import redact

        self.problems = [redact(problem) for problem in problems]
        super().__init__("\n".join(self.problems))


class ScopeError(CrawlpaceError, ValueError):
    """A request's throttling scopes are malformed (empty, wrong type, bad quota use)."""


class QuotaError(ScopeError):
    """A request's expected quota use exceeds its scope's whole quota: it can never be sent."""


class ScopeGivenUp(CrawlpaceError):
    """The circuit breaker gave a scope up after failure upon failure.

    Attributes:
        scope: the scope given up.
        reason: why, in words.
    """

    def __init__(self, scope: str, reason: str) -> None:
        self.scope = scope
        self.reason = reason
        super().__init__(f"scope {scope!r} was given up: {reason}")


class StoreUnreachable(CrawlpaceError):
    """A shared store could not be reached when it was checked at start-up.

    The message names the store (password hidden), what happened and what to
    check. While running, the store fails closed instead: requests wait.
    """


class RobotsDisallowed(CrawlpaceError):
    """A request was not sent because its origin's robots.txt forbids it.

    Raised by :mod:`crawlpace.http` clients built with ``robots_txt=True``.

    Attributes:
        url: the request's URL.
        origin: ``scheme://host[:port]``, whose robots.txt it was.
        reason: why, in words.
        final: True when the file itself forbids the URL; False when the file
            could not be fetched (RFC 9309 forbids the origin until it can be,
            so a later request may go).
    """

    def __init__(self, url: str, origin: str, reason: str, *, final: bool = True) -> None:
        self.url = url
        self.origin = origin
        self.reason = reason
        self.final = final
        super().__init__(f"{url} not sent: {reason}")


class StateFormatError(CrawlpaceError, ValueError):
    """Stored learned state this version cannot read (a newer layout, or not crawlpace's).

    Raised by :func:`crawlpace.policy.state.decode`; the stores catch it and
    start the scope afresh, so a user meets it only when reading state by hand.
    """


class PolicyFormatError(StateFormatError):
    """A store's record of one scope's policy could not be read; the cause is chained."""


class ThrottlerClosed(CrawlpaceError):
    """The throttler was closed; no more permits are handed out."""


class PermitError(CrawlpaceError, RuntimeError):
    """A permit was used after release, or released twice."""
