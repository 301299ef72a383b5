"""Random farms: each site's limiter kind and parameters drawn from wide ranges with a seeded generator.

A farm drawn here is a plain farm description (the mapping a farm file
holds), so it can be printed, written as TOML and served again with the
same seed or file. The kinds and their ranges:

========== ==================================================================
kind        what the site does
========== ==================================================================
bucket      token bucket, 0.5-60/s, bursts of 1-20, Retry-After or not
strict      token bucket with no burst, 0.5-30/s
holds       token bucket (0.5-30/s, bursts 1-10); a 429 demands 1-60 s of quiet
fixed       N per window of 1-120 s aligned to the clock, refusals counted or not
sliding     N in any window of 1-120 s, refusals counted or not
flask       Flask-Limiter with its headers on: a moving window, or a fixed one
            opened by a request (``limits``), of whole seconds, X-RateLimit headers
            and Retry-After on every answer
reqrate     HAProxy's ``http_req_rate`` over 1-60 s, refused requests counted, periods at any phase
conncap     1-16 requests at once, 0.1-0.4 s each, each slot freed at once (as HAProxy's
            ``conn_cur`` and nginx's ``limit_conn``) or, for half, 5-100 ms after its answer
softknee    0.15-0.4 s alone; latency grows past a knee of 2-12 in flight
hardknee    0.15-0.4 s alone, a little more per request in flight; 503 past 2-16 in flight
crawldelay  robots.txt ``Crawl-delay`` of 0.2-2 s
headers     a window announced in one of the RateLimit header forms
shifting    a bucket, window or counter whose limit changes twice mid-run
errors      no limit; 5-30 % of answers are 5xx and up to 3 % hang
challenge   token bucket whose refusals are 200 challenge pages
queue       nginx ``limit_req`` with a ``burst`` of 1-20 and no ``nodelay``, 0.5-60/s: a
            request over the rate waits in line (served at the rate), a full line
            gets 429 or 503; a quarter of them with ``delay=`` (part of the line goes at once)
========== ==================================================================

Every rate lies between 0.5 and 60 requests a second, and a window is at
most half the farm's ``seconds`` long, so that a crawl at capacity sees
at least two windows; each site has pages for about ``seconds`` seconds
at its capacity (at least 10, at most 1500). A window announced in a header
form that states its length (``w=`` of the IETF, draft-07 and policy forms)
is a whole number of seconds, as those forms can say no other, and so is a
Flask-Limiter window, as ``limits`` parses no other.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from ._rates import HEADER_STYLES

__all__ = ["RANDOM_KINDS", "draw_farm", "farm_toml"]

#: The limiter kinds a random farm draws from, in the order of the table above.
RANDOM_KINDS = ("bucket", "strict", "holds", "fixed", "sliding", "flask", "reqrate", "conncap", "softknee",
                "hardknee", "crawldelay", "headers", "shifting", "errors", "challenge", "queue")
#: The default time, in seconds, a crawl of each site at its capacity takes.
DEFAULT_SECONDS = 60.0
_MAX_WINDOW = 120.0
_MIN_PAGES = 10
_MAX_PAGES = 1500


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _round(value: float, digits: int = 3) -> float:
    return float(f"{value:.{digits}g}")


#: The header forms that announce a window's length, in whole seconds (``w=``).
_STATES_LENGTH = ("ietf", "draft07", "policy")


def _window(rng: random.Random, seconds: float, rate_high: float = 30.0) -> tuple[float, float]:
    """A window's rate and length: 1 s to ``min(120, seconds / 2)``, at 0.5 to ``rate_high`` a second."""
    window = _round(_log_uniform(rng, 1.0, max(min(_MAX_WINDOW, seconds / 2), 1.0)), 2)
    return _log_uniform(rng, 0.5, rate_high), window


def _count(rate: float, window: float, style: str) -> tuple[int, float]:
    """A window's count and length, the length whole seconds where ``style`` announces it."""
    if style in _STATES_LENGTH:
        window = float(max(round(window), 1))
    return max(round(rate * window), math.ceil(0.5 * window)), window


