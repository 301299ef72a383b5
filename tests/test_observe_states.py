"""What the dashboard and the report say happened to a site, in words (pure: no clock, no I/O)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from crawlpace.crawl import ScopeTally
from crawlpace.observe._dashboard import scope_state

UNREACHABLE = ("robots.txt of http://127.0.0.7:80 could not be fetched (status 503); RFC 9309 forbids "
               "crawling the site until it can")
DISALLOWED = "robots.txt of http://127.0.0.3:80 forbids it"


def snap(**changes: Any) -> Any:
    values = {"breaker": "closed", "hold_in": None, "backoff": 0, "rampup": None, "inflight": 0}
    return SimpleNamespace(**{**values, **changes})


def host(note: str = "", **outcomes: int) -> ScopeTally:
    return ScopeTally(done=sum(outcomes.values()), outcomes=Counter(outcomes), note=note)


@pytest.mark.parametrize(("scope", "record", "queued", "state"), [
    # A robots.txt that cannot be fetched forbids the whole site (RFC 9309).
    (snap(), host(UNREACHABLE, exhausted=5), 0, "forbidden by robots.txt"),
    # One that disallows every URL asked for, once none is left.
    (snap(), host(DISALLOWED, disallowed=4), 0, "forbidden by robots.txt"),
    (snap(), host(DISALLOWED, disallowed=4), 3, "ok"),  # the other URLs are still to come
    # A few disallowed paths beside pages fetched: the site's rules obeyed, nothing wrong.
    (snap(), host(DISALLOWED, ok=20, disallowed=3), 0, "ok"),
    (snap(breaker="given_up"), host(UNREACHABLE, exhausted=5), 0, "given up"),
    (snap(breaker="open"), None, 0, "paused by the breaker"),
    (snap(hold_in=2.0), None, 0, "held (Retry-After)"),
    (snap(backoff=1), None, 0, "backing off"),
    (snap(rampup=SimpleNamespace(decision="cut: a 429", pushbacks=1)), None, 0, "cut by rampup"),
])
def test_the_state_says_what_happened(scope: Any, record: ScopeTally | None, queued: int, state: str) -> None:
    assert scope_state(scope, None, record, queued) == state
