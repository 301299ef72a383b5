"""One result line: what a crawl writes per URL, as JSON, and reads back.

The line's fields, their checks when a file is read back
(:meth:`Result.from_json`), and which outcomes settle a URL for good
(:data:`FINAL_OUTCOMES`). The file they go to is ``crawl/_results.py``.
"""

from __future__ import annotations

import builtins
import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["FINAL_OUTCOMES", "OUTCOMES", "Result"]

#: Every outcome a result can have.
OUTCOMES = frozenset({"ok", "disallowed", "failed", "gave_up", "exhausted"})
#: Outcomes that settle a URL for good; the others are retried on resume.
FINAL_OUTCOMES = frozenset({"ok", "disallowed", "failed"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """What became of one URL: one line of the results file.

    Attributes:
        url: the URL as it was read from the input.
        status: the HTTP status of the last response, None without one.
        final_url: the URL that answered after redirects, None without a response.
        bytes: bytes of body received.
        latency: seconds from sending the last request to its response, None
            without a response.
        attempts: requests sent for this URL, retries included.
        error: what went wrong, in words, None when nothing did.
        scope: the throttling scope the URL was crawled under.
        time: when the URL was settled, in Unix time.
        outcome: one of

            - ``"ok"``: the site gave a final HTTP answer: a 2xx, or a 4xx or
              5xx that is not retried and so stands as the site's answer;
            - ``"disallowed"``: robots.txt forbids fetching it;
            - ``"failed"``: a permanent error, such as an invalid URL;
            - ``"gave_up"``: the circuit breaker gave the site up;
            - ``"exhausted"``: every retry was used without a final answer.

            The first three are final (:attr:`final`); the other two are
            tried again when the crawl is resumed.
        blocked: the last response was a soft block (a challenge page, a
            ``cf-mitigated`` header, a quota problem); written only when true.
        block_rule: the rule that matched, when ``blocked``.
    """

    url: str
    status: int | None
    final_url: str | None
    bytes: int
    latency: float | None
    attempts: int
    error: str | None
    scope: str
    time: float
    outcome: str
    blocked: bool = False
    block_rule: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {sorted(OUTCOMES)}, got {self.outcome!r}")
        if self.bytes < 0:
            raise ValueError(f"bytes must be >= 0, got {self.bytes!r}")
        if self.attempts < 0:
            raise ValueError(f"attempts must be >= 0, got {self.attempts!r}")
        if self.latency is not None and not (math.isfinite(self.latency) and self.latency >= 0):
            raise ValueError(f"latency must be a finite number >= 0 or None, got {self.latency!r}")
        if not math.isfinite(self.time):
            raise ValueError(f"time must be a finite number, got {self.time!r}")

    @property
    def final(self) -> bool:
        """Whether the outcome settles the URL for good (``ok``, ``disallowed``, ``failed``)."""
        return self.outcome in FINAL_OUTCOMES

    def to_json(self) -> str:
        """Return the result as one line of JSON, keys sorted, without a newline."""
        # The keys in sorted order, written out: a line per page, so no sort and no loop.
        if self.blocked:
            record = {"attempts": self.attempts, "block_rule": self.block_rule, "blocked": True,
                      "bytes": self.bytes, "error": self.error, "final_url": self.final_url,
                      "latency": self.latency, "outcome": self.outcome, "scope": self.scope,
                      "status": self.status, "time": self.time, "url": self.url}
        else:  # most lines: as short as before soft blocks existed
            record = {"attempts": self.attempts, "bytes": self.bytes, "error": self.error,
                      "final_url": self.final_url, "latency": self.latency, "outcome": self.outcome,
                      "scope": self.scope, "status": self.status, "time": self.time, "url": self.url}
        return _encode(record)

    # builtins.bytes: inside this class, plain ``bytes`` names the field above.
    @classmethod
    def from_json(cls, line: str | builtins.bytes) -> Result:
        """Parse a line written by :meth:`to_json`; unknown keys are ignored.

        Raises:
            ValueError: the line is not JSON, or a field is missing or has the
                wrong type or value.
        """
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a JSON line: {exc}") from exc
        if not isinstance(record, dict):
            raise ValueError(f"a result line holds a JSON object, not {type(record).__name__}")
        return cls(
            url=_field(record, "url", str),
            status=_field(record, "status", int, optional=True),
            final_url=_field(record, "final_url", str, optional=True),
            bytes=_field(record, "bytes", int),
            latency=_number(record, "latency", optional=True),
            attempts=_field(record, "attempts", int),
            error=_field(record, "error", str, optional=True),
            scope=_field(record, "scope", str),
            time=_number(record, "time"),
            outcome=_field(record, "outcome", str),
            blocked=record.get("blocked") is True,
            block_rule=record["block_rule"] if isinstance(record.get("block_rule"), str) else None,
        )


# One encoder for every line (json.dumps with options builds a new one per call).
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _field(record: dict[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    if name not in record:
        raise ValueError(f"result line lacks {name!r}")
    value = record[name]
    if value is None and optional:
        return None
    # bool is an int to Python but not a status or a count to anyone.
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"result field {name!r} must be {kind.__name__}"
                         f"{' or null' if optional else ''}, got {value!r}")
    return value


def _number(record: dict[str, Any], name: str, *, optional: bool = False) -> Any:
    if name not in record:
        raise ValueError(f"result line lacks {name!r}")
    value = record[name]
    if value is None and optional:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"result field {name!r} must be a number{' or null' if optional else ''}, "
                         f"got {value!r}")
    return float(value)