def _draw(kind: str, rng: random.Random, seconds: float) -> tuple[dict[str, Any], float | None]:
    """One site's profile and parameters, and its capacity in requests per second (None: unbounded)."""
    if kind in ("bucket", "strict", "challenge"):
        rate = _round(_log_uniform(rng, 0.5, 60.0 if kind == "bucket" else 30.0))
        burst = 1 if kind == "strict" else rng.randint(1, 20 if kind == "bucket" else 10)
        site: dict[str, Any] = {"profile": "challenge" if kind == "challenge" else "ratelimit",
                                "rate": rate, "burst": burst}
        if kind == "challenge":
            site["header"] = rng.random() < 0.5
        else:
            site["retry_after"] = rng.random() < 0.7
        return site, rate
    if kind == "queue":
        rate, burst = _round(_log_uniform(rng, 0.5, 60.0)), rng.randint(1, 20)
        # nginx's two-stage form (``burst=B delay=D``) lets the first D of the line through at once.
        at_once = rng.randint(1, burst - 1) if burst > 1 and rng.random() < 0.25 else 0
        return {"profile": "queue", "rate": rate, "burst": burst, "delay": at_once,
                "status": rng.choice((429, 503))}, rate
    if kind == "holds":
        rate = _round(_log_uniform(rng, 0.5, 30.0))
        return {"profile": "retryafter", "rate": rate, "burst": rng.randint(1, 10),
                "embargo": round(_log_uniform(rng, 1.0, 60.0))}, rate
    if kind in ("fixed", "sliding", "flask"):
        rate, window = _window(rng, seconds)
        sliding = kind == "sliding" or (kind == "flask" and rng.random() < 0.5)
        site = {"kind": "sliding" if sliding else "started" if kind == "flask" else "fixed"}
        if kind == "flask":
            # ``limits`` parses whole seconds only ("20 per 2 second"); refused requests never
            # extend its windows.
            window = float(max(round(window), 1))
            site.update(retry_after="every", style="x-ratelimit")
        else:
            site.update(count_refused=rng.random() < 0.5, retry_after=rng.choice(("none", "refusals")),
                        style=rng.choice(("none",) * 3 + HEADER_STYLES))
        limit, window = _count(rate, window, str(site["style"]))
        return {"profile": "window", "limit": limit, "window": window, **site}, limit / window
    if kind == "headers":
        rate, window = _window(rng, seconds)
        style = rng.choice(HEADER_STYLES)
        limit, window = _count(rate, window, style)
        return {"profile": "headers", "limit": limit, "window": window, "style": style,
                "retry_after": rng.random() < 0.7}, limit / window
    if kind == "reqrate":
        period = _round(_log_uniform(rng, 1.0, 60.0), 2)
        limit = max(round(_log_uniform(rng, 0.5, 60.0) * period), math.ceil(0.5 * period), 10)
        return {"profile": "reqrate", "limit": limit, "period": period}, limit / period
    if kind == "conncap":
        cap, latency, lag = rng.randint(1, 16), _round(rng.uniform(0.1, 0.4)), _round(rng.uniform(0.005, 0.1))
        return {"profile": "conncap", "cap": cap, "latency": latency, "lag": lag}, cap / (latency + lag)
    if kind == "softknee":
        knee, latency = rng.randint(2, 12), _round(rng.uniform(0.15, 0.4))
        exponent = rng.choice((1.0, 2.0))
        # Past the knee the throughput stays level (exponent 1) or falls (2): the knee is the best load.
        return {"profile": "overload", "latency": latency, "per_inflight": 0.0, "knee": knee,
                "exponent": exponent, "limit": knee * 3}, knee / latency
    if kind == "hardknee":
        limit, latency = rng.randint(2, 16), _round(rng.uniform(0.15, 0.4))
        per_inflight = _round(rng.uniform(0.0, 0.2) * latency)
        return {"profile": "overload", "latency": latency, "per_inflight": per_inflight,
                "limit": limit}, limit / (latency + per_inflight * (limit - 1))
    if kind == "crawldelay":
        delay = _round(rng.uniform(0.2, 2.0))
        return {"profile": "crawldelay", "delay": delay}, 1.0 / delay
    if kind == "shifting":
        base = rng.choice(("ratelimit", "window", "reqrate"))
        inner, capacity = _draw({"ratelimit": "bucket", "window": "fixed", "reqrate": "reqrate"}[base], rng,
                                seconds)
        inner.pop("profile")
        first = _round(rng.uniform(0.2, 0.4) * seconds, 2)
        second = _round(first + rng.uniform(0.2, 0.4) * seconds, 2)
        changes = [[first, _round(rng.uniform(0.3, 0.7), 2)], [second, _round(rng.uniform(0.7, 1.5), 2)]]
        return {"profile": "shifting", "base": base, **inner, "changes": changes}, capacity
    if kind == "errors":
        return {"profile": "flaky", "errors": _round(rng.uniform(0.05, 0.3), 2),
                "hangs": _round(rng.uniform(0.0, 0.03), 2), "hang": _round(rng.uniform(3.0, 15.0), 2),
                "status": rng.choice((500, 502, 503)), "latency": _round(rng.uniform(0.0, 0.05), 2)}, None
    raise ValueError(f"unknown kind {kind!r}; use one of: {', '.join(RANDOM_KINDS)}")


