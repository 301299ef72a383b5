"""Keeping secrets out of what crawlpace shows: log lines, errors, status output.

A store URL may carry a password (``redis://:s3cret@host``, ``redis://user:s3cret@host``)
or a token in its query (``?password=s3cret``), and a settings value may be such a
URL. Every place that shows a URL or a settings value passes it through
:func:`redact` first; :class:`RedactingFormatter` is the safety net for the
command line's own log output.

Only the secret is hidden, by ``***``: the scheme, the user name, the host and
the other options stay, since they are what a reader needs to find a mistake.
"""

from __future__ import annotations

import logging
import re

__all__ = ["MASK", "SECRET_KEYS", "RedactingFormatter", "redact"]

#: What a secret is replaced by.
MASK = "***"

#: Names whose value is a secret, in a URL query or in ``key=value``/``'key': value`` text.
SECRET_KEYS = ("password", "passwd", "pwd", "pass", "token", "secret", "api_key", "apikey",
               "access_token", "auth", "credentials")

_KEYS = "|".join(sorted(SECRET_KEYS, key=len, reverse=True))
# scheme://user:password@ or //user:password@ (the user part may be empty: redis://:password@host); the
# password runs to the last "@" before the host, as urlsplit reads it. Spaces are allowed in
# both parts (urlsplit allows them): better to hide a few words too many than a password.
# Line breaks may stand inside the user info: URL parsers drop them, so the password still counts.
_USERINFO = re.compile(r"(?P<head>(?:\b[A-Za-z][A-Za-z0-9+.\-]*:)?//[^:@/<>]*):(?P<secret>[^/<>]+)@")
# ?password=...  &token=...
_QUERY = re.compile(rf"(?P<head>[?&;](?:{_KEYS})=)(?P<secret>[^&#\s'\"<>]*)", re.IGNORECASE)
# password='x'  password=x  'token': 'x'  (reprs of keyword arguments and of dicts)
_ASSIGNED = re.compile(
    rf"(?P<head>(?:\b(?:{_KEYS})\s*=|['\"](?:{_KEYS})['\"]\s*:)\s*)"
    rf"(?:(?P<quote>['\"])(?P<quoted>.*?)(?P=quote)|(?P<bare>[^\s,;&)}}\]'\"]+))",
    re.IGNORECASE)


def _mask_assigned(match: re.Match[str]) -> str:
    quote = match["quote"] or ""
    return f"{match['head']}{quote}{MASK}{quote}"


def redact(text: object) -> str:
    """``text`` (a URL, a message, any value's ``str``) with every secret in it replaced by ``***``.

    Hidden: the password of each ``scheme://user:password@`` in it, the
    value of each secret-named query parameter (``password``, ``token``, ...,
    see :data:`SECRET_KEYS`), and secret-named ``key=value`` or
    ``'key': 'value'`` pairs. ``None`` and non-strings are shown with ``str``.

    Example:
        >>> redact("redis://default:s3cret@cache:6379/0?namespace=x&token=abc")
        'redis://default:***@cache:6379/0?namespace=x&token=***'
    """
    shown = text if isinstance(text, str) else str(text)
    if "=" not in shown and "@" not in shown and ":" not in shown:
        return shown
    shown = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", shown)
    shown = _QUERY.sub(lambda m: f"{m['head']}{MASK}", shown)
    return _ASSIGNED.sub(_mask_assigned, shown)


class RedactingFormatter(logging.Formatter):
    """A log formatter whose output, tracebacks included, has its secrets hidden.

    The command line installs it on its handler, so a secret that reached a
    log line from code that forgot :func:`redact` (a third-party message, a
    traceback) is still not shown.
    """

    def format(self, record: logging.LogRecord) -> str:
        """Format ``record`` as usual, then hide its secrets."""
        return redact(super().format(record))
