"""What the crawl scheduler queues: a URL on its way to an answer, and the helpers about it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from .._throttle._release import DONT_ADJUST_KEY

__all__ = ["Dropped", "Kind", "Task", "Unmeasured", "origin_of"]

Kind = Literal["page", "robots"]


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, the unit robots.txt applies to."""
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


class Unmeasured:
    """A request whose latency must not steer the scope (robots.txt answers
    faster or slower than pages, and would skew AutoThrottle's and rampup's view)."""

    __slots__ = ("meta", "url")

    def __init__(self, url: str) -> None:
        self.url = url
        self.meta = {DONT_ADJUST_KEY: True}


@dataclass(slots=True)
class Task:
    """One URL on its way to an answer.

    Attributes:
        id: the URL's id in the journal (0 for tasks that are not journalled).
        url: the URL as given, the key of its output line.
        target: the URL to fetch next; differs from ``url`` after a redirect.
        kind: ``"page"``, or ``"robots"`` for a robots.txt fetch.
        attempts: requests sent for it so far, redirect hops included.
        retries: times it was queued again after a backoff answer.
        hops: redirects followed so far.
        key: the queue it sits in: the target's throttling scope (its host by
            default), or the scopes joined with ``+`` when there are several.
        scopes: the throttler's scopes for the target, when it could name
            them at once (the default manager, whose answer for a URL is its
            host, at a quota use of 1): admission then need not work them out
            again.
        host: the target's host, what the crawl's figures and its give-ups
            are counted by whatever the scopes.
    """

    id: int
    url: str
    target: str = ""
    kind: Kind = "page"
    attempts: int = 0
    retries: int = 0
    hops: int = 0
    key: str = field(default="", compare=False)
    scopes: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    host: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.target:
            self.target = self.url


#: Why a task left the scheduler without being fetched.
Dropped = Literal["disallowed", "exhausted", "gave_up", "failed"]