def draw_farm(seed: int, sites: int, *, seconds: float = DEFAULT_SECONDS,
              kinds: Sequence[str] = RANDOM_KINDS) -> dict[str, Any]:
    """Draw a farm description: ``sites`` sites of the given kinds, in turn at random.

    The kinds are dealt from a shuffled deck, so every kind appears once
    before any appears twice. The same arguments always give the same farm.

    Args:
        seed: the seed of the draw.
        sites: how many sites.
        seconds: about how long a crawl of each site at its capacity takes.
        kinds: the kinds to draw from, names of :data:`RANDOM_KINDS`.

    Returns:
        The farm description, ``{"port": 0, "site": [...]}``, each site named
        after its kind and number (``fixed07``).

    Raises:
        ValueError: for an unknown kind, no kinds, or a count or time out of range.
    """
    unknown = [kind for kind in kinds if kind not in RANDOM_KINDS]
    if unknown or not kinds:
        raise ValueError(f"kinds {list(kinds)!r}: use one or more of: {', '.join(RANDOM_KINDS)}")
    if isinstance(sites, bool) or not isinstance(sites, int) or sites < 1:
        raise ValueError(f"sites must be an integer of at least 1, got {sites!r}")
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and 2.0 <= seconds <= 86400.0):
        raise ValueError(f"seconds must be a number from 2 to 86400, got {seconds!r}")
    rng = random.Random(seed)
    deck: list[str] = []
    drawn: list[dict[str, Any]] = []
    for index in range(1, sites + 1):
        if not deck:
            deck = list(kinds)
            rng.shuffle(deck)
        kind = deck.pop()
        site, capacity = _draw(kind, rng, float(seconds))
        target = rng.uniform(0.5, 1.0) * seconds
        pages = rng.randint(50, 300) if capacity is None else round(capacity * target)
        seed_of_site = rng.randrange(2**31)
        if site["profile"] == "conncap" and random.Random(seed_of_site).random() < 0.5:
            # HAProxy's ``conn_cur`` and nginx's ``limit_conn`` have freed the slot by the time the
            # client has read its answer (bench/limiter_scripts.py): half the caps free at once, the
            # others late as a worker pool may (drawn from the site's seed: other draws stay put).
            site["lag"] = 0.0
            pages = round(site["cap"] / site["latency"] * target)
        if "period" in site:
            # A request-rate counter's periods follow the server's clock: the share of one already
            # gone at the first request, drawn from the site's seed so other draws stay as they were.
            site["phase"] = round(random.Random(seed_of_site).random(), 3)
        drawn.append({"name": f"{kind}{index:02d}", **site, "pages": min(max(pages, _MIN_PAGES), _MAX_PAGES),
                      "seed": seed_of_site})
    return {"port": 0, "site": drawn}


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return repr(value)


def farm_toml(spec: Mapping[str, Any], comment: str = "") -> str:
    """Write a farm description (such as :func:`draw_farm` returns) as a farm file's TOML text."""
    lines = [f"# {line}" if line else "#" for line in comment.splitlines()]
    lines += [f"port = {int(spec.get('port', 0))}", ""]
    for site in spec.get("site", ()):
        lines.append("[[site]]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in site.items()]
        lines.append("")
    return "\n".join(lines)
