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
from typing import Any, TextIO

__all__ = ["MASK", "SECRET_KEYS", "RedactingFormatter", "RedactingStream", "redact"]

#: What a secret is replaced by.
MASK = "***"

#: Names whose value is a secret, in a URL query or in ``key=value``/``'key': value`` text.
SECRET_KEYS = ("password", "passwd", "pwd", "pass", "token", "secret", "api_key", "apikey",
               "access_token", "auth", "credentials")

_KEYS = "|".join(sorted(SECRET_KEYS, key=len, reverse=True))
# The one rule for a URL's password, whatever the user typed: scheme:/user:password@host,
# scheme://..., scheme:///... (one slash is a typo URL parsers still read, or show back), or a
# bare //user:password@ (never a lone /user:x@, which is a path). The user part stops at ":" or "/"
# (an "@" in it is the user's, as urlsplit reads 'A://@:pw@': found by the fuzz run); the
# password runs to the last "@" before the host, as urlsplit reads it, and may hold anything but
# "/" (which ends the user info for every URL parser: such a password must be typed as %2F):
# "<", ">", quotes, spaces, line breaks (URL parsers drop them, so the password still counts).
# Better to hide a few words too many than a password.
_USERINFO = re.compile(
    r"(?P<head>(?:\b[A-Za-z][A-Za-z0-9+.\-]*:[/\\]{1,3}|//)[^:/\\]*):(?P<secret>[^/\\]+)@")
# ?password=...  &token=... : the value runs to the next "&", "#" or ASCII blank (a query value
# cannot hold them as typed; other Unicode spaces, U+0085 say, it can: found by the fuzz run),
# quotes and brackets included; only closing quotes or brackets that end the text or stand
# before a blank are given back (they close a repr around the URL).
_CLOSERS = "'\")>\\]}"
_QUERY = re.compile(rf"(?P<head>[?&;](?:{_KEYS})=)(?P<secret>[^&#\s]*?)(?P<tail>[{_CLOSERS}]*)(?=[&#\s]|$)",
                    re.IGNORECASE | re.ASCII)
# password='x'  password=x  'token': 'x'  (reprs of keyword arguments and of dicts); a quoted value
# runs to its closing quote, escaped quotes included; a bare one to a blank, "," or ";", closing
# brackets and quotes at its end given back.
_ASSIGNED = re.compile(
    rf"(?P<head>(?:\b(?:{_KEYS})\s*=|['\"](?:{_KEYS})['\"]\s*:)\s*)"
    rf"(?:(?P<quote>['\"])(?P<quoted>(?:\\.|(?!(?P=quote)).)*)(?P=quote)"
    rf"|(?P<bare>[^\s,;&]+?)(?P<tail>[{_CLOSERS}]*)(?=[\s,;&]|$))",
    re.IGNORECASE | re.DOTALL | re.ASCII)


def _mask_assigned(match: re.Match[str]) -> str:
    quote = match["quote"] or ""
    return f"{match['head']}{quote}{MASK}{quote}{match['tail'] or ''}"


def redact(text: object) -> str:
    """``text`` (a URL, a message, any value's ``str``) with every secret in it replaced by ``***``.

    Hidden: the password of each ``scheme://user:password@`` in it (also
    with one or three slashes, and whatever the password holds but ``/``),
    the value of each secret-named query parameter (``password``, ``token``,
    ..., see :data:`SECRET_KEYS`), and secret-named ``key=value`` or
    ``'key': 'value'`` pairs. ``None`` and non-strings are shown with ``str``.
    This is the one rule: every command, log line and error goes through it.

    Example:
        >>> redact("redis://default:s3cret@cache:6379/0?namespace=x&token=abc")
        'redis://default:***@cache:6379/0?namespace=x&token=***'
        >>> redact('redis:/:a<b>"c@cache?password=x"y')
        'redis:/:***@cache?password=***'
    """
    shown = text if isinstance(text, str) else str(text)
    if "=" not in shown and "@" not in shown and ":" not in shown:
        return shown
    shown = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", shown)
    shown = _QUERY.sub(lambda m: f"{m['head']}{MASK}{m['tail']}", shown)
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


class RedactingStream:
    """A text stream that hides the secrets of everything written to it, then passes it on.

    The command line puts its standard output and error behind one, so that
    every line a command prints, an uncaught traceback included, goes through
    :func:`redact`, whatever the code that printed it remembered to do. Each
    ``write`` is masked on its own: ``print`` hands over a whole message at once.

    Args:
        stream: where the masked text goes.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    @property
    def wrapped(self) -> TextIO:
        """The stream written to."""
        return self._stream

    def write(self, text: str) -> int:
        """Write ``text`` with its secrets hidden; returns the length of ``text``."""
        self._stream.write(redact(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        """Write each of ``lines``."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Flush the stream written to."""
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer...
        return getattr(self._stream, name)
