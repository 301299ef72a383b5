"""A local stand-in for a metered LLM API: requests and tokens per minute, with their headers.

:class:`TokenAPI` is an ASGI application (serve it with
:class:`~crawlpace.sim.SimServer` on a loopback address, or with any ASGI
server) that answers requests whose query string (or JSON body) gives
``prompt_tokens`` and ``max_tokens``: ``GET /v1/chat?prompt_tokens=100&max_tokens=200``.
It keeps one refilling bucket per budget, as the vendors document theirs: a
budget of ``limit`` units per window holds at most ``limit`` and gets back
``limit / window`` units a second.

* A request arrives: it is refused (429, with ``Retry-After``) unless the
  requests bucket has a request left and every token bucket covers its
  prompt; otherwise one request and the prompt's tokens are charged.
* It is answered after a short latency with a completion of a random length
  up to ``max_tokens``; those tokens are charged then (a bucket may go below
  zero, and later requests wait for it to refill).

Every answer carries the budgets' headers, OpenAI's form
(``x-ratelimit-limit-tokens``, ``x-ratelimit-remaining-tokens``,
``x-ratelimit-reset-tokens: 1.5s``...) or Anthropic's
(``anthropic-ratelimit-input-tokens-limit``..., resets as RFC 3339 times), and
the body reports the use (``{"usage": {"prompt_tokens": ..., "completion_tokens": ...}}``
or ``{"usage": {"input_tokens": ..., "output_tokens": ...}}``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import parse_qs

from ._asgi import Receive, Scope, Send, respond

__all__ = ["TokenAPI", "TokenAPIStats", "go_duration"]


def go_duration(seconds: float) -> str:
    """A duration as OpenAI writes it: ``6m0s``, ``1.5s``, ``20ms``."""
    seconds = max(seconds, 0.0)
    if seconds < 1.0:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60.0)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


@dataclass
class _Bucket:
    limit: float
    window: float
    level: float
    at: float

    def refill(self, now: float) -> None:
        self.level = min(self.limit, self.level + (now - self.at) * self.limit / self.window)
        self.at = now

    def time_to(self, need: float) -> float:
        return max(need - self.level, 0.0) * self.window / self.limit


@dataclass
class TokenAPIStats:
    """What the stand-in served.

    Attributes:
        answered: requests answered with 200.
        refused: requests refused with 429.
        used: units charged per budget kind (requests, tokens...).
        first, last: monotonic times of the first and the latest answered request.
    """

    answered: int = 0
    refused: int = 0
    used: dict[str, float] = field(default_factory=dict)
    first: float | None = None
    last: float | None = None


class TokenAPI:
    """The stand-in API (see the module docstring).

    Args:
        requests: requests per window.
        tokens: tokens per window (input and output together), or None.
        input_tokens: input tokens per window, or None.
        output_tokens: output tokens per window, or None.
        window: the window in seconds (vendors count per minute).
        style: ``"openai"`` or ``"anthropic"``: which headers and usage field.
        latency: the range of seconds an answer takes.
        seed: for the completion lengths and latencies.
        clock: the monotonic clock; ``wall``: the POSIX clock (for RFC 3339 resets).

    Raises:
        ValueError: for an unknown style or a budget that is not positive.
    """

    def __init__(self, *, requests: float, tokens: float | None = None, input_tokens: float | None = None,
                 output_tokens: float | None = None, window: float = 60.0, style: str = "openai",
                 latency: tuple[float, float] = (0.02, 0.08), seed: int = 0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        if style not in ("openai", "anthropic"):
            raise ValueError(f"style must be 'openai' or 'anthropic', not {style!r}")
        limits = {"requests": requests, "tokens": tokens, "input-tokens": input_tokens,
                  "output-tokens": output_tokens}
        now = clock()
        self.buckets: dict[str, _Bucket] = {}
        for kind, limit in limits.items():
            if limit is None:
                continue
            if not limit > 0:
                raise ValueError(f"{kind} must be positive, not {limit!r}")
            self.buckets[kind] = _Bucket(float(limit), window, float(limit), now)
        if style == "openai" and set(self.buckets) - {"requests", "tokens"}:
            raise ValueError("OpenAI's headers know only requests and tokens budgets")
        self.style = style
        self.latency = latency
        self.stats = TokenAPIStats()
        self._rng = random.Random(seed)
        self._clock = clock
        self._wall = wall

    def _headers(self, now: float) -> list[tuple[bytes, bytes]]:
        out: list[tuple[str, str]] = []
        wall = self._wall()
        for kind, bucket in self.buckets.items():
            bucket.refill(now)
            remaining = str(max(int(bucket.level), 0))
            full_in = bucket.time_to(bucket.limit)
            if self.style == "openai":
                out += [(f"x-ratelimit-limit-{kind}", f"{bucket.limit:g}"),
                        (f"x-ratelimit-remaining-{kind}", remaining),
                        (f"x-ratelimit-reset-{kind}", go_duration(full_in))]
            else:
                reset = datetime.fromtimestamp(wall + full_in, UTC).isoformat(timespec="milliseconds")
                out += [(f"anthropic-ratelimit-{kind}-limit", f"{bucket.limit:g}"),
                        (f"anthropic-ratelimit-{kind}-remaining", remaining),
                        (f"anthropic-ratelimit-{kind}-reset", reset.replace("+00:00", "Z"))]
        return [(name.encode(), value.encode()) for name, value in out]

    def _charge(self, kind: str, units: float) -> None:
        bucket = self.buckets.get(kind)
        if bucket is not None:
            bucket.level -= units
        self.stats.used[kind] = self.stats.used.get(kind, 0.0) + units

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            asked: dict[str, object] = {key: values[0] for key, values in
                                        parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
            if body:
                asked.update(json.loads(body))
            prompt, most = int(str(asked.get("prompt_tokens", 0))), int(str(asked.get("max_tokens", 0)))
            if prompt < 0 or most < 0:
                raise ValueError("negative")
        except (ValueError, TypeError, AttributeError):
            await respond(send, 400, b'{"error": "give prompt_tokens and max_tokens, whole numbers >= 0"}',
                          content_type="application/json")
            return
        now = self._clock()
        needs = {"requests": 1.0, "tokens": float(prompt), "input-tokens": float(prompt),
                 "output-tokens": 1.0}
        wait = 0.0
        for kind, bucket in self.buckets.items():
            bucket.refill(now)
            wait = max(wait, bucket.time_to(needs[kind]))
        if wait > 0.0:
            self.stats.refused += 1
            await respond(send, 429, b'{"error": "rate limited"}', content_type="application/json",
                          headers=[(b"retry-after", str(max(1, round(wait))).encode()), *self._headers(now)])
            return
        self._charge("requests", 1.0)
        self._charge("tokens", prompt)
        self._charge("input-tokens", prompt)
        await asyncio.sleep(self._rng.uniform(*self.latency))
        completion = self._rng.randint(most // 4, most) if most > 0 else 0
        self._charge("tokens", completion)
        self._charge("output-tokens", completion)
        now = self._clock()
        stats = self.stats
        stats.answered += 1
        stats.first = now if stats.first is None else stats.first
        stats.last = now
        if self.style == "openai":
            usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}
        else:
            usage = {"input_tokens": prompt, "output_tokens": completion}
        await respond(send, 200, json.dumps({"usage": usage}).encode(), content_type="application/json",
                      headers=self._headers(now))
