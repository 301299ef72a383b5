"""Tickets: what a Scrapy request carries from its admission to its release.

A permit is granted in one place (the scheduler, or the downloader
middleware for requests that bypass it) and released in another (the
middleware, once the download ended), so the request carries it in its
``meta`` inside a :class:`Ticket`. The ticket also says where the request is:

* ``PARKED``: the scheduler granted it; the request is on its way through
  the downloader middlewares and has not reached the network yet;
* ``SENT``: the request reached the network under this permit;
* ``LENT``: the permit was handed to a request that had to go first (the
  robots.txt fetch this very request is waiting for); the request must be
  admitted again when it reaches the network;
* ``DONE``: the permit went back to the throttler.
"""

from __future__ import annotations

import enum
import weakref
from typing import Any

from .._throttle._permit import Permit

__all__ = ["APPLIED_SCOPES_KEY", "DELAY_DONE_KEY", "DELAY_KEY", "DONT_THROTTLE_KEY", "REFUSAL_KEY",
           "TICKET_KEY", "RequestView", "State", "Ticket", "pending_delay"]

#: Private meta key holding the request's :class:`Ticket`.
TICKET_KEY = "_crawlpace_ticket"
#: Private meta key marking a request that can never be admitted, with the reason.
REFUSAL_KEY = "_crawlpace_refusal"
#: Public meta key: the scopes the request was last sent under.
APPLIED_SCOPES_KEY = "throttling_applied_scopes"
#: Public meta key (Scrapy's throttling draft): the request goes outside its scopes' limits and is not
#: counted in them.
DONT_THROTTLE_KEY = "dont_throttle"
#: Public meta key (Scrapy's throttling draft): seconds to hold the request, once, before it is throttled.
DELAY_KEY = "delay"
#: Private meta key marking a request whose ``delay`` was served (retries and redirects copy ``meta``).
DELAY_DONE_KEY = "_crawlpace_delay_done"


def pending_delay(meta: Any) -> float:
    """Seconds the ``delay`` meta key still asks for (0 once served, or when it is not a positive number)."""
    value = meta.get(DELAY_KEY)
    if meta.get(DELAY_DONE_KEY) or isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if 0.0 < value < float("inf") else 0.0


class State(enum.Enum):
    """Where a ticket's request is (see the module docstring)."""

    PARKED = "parked"
    SENT = "sent"
    LENT = "lent"
    DONE = "done"


class Ticket:
    """One admission of one Scrapy request.

    Attributes:
        permit: the throttler's permit.
        state: where the request is.
        source: ``"scheduler"``, ``"direct"`` (admitted by the middleware) or
            ``"lent"`` (sent under a parked request's permit).
        finalizer: releases the permit if the request object disappears
            before the ticket was settled.
        outdated: the admission was made under limits that have since
            tightened; the request must be admitted again.
    """

    __slots__ = ("__weakref__", "finalizer", "outdated", "permit", "source", "state")

    def __init__(self, permit: Permit, source: str, state: State) -> None:
        self.permit = permit
        self.source = source
        self.state = state
        self.finalizer: weakref.finalize[Any, Any] | None = None
        #: Set when the scopes' limits tightened (a Crawl-Delay arrived) while
        #: the request was parked: its admission no longer holds.
        self.outdated = False

    @property
    def scopes(self) -> tuple[str, ...]:
        """The scopes the permit holds a slot in."""
        return self.permit.scopes

    def covers(self, names: tuple[str, ...]) -> bool:
        """True when the permit holds a slot in every one of ``names``."""
        held = self.permit.scopes
        return all(name in held for name in names)

    def __repr__(self) -> str:
        return f"<Ticket {'+'.join(self.scopes)} {self.state.value} from {self.source}>"


class RequestView:
    """What the throttler keeps of a Scrapy request inside its permit.

    The permit only needs the URL and ``meta`` (for
    ``autothrottle_dont_adjust_delay``); holding the request itself would
    keep it alive, and with it the finalizer that frees a lost permit would
    never run.
    """

    __slots__ = ("_ref", "url")

    def __init__(self, request: Any) -> None:
        self.url: str = request.url
        self._ref = weakref.ref(request)

    @property
    def meta(self) -> dict[str, Any]:
        request = self._ref()
        return request.meta if request is not None else {}

    def __repr__(self) -> str:
        return f"<RequestView {self.url}>"
