"""What one outcome tells one scope: the value feedback carries into a store."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AnnouncedQuota", "BudgetReading", "CoarseReset", "ScopeFeedback"]


@dataclass(frozen=True, slots=True)
class BudgetReading:
    """A server's announced request budget, as one answer gave it (``RateLimit`` fields).

    Attributes:
        remaining: ``r``, requests left.
        quota: ``q``, requests per window.
        window: ``w``, the window in seconds.
        span: ``t``, seconds within which ``remaining`` may be used, when given.
    """

    remaining: float
    quota: float
    window: float
    span: float | None = None


@dataclass(frozen=True, slots=True)
class CoarseReset:
    """A request budget announced without its window's length (``X-RateLimit-*``, the
    ``RateLimit-*`` trio), as one answer gave it.

    Attributes:
        remaining: requests left.
        limit: requests per window.
        reset: seconds to the reset as the header gave it (the latest it may be).
        whole: the reset came as a moment in whole seconds (``X-RateLimit-Reset`` as a Unix
            time); False for seconds from now (``X-RateLimit-Reset-After``, the trio's reset),
            which only a moving window's log (:class:`~crawlpace.policy.budget.WindowLog`) uses.
    """

    remaining: float
    limit: float
    reset: float
    whole: bool = True


@dataclass(frozen=True, slots=True)
class AnnouncedQuota:
    """A metered API's budget for the unit one scope counts (tokens, say), as an answer announced it.

    Attributes:
        limit: units per window.
        window: the window in seconds.
    """

    limit: float
    window: float


@dataclass(frozen=True, slots=True)
class ScopeFeedback:
    """The meaning of one response or failure for one scope.

    The throttler builds one per scope of the request (a throttling manager
    may change them with :func:`~crawlpace.update_scope_backoff`); the store
    applies it to the scope's state.

    Attributes:
        backoff: the outcome is a backoff trigger for this scope.
        failed: the outcome counts as an error for the circuit breaker.
        hold: seconds the server asked the client to wait before the next
            request (``Retry-After``, or an exhausted rate-limit budget).
        pace: seconds between sends that the server's announced budget allows
            (its remaining requests spread over the time to its reset) ...
        pace_for: ... for this many seconds.
        consumed_quota: the quota the request actually used, when reported;
            the difference from its expected use is charged or refunded.
        latency: seconds from connection to response headers, for
            AutoThrottle; ``None`` leaves the delay alone.
        status: the HTTP status, when a response arrived.
        concurrency: requests the server allows in flight at once (a
            ``concurrent-requests`` RateLimit policy), when announced; the
            scope's slots are capped at it from then on.
        budget: the announced request budget with its policy, when the answer
            gave both; the scope learns its window and brake from these (see
            :mod:`crawlpace.policy.budget`) and paces by them instead of ``pace``.
        announced: the budget of a metered API that this scope counts (a
            budget scope, see :mod:`crawlpace.budgets`); a scope without a
            quota of its own in the settings keeps a bucket of it
            (:mod:`crawlpace.policy.tokens`).
        coarse: the request budget, when its reset came in whole seconds: the
            scope narrows the reset with the window it learned
            (:class:`crawlpace.policy.budget.ResetRefiner`).
        lag: seconds from the request's admission (the send time the scope
            records) to the moment the caller began to send it: its own delay
            (a shared store's reply on the way back, a busy event loop), which
            moves the request's arrival at the site and which ``latency`` does
            not hold. Rampup reads the arrivals' spread from it (a strict
            bucket's refusal that a late arrival explains is no cut).
        left: the scope's requests the caller still holds to send (those in
            flight not counted), when it knows them: a crawl's queued URLs of the
            scope. Rampup weighs a step after a ``Retry-After`` hold against the
            work it can still speed up (``policy/_rampup_bucket.py``).
        more: more requests of the scope may come than ``left`` (a source
            that loads its URLs in batches, links still to be found): ``left``
            is then only a floor under the work ahead.
    """
    backoff: bool = False
    failed: bool = False
    hold: float | None = None
    pace: float | None = None
    pace_for: float = 0.0
    consumed_quota: float | None = None
    latency: float | None = None
    status: int | None = None
    concurrency: int | None = None
    budget: BudgetReading | None = None
    announced: AnnouncedQuota | None = None
    coarse: CoarseReset | None = None
    lag: float = 0.0
    left: int | None = None
    more: bool = True

    @property
    def accepted(self) -> bool:
        """An answer the scope accepted: a response that is neither pushback nor a failure (the
        answers rampup counts in a cycle, ``policy/_rampup_episode.py``)."""
        return self.status is not None and not self.backoff and not self.failed
